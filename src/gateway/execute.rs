//! The execute path: one `execute_request` to a registration, whoever asked (the
//! HTTP API, the test kit, an invoke), and its answer or its failure. Each socket's
//! pending map (`pending.rs`) correlates the answer; a guard prunes it on every way
//! out of the call.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::figures::{ExecuteEnd, RegistrationFigures};
use super::link::ConnectorLink;
use super::state::GatewayState;
use crate::context_keys::{
    CONNECTOR_ARN_CONTEXT_KEY, CONTEXT_TRACEPARENT, CONTEXT_TRACESTATE, TIMEOUT_MS_CONTEXT_KEY,
};
use crate::error::{Error, Result};
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, PayloadEncoding, StreamMessage,
};
use crate::telemetry::{Parent, Span, SpanKind};
use crate::trace_context::TraceParent;

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
    link: &'a ConnectorLink,
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

impl GatewayState {
    /// Sends an execute to the registration `arn` and waits for its response;
    /// [`Error::NotFound`] or [`Error::PendingApproval`] when it may not be executed.
    pub(crate) async fn execute(&self, arn: &str, call: ExecuteCall) -> Result<ExecuteResponse> {
        let (link, figures) = self.registry().lookup_executable(arn)?;
        self.execute_on(&link, arn, &figures, call).await
    }

    /// Sends an execute to `arn` on `link` and waits for its response, at most the
    /// call's effective deadline, which rides along as `context["timeout_ms"]`.
    /// Errors: [`Error::Overloaded`] when the socket is at its in-flight cap,
    /// [`Error::Timeout`], [`Error::ConnectionClosed`]. A routed execute is counted
    /// in the registration's `figures` (found by the same look-up as `link`, so this
    /// takes no lock for it) and, once it ends, in the live chart's totals.
    pub(crate) async fn execute_on(
        &self,
        link: &ConnectorLink,
        arn: &str,
        figures: &RegistrationFigures,
        call: ExecuteCall,
    ) -> Result<ExecuteResponse> {
        // The token before the flag: see `GatewayState::begin_stop`.
        let _draining = self.executing.token();
        if self.is_stopping() {
            return Err(Error::Overloaded(format!(
                "the gateway is stopping; execute on {arn} not sent (retry once it is back or on another gateway)"
            )));
        }
        let _slot = link.admit(
            &format!("execute on {arn}"),
            self.config.max_in_flight_per_socket,
        )?;
        let timeout = self.config.effective_timeout(call.timeout);
        let request_id = format!("gw-{:x}", self.next_request.fetch_add(1, Relaxed));
        let mut context = call.context;
        let mut span = round_trip_span(arn, &call.capability_id, &mut context);
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
        let _in_flight = figures.start_execute();
        let sent = Instant::now();
        let (result, end) = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(resp)) => {
                let end = if resp.success {
                    ExecuteEnd::Ok
                } else {
                    ExecuteEnd::Failed
                };
                (Ok(resp), end)
            }
            Ok(Err(_)) => (Err(closed()), ExecuteEnd::Failed),
            Err(_) => (
                Err(Error::timeout(
                    format!("execute {request_id} on {arn}"),
                    timeout,
                )),
                ExecuteEnd::TimedOut,
            ),
        };
        match (&result, end) {
            (Err(e), _) => span.fail(|| e.to_string()),
            (Ok(resp), ExecuteEnd::Failed) => span.fail(|| resp.error.clone()),
            _ => {}
        }
        span.set(|| vec![("switchboard.outcome", end.label().into())]);
        span.end();
        figures.end_execute(end);
        let tenant = crate::identity::Arn::parse(arn)
            .map(|a| a.tenant)
            .unwrap_or_default();
        self.counters
            .execute_seconds
            .observe(&tenant, end.label(), sent.elapsed());
        let answered_in = result.is_ok().then(|| sent.elapsed());
        self.counters
            .execute_ended(answered_in, end == ExecuteEnd::Ok);
        result
    }
}

/// The gateway's span for one execute's round trip: `execute {capability}`, kind
/// CLIENT, a child of the caller's `traceparent` (a dispatch attempt's, a connector's
/// invoke). When it records, the request carries its context instead, so the
/// connector's execute nests under the round trip; otherwise the caller's context
/// passes through unchanged.
fn round_trip_span(arn: &str, capability: &str, context: &mut HashMap<String, String>) -> Span {
    let parent = context
        .get(CONTEXT_TRACEPARENT)
        .and_then(|v| TraceParent::parse(v));
    let state = context.get(CONTEXT_TRACESTATE).cloned().unwrap_or_default();
    let span = Span::start(
        "execute",
        capability,
        SpanKind::Client,
        Parent::child_of(parent),
        &state,
        || {
            vec![
                ("rpc.system", "matrix_connector".into()),
                ("rpc.method", capability.to_owned().into()),
                ("switchboard.connector_arn", arn.to_owned().into()),
            ]
        },
    );
    if span.owns_context() {
        context.insert(CONTEXT_TRACEPARENT.to_owned(), span.context().header());
    }
    span
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
