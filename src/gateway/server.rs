//! The running gateway: accept loop, shared state, and the in-process execute path.
//!
//! One [`Gateway`] serves the Phoenix socket and the HTTP API on one port (axum). Each
//! accepted socket gets a task (`socket.rs`); registrations point at their socket's
//! [`SocketLink`], through which executes are written and their responses correlated.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::registry::{RegistrationInfo, Registry};
use super::stats::{Counters, GatewayStats};
use crate::error::{Error, Result};
use crate::phoenix::{encode_proto, LOBBY_TOPIC};
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, PayloadEncoding, StreamMessage,
};

/// How long [`Gateway::shutdown`] waits for in-flight HTTP requests to finish before it
/// gives up; executes in flight fail at once when their sockets close, so this is only
/// reached by a stuck HTTP client.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Settings of a gateway.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Close a socket after this long without inbound data (default 60 s, as the
    /// protocol family's gateways do; clients heartbeat every 25 s).
    pub idle_timeout: Duration,
    /// Deadline of an execute when the caller names none (default 30 s).
    pub default_execute_timeout: Duration,
    /// Largest inbound text frame (default 16 MiB); larger ones are dropped and counted.
    pub max_frame_bytes: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            idle_timeout: Duration::from_secs(60),
            default_execute_timeout: Duration::from_secs(30),
            max_frame_bytes: 16 * 1024 * 1024,
        }
    }
}

impl GatewayConfig {
    /// Sets [`GatewayConfig::idle_timeout`].
    pub fn with_idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::default_execute_timeout`].
    pub fn with_default_execute_timeout(mut self, t: Duration) -> Self {
        self.default_execute_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::max_frame_bytes`].
    pub fn with_max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
        self
    }
}

/// The result of one execute.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExecuteOutcome {
    /// Whether the connector succeeded.
    pub success: bool,
    /// The connector's payload: JSON when it answered JSON, else a base64 string.
    pub payload: serde_json::Value,
    /// The connector's error message when it failed.
    pub error: Option<String>,
    /// The connector's reported duration.
    pub duration_ms: i64,
}

/// Pending executes of one socket, keyed by request id. One map per socket, so the
/// lock is shared only by that socket's reader and the callers executing on it, and it
/// is never held across an `.await`.
pub(crate) type Pending = Mutex<super::pending::Pending<oneshot::Sender<ExecuteResponse>>>;

/// Removes a request from its socket's pending map when the execute's future ends
/// without an answer: on timeout, and also when the caller drops the future (an HTTP
/// client that hung up), which a timeout branch alone would leak.
struct PendingGuard<'a> {
    link: &'a SocketLink,
    request_id: &'a str,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.link
            .pending
            .lock()
            .expect("pending lock")
            .forget(self.request_id);
    }
}

/// What the rest of the gateway holds of a socket: its writer queue, its pending
/// executes, its current join ref, and a switch to kill it.
#[derive(Debug)]
pub(crate) struct SocketLink {
    pub(crate) id: u64,
    pub(crate) tx: mpsc::Sender<String>,
    pub(crate) pending: Pending,
    pub(crate) join_ref: Mutex<Option<String>>,
    pub(crate) kill: CancellationToken,
}

impl SocketLink {
    /// Queues a server push of `msg` on the lobby channel.
    pub(crate) async fn push(&self, msg: &StreamMessage) -> bool {
        let jr = self.join_ref.lock().expect("join ref lock").clone();
        let text = encode_proto(jr.as_deref(), None, LOBBY_TOPIC, msg);
        self.tx.send(text).await.is_ok()
    }
}

/// State shared by the accept loop, socket tasks, HTTP handlers and the test kit.
pub(crate) struct Shared {
    pub(crate) config: GatewayConfig,
    pub(crate) counters: Counters,
    pub(crate) registry: Mutex<Registry<Arc<SocketLink>>>,
    pub(crate) sockets: Mutex<std::collections::HashMap<u64, Arc<SocketLink>>>,
    pub(crate) next_socket: AtomicU64,
    next_request: AtomicU64,
    pub(crate) refuse_registers: AtomicBool,
    pub(crate) drop_on_register: AtomicBool,
    pub(crate) answer_phoenix_heartbeats: AtomicBool,
    pub(crate) answer_app_heartbeats: AtomicBool,
    pub(crate) registration_count: watch::Sender<usize>,
    pub(crate) cancel: CancellationToken,
}

impl Shared {
    pub(crate) fn registry(&self) -> std::sync::MutexGuard<'_, Registry<Arc<SocketLink>>> {
        self.registry.lock().expect("registry lock")
    }

    pub(crate) fn publish_registration_count(&self) {
        let n = self.registry().len();
        self.registration_count.send_replace(n);
    }

    /// Sends an execute to the registration `arn` and waits for its response.
    pub(crate) async fn execute(
        &self,
        arn: &str,
        payload: bytes::Bytes,
        encoding: PayloadEncoding,
        capability_id: Option<&str>,
        mut context: std::collections::HashMap<String, String>,
        timeout: Duration,
    ) -> Result<ExecuteResponse> {
        let link = self
            .registry()
            .lookup(arn)
            .ok_or_else(|| Error::NotFound(format!("no registration with ARN {arn}")))?;
        let request_id = format!("gw-{:x}", self.next_request.fetch_add(1, Relaxed));
        context.insert("connector_arn".into(), arn.to_owned());
        let msg = StreamMessage {
            message: Some(Message::ExecuteRequest(ExecuteRequest {
                request_id: request_id.clone(),
                payload,
                payload_encoding: encoding as i32,
                context,
                capability_id: capability_id.unwrap_or_default().to_owned(),
            })),
        };
        let (tx, rx) = oneshot::channel();
        let closed = || {
            Error::ConnectionClosed(format!(
                "the socket carrying {arn} closed before it answered; the connector will re-register after it reconnects"
            ))
        };
        if link
            .pending
            .lock()
            .expect("pending lock")
            .insert(request_id.clone(), tx)
            .is_err()
        {
            return Err(closed());
        }
        let _guard = PendingGuard {
            link: &link,
            request_id: &request_id,
        };
        if !link.push(&msg).await {
            return Err(closed());
        }
        self.counters.executes_routed.fetch_add(1, Relaxed);
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(_)) => Err(closed()),
            Err(_) => Err(Error::timeout(
                format!("execute {request_id} on {arn}"),
                timeout,
            )),
        }
    }
}

/// A running reference gateway.
///
/// Dropping it stops it as [`Gateway::shutdown`] does, without waiting for the port to
/// be released; call `shutdown` to rebind the same address afterwards.
pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
    addr: SocketAddr,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A gateway nobody holds must not keep serving sockets in the background.
        self.shared.cancel.cancel();
    }
}

impl Gateway {
    /// Binds `addr` and starts serving; returns once the port accepts connections.
    pub async fn start(config: GatewayConfig, addr: SocketAddr) -> Result<Gateway> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            config,
            counters: Counters::default(),
            registry: Mutex::new(Registry::new()),
            sockets: Mutex::default(),
            next_socket: AtomicU64::new(1),
            next_request: AtomicU64::new(1),
            refuse_registers: AtomicBool::new(false),
            drop_on_register: AtomicBool::new(false),
            answer_phoenix_heartbeats: AtomicBool::new(true),
            answer_app_heartbeats: AtomicBool::new(true),
            registration_count: watch::channel(0).0,
            cancel: CancellationToken::new(),
        });
        let app = super::http_api::router(shared.clone());
        let cancel = shared.cancel.clone();
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app)
                .with_graceful_shutdown(async move { cancel.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "gateway server failed");
            }
        });
        Ok(Gateway {
            shared,
            addr,
            server: Some(server),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Phoenix socket URL connectors dial.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/socket/connector/websocket", self.addr)
    }

    /// The base URL of the HTTP API.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Executes `payload` (JSON) on `arn` with the default deadline.
    pub async fn execute(&self, arn: &str, payload: serde_json::Value) -> Result<ExecuteOutcome> {
        self.execute_with(
            arn,
            payload,
            None,
            self.shared.config.default_execute_timeout,
        )
        .await
    }

    /// Executes `payload` (JSON) on `arn` for `capability_id` within `timeout`.
    /// Errors: [`Error::NotFound`] for an unknown ARN, [`Error::Timeout`],
    /// [`Error::ConnectionClosed`] when the socket went away first.
    pub async fn execute_with(
        &self,
        arn: &str,
        payload: serde_json::Value,
        capability_id: Option<&str>,
        timeout: Duration,
    ) -> Result<ExecuteOutcome> {
        let bytes: bytes::Bytes = serde_json::to_vec(&payload)
            .map_err(|e| Error::Payload(e.to_string()))?
            .into();
        let started = Instant::now();
        let resp = self
            .shared
            .execute(
                arn,
                bytes,
                PayloadEncoding::Json,
                capability_id,
                Default::default(),
                timeout,
            )
            .await?;
        tracing::trace!(
            arn,
            elapsed_us = started.elapsed().as_micros() as u64,
            "execute answered"
        );
        Ok(outcome(resp))
    }

    /// Every registration, ordered by ARN.
    pub fn registrations(&self) -> Vec<RegistrationInfo> {
        self.shared.registry().list()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> GatewayStats {
        let n = self.shared.registry().len();
        self.shared.counters.snapshot(n)
    }

    /// Waits until at least `n` registrations exist, at most `deadline`; false on timeout.
    pub async fn wait_for_registrations(&self, n: usize, deadline: Duration) -> bool {
        let mut rx = self.shared.registration_count.subscribe();
        tokio::time::timeout(deadline, rx.wait_for(|c| *c >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Ids of the open sockets.
    pub fn socket_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .shared
            .sockets
            .lock()
            .expect("sockets lock")
            .keys()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    fn socket(&self, socket_id: u64) -> Option<Arc<SocketLink>> {
        let sockets = self.shared.sockets.lock().expect("sockets lock");
        sockets.get(&socket_id).cloned()
    }

    /// Hard-closes one socket (no close frame), as a crashed network path would.
    pub fn drop_socket(&self, socket_id: u64) -> bool {
        self.socket(socket_id).map(|l| l.kill.cancel()).is_some()
    }

    /// Hard-closes every socket; returns how many.
    pub fn drop_all_sockets(&self) -> usize {
        let links: Vec<_> = self
            .shared
            .sockets
            .lock()
            .expect("sockets lock")
            .values()
            .cloned()
            .collect();
        links.iter().for_each(|l| l.kill.cancel());
        links.len()
    }

    /// While set, every register is answered with `success: false`.
    pub fn set_refuse_registers(&self, refuse: bool) {
        self.shared.refuse_registers.store(refuse, Relaxed);
    }

    /// While set, a socket that sends a register is hard-closed instead of answered: a
    /// gateway that accepts connections but never completes a registration.
    pub fn set_drop_sockets_on_register(&self, on: bool) {
        self.shared.drop_on_register.store(on, Relaxed);
    }

    /// While unset, Phoenix heartbeats go unanswered (a dead peer, to the client).
    pub fn set_answer_phoenix_heartbeats(&self, on: bool) {
        self.shared.answer_phoenix_heartbeats.store(on, Relaxed);
    }

    /// While unset, application `heartbeat_request`s go unanswered.
    pub fn set_answer_app_heartbeats(&self, on: bool) {
        self.shared.answer_app_heartbeats.store(on, Relaxed);
    }

    /// Queues a raw text frame to a socket, for malformed-input tests.
    pub fn send_raw(&self, socket_id: u64, text: String) -> bool {
        self.socket(socket_id)
            .is_some_and(|l| l.tx.try_send(text).is_ok())
    }

    /// Stops accepting, closes every socket, and returns once the port is released.
    pub async fn shutdown(mut self) {
        self.shared.cancel.cancel();
        self.drop_all_sockets();
        if let Some(server) = self.server.take() {
            if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
                tracing::warn!(?SHUTDOWN_GRACE, "gateway server did not stop in time");
            }
        }
    }
}

/// Turns a connector's response into the API's outcome.
pub(crate) fn outcome(resp: ExecuteResponse) -> ExecuteOutcome {
    use base64::Engine as _;
    let encoding =
        PayloadEncoding::try_from(resp.payload_encoding).unwrap_or(PayloadEncoding::Unspecified);
    let payload = if resp.payload.is_empty() {
        serde_json::Value::Null
    } else {
        match encoding {
            PayloadEncoding::Json | PayloadEncoding::Unspecified => {
                serde_json::from_slice(&resp.payload).unwrap_or_else(|_| {
                    base64::engine::general_purpose::STANDARD
                        .encode(&resp.payload)
                        .into()
                })
            }
            _ => base64::engine::general_purpose::STANDARD
                .encode(&resp.payload)
                .into(),
        }
    };
    ExecuteOutcome {
        success: resp.success,
        payload,
        error: (!resp.error.is_empty()).then_some(resp.error),
        duration_ms: resp.duration_ms,
    }
}
