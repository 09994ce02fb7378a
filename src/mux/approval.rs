//! The approval flow's per-registration task, and what the socket's driver hands it.
//!
//! When the gateway sends `credentials_issued`, the driver starts ONE task for that
//! registration (a second `credentials_issued` replaces the first: its token is the
//! newer one). The task makes and stores a key pair, registers it with the one-time
//! token, mints an access token (JWT), stores it, and sends it back to the socket's
//! core as [`Command::Credentials`], which re-registers in-stream with it. It then
//! stays to re-mint the JWT at 80% of its lifetime, so a reconnect never presents an
//! expired one. A registration that starts with stored keys gets the same task in its
//! refresh half at once.
//!
//! The task runs apart from the socket task (HTTP must never stall a socket), every
//! HTTP step is bounded by the registration's register timeout, transient failures
//! are retried with backoff and jitter, and a final refusal (a used or expired
//! one-time token, an unknown client) is published on the handle and ends the task:
//! the registration then waits for a new approval. Removing the registration, or the
//! socket task ending, cancels it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::core::Credential;
use super::driver::Command;
use super::handle::HandleState;
use super::routing::HandleId;
use crate::auth::exchange::Exchange;
use crate::auth::keys::KeyPair;
use crate::auth::store::{CredentialStore, StoredCredentials};
use crate::backoff::{Backoff, BackoffPolicy};
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::proto::CredentialsIssued;

/// When a JWT is re-minted: at this fraction of its remaining lifetime.
const REFRESH_AT: f64 = 0.8;

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

/// How a registration's task starts.
pub(crate) enum Start {
    /// The gateway issued a one-time token: the whole exchange.
    Issued(CredentialsIssued),
    /// Stored keys: keep the JWT fresh (mint at once if it is missing or expiring).
    Refresh(Refresh),
}

/// The running tasks of one socket, one per registration at most. Dropping an entry
/// (or the whole set) cancels its task.
#[derive(Default)]
pub(crate) struct Agents {
    running: HashMap<HandleId, DropGuard>,
}

impl Agents {
    /// Starts the registration's task, cancelling the one it replaces.
    pub(crate) fn start(
        &mut self,
        handle: HandleId,
        ctx: Arc<AuthCtx>,
        state: Arc<HandleState>,
        commands: mpsc::Sender<Command>,
        start: Start,
    ) {
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let agent = Agent {
            handle,
            ctx,
            state,
            commands,
        };
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = agent.run(start) => {}
            }
        });
        self.running.insert(handle, cancel.drop_guard());
    }

    /// Cancels the registration's task, if it has one.
    pub(crate) fn stop(&mut self, handle: HandleId) {
        self.running.remove(&handle);
    }
}

struct Agent {
    handle: HandleId,
    ctx: Arc<AuthCtx>,
    state: Arc<HandleState>,
    commands: mpsc::Sender<Command>,
}

impl Agent {
    async fn run(self, start: Start) {
        let key = self.ctx.key.clone();
        let span = tracing::info_span!("approval", key = %key);
        let _ = tracing::Instrument::instrument(self.exchange(start), span).await;
    }

    async fn exchange(&self, start: Start) -> Result<()> {
        let tls = self
            .ctx
            .config
            .dialer()
            .inspect_err(|e| self.failed(e))?
            .tls_config();
        let ex = Exchange::new(self.ctx.timeout, Some(tls), &self.ctx.config.proxy)
            .inspect_err(|e| self.failed(e))?;
        let mut refresh = match start {
            Start::Issued(issued) => self.register_key(&ex, issued).await?,
            Start::Refresh(r) => r,
        };
        loop {
            if let Some(exp) = refresh.jwt_expires_at_ms {
                tokio::time::sleep(refresh_delay(exp, crate::clock::now_ms())).await;
            }
            let token = match self
                .retrying("the token request", || {
                    ex.mint(&refresh.client_id, &refresh.token_endpoint, &refresh.key)
                })
                .await
            {
                Ok(t) => t,
                Err(e) => {
                    // The gateway no longer accepts these keys: forget them, and let
                    // the registration fall back to what else it has (a fresh
                    // approval at worst).
                    self.failed(&e);
                    self.store(|c| {
                        *c = StoredCredentials {
                            session_token: c.session_token.take(),
                            ..Default::default()
                        }
                    })
                    .await?;
                    self.send(None).await;
                    return Err(e);
                }
            };
            let expires_at = crate::clock::now_ms() + token.expires_in.as_millis() as i64;
            let jwt = token.jwt.clone();
            self.store(move |c| {
                c.jwt = Some(jwt);
                c.jwt_expires_at_ms = Some(expires_at);
            })
            .await?;
            tracing::info!(
                expires_in_s = token.expires_in.as_secs(),
                "access token minted"
            );
            self.state.approval_error(None);
            if !self.send(Some(token.jwt)).await {
                return Ok(());
            }
            refresh.jwt_expires_at_ms = Some(expires_at);
        }
    }

    /// Makes and stores a key pair and registers it with the one-time token.
    async fn register_key(&self, ex: &Exchange, issued: CredentialsIssued) -> Result<Refresh> {
        let key = KeyPair::generate();
        let (store, dot, k) = (
            self.ctx.store.clone(),
            self.ctx.key.dot_key().to_owned(),
            key.clone(),
        );
        blocking(move || store.save_key(&dot, &k))
            .await
            .inspect_err(|e| self.failed(e))?;
        let reg = self
            .retrying("the key registration", || {
                ex.register_key(
                    &issued.matrix_api_url,
                    &issued.register_url,
                    &issued.ott,
                    &key,
                    &self.ctx.key,
                )
            })
            .await
            .inspect_err(|e| self.failed(e))?;
        tracing::info!(client_id = %reg.client_id, "key registered with the one-time token");
        let stored = reg.clone();
        self.store(move |c| {
            c.client_id = Some(stored.client_id);
            c.token_endpoint = Some(stored.token_endpoint);
            c.issuer = Some(stored.issuer).filter(|i| !i.is_empty());
            c.jwt = None;
            c.jwt_expires_at_ms = None;
        })
        .await?;
        Ok(Refresh {
            key,
            client_id: reg.client_id,
            token_endpoint: reg.token_endpoint,
            jwt_expires_at_ms: None,
        })
    }

    /// Runs `step` until it succeeds or fails for good; transient failures wait a
    /// backoff with jitter and are published on the handle meanwhile.
    async fn retrying<T, F: Future<Output = Result<T>>>(
        &self,
        what: &str,
        mut step: impl FnMut() -> F,
    ) -> Result<T> {
        let mut backoff = Backoff::new(self.ctx.retry.clone());
        loop {
            match step().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_recoverable() => {
                    let delay = backoff.next_delay(rand::random::<f64>());
                    tracing::warn!(error = %e, delay_ms = delay.as_millis() as u64, "{what} failed; retrying");
                    self.state.approval_error(Some(e.to_string()));
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn store(&self, f: impl FnOnce(&mut StoredCredentials) + Send + 'static) -> Result<()> {
        let (store, dot) = (self.ctx.store.clone(), self.ctx.key.dot_key().to_owned());
        blocking(move || store.update(&dot, f).map(|_| ()))
            .await
            .inspect_err(|e| self.failed(e))
    }

    /// Hands the JWT (or the news that there is none) to the socket's core; false
    /// when the socket is gone.
    async fn send(&self, jwt: Option<String>) -> bool {
        let cmd = Command::Credentials {
            handle: self.handle,
            jwt,
        };
        self.commands.send(cmd).await.is_ok()
    }

    fn failed(&self, e: &Error) {
        tracing::warn!(error = %e, "approval exchange failed; waiting for a new approval");
        self.state.approval_error(Some(e.to_string()));
    }
}

/// How long until a JWT expiring at `expires_at_ms` is re-minted.
pub(crate) fn refresh_delay(expires_at_ms: i64, now_ms: i64) -> Duration {
    let left = expires_at_ms.saturating_sub(now_ms).max(0) as f64;
    Duration::from_millis((left * REFRESH_AT) as u64)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Error::Config(format!("credential store task failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_is_refreshed_at_80_percent_of_what_is_left() {
        assert_eq!(refresh_delay(1_000_000, 0), Duration::from_millis(800_000));
        assert_eq!(refresh_delay(100, 200), Duration::ZERO);
    }

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

/// The driver's side of the flow: what it does with the core's approval events and
/// with `credentials_issued`, kept here so the driver only dispatches.
pub(crate) mod glue {
    use super::*;
    use crate::mux::core::Event;
    use crate::mux::driver::{Core, RegUser, Waiter};

    /// Starts the refresh half for a registration admitted with stored keys.
    pub(crate) fn admitted(
        agents: &mut Agents,
        handle: HandleId,
        user: &RegUser,
        commands: &mpsc::Sender<Command>,
    ) {
        let Some(auth) = &user.auth else {
            return;
        };
        if let Some(r) = &auth.refresh {
            let start = Start::Refresh(r.clone());
            agents.start(
                handle,
                auth.clone(),
                user.state.clone(),
                commands.clone(),
                start,
            );
        }
    }

    /// `credentials_issued` for a registration: run (or restart) its exchange.
    pub(crate) fn credentials_issued(
        agents: &mut Agents,
        core: &Core,
        handle: HandleId,
        issued: CredentialsIssued,
        commands: &mpsc::Sender<Command>,
    ) {
        let Some(user) = core.user(handle) else {
            return;
        };
        let Some(auth) = &user.auth else {
            tracing::warn!(key = ?core.key(handle), "credentials_issued for a registration without a credential store; ignored");
            return;
        };
        tracing::info!(key = %auth.key, "credentials_issued received; starting the approval exchange");
        let start = Start::Issued(issued);
        agents.start(
            handle,
            auth.clone(),
            user.state.clone(),
            commands.clone(),
            start,
        );
    }

    /// Publishes the core's approval events on the handle and the credential store.
    pub(crate) fn event(agents: &mut Agents, core: &Core, ev: Event<Waiter>) {
        match ev {
            Event::Pending { handle, arn } => {
                if let Some(u) = core.user(handle) {
                    u.state.pending(arn);
                }
            }
            Event::Rejected { handle, reason } => {
                agents.stop(handle);
                if let Some(u) = core.user(handle) {
                    u.state.rejected(reason);
                }
            }
            Event::CredentialRefused {
                handle,
                credential,
                error,
            } => {
                let Some(u) = core.user(handle) else {
                    return;
                };
                u.state.register_failed(error);
                if credential == Credential::Jwt {
                    // Its keys made a JWT the gateway refuses: wait for a new approval.
                    agents.stop(handle);
                }
                if let Some(auth) = &u.auth {
                    auth.forget(credential);
                }
            }
            _ => {}
        }
    }
}
