//! The approval flow's per-registration task.
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
//!
//! What the task works on, the registration's credential store and stored keys, is
//! `auth_context`; the driver decides when a task starts and stops.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::auth_context::{AuthCtx, Refresh};
use super::handle_state::HandleState;
use super::routing::HandleId;
use super::socket::Command;
use crate::auth::exchange::Exchange;
use crate::auth::keys::KeyPair;
use crate::auth::store::StoredCredentials;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::proto::CredentialsIssued;

/// When a JWT is re-minted: at this fraction of its remaining lifetime.
const REFRESH_AT: f64 = 0.8;

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
}
