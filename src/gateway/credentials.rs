//! What the gateway remembers about who may register: one-time tokens it issued on
//! approval, connectors' registered public keys (its OAuth clients), session tokens
//! (hashed), rejected identities, and the client assertions' `jti`s it has seen.
//!
//! Plain data with `now` (milliseconds or seconds since the epoch) and randomness as
//! inputs. Clients, session tokens and rejections are persistent ([`Persisted`]);
//! one-time tokens and seen `jti`s are short-lived and kept in memory only. Every
//! persistent change bumps [`CredentialBook::generation`], so that the writer knows a
//! snapshot is newer than the file.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::tokens::{hash_session_token, ClientKey};
use crate::identity::RegistrationKey;

/// Session tokens kept per identity; the oldest is dropped beyond it. Each register
/// with a JWT mints a fresh one, so without a cap a connector that keeps
/// re-registering would grow the data file forever; four covers a connector and a
/// reconnect or two in flight.
pub(crate) const MAX_SESSION_TOKENS_PER_IDENTITY: usize = 4;

/// Most client-assertion `jti`s remembered at once. Each is kept until its assertion
/// expires (at most five minutes), so this bounds the memory a client that floods the
/// token endpoint with valid assertions can take; beyond it assertions are refused
/// until old ones expire.
pub(crate) const MAX_SEEN_JTIS: usize = 100_000;

/// A registered connector: its identity and public key.
#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) key: RegistrationKey,
    pub(crate) public_key: ClientKey,
}

/// Why a one-time token was refused (contract: register endpoint errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OttError {
    /// Never issued, or already used.
    Unknown,
    /// Past its lifetime; it is forgotten now.
    Expired,
    /// Issued for another identity; it stays usable by the right one.
    IdentityMismatch,
}

#[derive(Debug, Clone)]
struct Ott {
    key: RegistrationKey,
    expires_at_ms: u64,
}

/// The persistent part, as written to `approvals.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Persisted {
    /// Registered clients by client id (the dot key).
    #[serde(default)]
    clients: BTreeMap<String, PersistedClient>,
    /// SHA-256 (hex) of the live session tokens, by dot key, oldest first.
    #[serde(default)]
    session_tokens: BTreeMap<String, Vec<String>>,
    /// Rejected identities by dot key.
    #[serde(default)]
    rejected: BTreeMap<String, Rejection>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PersistedClient {
    tenant_id: String,
    connector_type: String,
    instance_id: String,
    public_key: String,
}

/// An operator's rejection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rejection {
    pub(crate) reason: String,
    pub(crate) at_ms: u64,
}

/// Everything above, in memory.
#[derive(Default)]
pub(crate) struct CredentialBook {
    clients: BTreeMap<String, Client>,
    sessions: BTreeMap<String, Vec<String>>,
    rejected: BTreeMap<String, Rejection>,
    otts: HashMap<String, Ott>,
    jtis: HashMap<String, u64>,
    generation: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl CredentialBook {
    /// Rebuilds the state from its persisted form; an unusable entry is an error
    /// naming it.
    pub(crate) fn from_persisted(p: Persisted) -> Result<CredentialBook, String> {
        let mut clients = BTreeMap::new();
        for (id, c) in p.clients {
            let key = RegistrationKey::new(&c.tenant_id, &c.connector_type, &c.instance_id);
            if key.dot_key() != id {
                return Err(format!(
                    "client {id:?} names the identity {}",
                    key.dot_key()
                ));
            }
            let public_key =
                ClientKey::from_pem(&c.public_key).map_err(|e| format!("client {id:?}: {e}"))?;
            clients.insert(id, Client { key, public_key });
        }
        Ok(CredentialBook {
            clients,
            sessions: p.session_tokens,
            rejected: p.rejected,
            ..Default::default()
        })
    }

    /// The persistent part, for the writer.
    pub(crate) fn persisted(&self) -> Persisted {
        Persisted {
            clients: self
                .clients
                .iter()
                .map(|(id, c)| {
                    let pc = PersistedClient {
                        tenant_id: c.key.tenant().to_owned(),
                        connector_type: c.key.connector_type().to_owned(),
                        instance_id: c.key.instance_id().to_owned(),
                        public_key: c.public_key.pem.clone(),
                    };
                    (id.clone(), pc)
                })
                .collect(),
            session_tokens: self.sessions.clone(),
            rejected: self.rejected.clone(),
        }
    }

    /// Bumped by every change of the persistent part.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Issues a one-time token for `key`, valid until `now_ms + lifetime_ms`; any
    /// earlier one for the same identity is withdrawn, so there is at most one per
    /// identity. `random` is the token's entropy.
    pub(crate) fn issue_ott(
        &mut self,
        key: &RegistrationKey,
        now_ms: u64,
        lifetime_ms: u64,
        random: [u8; 32],
    ) -> String {
        self.otts
            .retain(|_, o| o.expires_at_ms > now_ms && o.key != *key);
        let ott = hex(&random);
        let entry = Ott {
            key: key.clone(),
            expires_at_ms: now_ms.saturating_add(lifetime_ms),
        };
        self.otts.insert(ott.clone(), entry);
        ott
    }

    /// Uses `ott` for `claimed` to register `public_key`: consumed on success, so a
    /// second use is [`OttError::Unknown`]. Returns the new client's id.
    pub(crate) fn redeem_ott(
        &mut self,
        ott: &str,
        claimed: &RegistrationKey,
        claimed_tenant: bool,
        public_key: ClientKey,
        now_ms: u64,
    ) -> Result<String, OttError> {
        let o = self.otts.get(ott).ok_or(OttError::Unknown)?;
        if o.expires_at_ms <= now_ms {
            self.otts.remove(ott);
            return Err(OttError::Expired);
        }
        let same = o.key.connector_type() == claimed.connector_type()
            && o.key.instance_id() == claimed.instance_id()
            && (!claimed_tenant || o.key.tenant() == claimed.tenant());
        if !same {
            return Err(OttError::IdentityMismatch);
        }
        let key = self.otts.remove(ott).expect("present").key;
        let id = key.dot_key().to_owned();
        self.clients.insert(id.clone(), Client { key, public_key });
        self.generation += 1;
        Ok(id)
    }

    /// The client registered under `client_id`.
    pub(crate) fn client(&self, client_id: &str) -> Option<&Client> {
        self.clients.get(client_id)
    }

    /// Remembers an assertion's `jti` until `exp` (seconds); false when it was seen
    /// before (a replay) or the memory is full.
    pub(crate) fn note_jti(&mut self, client_id: &str, jti: &str, exp: u64, now: u64) -> bool {
        self.jtis.retain(|_, e| *e > now);
        if self.jtis.len() >= MAX_SEEN_JTIS {
            return false;
        }
        let k = format!("{client_id} {jti}");
        if self.jtis.contains_key(&k) {
            return false;
        }
        self.jtis.insert(k, exp);
        true
    }

    /// Mints a session token for `key` from `random` and keeps its hash.
    pub(crate) fn issue_session(&mut self, key: &RegistrationKey, random: [u8; 16]) -> String {
        let token = hex(&random);
        let list = self.sessions.entry(key.dot_key().to_owned()).or_default();
        list.push(hash_session_token(&token));
        if list.len() > MAX_SESSION_TOKENS_PER_IDENTITY {
            list.remove(0);
        }
        self.generation += 1;
        token
    }

    /// Whether `token` is a live session token of `key`.
    pub(crate) fn session_valid(&self, key: &RegistrationKey, token: &str) -> bool {
        let h = hash_session_token(token);
        self.sessions
            .get(key.dot_key())
            .is_some_and(|l| l.contains(&h))
    }

    /// Records an operator's rejection of `key` and revokes everything it was given:
    /// its session tokens, its registered key (so it can mint no more JWTs) and any
    /// outstanding one-time token. Without that, an identity approved once and
    /// rejected later would still get in with what it holds, since credentials are
    /// checked before rejections.
    pub(crate) fn reject(&mut self, key: &RegistrationKey, reason: &str, now_ms: u64) {
        let r = Rejection {
            reason: reason.to_owned(),
            at_ms: now_ms,
        };
        self.rejected.insert(key.dot_key().to_owned(), r);
        self.sessions.remove(key.dot_key());
        self.clients.retain(|_, c| c.key != *key);
        self.otts.retain(|_, o| o.key != *key);
        self.generation += 1;
    }

    /// The operator's rejection of `key`, if any.
    pub(crate) fn rejection(&self, key: &RegistrationKey) -> Option<&Rejection> {
        self.rejected.get(key.dot_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::tokens::GatewayKey;

    fn k(instance: &str) -> RegistrationKey {
        RegistrationKey::new("acme", "echo", instance)
    }

    fn some_public_key() -> ClientKey {
        let g = GatewayKey::from_secret_bytes(&[3; 32]).unwrap();
        let jwk = &g.jwks()["keys"][0];
        let jwk: p256::elliptic_curve::JwkEcKey = serde_json::from_value(serde_json::json!({
            "kty": "EC", "crv": "P-256", "x": jwk["x"], "y": jwk["y"],
        }))
        .unwrap();
        let public = p256::PublicKey::from_jwk(&jwk).unwrap();
        use p256::pkcs8::EncodePublicKey as _;
        ClientKey::from_pem(&public.to_public_key_pem(Default::default()).unwrap()).unwrap()
    }

    #[test]
    fn a_one_time_token_registers_a_key_once() {
        let mut c = CredentialBook::default();
        let ott = c.issue_ott(&k("a"), 1_000, 600_000, [1; 32]);
        let id = c
            .redeem_ott(&ott, &k("a"), true, some_public_key(), 2_000)
            .unwrap();
        assert_eq!(id, "acme.echo.a");
        assert!(c.client(&id).is_some());
        assert_eq!(
            c.redeem_ott(&ott, &k("a"), true, some_public_key(), 2_000)
                .err(),
            Some(OttError::Unknown)
        );
    }

    #[test]
    fn a_one_time_token_expires_at_its_lifetime() {
        let mut c = CredentialBook::default();
        let ott = c.issue_ott(&k("a"), 1_000, 600_000, [1; 32]);
        assert_eq!(
            c.redeem_ott(&ott, &k("a"), true, some_public_key(), 601_000)
                .err(),
            Some(OttError::Expired)
        );
        assert_eq!(
            c.redeem_ott(&ott, &k("a"), true, some_public_key(), 601_000)
                .err(),
            Some(OttError::Unknown),
            "an expired token is forgotten"
        );
    }

    #[test]
    fn a_one_time_token_of_another_identity_is_refused_and_kept() {
        let mut c = CredentialBook::default();
        let ott = c.issue_ott(&k("a"), 0, 600_000, [1; 32]);
        assert_eq!(
            c.redeem_ott(&ott, &k("b"), true, some_public_key(), 1)
                .err(),
            Some(OttError::IdentityMismatch)
        );
        let no_tenant = RegistrationKey::new("", "echo", "a");
        assert!(c
            .redeem_ott(&ott, &no_tenant, false, some_public_key(), 1)
            .is_ok());
    }

    #[test]
    fn a_new_one_time_token_withdraws_the_old_one() {
        let mut c = CredentialBook::default();
        let first = c.issue_ott(&k("a"), 0, 600_000, [1; 32]);
        let _second = c.issue_ott(&k("a"), 0, 600_000, [2; 32]);
        assert_eq!(
            c.redeem_ott(&first, &k("a"), true, some_public_key(), 1)
                .err(),
            Some(OttError::Unknown)
        );
    }

    #[test]
    fn session_tokens_are_found_by_identity_and_capped() {
        let mut c = CredentialBook::default();
        let first = c.issue_session(&k("a"), [1; 16]);
        assert!(c.session_valid(&k("a"), &first));
        assert!(
            !c.session_valid(&k("b"), &first),
            "another identity's token"
        );
        assert!(!c.session_valid(&k("a"), "deadbeef"));
        for i in 0..MAX_SESSION_TOKENS_PER_IDENTITY as u8 {
            c.issue_session(&k("a"), [10 + i; 16]);
        }
        assert!(!c.session_valid(&k("a"), &first), "the oldest is dropped");
    }

    #[test]
    fn a_replayed_jti_is_refused_until_it_expires() {
        let mut c = CredentialBook::default();
        assert!(c.note_jti("acme.echo.a", "j1", 100, 10));
        assert!(!c.note_jti("acme.echo.a", "j1", 100, 20));
        assert!(c.note_jti("acme.echo.b", "j1", 100, 20), "per client");
        assert!(
            c.note_jti("acme.echo.a", "j1", 200, 100),
            "forgotten at exp"
        );
    }

    #[test]
    fn a_rejection_revokes_the_identitys_session_tokens_key_and_one_time_token() {
        let mut c = CredentialBook::default();
        let t = c.issue_session(&k("a"), [4; 16]);
        let ott = c.issue_ott(&k("a"), 0, 600_000, [5; 32]);
        let id = c
            .redeem_ott(&ott, &k("a"), true, some_public_key(), 1)
            .unwrap();
        let pending_ott = c.issue_ott(&k("a"), 2, 600_000, [6; 32]);
        let other = c.issue_session(&k("b"), [7; 16]);
        c.reject(&k("a"), "gone", 3);
        assert!(!c.session_valid(&k("a"), &t), "session token revoked");
        assert!(c.client(&id).is_none(), "registered key revoked");
        assert_eq!(
            c.redeem_ott(&pending_ott, &k("a"), true, some_public_key(), 4)
                .err(),
            Some(OttError::Unknown),
            "one-time token withdrawn"
        );
        assert!(
            c.session_valid(&k("b"), &other),
            "other identities keep theirs"
        );
    }

    #[test]
    fn a_rejection_is_remembered_and_survives_persistence() {
        let mut c = CredentialBook::default();
        c.reject(&k("a"), "not ours", 5);
        let t = c.issue_session(&k("b"), [4; 16]);
        let ott = c.issue_ott(&k("c"), 0, 600_000, [5; 32]);
        c.redeem_ott(&ott, &k("c"), true, some_public_key(), 1)
            .unwrap();
        let json = serde_json::to_string(&c.persisted()).unwrap();
        let again = CredentialBook::from_persisted(serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(again.rejection(&k("a")).unwrap().reason, "not ours");
        assert!(again.rejection(&k("b")).is_none());
        assert!(again.session_valid(&k("b"), &t));
        assert!(again.client("acme.echo.c").is_some());
    }

    #[test]
    fn persistent_changes_bump_the_generation() {
        let mut c = CredentialBook::default();
        let g0 = c.generation();
        c.issue_ott(&k("a"), 0, 1, [1; 32]);
        assert_eq!(c.generation(), g0, "one-time tokens are memory only");
        c.reject(&k("a"), "x", 0);
        assert!(c.generation() > g0);
    }
}
