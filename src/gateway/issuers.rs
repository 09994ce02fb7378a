//! External OIDC issuers a manual-mode gateway trusts
//! ([`super::GatewayConfig::trusted_issuers`]): a register's `jwt_token` may come from
//! an identity provider the operator runs (in this protocol family typically a
//! Keycloak realm) instead of the gateway's own token endpoint.
//!
//! How a register's JWT is checked:
//! 1. [`select`] reads the token's `iss` without verifying anything, only to pick the
//!    key set: the gateway's own issuer is checked as before (`tokens.rs`); an `iss`
//!    equal, byte for byte, to a [`TrustedIssuer::issuer`] is checked here; any other
//!    `iss` is refused `untrusted_issuer:`. A token whose payload cannot be read at
//!    all goes to the gateway's own check, which refuses it `invalid_token:`.
//! 2. The issuer's JWKS comes from a per-issuer cache ([`KeyCache`]), fetched with
//!    `reqwest` when empty, older than `jwks_cache_ttl`, or lacking the token's `kid`.
//!    A fetch is bounded by `jwks_fetch_timeout` (connect to last byte) and its body
//!    by [`MAX_JWKS_BYTES`]. Beyond the first fetch, an issuer is fetched at most once
//!    per [`MIN_REFETCH_INTERVAL`] for an unknown `kid` or after a failed fetch, so a
//!    flood of registers with made-up `kid`s, or with tokens of an issuer that is down,
//!    cannot make the gateway hammer it: inside that window an unknown `kid` is
//!    refused `invalid_token:` and a failed issuer is refused with the error of its
//!    last fetch. A failed fetch refuses with `untrusted_issuer: could not fetch the
//!    JWKS of <issuer> from <url> within <timeout>: <reason>`; stale keys are not used
//!    past their TTL (a connector holding a session token is not affected: session
//!    tokens are checked first).
//! 3. The signature is verified by `jsonwebtoken` (RustCrypto backend) with the JWK of
//!    the token's `kid` (a token without `kid` needs a set with exactly one suitable
//!    key); only ES256 (P-256 keys) and RS256 (RSA keys) are accepted, and a JWK whose
//!    `alg` or `use` says otherwise is not used. Then `iss`, `exp` (required, against
//!    the gateway's clock), `nbf` if present (a minute of skew), `aud` when the issuer
//!    has an audience configured.
//! 4. The identity ([`check_identity`]): when the token carries any of `tenant_id`,
//!    `connector_type`, `instance_id` it must carry all three, and they must name the
//!    register's identity (after the same sanitising, PROTOCOL.md §1). When it carries
//!    none, its `azp` (Keycloak's authorized party, the client id of a
//!    client-credentials token), else its `client_id` claim, must equal the register's
//!    dot key `tenant.type.instance`, i.e. the operator names the Keycloak client
//!    after the dot key. Neither is `invalid_token:`.
//!
//! An accepted token approves the register with a fresh session token, as a gateway
//! JWT does.
//!
//! Waiting: the decision runs inside the link's message handler
//! (`connector_messages::on_message`), and the fetch is awaited there. No `std::sync::Mutex`
//! guard is held across it: the approval state's lock is taken only before and after,
//! and the cache's lock is a `tokio::sync::Mutex` per issuer. So only the link whose
//! register needs the fetch waits for it (at most `jwks_fetch_timeout`; its later
//! messages queue behind the register, so its answers stay in order), plus registers
//! of other links that need the same issuer's keys at that moment, which then use the
//! fetch's outcome instead of fetching again. Other links, and registers with a session
//! token, a gateway JWT or no credential, do not wait.

use std::time::{Duration, Instant};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::config::{GatewayConfig, TrustedIssuer};
use super::tokens::TokenError;
use crate::identity::RegistrationKey;

/// Largest JWKS body read (256 KiB): a realm's set is a few kilobytes even with
/// several RSA keys and certificate chains; a misbehaving server must not make the
/// gateway buffer more.
pub(crate) const MAX_JWKS_BYTES: usize = 256 * 1024;

/// Least time between two fetches of one issuer's JWKS for an unknown `kid` or after
/// a failed fetch (30 s): a rotated key is picked up within it, and a flood of bad
/// tokens costs the issuer at most two requests a minute.
pub(crate) const MIN_REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// How far ahead of the gateway's clock an issuer's `nbf` may be.
const CLOCK_SKEW_SECS: u64 = 60;

/// Which keys a register's JWT is checked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// The gateway's own key (its issuer, or a token whose `iss` cannot be read).
    Gateway,
    /// The trusted issuer at this index of the configuration.
    Trusted(usize),
    /// Neither: this `iss`.
    Unknown(String),
}

/// Picks the key set for `jwt` by its unverified `iss` (module docs, step 1).
pub(crate) fn select(jwt: &str, gateway_issuer: &str, trusted: &[TrustedIssuer]) -> Source {
    #[derive(Deserialize)]
    struct Iss {
        iss: Option<String>,
    }
    // Unverified on purpose: the issuer only says which keys to verify with.
    let Some(iss) = jsonwebtoken::dangerous::insecure_decode::<Iss>(jwt)
        .ok()
        .and_then(|t| t.claims.iss)
    else {
        return Source::Gateway;
    };
    if iss == gateway_issuer {
        Source::Gateway
    } else if let Some(i) = trusted.iter().position(|t| t.issuer == iss) {
        Source::Trusted(i)
    } else {
        Source::Unknown(iss)
    }
}

/// The claims of an external token the gateway reads.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct ExternalClaims {
    #[serde(default)]
    pub(crate) exp: Option<u64>,
    #[serde(default)]
    pub(crate) nbf: Option<u64>,
    #[serde(default)]
    pub(crate) tenant_id: Option<String>,
    #[serde(default)]
    pub(crate) connector_type: Option<String>,
    #[serde(default)]
    pub(crate) instance_id: Option<String>,
    #[serde(default)]
    pub(crate) azp: Option<String>,
    #[serde(default)]
    pub(crate) client_id: Option<String>,
}

/// `exp` required and after `now`, `nbf` if present not after `now` (plus skew).
pub(crate) fn check_times(c: &ExternalClaims, now: u64) -> Result<(), TokenError> {
    let Some(exp) = c.exp else {
        return Err(TokenError::Invalid("the token has no exp".into()));
    };
    if exp <= now {
        return Err(TokenError::Expired(format!(
            "the token expired at {exp} (now {now}); fetch a new one from its issuer"
        )));
    }
    if let Some(nbf) = c.nbf {
        if nbf > now + CLOCK_SKEW_SECS {
            return Err(TokenError::Invalid(format!(
                "the token is not valid before {nbf} (now {now})"
            )));
        }
    }
    Ok(())
}

/// Whether the token names the register's identity (module docs, step 4).
pub(crate) fn check_identity(c: &ExternalClaims, key: &RegistrationKey) -> Result<(), TokenError> {
    let parts = [&c.tenant_id, &c.connector_type, &c.instance_id];
    if parts.iter().any(|p| p.is_some()) {
        let [Some(t), Some(ty), Some(i)] = parts else {
            return Err(TokenError::Invalid(
                "the token carries some but not all of tenant_id, connector_type and \
                 instance_id"
                    .into(),
            ));
        };
        let named = RegistrationKey::new(t, ty, i);
        if named != *key {
            return Err(TokenError::Invalid(format!(
                "the token was issued to {named} but this register is {key}"
            )));
        }
        return Ok(());
    }
    match c.azp.as_ref().or(c.client_id.as_ref()) {
        Some(id) if id == key.dot_key() => Ok(()),
        Some(id) => Err(TokenError::Invalid(format!(
            "the token was issued to client {id} but this register is {key}"
        ))),
        None => Err(TokenError::Invalid(format!(
            "the token names no identity: it needs tenant_id, connector_type and \
             instance_id claims, or azp (or client_id) equal to {key}"
        ))),
    }
}

/// The token's algorithm, if ES256 or RS256, and `kid`.
pub(crate) fn header_of(jwt: &str) -> Result<(Algorithm, Option<String>), TokenError> {
    let h = jsonwebtoken::decode_header(jwt)
        .map_err(|e| TokenError::Invalid(format!("the token is malformed: {e}")))?;
    match h.alg {
        Algorithm::ES256 | Algorithm::RS256 => Ok((h.alg, h.kid)),
        other => Err(TokenError::Invalid(format!(
            "the token is signed with {other:?}; tokens of a trusted issuer must be ES256 \
             or RS256"
        ))),
    }
}

/// Whether `jwk` may verify an `alg` signature: a signing key (or unspecified use) of
/// the right type and curve whose `alg`, if given, is `alg`.
fn suits(jwk: &Jwk, alg: Algorithm) -> bool {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return false;
    }
    let alg_ok = match jwk.common.key_algorithm {
        None => true,
        Some(KeyAlgorithm::ES256) => alg == Algorithm::ES256,
        Some(KeyAlgorithm::RS256) => alg == Algorithm::RS256,
        Some(_) => false,
    };
    alg_ok
        && match (&jwk.algorithm, alg) {
            (AlgorithmParameters::EllipticCurve(p), Algorithm::ES256) => {
                p.curve == EllipticCurve::P256
            }
            (AlgorithmParameters::RSA(_), Algorithm::RS256) => true,
            _ => false,
        }
}

/// The key to verify a token of `alg` and `kid` with: the suitable key with that
/// `kid`, or without a `kid` the only suitable key.
pub(crate) fn find_key<'a>(keys: &'a [Jwk], kid: Option<&str>, alg: Algorithm) -> Option<&'a Jwk> {
    let mut suitable = keys.iter().filter(|k| suits(k, alg));
    match kid {
        Some(kid) => suitable.find(|k| k.common.key_id.as_deref() == Some(kid)),
        None => {
            let first = suitable.next();
            first.filter(|_| suitable.next().is_none())
        }
    }
}

/// Verifies `jwt` with `jwk`: signature, `iss`, `aud` if configured, times, identity.
pub(crate) fn verify_with(
    jwt: &str,
    jwk: &Jwk,
    alg: Algorithm,
    issuer: &TrustedIssuer,
    key: &RegistrationKey,
    now: u64,
) -> Result<(), TokenError> {
    let kid = jwk.common.key_id.as_deref().unwrap_or("(no kid)");
    let decoding = DecodingKey::from_jwk(jwk).map_err(|e| {
        TokenError::Invalid(format!(
            "the key {kid} of {} is unusable: {e}",
            issuer.issuer
        ))
    })?;
    let mut v = Validation::new(alg);
    v.validate_exp = false;
    v.validate_nbf = false;
    v.set_issuer(&[&issuer.issuer]);
    match &issuer.audience {
        Some(aud) => {
            v.set_required_spec_claims(&["exp", "iss", "aud"]);
            v.set_audience(&[aud]);
        }
        None => {
            v.set_required_spec_claims(&["exp", "iss"]);
            v.validate_aud = false;
        }
    }
    let claims = jsonwebtoken::decode::<ExternalClaims>(jwt, &decoding, &v)
        .map_err(|e| {
            TokenError::Invalid(match e.kind() {
                ErrorKind::InvalidAudience | ErrorKind::MissingRequiredClaim(_)
                    if issuer.audience.is_some() =>
                {
                    format!(
                        "the token's aud does not name {} ({e})",
                        issuer.audience.as_deref().unwrap_or_default()
                    )
                }
                _ => format!(
                    "the token does not verify against the key {kid} of {} ({e})",
                    issuer.issuer
                ),
            })
        })?
        .claims;
    check_times(&claims, now)?;
    check_identity(&claims, key)
}

/// What to do for a token, given the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Verify with the cached keys (which may lack the `kid`: then it is refused).
    Use,
    /// Fetch the JWKS first.
    Fetch,
    /// Refuse with the error of the last fetch (it failed less than
    /// [`MIN_REFETCH_INTERVAL`] ago).
    Refuse(String),
}

/// One issuer's cached JWKS and the record of its fetches.
#[derive(Debug, Default)]
pub(crate) struct KeyCache {
    keys: Vec<Jwk>,
    fetched_at: Option<Instant>,
    last_attempt: Option<Instant>,
    last_error: Option<String>,
}

impl KeyCache {
    /// What to do at `now` for a token whose key is (`has_key`) or is not in the cache
    /// (module docs, step 2).
    pub(crate) fn plan(&self, has_key: bool, now: Instant, ttl: Duration) -> Plan {
        let fresh = self
            .fetched_at
            .is_some_and(|t| now.saturating_duration_since(t) < ttl);
        if fresh && has_key {
            return Plan::Use;
        }
        let recent = self
            .last_attempt
            .is_some_and(|t| now.saturating_duration_since(t) < MIN_REFETCH_INTERVAL);
        if !recent {
            return Plan::Fetch;
        }
        if fresh {
            return Plan::Use;
        }
        match &self.last_error {
            Some(e) => Plan::Refuse(e.clone()),
            // Fetched fine lately but already stale: a TTL below the interval.
            None => Plan::Fetch,
        }
    }

    /// Records a fetch that ended at `now`. A failed fetch keeps the keys it had,
    /// which stay usable until their TTL.
    pub(crate) fn fetched(&mut self, result: Result<Vec<Jwk>, String>, now: Instant) {
        self.last_attempt = Some(now);
        match result {
            Ok(keys) => {
                self.keys = keys;
                self.fetched_at = Some(now);
                self.last_error = None;
            }
            Err(e) => self.last_error = Some(e),
        }
    }

    pub(crate) fn keys(&self) -> &[Jwk] {
        &self.keys
    }
}

/// The keys of a JWKS body that `jsonwebtoken` can read; others (for example
/// encryption keys of an algorithm it does not know) are skipped.
pub(crate) fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, String> {
    #[derive(Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set =
        serde_json::from_slice(body).map_err(|e| format!("the answer is not a JWKS: {e}"))?;
    Ok(set
        .keys
        .into_iter()
        .filter_map(|k| serde_json::from_value(k).ok())
        .collect())
}

struct Entry {
    config: TrustedIssuer,
    /// An async lock: a register holds it across its fetch, so that registers of
    /// other links needing this issuer's keys meanwhile use that fetch's outcome.
    cache: tokio::sync::Mutex<KeyCache>,
}

/// The trusted issuers of one gateway and their key caches.
pub(crate) struct Issuers {
    entries: Vec<Entry>,
    configs: Vec<TrustedIssuer>,
    /// Built only when there is an issuer to fetch from.
    http: Option<reqwest::Client>,
    fetch_timeout: Duration,
    ttl: Duration,
}

impl Issuers {
    /// The issuers of `config`; a JWKS URL that is not `http(s)` is an error naming it.
    pub(crate) fn new(config: &GatewayConfig) -> Result<Issuers, String> {
        for t in &config.trusted_issuers {
            let url = reqwest::Url::parse(&t.jwks_url).map_err(|e| {
                format!(
                    "the JWKS URL {:?} of trusted issuer {:?} is not a URL: {e}",
                    t.jwks_url, t.issuer
                )
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!(
                    "the JWKS URL {:?} of trusted issuer {:?} is not http(s)",
                    t.jwks_url, t.issuer
                ));
            }
        }
        let http = if config.trusted_issuers.is_empty() {
            None
        } else {
            let client = reqwest::Client::builder()
                .connect_timeout(config.jwks_fetch_timeout)
                .timeout(config.jwks_fetch_timeout)
                .redirect(reqwest::redirect::Policy::limited(3))
                .build()
                .map_err(|e| format!("cannot build the JWKS client: {e}"))?;
            Some(client)
        };
        Ok(Issuers {
            entries: config
                .trusted_issuers
                .iter()
                .map(|t| Entry {
                    config: t.clone(),
                    cache: tokio::sync::Mutex::default(),
                })
                .collect(),
            configs: config.trusted_issuers.clone(),
            http,
            fetch_timeout: config.jwks_fetch_timeout,
            ttl: config.jwks_cache_ttl,
        })
    }

    /// The configured issuers, for [`select`].
    pub(crate) fn configs(&self) -> &[TrustedIssuer] {
        &self.configs
    }

    /// Verifies `jwt` from the trusted issuer `index` for the register of `key`
    /// (module docs, steps 2 to 4); `now_secs` gives the time of the claim checks,
    /// read after any fetch.
    pub(crate) async fn verify(
        &self,
        index: usize,
        jwt: &str,
        key: &RegistrationKey,
        now_secs: impl Fn() -> u64,
    ) -> Result<(), TokenError> {
        let entry = &self.entries[index];
        let (alg, kid) = header_of(jwt)?;
        let jwk = {
            let mut cache = entry.cache.lock().await;
            let has_key = find_key(cache.keys(), kid.as_deref(), alg).is_some();
            match cache.plan(has_key, Instant::now(), self.ttl) {
                Plan::Use => {}
                Plan::Refuse(e) => return Err(TokenError::UntrustedIssuer(e)),
                Plan::Fetch => {
                    let result = self.fetch(&entry.config).await;
                    let failed = result.as_ref().err().cloned();
                    cache.fetched(result, Instant::now());
                    if let Some(e) = failed {
                        return Err(TokenError::UntrustedIssuer(e));
                    }
                }
            }
            find_key(cache.keys(), kid.as_deref(), alg).cloned()
        };
        let Some(jwk) = jwk else {
            let (iss, url) = (&entry.config.issuer, &entry.config.jwks_url);
            return Err(TokenError::Invalid(match kid {
                Some(kid) => format!("{iss} publishes no {alg:?} key with kid {kid:?} at {url}"),
                None => format!(
                    "the token has no kid and {iss} publishes not exactly one {alg:?} key at {url}"
                ),
            }));
        };
        verify_with(jwt, &jwk, alg, &entry.config, key, now_secs())
    }

    /// Fetches one issuer's JWKS within the fetch timeout; the error is the wire
    /// explanation after `untrusted_issuer: `.
    async fn fetch(&self, t: &TrustedIssuer) -> Result<Vec<Jwk>, String> {
        let fail = |reason: String| {
            format!(
                "could not fetch the JWKS of {} from {} within {:?}: {reason}",
                t.issuer, t.jwks_url, self.fetch_timeout
            )
        };
        let Some(http) = &self.http else {
            return Err(fail("no HTTP client".into()));
        };
        let body =
            match tokio::time::timeout(self.fetch_timeout, fetch_body(http, &t.jwks_url)).await {
                Err(_) => return Err(fail("no complete answer in time".into())),
                Ok(Err(reason)) => return Err(fail(reason)),
                Ok(Ok(body)) => body,
            };
        let keys = parse_jwks(&body).map_err(fail)?;
        tracing::info!(issuer = %t.issuer, url = %t.jwks_url, keys = keys.len(), "fetched a trusted issuer's JWKS");
        Ok(keys)
    }
}

/// GETs `url`, refusing a non-2xx answer or a body over [`MAX_JWKS_BYTES`].
async fn fetch_body(http: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| error_chain(&e))?;
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status()));
    }
    let too_large = || format!("the answer is larger than {} KiB", MAX_JWKS_BYTES / 1024);
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| error_chain(&e))? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error with its sources, `a: b: c`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use p256::pkcs8::EncodePrivateKey as _;

    const ISS: &str = "https://kc.example/realms/acme";
    const NOW: u64 = 1_700_000_000;

    fn trusted() -> TrustedIssuer {
        TrustedIssuer::new(ISS, "https://kc.example/realms/acme/certs")
    }

    fn k() -> RegistrationKey {
        RegistrationKey::new("acme", "echo", "a")
    }

    fn secret(seed: u8) -> p256::SecretKey {
        p256::SecretKey::from_slice(&[seed; 32]).unwrap()
    }

    fn jwk_of(seed: u8, kid: &str) -> Jwk {
        let mut v = serde_json::to_value(secret(seed).public_key().to_jwk()).unwrap();
        v["kid"] = kid.into();
        v["alg"] = "ES256".into();
        v["use"] = "sig".into();
        serde_json::from_value(v).unwrap()
    }

    fn sign(seed: u8, kid: Option<&str>, claims: serde_json::Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = kid.map(str::to_owned);
        let der = secret(seed).to_pkcs8_der().unwrap();
        jsonwebtoken::encode(&h, &claims, &EncodingKey::from_ec_der(der.as_bytes())).unwrap()
    }

    fn good_claims() -> serde_json::Value {
        serde_json::json!({
            "iss": ISS, "exp": NOW + 60, "tenant_id": "acme",
            "connector_type": "echo", "instance_id": "a",
        })
    }

    #[test]
    fn the_issuer_picks_the_key_set() {
        let t = [trusted()];
        let tok = |iss: &str| sign(1, None, serde_json::json!({ "iss": iss }));
        assert_eq!(select(&tok("http://gw"), "http://gw", &t), Source::Gateway);
        assert_eq!(select(&tok(ISS), "http://gw", &t), Source::Trusted(0));
        assert_eq!(
            select(&tok(&format!("{ISS}/")), "http://gw", &t),
            Source::Unknown(format!("{ISS}/")),
            "compared exactly"
        );
        assert_eq!(select("garbage", "http://gw", &t), Source::Gateway);
        assert_eq!(
            select(&sign(1, None, serde_json::json!({})), "http://gw", &t),
            Source::Gateway,
            "no iss: the gateway's own check refuses it"
        );
    }

    #[test]
    fn identity_claims_or_the_client_id_must_name_the_register() {
        let c = |v: serde_json::Value| serde_json::from_value::<ExternalClaims>(v).unwrap();
        assert!(check_identity(&c(good_claims()), &k()).is_ok());
        let other = c(serde_json::json!({
            "tenant_id": "acme", "connector_type": "echo", "instance_id": "b",
        }));
        assert!(check_identity(&other, &k()).is_err());
        let partial = c(serde_json::json!({ "tenant_id": "acme", "azp": "acme.echo.a" }));
        assert!(
            check_identity(&partial, &k()).is_err(),
            "some identity claims: all three are needed, azp does not stand in"
        );
        let azp = c(serde_json::json!({ "azp": "acme.echo.a" }));
        assert!(check_identity(&azp, &k()).is_ok());
        let client_id = c(serde_json::json!({ "client_id": "acme.echo.a" }));
        assert!(check_identity(&client_id, &k()).is_ok());
        let wrong_azp = c(serde_json::json!({ "azp": "acme.echo.b", "client_id": "acme.echo.a" }));
        assert!(
            check_identity(&wrong_azp, &k()).is_err(),
            "azp wins over client_id"
        );
        let e = check_identity(&ExternalClaims::default(), &k()).unwrap_err();
        assert!(e.wire().starts_with("invalid_token: "), "{e:?}");
    }

    #[test]
    fn times_are_checked_against_now() {
        let c = |v: serde_json::Value| serde_json::from_value::<ExternalClaims>(v).unwrap();
        assert!(check_times(&c(serde_json::json!({ "exp": NOW + 1 })), NOW).is_ok());
        assert!(matches!(
            check_times(&c(serde_json::json!({ "exp": NOW })), NOW),
            Err(TokenError::Expired(_))
        ));
        assert!(check_times(&c(serde_json::json!({})), NOW).is_err());
        let early = c(serde_json::json!({ "exp": NOW + 900, "nbf": NOW + 600 }));
        assert!(check_times(&early, NOW).is_err());
    }

    #[test]
    fn a_token_verifies_with_its_issuers_key_only() {
        let keys = [jwk_of(1, "k1"), jwk_of(2, "k2")];
        let tok = sign(1, Some("k1"), good_claims());
        let (alg, kid) = header_of(&tok).unwrap();
        let jwk = find_key(&keys, kid.as_deref(), alg).unwrap();
        assert!(verify_with(&tok, jwk, alg, &trusted(), &k(), NOW).is_ok());
        let forged = sign(3, Some("k1"), good_claims());
        let e = verify_with(&forged, jwk, alg, &trusted(), &k(), NOW).unwrap_err();
        assert!(e.wire().starts_with("invalid_token: "), "{e:?}");
        assert!(find_key(&keys, Some("k9"), alg).is_none());
        assert!(find_key(&keys, None, alg).is_none(), "no kid, two keys");
        assert!(find_key(&keys[..1], None, alg).is_some());
        assert!(
            find_key(&keys, Some("k1"), Algorithm::RS256).is_none(),
            "an EC key does not verify RS256"
        );
        let aud = trusted().with_audience("switchboard");
        let e = verify_with(&tok, jwk, alg, &aud, &k(), NOW).unwrap_err();
        assert!(e.wire().contains("aud"), "{e:?}");
        let mut with_aud = good_claims();
        with_aud["aud"] = serde_json::json!(["account", "switchboard"]);
        let tok = sign(1, Some("k1"), with_aud);
        assert!(verify_with(&tok, jwk, alg, &aud, &k(), NOW).is_ok());
        assert!(header_of(&sign_hs256()).is_err(), "HS256 is refused");
    }

    /// A 2048-bit RSA key made for this test only (`openssl genrsa`), and its modulus.
    const RSA_PEM: &str = include_str!("testdata/rsa-2048-test-only.pem");
    const RSA_N: &str = "wt5f2_JJdHz-e3DlJkEB6iiPpvCE2crqn0vIUBhhyMiiWDEspybZ2B0_MZUqY3ITNt2KwkeM56LoO4QYTFUL4xKFcrAkzjdi955CxVINTf3f1bEonqUEjDWFlGXCFssC1zjaVbHcL557gGdpVseTEQV2DxFWn_2mhlkMnE6dri6asevgppwZWMaIG2mh0pzCEV_yVFPgBI8--0tyVRj9B4C2lrRz-JLjiGuNcCJWy2Uemt5W_1ct7eaCrjuI4AZuJ42ADNve0CWn3BSUSKW5q4tat3Y-J0HxAcDBF4JOB5G0t5HofHeM6Oet8N6VGCQfrrCg5L2eJOWR4GYVxrvbfw";

    #[test]
    fn an_rs256_token_verifies_with_an_rsa_jwk() {
        let jwks = serde_json::to_vec(&serde_json::json!({ "keys": [
            { "kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig", "n": RSA_N, "e": "AQAB" },
            serde_json::to_value(jwk_of(1, "k1")).unwrap(),
        ]}))
        .unwrap();
        let keys = parse_jwks(&jwks).unwrap();
        let mut h = Header::new(Algorithm::RS256);
        h.kid = Some("r1".into());
        let encoding = EncodingKey::from_rsa_pem(RSA_PEM.as_bytes()).unwrap();
        let tok = jsonwebtoken::encode(&h, &good_claims(), &encoding).unwrap();
        let (alg, kid) = header_of(&tok).unwrap();
        assert_eq!(alg, Algorithm::RS256);
        let jwk = find_key(&keys, kid.as_deref(), alg).unwrap();
        assert!(verify_with(&tok, jwk, alg, &trusted(), &k(), NOW).is_ok());
        assert!(
            find_key(&keys, Some("r1"), Algorithm::ES256).is_none(),
            "an RSA key does not verify ES256"
        );
        assert!(
            find_key(&keys, Some("k1"), Algorithm::RS256).is_none(),
            "an RS256 header does not select the EC key of that kid"
        );
    }

    fn sign_hs256() -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &good_claims(),
            &EncodingKey::from_secret(b"s"),
        )
        .unwrap()
    }

    #[test]
    fn a_jwks_with_unreadable_keys_keeps_the_readable_ones() {
        let good = serde_json::to_vec(&serde_json::json!({ "keys": [
            serde_json::to_value(jwk_of(1, "k1")).unwrap(),
            { "kty": "nonsense" },
            { "kty": "RSA", "use": "enc", "alg": "RSA-OAEP", "n": "AQAB", "e": "AQAB", "kid": "enc" },
        ]}))
        .unwrap();
        let keys = parse_jwks(&good).unwrap();
        assert_eq!(keys.len(), 2, "the nonsense key is skipped");
        assert!(find_key(&keys, Some("enc"), Algorithm::RS256).is_none());
        assert!(parse_jwks(b"[1,2]").is_err());
    }

    #[test]
    fn the_cache_refetches_an_unknown_kid_at_most_every_interval() {
        let ttl = Duration::from_secs(600);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut c = KeyCache::default();
        assert_eq!(c.plan(false, t0, ttl), Plan::Fetch, "empty: fetch");
        c.fetched(Ok(vec![jwk_of(1, "k1")]), t0);
        assert_eq!(c.plan(true, at(1), ttl), Plan::Use);
        assert_eq!(
            c.plan(false, at(1), ttl),
            Plan::Use,
            "unknown kid, fetched 1 s ago"
        );
        assert_eq!(c.plan(false, at(29), ttl), Plan::Use);
        assert_eq!(
            c.plan(false, at(30), ttl),
            Plan::Fetch,
            "the interval has passed"
        );
        c.fetched(Ok(vec![jwk_of(1, "k1")]), at(30));
        assert_eq!(
            c.plan(false, at(31), ttl),
            Plan::Use,
            "at most once per interval"
        );
        assert_eq!(c.plan(true, at(629), ttl), Plan::Use);
        assert_eq!(
            c.plan(true, at(630), ttl),
            Plan::Fetch,
            "the TTL has passed"
        );
    }

    #[test]
    fn a_failed_fetch_is_not_retried_within_the_interval() {
        let ttl = Duration::from_secs(600);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut c = KeyCache::default();
        c.fetched(Err("down".into()), t0);
        assert_eq!(c.plan(false, at(5), ttl), Plan::Refuse("down".into()));
        assert_eq!(c.plan(false, at(30), ttl), Plan::Fetch);
        c.fetched(Ok(vec![jwk_of(1, "k1")]), at(30));
        c.fetched(Err("down again".into()), at(60));
        assert_eq!(
            c.plan(true, at(61), ttl),
            Plan::Use,
            "keys within their TTL stay usable after a failed refetch"
        );
        assert_eq!(
            c.plan(true, at(630), ttl),
            Plan::Fetch,
            "stale and the last failure is old"
        );
        c.fetched(Err("still down".into()), at(630));
        assert_eq!(
            c.plan(true, at(631), ttl),
            Plan::Refuse("still down".into())
        );
        let short = Duration::from_secs(1);
        let mut c = KeyCache::default();
        c.fetched(Ok(vec![]), t0);
        assert_eq!(
            c.plan(true, at(2), short),
            Plan::Fetch,
            "a TTL below the interval refetches once stale"
        );
    }
}
