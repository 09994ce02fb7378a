//! The running gateway: accept loop, shared state, and the in-process execute path.
//!
//! One [`Gateway`] serves the Phoenix socket and the HTTP API on one port (axum). Each
//! accepted socket gets a task (`socket.rs`); registrations point at their socket's
//! [`SocketLink`], through which executes are written and their responses correlated.
//! Every task the gateway starts is tracked, so that [`Gateway::shutdown`] returns only
//! once none is left.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::serve::ListenerExt as _;
use bytes::Bytes;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::approvals::Approvals;
use super::config::GatewayConfig;
use super::link::SocketLink;
use super::registry::{RegistrationInfo, Registry};
use super::stats::{Counters, GatewayStats};
use super::{CONNECTOR_ARN_CONTEXT_KEY, TIMEOUT_MS_CONTEXT_KEY};
use crate::error::{Error, Result};
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, PayloadEncoding, StreamMessage,
};

/// How long [`Gateway::shutdown`] waits for in-flight HTTP requests and for the
/// gateway's tasks to finish. Closing the sockets fails their executes at once and
/// every task watches the gateway's cancellation, so this is only reached by a stuck
/// HTTP client or a bug; it keeps such a thing from hanging the caller's shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

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

/// One execute as the gateway sends it, whoever asked (HTTP API, test kit, invoke).
#[derive(Debug, Default)]
pub(crate) struct ExecuteCall {
    pub(crate) payload: Bytes,
    pub(crate) encoding: PayloadEncoding,
    pub(crate) capability_id: String,
    /// Context sent along; the gateway adds the addressee's ARN and the deadline.
    pub(crate) context: HashMap<String, String>,
    /// The deadline asked for; `None` or zero means the default. Capped either way
    /// ([`GatewayConfig::effective_timeout`]).
    pub(crate) timeout: Option<Duration>,
}

/// State shared by the accept loop, socket tasks, HTTP handlers and the test kit.
pub(crate) struct Shared {
    pub(crate) config: GatewayConfig,
    /// The approval mode, keys and credentials (`approvals.rs`).
    pub(crate) approvals: Approvals,
    pub(crate) counters: Counters,
    pub(crate) registry: Mutex<Registry<Arc<SocketLink>>>,
    pub(crate) sockets: Mutex<HashMap<u64, Arc<SocketLink>>>,
    pub(crate) next_socket: AtomicU64,
    next_request: AtomicU64,
    pub(crate) refuse_registers: AtomicBool,
    pub(crate) drop_on_register: AtomicBool,
    pub(crate) answer_phoenix_heartbeats: AtomicBool,
    pub(crate) answer_app_heartbeats: AtomicBool,
    pub(crate) registration_count: watch::Sender<usize>,
    pub(crate) cancel: CancellationToken,
    /// Parent of every accepted gRPC connection's cut switch; replaced when the test
    /// hook cuts them all, so later connections live on.
    pub(crate) grpc_cut: Mutex<CancellationToken>,
    /// Every task the gateway starts: socket readers, writers, invokes.
    pub(crate) tasks: TaskTracker,
}

impl Shared {
    pub(crate) fn registry(&self) -> std::sync::MutexGuard<'_, Registry<Arc<SocketLink>>> {
        self.registry.lock().expect("registry lock")
    }

    /// Makes a newly accepted link (socket or stream) reachable by id: by the test
    /// hooks, by `drop_socket`, by shutdown.
    pub(crate) fn add_link(&self, link: Arc<SocketLink>) {
        self.sockets
            .lock()
            .expect("sockets lock")
            .insert(link.id, link);
    }

    /// Forgets a closed link: its registrations are removed and its pending executes
    /// fail at once. Dropping the waiters fails every waiting execute; closing the map
    /// makes an execute that raced this teardown fail instead of waiting out its
    /// deadline. Returns how many registrations went with it.
    pub(crate) fn forget_link(&self, link: &SocketLink) -> usize {
        self.sockets.lock().expect("sockets lock").remove(&link.id);
        let removed = self.registry().remove_socket(link.id);
        self.publish_registration_count();
        let failed = link.pending.lock().expect("pending lock").close();
        drop(failed);
        removed
    }

    /// The counters with the registry's counts.
    pub(crate) fn stats(&self) -> GatewayStats {
        let by_transport = self.registry().count_by_transport();
        self.counters.snapshot(by_transport)
    }

    pub(crate) fn publish_registration_count(&self) {
        let n = self.registry().len();
        self.registration_count.send_replace(n);
    }

    /// Sends an execute to the registration `arn` and waits for its response;
    /// [`Error::NotFound`] or [`Error::PendingApproval`] when it may not be executed.
    pub(crate) async fn execute(&self, arn: &str, call: ExecuteCall) -> Result<ExecuteResponse> {
        let link = self.registry().lookup_executable(arn)?;
        self.execute_on(&link, arn, call).await
    }

    /// Sends an execute to `arn` on `link` and waits for its response, at most the
    /// call's effective deadline, which rides along as `context["timeout_ms"]`.
    /// Errors: [`Error::Overloaded`] when the socket is at its in-flight cap,
    /// [`Error::Timeout`], [`Error::ConnectionClosed`].
    pub(crate) async fn execute_on(
        &self,
        link: &SocketLink,
        arn: &str,
        call: ExecuteCall,
    ) -> Result<ExecuteResponse> {
        let _slot = link.admit(
            &format!("execute on {arn}"),
            self.config.max_in_flight_per_socket,
        )?;
        let timeout = self.config.effective_timeout(call.timeout);
        let request_id = format!("gw-{:x}", self.next_request.fetch_add(1, Relaxed));
        let mut context = call.context;
        context.insert(CONNECTOR_ARN_CONTEXT_KEY.into(), arn.to_owned());
        context.insert(
            TIMEOUT_MS_CONTEXT_KEY.into(),
            timeout.as_millis().to_string(),
        );
        let msg = StreamMessage {
            message: Some(Message::ExecuteRequest(ExecuteRequest {
                request_id: request_id.clone(),
                payload: call.payload,
                payload_encoding: call.encoding as i32,
                context,
                capability_id: call.capability_id,
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
            link,
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
    grpc_addr: Option<SocketAddr>,
    server: Option<tokio::task::JoinHandle<()>>,
    /// The gRPC accept loop, when serving gRPC; like `server`, not among the tracked
    /// tasks, which count per-connection work.
    grpc_server: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A gateway nobody holds must not keep serving sockets in the background.
        self.shared.cancel.cancel();
    }
}

impl Gateway {
    /// Binds `addr` (Phoenix socket and HTTP API) and, when
    /// [`GatewayConfig::grpc_listen`] is set, the gRPC port; returns once both accept
    /// connections. With [`GatewayConfig::data_dir`] set it first reads the approval
    /// state there: an unreadable file is an [`Error::Config`] naming it.
    pub async fn start(config: GatewayConfig, addr: SocketAddr) -> Result<Gateway> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let approvals = Approvals::open(&config, addr)?;
        let grpc_listener = match config.grpc_listen {
            Some(at) => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .map_err(|e| Error::Config(format!("cannot listen for gRPC on {at}: {e}")))?,
            ),
            None => None,
        };
        let grpc_addr = match &grpc_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let cancel = CancellationToken::new();
        let shared = Arc::new(Shared {
            approvals,
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
            grpc_cut: Mutex::new(cancel.child_token()),
            cancel,
            tasks: TaskTracker::new(),
        });
        let grpc_server = grpc_listener
            .map(|listener| tokio::spawn(super::grpc::serve(shared.clone(), listener)));
        let app = super::http_api::router(shared.clone());
        // Nagle off on every accepted socket, as the client already has it: the writer
        // task sends small frames (an execute_request, an invoke_response) that must
        // leave at once, and with Nagle a frame written while an earlier one is still
        // unacknowledged waits for the peer's delayed ACK (40 ms on Linux).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted socket");
            }
        });
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
            grpc_addr,
            server: Some(server),
            grpc_server,
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

    /// The bound gRPC address, when the gateway serves gRPC.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// The `grpc://` address connectors dial, when the gateway serves gRPC.
    pub fn grpc_url(&self) -> Option<String> {
        self.grpc_addr.map(|a| format!("grpc://{a}"))
    }

    /// The base URL of the HTTP API.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Executes `payload` (JSON) on `arn` with the default deadline.
    pub async fn execute(&self, arn: &str, payload: serde_json::Value) -> Result<ExecuteOutcome> {
        self.execute_call(arn, payload, None, None).await
    }

    /// Executes `payload` (JSON) on `arn` for `capability_id` within `timeout`
    /// (capped at [`GatewayConfig::max_execute_timeout`]).
    /// Errors: [`Error::NotFound`] for an unknown ARN, [`Error::Timeout`],
    /// [`Error::ConnectionClosed`] when the socket went away first,
    /// [`Error::Overloaded`] when its socket is at
    /// [`GatewayConfig::max_in_flight_per_socket`].
    pub async fn execute_with(
        &self,
        arn: &str,
        payload: serde_json::Value,
        capability_id: Option<&str>,
        timeout: Duration,
    ) -> Result<ExecuteOutcome> {
        self.execute_call(arn, payload, capability_id, Some(timeout))
            .await
    }

    async fn execute_call(
        &self,
        arn: &str,
        payload: serde_json::Value,
        capability_id: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOutcome> {
        let payload: Bytes = serde_json::to_vec(&payload)
            .map_err(|e| Error::Payload(e.to_string()))?
            .into();
        let started = Instant::now();
        let call = ExecuteCall {
            payload,
            encoding: PayloadEncoding::Json,
            capability_id: capability_id.unwrap_or_default().to_owned(),
            context: HashMap::new(),
            timeout,
        };
        let resp = self.shared.execute(arn, call).await?;
        tracing::trace!(
            arn,
            elapsed_us = started.elapsed().as_micros() as u64,
            "execute answered"
        );
        Ok(outcome(resp))
    }

    /// Every registration, ordered by ARN, with its scope and latest metrics report.
    pub fn registrations(&self) -> Vec<RegistrationInfo> {
        self.shared.registry().list()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> GatewayStats {
        self.shared.stats()
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

    pub(crate) fn socket(&self, socket_id: u64) -> Option<Arc<SocketLink>> {
        let sockets = self.shared.sockets.lock().expect("sockets lock");
        sockets.get(&socket_id).cloned()
    }

    /// How many tasks the gateway started are still running: a reader and a writer per
    /// socket, a reader per gRPC stream, and one per invoke in flight. A leak of any of them shows here first.
    pub fn tracked_tasks(&self) -> usize {
        self.shared.tasks.len()
    }

    /// Stops accepting, closes every socket, cancels every task the gateway started
    /// and waits for them and for in-flight HTTP requests, at most a few seconds.
    /// Returns once the port is released, with the number of tasks still running when
    /// the wait gave up: 0 on a clean stop.
    pub async fn shutdown(mut self) -> usize {
        self.shared.cancel.cancel();
        self.drop_all_sockets();
        self.shared.tasks.close();
        let servers = [self.server.take(), self.grpc_server.take()];
        let tasks = self.shared.tasks.clone();
        let stopped = tokio::time::timeout(SHUTDOWN_GRACE, async move {
            for server in servers.into_iter().flatten() {
                let _ = server.await;
            }
            tasks.wait().await;
        })
        .await;
        let left = self.shared.tasks.len();
        if stopped.is_err() {
            tracing::warn!(?SHUTDOWN_GRACE, left, "gateway did not stop in time");
        }
        left
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
