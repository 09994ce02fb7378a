//! How a register is decided, and the state the decision reads: the approval contract
//! (PROTOCOL.md §4; the guide's (docs/guide/connector-authors.md) "Approval" sections).
//!
//! In [`ApprovalMode::Auto`] every well-formed register is approved. In
//! [`ApprovalMode::Manual`], [`decide`] applies, in order: a known session token of
//! the identity approves; a valid gateway JWT naming the identity approves with a fresh
//! session token; any other credential given is refused with a stable code
//! (`invalid_session_token:`, `invalid_token:`, `expired_token:`, `untrusted_issuer:`)
//! so that the client drops it and tries the next; an identity the operator rejected
//! is REJECTED; anything else is PENDING until the operator approves it.
//!
//! A JWT whose (unverified) `iss` names one of the operator's trusted external issuers
//! ([`super::GatewayConfig::trusted_issuers`], typically a Keycloak realm) is checked
//! against that issuer's JWKS instead (`issuers.rs`) and, when valid, approves the same
//! way; an `iss` that is neither the gateway's nor trusted is `untrusted_issuer:`.
//!
//! [`Approvals`] holds the gateway key, the issuer and the [`CredentialBook`] behind one
//! short lock, and writes each persistent change to the data dir after the lock is
//! released. [`Approvals::decide`] verifies an external JWT (which may fetch a JWKS)
//! before it takes that lock, never while holding it. [`decide`] takes `now`, the
//! randomness of a new session token and the external verdict as inputs, so its tests
//! are plain `#[test]`s.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use super::config::{ApprovalMode, GatewayConfig};
use super::credentials::CredentialBook;
use super::issuers::{self, Issuers, Source};
use super::persist::Persister;
use super::tokens::{GatewayKey, TokenError};
use crate::error::Result;
use crate::identity::RegistrationKey;
use crate::proto::{
    stream_message::Message, ApprovalNotification, CredentialsIssued, RegistrationStatus,
    StreamMessage,
};

/// The path of the key registration endpoint, as `credentials_issued.register_url`.
pub(crate) const REGISTER_PATH: &str = "/api/v1/auth/register";
/// The path of the token endpoint, below the issuer.
pub(crate) const TOKEN_PATH: &str = "/oauth/token";

/// The answer [`decide`] gives a register request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Approved, with this session token for the response.
    Approved { session_token: String },
    /// Listed for the operator, not executable.
    Pending,
    /// A credential was given and is not valid: `code: explanation`.
    Invalid(String),
    /// The operator rejected this identity: `rejected: reason`.
    Rejected(String),
}

/// The approval state of one gateway.
pub(crate) struct Approvals {
    pub(crate) mode: ApprovalMode,
    pub(crate) key: GatewayKey,
    /// The issuer of access tokens and the `matrix_api_url`: no trailing slash.
    pub(crate) issuer: String,
    pub(crate) ott_lifetime: Duration,
    pub(crate) token_lifetime: Duration,
    creds: Mutex<CredentialBook>,
    persister: Option<Persister>,
    issuers: Issuers,
}

impl Approvals {
    /// The state for a gateway bound to `addr`: read from `config.data_dir` if set
    /// (an unreadable file is an error), else fresh in memory.
    pub(crate) fn open(config: &GatewayConfig, addr: SocketAddr) -> Result<Approvals> {
        let (key, creds, persister) = match &config.data_dir {
            Some(dir) => {
                let (k, c, p) = super::persist::open(dir)?;
                (k, c, Some(p))
            }
            None => (GatewayKey::generate(), CredentialBook::default(), None),
        };
        let issuers = Issuers::new(config).map_err(crate::error::Error::Config)?;
        let issuer = config
            .public_url
            .as_deref()
            .map(|u| u.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| format!("http://{addr}"));
        Ok(Approvals {
            mode: config.approval,
            key,
            issuer,
            ott_lifetime: config.ott_lifetime,
            token_lifetime: config.token_lifetime,
            creds: Mutex::new(creds),
            persister,
            issuers,
        })
    }

    /// The absolute URL of the token endpoint.
    pub(crate) fn token_endpoint(&self) -> String {
        format!("{}{TOKEN_PATH}", self.issuer)
    }

    /// Runs `f` on the credentials under the lock; a persistent change is written to
    /// the data dir once the lock is released (a failed write is logged with the
    /// path: the change holds in memory, and the next write retries it).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut CredentialBook) -> R) -> R {
        let (r, snapshot) = {
            let mut c = self.creds.lock().expect("credentials lock");
            let before = c.generation();
            let r = f(&mut c);
            let changed = c.generation() != before && self.persister.is_some();
            (r, changed.then(|| (c.generation(), c.persisted())))
        };
        if let (Some((generation, state)), Some(p)) = (snapshot, &self.persister) {
            if let Err(e) = p.write(generation, &state) {
                tracing::error!(error = %e, "could not write the gateway's approval state");
            }
        }
        r
    }

    /// Decides a register of `key` with these credentials, now. A JWT of a trusted
    /// external issuer is verified first, with no lock held: that may fetch the
    /// issuer's JWKS, and only the caller waits for it (`issuers.rs`).
    pub(crate) async fn decide(
        &self,
        key: &RegistrationKey,
        session_token: &str,
        jwt: &str,
    ) -> Decision {
        use rand::Rng as _;
        let by_session =
            !session_token.is_empty() && self.with(|c| c.session_valid(key, session_token));
        let external = if jwt.is_empty() || by_session {
            None
        } else {
            match issuers::select(jwt, &self.issuer, self.issuers.configs()) {
                Source::Gateway => None,
                Source::Unknown(iss) => Some(Err(TokenError::UntrustedIssuer(format!(
                    "the token's issuer {iss:?} is neither this gateway ({}) nor an issuer it \
                     trusts",
                    self.issuer
                )))),
                Source::Trusted(i) => {
                    Some(self.issuers.verify(i, jwt, key, || now_ms() / 1000).await)
                }
            }
        };
        let random: [u8; 16] = rand::rng().random();
        let now = now_ms() / 1000;
        self.with(|c| {
            decide(
                c,
                &self.key,
                &self.issuer,
                key,
                session_token,
                jwt,
                external,
                now,
                random,
            )
        })
    }
}

/// [`crate::clock::now_ms`] as the unsigned milliseconds the approval records keep.
pub(crate) fn now_ms() -> u64 {
    u64::try_from(crate::clock::now_ms()).unwrap_or(0)
}

/// The manual-mode decision (module docs), at `now` (seconds since the epoch);
/// `random` becomes the session token of an approval by JWT. `external` is the
/// verdict on a JWT that is not the gateway's own (a trusted or unknown issuer), which
/// then stands in for the check with the gateway key.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decide(
    creds: &mut CredentialBook,
    gateway_key: &GatewayKey,
    issuer: &str,
    key: &RegistrationKey,
    session_token: &str,
    jwt: &str,
    external: Option<Result<(), TokenError>>,
    now: u64,
    random: [u8; 16],
) -> Decision {
    let mut refusal = None;
    if !session_token.is_empty() {
        if creds.session_valid(key, session_token) {
            return Decision::Approved {
                session_token: session_token.to_owned(),
            };
        }
        refusal = Some(format!(
            "invalid_session_token: the session token is not one this gateway issued to {}; \
             register with a JWT instead",
            key.dot_key()
        ));
    }
    if let Some(verdict) = external.filter(|_| !jwt.is_empty()) {
        match verdict {
            Ok(()) => {
                return Decision::Approved {
                    session_token: creds.issue_session(key, random),
                }
            }
            Err(e) => {
                refusal.get_or_insert(e.wire());
            }
        }
    } else if !jwt.is_empty() {
        match gateway_key.verify(jwt, issuer, now) {
            Ok(c)
                if c.tenant_id == key.tenant()
                    && c.connector_type == key.connector_type()
                    && c.instance_id == key.instance_id()
                    && c.sub == key.dot_key() =>
            {
                return Decision::Approved {
                    session_token: creds.issue_session(key, random),
                };
            }
            Ok(c) => {
                refusal.get_or_insert(format!(
                    "invalid_token: the token was issued to {} but this register is {}",
                    c.sub,
                    key.dot_key()
                ));
            }
            Err(e) => {
                refusal.get_or_insert(e.wire());
            }
        }
    }
    if let Some(r) = refusal {
        return Decision::Invalid(r);
    }
    if let Some(r) = creds.rejection(key) {
        return Decision::Rejected(format!("rejected: {}", r.reason));
    }
    Decision::Pending
}

/// `approval_notification` for the registration `key`.
pub(crate) fn notification(
    key: &RegistrationKey,
    status: RegistrationStatus,
    message: String,
) -> StreamMessage {
    StreamMessage {
        message: Some(Message::ApprovalNotification(ApprovalNotification {
            gateway_id: key.dot_key().to_owned(),
            status: status as i32,
            message,
        })),
    }
}

/// `credentials_issued` carrying `ott` for the registration `key`.
pub(crate) fn credentials_issued(
    key: &RegistrationKey,
    ott: String,
    matrix_api_url: &str,
    now_ms: u64,
) -> StreamMessage {
    StreamMessage {
        message: Some(Message::CredentialsIssued(CredentialsIssued {
            gateway_id: key.dot_key().to_owned(),
            timestamp_ms: i64::try_from(now_ms).unwrap_or(i64::MAX),
            message: format!(
                "POST your public key with this one-time token to {matrix_api_url}{REGISTER_PATH}"
            ),
            ott,
            register_url: REGISTER_PATH.to_owned(),
            matrix_api_url: matrix_api_url.to_owned(),
            ..Default::default()
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::tokens::{AccessClaims, ACCESS_TOKEN_AUDIENCE};

    const ISS: &str = "http://gw";
    const NOW: u64 = 1_700_000_000;

    fn k(instance: &str) -> RegistrationKey {
        RegistrationKey::new("acme", "echo", instance)
    }

    fn gw_key() -> GatewayKey {
        GatewayKey::from_secret_bytes(&[5; 32]).unwrap()
    }

    fn jwt_for(g: &GatewayKey, key: &RegistrationKey, exp: u64) -> String {
        g.mint(&AccessClaims {
            iss: ISS.into(),
            sub: key.dot_key().into(),
            aud: ACCESS_TOKEN_AUDIENCE.into(),
            tenant_id: key.tenant().into(),
            connector_type: key.connector_type().into(),
            instance_id: key.instance_id().into(),
            iat: NOW,
            exp,
        })
    }

    fn run(c: &mut CredentialBook, key: &RegistrationKey, session: &str, jwt: &str) -> Decision {
        decide(c, &gw_key(), ISS, key, session, jwt, None, NOW, [9; 16])
    }

    #[test]
    fn an_external_verdict_stands_in_for_the_gateway_key() {
        let mut c = CredentialBook::default();
        let mut ext = |v| {
            decide(
                &mut c,
                &gw_key(),
                ISS,
                &k("a"),
                "",
                "x.y.z",
                Some(v),
                NOW,
                [9; 16],
            )
        };
        let Decision::Approved { session_token } = ext(Ok(())) else {
            panic!("approved")
        };
        assert_eq!(
            run(&mut c, &k("a"), &session_token, ""),
            Decision::Approved {
                session_token: session_token.clone()
            },
            "the session token of an external approval approves later"
        );
        let refused = decide(
            &mut c,
            &gw_key(),
            ISS,
            &k("a"),
            "",
            "x.y.z",
            Some(Err(TokenError::UntrustedIssuer("down".into()))),
            NOW,
            [9; 16],
        );
        assert_eq!(refused, Decision::Invalid("untrusted_issuer: down".into()));
    }

    #[test]
    fn no_credential_is_pending() {
        assert_eq!(
            run(&mut CredentialBook::default(), &k("a"), "", ""),
            Decision::Pending
        );
    }

    #[test]
    fn a_valid_jwt_approves_with_a_session_token_that_approves_later() {
        let mut c = CredentialBook::default();
        let jwt = jwt_for(&gw_key(), &k("a"), NOW + 60);
        let Decision::Approved { session_token } = run(&mut c, &k("a"), "", &jwt) else {
            panic!("approved")
        };
        assert_eq!(
            run(&mut c, &k("a"), &session_token, ""),
            Decision::Approved {
                session_token: session_token.clone()
            }
        );
        assert!(matches!(
            run(&mut c, &k("b"), &session_token, ""),
            Decision::Invalid(e) if e.starts_with("invalid_session_token: ")
        ));
    }

    #[test]
    fn a_bad_credential_is_refused_with_its_code() {
        let mut c = CredentialBook::default();
        let other = jwt_for(&gw_key(), &k("b"), NOW + 60);
        let expired = jwt_for(&gw_key(), &k("a"), NOW - 1);
        let foreign = jwt_for(
            &GatewayKey::from_secret_bytes(&[6; 32]).unwrap(),
            &k("a"),
            NOW + 60,
        );
        for (jwt, code) in [
            (other.as_str(), "invalid_token: "),
            (expired.as_str(), "expired_token: "),
            (foreign.as_str(), "invalid_token: "),
            ("not.a.jwt", "invalid_token: "),
        ] {
            assert!(
                matches!(run(&mut c, &k("a"), "", jwt), Decision::Invalid(ref e) if e.starts_with(code)),
                "{code}"
            );
        }
    }

    #[test]
    fn a_valid_jwt_wins_over_a_stale_session_token() {
        let mut c = CredentialBook::default();
        let jwt = jwt_for(&gw_key(), &k("a"), NOW + 60);
        assert!(matches!(
            run(&mut c, &k("a"), "stale", &jwt),
            Decision::Approved { .. }
        ));
    }

    #[test]
    fn a_rejected_identity_stays_rejected() {
        let mut c = CredentialBook::default();
        c.reject(&k("a"), "unknown host", 0);
        assert_eq!(
            run(&mut c, &k("a"), "", ""),
            Decision::Rejected("rejected: unknown host".into())
        );
        assert_eq!(run(&mut c, &k("b"), "", ""), Decision::Pending);
    }
}
