//! One registration's task: register when the socket's link comes up, wait for the
//! answer under a deadline, keep the ARN and session token, and serve execute requests
//! concurrently under the registration's own limit.
//!
//! The handle never touches the socket: it reads its inbox (filled by the demux),
//! watches the link state, and queues outbound messages. A slow connector therefore
//! fills only its own inbox and permits; other registrations on the socket carry on.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::metrics::{snapshot, ConnectorMetrics, HandleMetrics};
use super::routing::HandleId;
use super::shared::{kind, Link, SocketShared};
use super::socket::wrap;
use crate::config::ConnectorConfig;
use crate::connector::{register_request, run_execute, BaseConnector};
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::proto::{
    stream_message::Message, RegisterConnectorResponse, RegistrationStatus, StreamMessage,
};

/// What a registration knows about itself, shared with its [`RegistrationHandle`].
#[derive(Debug, Default)]
struct Session {
    session_token: Option<String>,
    status: Option<RegistrationStatus>,
    last_error: Option<String>,
}

#[derive(Debug)]
pub(crate) struct HandleState {
    session: Mutex<Session>,
    /// The ARN of the current successful registration; `None` while unregistered.
    arn: watch::Sender<Option<String>>,
    pub(crate) metrics: Arc<HandleMetrics>,
}

impl HandleState {
    pub(crate) fn new(metrics: Arc<HandleMetrics>) -> Arc<Self> {
        Arc::new(HandleState {
            session: Mutex::default(),
            arn: watch::channel(None).0,
            metrics,
        })
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().expect("session lock poisoned")
    }
}

/// The user's view of one registration: its identity, ARN, status and metrics, and a
/// way to remove it. Cheap to clone.
#[derive(Clone)]
pub struct RegistrationHandle {
    pub(crate) key: RegistrationKey,
    pub(crate) id: HandleId,
    pub(crate) state: Arc<HandleState>,
    pub(crate) socket: Arc<SocketShared>,
    pub(crate) cancel: CancellationToken,
}

impl std::fmt::Debug for RegistrationHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrationHandle")
            .field("key", &self.key)
            .field("arn", &self.arn())
            .finish()
    }
}

impl RegistrationHandle {
    /// The registration's dot key (`tenant.type.instance`, sanitised).
    pub fn key(&self) -> &RegistrationKey {
        &self.key
    }

    /// The ARN the gateway assigned, once registered; `None` while (re)registering.
    pub fn arn(&self) -> Option<String> {
        self.state.arn.borrow().clone()
    }

    /// The registration status from the gateway's last answer.
    pub fn status(&self) -> Option<RegistrationStatus> {
        self.state.session().status
    }

    /// The gateway's last refusal, if the latest register failed.
    pub fn last_error(&self) -> Option<String> {
        self.state.session().last_error.clone()
    }

    /// A copy of this registration's counters.
    pub fn metrics(&self) -> ConnectorMetrics {
        snapshot(&self.state.metrics, &self.socket.metrics)
    }

    /// Waits until the registration holds an ARN (registered on the current link), at
    /// most `timeout`. Returns the ARN.
    pub async fn wait_registered(&self, timeout: Duration) -> Result<String> {
        let mut rx = self.state.arn.subscribe();
        let wait = async {
            rx.wait_for(|arn| arn.is_some())
                .await
                .map(|arn| arn.clone())
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(arn)) => Ok(arn.expect("waited for Some")),
            Ok(Err(_)) => Err(Error::Shutdown),
            Err(_) => Err(Error::timeout(
                format!("registration of {}", self.key),
                timeout,
            )),
        }
    }

    /// Removes the registration: it stops routing at once (a late execute for its ARN is
    /// dropped, never handed to another registration) and its task ends.
    pub fn remove(&self) {
        self.socket.remove(self.id);
        self.cancel.cancel();
    }
}

/// Everything a handle task needs; built at admission, run when the runner starts.
pub(crate) struct HandleTask {
    pub(crate) handle: RegistrationHandle,
    pub(crate) config: ConnectorConfig,
    pub(crate) connector: Arc<dyn BaseConnector>,
    pub(crate) inbox: mpsc::Receiver<super::shared::InboxItem>,
}

/// Where the handle's registration stands on the current link.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// No link: nothing to do until it comes up.
    Down,
    /// Register sent; fail it at the deadline.
    Registering(Instant),
    /// Refused or timed out; send the next register at the instant.
    RetryAt(Instant),
    /// Registered on this link.
    Registered,
}

impl Phase {
    fn deadline(self) -> Option<Instant> {
        match self {
            Phase::Registering(t) | Phase::RetryAt(t) => Some(t),
            Phase::Down | Phase::Registered => None,
        }
    }
}

impl HandleTask {
    /// Runs until the handle is removed, the runner shuts down, or the inbox closes.
    pub(crate) async fn run(mut self) {
        let cancel = self.handle.cancel.clone();
        let mut link_rx = self.handle.socket.link.subscribe();
        let permits = Arc::new(Semaphore::new(self.config.max_concurrent_requests));
        let mut backoff = Backoff::new(self.config.reconnect.clone());
        let mut phase = Phase::Down;
        let link = *link_rx.borrow_and_update();
        if link.up {
            phase = self.send_register().await;
        }
        loop {
            let deadline = phase.deadline();
            tokio::select! {
                _ = cancel.cancelled() => break,
                changed = link_rx.changed() => {
                    if changed.is_err() { break }
                    let link: Link = *link_rx.borrow_and_update();
                    self.handle.state.arn.send_replace(None);
                    phase = if link.up { self.send_register().await } else { Phase::Down };
                }
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    phase = match phase {
                        Phase::Registering(_) => {
                            self.register_failed("no register_response before the register timeout".into());
                            Phase::RetryAt(Instant::now() + backoff.next_delay(rand::random::<f64>()))
                        }
                        _ => self.send_register().await,
                    };
                }
                msg = self.inbox.recv() => {
                    let Some(msg) = msg else { break };
                    match msg.message {
                        Some(Message::RegisterResponse(resp)) => {
                            phase = self.on_register_response(resp, phase, &mut backoff);
                        }
                        Some(Message::ExecuteRequest(req)) => {
                            let permit = tokio::select! {
                                p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
                                _ = cancel.cancelled() => break,
                            };
                            self.handle.state.metrics.requests_received.fetch_add(1, Relaxed);
                            let connector = self.connector.clone();
                            let metrics = self.handle.state.metrics.clone();
                            let socket = self.handle.socket.clone();
                            tokio::spawn(async move {
                                let bytes_in = req.payload.len();
                                let resp = run_execute(connector.as_ref(), req).await;
                                metrics.record_execute(resp.success, bytes_in, resp.payload.len(), resp.duration_ms.max(0) as u64);
                                drop(permit);
                                let msg = wrap(Message::ExecuteResponse(resp));
                                if !socket.send_direct(&msg).await {
                                    let _ = socket.outbound.send(msg).await;
                                }
                            });
                        }
                        Some(Message::ApprovalNotification(note)) => {
                            tracing::info!(key = %self.handle.key, status = ?note.status(), message = %note.message, "approval notification");
                            self.handle.state.session().status = Some(note.status());
                        }
                        other => {
                            let msg = StreamMessage { message: other };
                            tracing::debug!(key = %self.handle.key, kind = kind(&msg), "ignoring message this SDK version does not act on");
                        }
                    }
                }
            }
        }
        self.handle.state.arn.send_replace(None);
        self.handle.socket.remove(self.handle.id);
    }

    async fn send_register(&mut self) -> Phase {
        let token = self.handle.state.session().session_token.clone();
        let req = register_request(&self.config, self.connector.as_ref(), token.as_deref());
        let deadline = Instant::now() + self.config.register_timeout;
        if self
            .handle
            .socket
            .outbound
            .send(wrap(Message::RegisterRequest(req)))
            .await
            .is_err()
        {
            return Phase::Down;
        }
        Phase::Registering(deadline)
    }

    fn on_register_response(
        &mut self,
        resp: RegisterConnectorResponse,
        phase: Phase,
        backoff: &mut Backoff,
    ) -> Phase {
        if !resp.success {
            // A stale session token is a common cause; fall back to the configured
            // credentials on the next attempt.
            self.handle.state.session().session_token = None;
            self.register_failed(resp.error);
            return match phase {
                Phase::Down => Phase::Down,
                _ => Phase::RetryAt(Instant::now() + backoff.next_delay(rand::random::<f64>())),
            };
        }
        {
            let mut s = self.handle.state.session();
            if !resp.session_token.is_empty() {
                s.session_token = Some(resp.session_token.clone());
            }
            s.status = Some(resp.status());
            s.last_error = None;
        }
        self.handle
            .socket
            .set_arn(self.handle.id, &resp.connector_arn);
        self.handle.socket.registered_on_link.store(true, Relaxed);
        self.handle
            .state
            .metrics
            .registrations
            .fetch_add(1, Relaxed);
        backoff.reset();
        tracing::info!(key = %self.handle.key, arn = %resp.connector_arn, "registered");
        self.handle.state.arn.send_replace(Some(resp.connector_arn));
        Phase::Registered
    }

    fn register_failed(&self, error: String) {
        tracing::warn!(key = %self.handle.key, error = %error, "register failed");
        self.handle
            .state
            .metrics
            .register_failures
            .fetch_add(1, Relaxed);
        self.handle.state.session().last_error = Some(error);
    }
}
