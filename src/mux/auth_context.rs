//! What the socket's task keeps per registration for the approval flow ([`AuthCtx`]),
//! loaded from the registration's credential directory when it is admitted
//! ([`load`]).
//!
//! The approval task (`approval`) and the driver's event handling both work on it:
//! the task stores the keys and JWTs it obtains, the driver persists a session token
//! from an approved register and forgets a credential the gateway refused. Kept apart
//! from both so that a socket's per-registration data (`socket::RegUser`) can name it
//! without importing either.

use std::sync::Arc;
use std::time::Duration;

use super::core::Credential;
use crate::auth::keys::KeyPair;
use crate::auth::store::{CredentialStore, StoredCredentials};
use crate::backoff::BackoffPolicy;
use crate::identity::RegistrationKey;

/// A stored JWT counts as usable only if it outlives this margin, so a register in
/// flight does not present one that expires on arrival.
pub(crate) const JWT_MARGIN: Duration = Duration::from_secs(30);

/// What the driver keeps per registration for the approval flow.
pub(crate) struct AuthCtx {
    pub(crate) store: CredentialStore,
    pub(crate) key: RegistrationKey,
    /// Bound of every HTTP step (the registration's register timeout).
    pub(crate) timeout: Duration,
    pub(crate) retry: BackoffPolicy,
    /// Stored keys to keep the JWT fresh with from the start.
    pub(crate) refresh: Option<Refresh>,
    /// The registration's config, whose CA bundle and proxy setting the exchange
    /// follows: the gateway's HTTP API is reached the way its socket is.
    pub(crate) config: crate::connector::config::ConnectorConfig,
}

/// A registration's stored keys, enough to mint JWTs without a new approval.
#[derive(Clone)]
pub(crate) struct Refresh {
    pub(crate) key: KeyPair,
    pub(crate) client_id: String,
    pub(crate) token_endpoint: String,
    pub(crate) jwt_expires_at_ms: Option<i64>,
}

impl Refresh {
    /// The refresh half of stored credentials, when they hold a key and a client.
    pub(crate) fn from_stored(key: Option<KeyPair>, c: &StoredCredentials) -> Option<Self> {
        Some(Refresh {
            key: key?,
            client_id: c.client_id.clone()?,
            token_endpoint: c.token_endpoint.clone()?,
            jwt_expires_at_ms: c.jwt.as_ref().and(c.jwt_expires_at_ms),
        })
    }
}

impl AuthCtx {
    /// Persists a session token from an approved register, off the socket task, if
    /// the registration went through an approval (its key is stored). One that an
    /// auto-approving gateway accepted has nothing a restart would need, so it writes
    /// nothing: a connector that never meets a manual gateway leaves no files behind.
    pub(crate) fn store_session_token(&self, token: String) {
        let (store, key) = (self.store.clone(), self.key.dot_key().to_owned());
        tokio::task::spawn_blocking(move || {
            if !matches!(store.load_key(&key), Ok(Some(_))) {
                return;
            }
            if let Err(e) = store.update(&key, |c| c.session_token = Some(token)) {
                tracing::warn!(key = %key, error = %e, "cannot update the stored credentials");
            }
        });
    }

    /// Forgets a stored credential the gateway called invalid.
    pub(crate) fn forget(&self, credential: Credential) {
        self.update_in_background(move |c| match credential {
            Credential::SessionToken => c.session_token = None,
            Credential::Jwt => {
                c.jwt = None;
                c.jwt_expires_at_ms = None;
            }
            Credential::Configured | Credential::None => {}
        });
    }

    fn update_in_background(&self, f: impl FnOnce(&mut StoredCredentials) + Send + 'static) {
        let (store, key) = (self.store.clone(), self.key.dot_key().to_owned());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.update(&key, f) {
                tracing::warn!(key = %key, error = %e, "cannot update the stored credentials");
            }
        });
    }
}

/// What a registration starts with, from its credential directory.
#[derive(Default)]
pub(crate) struct Loaded {
    pub(crate) session_token: Option<String>,
    /// The stored JWT, if it outlives [`JWT_MARGIN`].
    pub(crate) jwt: Option<String>,
    /// Stored keys but no usable JWT or session token: hold the first register for
    /// the JWT the refresh task mints at once.
    pub(crate) await_jwt: bool,
    pub(crate) auth: Option<Arc<AuthCtx>>,
}

/// Loads a registration's stored credentials at admission. A directory that cannot
/// be read is logged and treated as empty (the registration then asks for a fresh
/// approval), never a reason not to start.
pub(crate) fn load(
    config: &crate::connector::config::ConnectorConfig,
    key: &RegistrationKey,
) -> Loaded {
    let Some(dir) = config.effective_credentials_dir() else {
        tracing::warn!(key = %key, "no credential directory (set credentials_dir, SWITCHBOARD_CREDENTIALS_DIR or HOME); approvals will not survive a restart");
        return Loaded::default();
    };
    let store = CredentialStore::new(dir);
    let dot = key.dot_key();
    let stored = store.load(dot).and_then(|c| Ok((c, store.load_key(dot)?)));
    let (stored, stored_key) = match stored {
        Ok((c, k)) => (c.unwrap_or_default(), k),
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "ignoring unreadable stored credentials");
            (StoredCredentials::default(), None)
        }
    };
    let jwt = stored
        .live_jwt(crate::clock::now_ms(), JWT_MARGIN.as_millis() as i64)
        .map(str::to_owned);
    let mut refresh = Refresh::from_stored(stored_key, &stored);
    if let (Some(r), None) = (&mut refresh, &jwt) {
        // Expired or expiring: mint at once.
        r.jwt_expires_at_ms = None;
    }
    let await_jwt = refresh.is_some() && jwt.is_none() && stored.session_token.is_none();
    if stored.session_token.is_some() || jwt.is_some() {
        tracing::info!(key = %key, session_token = stored.session_token.is_some(), jwt = jwt.is_some(), "loaded stored credentials");
    }
    Loaded {
        session_token: stored.session_token,
        jwt,
        await_jwt,
        auth: Some(Arc::new(AuthCtx {
            store,
            key: key.clone(),
            timeout: config.register_timeout,
            retry: config.reconnect.clone(),
            refresh,
            config: config.clone(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_needs_a_key_and_a_client() {
        let c = StoredCredentials {
            client_id: Some("a.b.c".into()),
            token_endpoint: Some("http://g/oauth/token".into()),
            jwt_expires_at_ms: Some(5),
            ..Default::default()
        };
        assert!(Refresh::from_stored(None, &c).is_none());
        let r = Refresh::from_stored(Some(KeyPair::generate()), &c).unwrap();
        // No JWT stored: its expiry means nothing, mint at once.
        assert_eq!(r.jwt_expires_at_ms, None);
        let no_client = StoredCredentials::default();
        assert!(Refresh::from_stored(Some(KeyPair::generate()), &no_client).is_none());
    }
}
