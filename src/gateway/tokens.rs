//! The gateway's keys and tokens: its own P-256 signing key (persisted, published as
//! a JWKS), the ES256 access tokens it mints at its token endpoint and checks on a
//! register, and the connectors' ES256 client assertions (RFC 7523) it checks before
//! minting one.
//!
//! All cryptography is `p256` (keys, PEM, JWK) and `jsonwebtoken` with its RustCrypto
//! backend (sign and verify); nothing here is hand-written. Time is an input (`now`
//! in seconds since the epoch) and so is the randomness of a new key, so every check
//! is a plain unit test. `jsonwebtoken`'s own clock is switched off (`validate_exp`),
//! and `exp`/`iat` are compared with `now` here.

use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use p256::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `aud` of every access token the gateway mints (contract: "matrix-connectors").
pub(crate) const ACCESS_TOKEN_AUDIENCE: &str = "matrix-connectors";

/// The longest a client assertion may live, `exp - iat` (contract: at most 5 min).
/// An assertion is a one-shot proof of key possession; its `jti` is remembered until
/// it expires, so this also bounds how long the replay memory holds each one.
pub(crate) const MAX_ASSERTION_LIFETIME_SECS: u64 = 300;

/// How far ahead of the gateway's clock a client's `iat` may be: connectors run on
/// other machines, and a minute covers ordinary NTP drift.
const CLOCK_SKEW_SECS: u64 = 60;

/// Why a JWT was refused; [`TokenError::wire`] is the register response's `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// Bad signature, wrong algorithm, wrong audience or identity, malformed.
    Invalid(String),
    /// `exp` has passed.
    Expired(String),
    /// Signed by this gateway's key but naming another issuer.
    UntrustedIssuer(String),
}

impl TokenError {
    /// `code: explanation`, as the contract's register errors are written.
    pub(crate) fn wire(&self) -> String {
        match self {
            TokenError::Invalid(m) => format!("invalid_token: {m}"),
            TokenError::Expired(m) => format!("expired_token: {m}"),
            TokenError::UntrustedIssuer(m) => format!("untrusted_issuer: {m}"),
        }
    }
}

/// The claims of a gateway access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AccessClaims {
    pub(crate) iss: String,
    pub(crate) sub: String,
    pub(crate) aud: String,
    pub(crate) tenant_id: String,
    pub(crate) connector_type: String,
    pub(crate) instance_id: String,
    pub(crate) iat: u64,
    pub(crate) exp: u64,
}

/// The claims of a client assertion the gateway reads (`aud` is checked by
/// `jsonwebtoken`, as a string or an array).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct AssertionClaims {
    #[serde(default)]
    pub(crate) iat: Option<u64>,
    pub(crate) exp: u64,
    #[serde(default)]
    pub(crate) jti: String,
}

/// The gateway's signing key and what is derived from it.
pub(crate) struct GatewayKey {
    secret: p256::SecretKey,
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for GatewayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayKey")
            .field("kid", &self.kid)
            .finish()
    }
}

impl GatewayKey {
    /// A new key from the operating system's randomness.
    pub(crate) fn generate() -> GatewayKey {
        use rand::Rng as _;
        loop {
            // Out of range scalars (zero, or at least the group order) have a chance
            // of about 2^-32; draw again.
            if let Some(k) = GatewayKey::from_secret_bytes(&rand::rng().random()) {
                return k;
            }
        }
    }

    /// The key with this secret scalar, `None` when it is no valid P-256 scalar.
    pub(crate) fn from_secret_bytes(bytes: &[u8; 32]) -> Option<GatewayKey> {
        p256::SecretKey::from_slice(bytes)
            .ok()
            .map(Self::from_secret)
    }

    /// Reads a PKCS#8 PEM private key.
    pub(crate) fn from_pkcs8_pem(pem: &str) -> Result<GatewayKey, String> {
        p256::SecretKey::from_pkcs8_pem(pem)
            .map(Self::from_secret)
            .map_err(|e| format!("not a PKCS#8 P-256 private key: {e}"))
    }

    fn from_secret(secret: p256::SecretKey) -> GatewayKey {
        let pkcs8 = secret
            .to_pkcs8_der()
            .expect("a P-256 key encodes as PKCS#8");
        let public = secret.public_key();
        let spki = public
            .to_public_key_der()
            .expect("a P-256 public key encodes as SPKI");
        let spki_pem = public
            .to_public_key_pem(LineEnding::LF)
            .expect("a P-256 public key encodes as PEM");
        let digest = Sha256::digest(spki.as_bytes());
        let kid = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16]);
        GatewayKey {
            encoding: EncodingKey::from_ec_der(pkcs8.as_bytes()),
            decoding: DecodingKey::from_ec_pem(spki_pem.as_bytes())
                .expect("our own SPKI PEM parses"),
            secret,
            kid,
        }
    }

    /// The key as PKCS#8 PEM, for the data dir.
    pub(crate) fn to_pkcs8_pem(&self) -> String {
        self.secret
            .to_pkcs8_pem(LineEnding::LF)
            .expect("a P-256 key encodes as PKCS#8 PEM")
            .to_string()
    }

    /// The key id in the header of every token this key signs, and in the JWKS.
    #[cfg(test)]
    pub(crate) fn kid(&self) -> &str {
        &self.kid
    }

    /// `/.well-known/jwks.json`.
    pub(crate) fn jwks(&self) -> serde_json::Value {
        let mut jwk =
            serde_json::to_value(self.secret.public_key().to_jwk()).expect("a JWK serialises");
        if let Some(o) = jwk.as_object_mut() {
            o.insert("kid".into(), self.kid.clone().into());
            o.insert("alg".into(), "ES256".into());
            o.insert("use".into(), "sig".into());
        }
        serde_json::json!({ "keys": [jwk] })
    }

    /// Signs `claims` as an ES256 JWT with this key's `kid`.
    pub(crate) fn mint(&self, claims: &AccessClaims) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("ES256 signing succeeds")
    }

    /// Checks an access token: ES256 by this key, `aud`, `iss` = `issuer`, `exp` after
    /// `now`. The identity claims are the caller's to compare.
    pub(crate) fn verify(
        &self,
        token: &str,
        issuer: &str,
        now: u64,
    ) -> Result<AccessClaims, TokenError> {
        let mut v = Validation::new(Algorithm::ES256);
        v.validate_exp = false;
        v.validate_nbf = false;
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.set_audience(&[ACCESS_TOKEN_AUDIENCE]);
        v.set_issuer(&[issuer]);
        let claims = jsonwebtoken::decode::<AccessClaims>(token, &self.decoding, &v)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidIssuer => TokenError::UntrustedIssuer(format!(
                    "the token was not issued by {issuer}; fetch a new one from its token endpoint"
                )),
                _ => TokenError::Invalid(format!(
                    "the token does not verify against this gateway's key ({e}); \
                     fetch a new one from the token endpoint"
                )),
            })?
            .claims;
        if claims.exp <= now {
            return Err(TokenError::Expired(format!(
                "the token expired at {} (now {now}); fetch a new one from the token endpoint",
                claims.exp
            )));
        }
        Ok(claims)
    }
}

/// A connector's public key, as it registered it.
#[derive(Clone)]
pub(crate) struct ClientKey {
    /// Normalised SPKI PEM (what is persisted).
    pub(crate) pem: String,
    decoding: DecodingKey,
}

impl ClientKey {
    /// Parses a SubjectPublicKeyInfo PEM of a P-256 public key.
    pub(crate) fn from_pem(pem: &str) -> Result<ClientKey, String> {
        let public = p256::PublicKey::from_public_key_pem(pem.trim())
            .map_err(|e| format!("public_key is not a P-256 SubjectPublicKeyInfo PEM: {e}"))?;
        let pem = public
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| format!("public_key does not encode: {e}"))?;
        let decoding = DecodingKey::from_ec_pem(pem.as_bytes())
            .map_err(|e| format!("public_key is not usable for ES256: {e}"))?;
        Ok(ClientKey { pem, decoding })
    }

    /// Checks a client assertion signed by this key: ES256, `iss` = `sub` =
    /// `client_id`, `aud` = `token_endpoint`, `exp` after `now`, `iat` not in the
    /// future (beyond [`CLOCK_SKEW_SECS`]), `exp - iat` at most
    /// [`MAX_ASSERTION_LIFETIME_SECS`], a non-empty `jti`. Replay of the `jti` is the
    /// caller's to check. The error says which rule failed.
    pub(crate) fn verify_assertion(
        &self,
        assertion: &str,
        client_id: &str,
        token_endpoint: &str,
        now: u64,
    ) -> Result<AssertionClaims, String> {
        let mut v = Validation::new(Algorithm::ES256);
        v.validate_exp = false;
        v.validate_nbf = false;
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.set_audience(&[token_endpoint]);
        v.set_issuer(&[client_id]);
        v.sub = Some(client_id.to_owned());
        let claims = jsonwebtoken::decode::<AssertionClaims>(assertion, &self.decoding, &v)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidSignature => {
                    "the client assertion is not signed by the key registered for this client"
                        .to_owned()
                }
                _ => format!("the client assertion is invalid: {e}"),
            })?
            .claims;
        if claims.exp <= now {
            return Err(format!(
                "the client assertion expired at {} (now {now})",
                claims.exp
            ));
        }
        let Some(iat) = claims.iat else {
            return Err("the client assertion has no iat".into());
        };
        if iat > now + CLOCK_SKEW_SECS {
            return Err(format!("the client assertion's iat {iat} is in the future"));
        }
        if claims.exp.saturating_sub(iat) > MAX_ASSERTION_LIFETIME_SECS {
            return Err(format!(
                "the client assertion lives longer than {MAX_ASSERTION_LIFETIME_SECS} s (exp - iat)"
            ));
        }
        if claims.jti.is_empty() {
            return Err("the client assertion has no jti".into());
        }
        Ok(claims)
    }
}

/// The stored form of a session token: its SHA-256, hex. A leaked data dir then gives
/// nobody a usable token.
pub(crate) fn hash_session_token(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISS: &str = "http://127.0.0.1:4000";
    const NOW: u64 = 1_700_000_000;

    fn key(n: u8) -> GatewayKey {
        GatewayKey::from_secret_bytes(&[n; 32]).unwrap()
    }

    fn claims(iss: &str, exp: u64) -> AccessClaims {
        AccessClaims {
            iss: iss.into(),
            sub: "acme.echo.a".into(),
            aud: ACCESS_TOKEN_AUDIENCE.into(),
            tenant_id: "acme".into(),
            connector_type: "echo".into(),
            instance_id: "a".into(),
            iat: NOW,
            exp,
        }
    }

    #[test]
    fn a_minted_token_verifies_until_it_expires() {
        let k = key(7);
        let t = k.mint(&claims(ISS, NOW + 900));
        assert_eq!(k.verify(&t, ISS, NOW + 899).unwrap().sub, "acme.echo.a");
        assert!(matches!(
            k.verify(&t, ISS, NOW + 900),
            Err(TokenError::Expired(_))
        ));
    }

    #[test]
    fn a_token_of_another_key_or_tampered_is_invalid() {
        let t = key(7).mint(&claims(ISS, NOW + 900));
        assert!(matches!(
            key(8).verify(&t, ISS, NOW),
            Err(TokenError::Invalid(_))
        ));
        let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
        let forged = claims(ISS, NOW + 900);
        let forged = AccessClaims {
            instance_id: "b".into(),
            ..forged
        };
        parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&forged).unwrap());
        let e = key(7).verify(&parts.join("."), ISS, NOW).unwrap_err();
        assert!(e.wire().starts_with("invalid_token: "), "{e:?}");
    }

    #[test]
    fn a_token_naming_another_issuer_is_untrusted() {
        let k = key(7);
        let t = k.mint(&claims("http://elsewhere", NOW + 900));
        let e = k.verify(&t, ISS, NOW).unwrap_err();
        assert!(e.wire().starts_with("untrusted_issuer: "), "{e:?}");
    }

    #[test]
    fn the_key_round_trips_through_pkcs8_pem_and_keeps_its_kid() {
        let k = key(9);
        let again = GatewayKey::from_pkcs8_pem(&k.to_pkcs8_pem()).unwrap();
        assert_eq!(again.kid(), k.kid());
        let t = k.mint(&claims(ISS, NOW + 10));
        assert!(again.verify(&t, ISS, NOW).is_ok());
        let jwks = k.jwks();
        assert_eq!(jwks["keys"][0]["kid"], k.kid());
        assert_eq!(jwks["keys"][0]["crv"], "P-256");
        assert!(GatewayKey::from_pkcs8_pem("garbage").is_err());
    }

    fn assertion(signer: &GatewayKey, aud: &str, iat: u64, exp: u64, jti: &str) -> String {
        let c = serde_json::json!({
            "iss": "acme.echo.a", "sub": "acme.echo.a", "aud": aud,
            "iat": iat, "exp": exp, "jti": jti,
        });
        jsonwebtoken::encode(&Header::new(Algorithm::ES256), &c, &signer.encoding).unwrap()
    }

    fn client_key_of(k: &GatewayKey) -> ClientKey {
        let pem = k
            .secret
            .public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        ClientKey::from_pem(&pem).unwrap()
    }

    #[test]
    fn an_assertion_is_checked_for_key_audience_and_lifetime() {
        let ep = "http://gw/oauth/token";
        let (client, other) = (key(1), key(2));
        let ck = client_key_of(&client);
        let ok = assertion(&client, ep, NOW, NOW + 60, "j1");
        assert_eq!(
            ck.verify_assertion(&ok, "acme.echo.a", ep, NOW)
                .unwrap()
                .jti,
            "j1"
        );
        let refused = [
            ("wrong key", assertion(&other, ep, NOW, NOW + 60, "j")),
            (
                "wrong aud",
                assertion(&client, "http://x", NOW, NOW + 60, "j"),
            ),
            ("expired", assertion(&client, ep, NOW - 100, NOW - 1, "j")),
            ("too long", assertion(&client, ep, NOW, NOW + 3600, "j")),
            (
                "future iat",
                assertion(&client, ep, NOW + 600, NOW + 700, "j"),
            ),
            ("no jti", assertion(&client, ep, NOW, NOW + 60, "")),
        ];
        for (why, a) in refused {
            assert!(
                ck.verify_assertion(&a, "acme.echo.a", ep, NOW).is_err(),
                "{why}"
            );
        }
        assert!(
            ck.verify_assertion(&ok, "acme.echo.b", ep, NOW).is_err(),
            "iss/sub must be the client id"
        );
    }

    #[test]
    fn a_malformed_public_key_is_refused() {
        assert!(
            ClientKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
                .is_err()
        );
    }

    #[test]
    fn session_tokens_are_stored_hashed() {
        let h = hash_session_token("abc");
        assert_eq!(h.len(), 64);
        assert_ne!(h, "abc");
        assert_eq!(h, hash_session_token("abc"));
    }
}
