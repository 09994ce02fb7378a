//! Connector-to-connector invokes (PROTOCOL.md §4): a connector sends `invoke_request`,
//! the gateway delivers an `execute_request` to the target and answers the caller with
//! an `invoke_response` under the caller's `request_id`.
//!
//! Policy, in order: in manual approval mode the caller's link must carry an approved
//! registration; the target address must name a registration (an ARN, or a dot key)
//! that is not awaiting approval (code `pending_approval` for both); a target in
//! another tenant than the caller's socket is refused unless it registered with
//! `CONNECTOR_SCOPE_GLOBAL`; the caller's socket must have an in-flight
//! slot left. A refusal is answered at once, without touching the target. Every
//! answer carries `error_details["code"]` when it failed, and the request's context
//! plus `target_arn` once the target is known. A `fire_and_forget` invoke is executed
//! the same way but never answered. Each finished invoke is counted by outcome.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::ApprovalMode;
use super::execute::ExecuteCall;
use super::figures::RegistrationFigures;
use super::link::ConnectorLink;
use super::state::GatewayState;
use super::stats::InvokeOutcome;
use crate::context_keys::TARGET_ARN_CONTEXT_KEY;
use crate::error::Error;
use crate::proto::{
    stream_message::Message, ExecuteResponse, InvokeCapabilityRequest, InvokeCapabilityResponse,
    PayloadEncoding, StreamMessage,
};

/// The key of `error_details` that carries a failed invoke's stable code.
const ERROR_CODE_KEY: &str = "code";
/// The code of a cross-tenant invoke of a tenant-scoped target.
const FORBIDDEN_CODE: &str = "forbidden";
/// The code of a target that answered with a failure of its own.
const CONNECTOR_CODE: &str = "connector";

/// Why an invoke failed without an answer from the target.
struct InvokeFailure {
    outcome: InvokeOutcome,
    code: &'static str,
    message: String,
}

impl InvokeFailure {
    fn from_error(e: &Error) -> Self {
        let outcome = match e {
            Error::Timeout { .. } => InvokeOutcome::Timeout,
            Error::NotFound(_) => InvokeOutcome::NotFound,
            Error::Overloaded(_) => InvokeOutcome::Overloaded,
            Error::ConnectionClosed(_) => InvokeOutcome::Closed,
            _ => InvokeOutcome::Error,
        };
        InvokeFailure {
            outcome,
            code: e.code(),
            message: e.to_string(),
        }
    }
}

/// What answering an invoke needs of its request after the payload went to the target.
struct Reply {
    request_id: String,
    /// The request's context, plus `target_arn` once the target is known.
    context: HashMap<String, String>,
    fire_and_forget: bool,
    started: Instant,
    /// The target's live figures, once it is resolved: they count the outcome too.
    target: Option<Arc<RegistrationFigures>>,
}

impl Reply {
    /// Answers the caller (unless fire-and-forget), then counts the outcome: the count
    /// marks the invoke as finished, answer included.
    async fn send(
        mut self,
        state: &GatewayState,
        caller: &ConnectorLink,
        result: Result<ExecuteResponse, InvokeFailure>,
    ) {
        let target = self.target.take();
        let (outcome, resp) = match result {
            Ok(r) => {
                let outcome = if r.success {
                    InvokeOutcome::Ok
                } else {
                    InvokeOutcome::Error
                };
                let error_details = if r.success {
                    HashMap::new()
                } else {
                    [(ERROR_CODE_KEY.to_owned(), CONNECTOR_CODE.to_owned())].into()
                };
                let resp = InvokeCapabilityResponse {
                    request_id: self.request_id,
                    success: r.success,
                    payload: r.payload,
                    payload_encoding: r.payload_encoding,
                    error: r.error,
                    duration_ms: r.duration_ms,
                    context: self.context,
                    error_details,
                };
                (outcome, resp)
            }
            Err(f) => {
                let resp = InvokeCapabilityResponse {
                    request_id: self.request_id,
                    success: false,
                    error: f.message,
                    duration_ms: i64::try_from(self.started.elapsed().as_millis())
                        .unwrap_or(i64::MAX),
                    context: self.context,
                    error_details: [(ERROR_CODE_KEY.to_owned(), f.code.to_owned())].into(),
                    ..Default::default()
                };
                (f.outcome, resp)
            }
        };
        if !self.fire_and_forget {
            let msg = StreamMessage {
                message: Some(Message::InvokeResponse(resp)),
            };
            if !caller.push(&msg).await {
                tracing::debug!(
                    socket_id = caller.id,
                    "invoke answered after the caller's channel closed"
                );
            }
        }
        state.counters.invoke(outcome);
        caller.invokes_sent.add(outcome);
        if let Some(target) = &target {
            target.invoked(outcome);
        }
    }
}

/// Handles one `invoke_request` from `caller`: refusals are answered before this
/// returns; an admitted invoke runs in its own tracked task, so that the caller's
/// socket keeps reading (the target may be on the same socket).
pub(crate) async fn on_invoke(
    state: &Arc<GatewayState>,
    caller: &Arc<ConnectorLink>,
    mut req: InvokeCapabilityRequest,
) {
    let mut reply = Reply {
        request_id: std::mem::take(&mut req.request_id),
        context: req.context.clone(),
        fire_and_forget: req.fire_and_forget,
        started: Instant::now(),
        target: None,
    };
    let target = match resolve(state, caller.id, &req.target_address) {
        Ok(t) => t,
        Err(f) => return reply.send(state, caller, Err(f)).await,
    };
    reply
        .context
        .insert(TARGET_ARN_CONTEXT_KEY.into(), target.0.clone());
    reply.target = Some(target.2.clone());
    let cap = state.config.max_in_flight_per_socket;
    let slot = match caller.admit(&format!("invoke of {}", target.0), cap) {
        Ok(slot) => slot,
        Err(e) => {
            return reply
                .send(state, caller, Err(InvokeFailure::from_error(&e)))
                .await
        }
    };
    let (state, caller) = (state.clone(), caller.clone());
    let cancel = state.cancel.clone();
    state.tasks.clone().spawn(async move {
        let _slot = slot;
        let (arn, link, figures) = target;
        let call = ExecuteCall {
            payload: std::mem::take(&mut req.payload),
            encoding: PayloadEncoding::try_from(req.payload_encoding)
                .unwrap_or(PayloadEncoding::Unspecified),
            capability_id: std::mem::take(&mut req.capability_id),
            context: std::mem::take(&mut req.context),
            timeout: u64::try_from(req.timeout_ms)
                .ok()
                .map(Duration::from_millis),
        };
        tokio::select! {
            // The gateway is stopping: the caller's socket is closing too, so nobody is
            // left to answer; the invoke ends as its sockets do.
            _ = cancel.cancelled() => state.counters.invoke(InvokeOutcome::Closed),
            result = state.execute_on(&link, &arn, &figures, call) => {
                let result = result.map_err(|e| InvokeFailure::from_error(&e));
                reply.send(&state, &caller, result).await;
            }
        }
    });
}

/// The target's ARN, socket and live figures, if the caller on `caller_socket` may
/// invoke it.
fn resolve(
    state: &GatewayState,
    caller_socket: u64,
    address: &str,
) -> Result<(String, Arc<ConnectorLink>, Arc<RegistrationFigures>), InvokeFailure> {
    let registry = state.registry();
    if state.approvals.mode == ApprovalMode::Manual && !registry.socket_has_approved(caller_socket)
    {
        return Err(InvokeFailure::from_error(&Error::PendingApproval(format!(
            "invoke of {address:?} refused: this connection carries no approved registration; \
             invokes are accepted once the operator approves one"
        ))));
    }
    let Some(target) = registry.resolve(address) else {
        return Err(InvokeFailure::from_error(&Error::NotFound(format!(
            "no registration at target_address {address:?}; address a registration by its \
             ARN (matrix:tenant:type:instance) or its dot key (tenant.type.instance)"
        ))));
    };
    if target.pending {
        return Err(InvokeFailure::from_error(&Error::PendingApproval(
            super::registry::pending_message(&target.arn),
        )));
    }
    let caller_tenant = registry.tenant_of_socket(caller_socket);
    if !target.global && caller_tenant != Some(target.tenant.as_str()) {
        return Err(InvokeFailure {
            outcome: InvokeOutcome::Forbidden,
            code: FORBIDDEN_CODE,
            message: format!(
                "invoke of {} refused: it is scoped to tenant {:?} and the calling socket {}; \
                 only a target registered with CONNECTOR_SCOPE_GLOBAL accepts invokes from \
                 other tenants",
                target.arn,
                target.tenant,
                match caller_tenant {
                    Some(t) => format!("is bound to tenant {t:?}"),
                    None => "has no registration".to_owned(),
                }
            ),
        });
    }
    Ok((target.arn, target.socket, target.figures))
}
