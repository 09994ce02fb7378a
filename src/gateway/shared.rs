//! State shared by everything that serves the gateway: the accept loop and
//! lifecycle (`server.rs`), the Phoenix socket and gRPC stream tasks, the HTTP API and
//! the test kit. It lives apart from the [`Gateway`](super::Gateway) so that the
//! dependency arrows run one way: each of those modules uses this one, and this one
//! uses none of them (before, `server`, `http_api` and `socket` imported each other).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::approvals::Approvals;
use super::config::GatewayConfig;
use super::link::SocketLink;
use super::registry::Registry;
use super::stats::{Counters, GatewayStats};
use super::{CONNECTOR_ARN_CONTEXT_KEY, TIMEOUT_MS_CONTEXT_KEY};
use crate::error::{Error, Result};
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, PayloadEncoding, StreamMessage,
};

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
    pub(crate) next_request: AtomicU64,
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
