//! The protocol's messages from a connector, whichever transport carried them:
//! register, heartbeat, execute responses, invokes and metrics reports.
//!
//! A Phoenix socket (`socket.rs`) unwraps its `proto` pushes and binary frames into
//! `StreamMessage`s, a gRPC stream (`grpc.rs`) receives them as they are; both hand
//! each one to [`on_message`] with the [`ConnectorLink`] it came on, so the registration
//! logic, correlation and limits are the same code for both.

use std::sync::Arc;

use super::approvals::{now_ms, Decision};
use super::config::ApprovalMode;
use super::link::ConnectorLink;
use super::registration_info::RegistrationState;
use super::registry::{tenant_of, RegisterOutcome};
use super::state::GatewayState;
use crate::identity::{Arn, RegistrationKey};
use crate::proto::{
    stream_message::Message, HeartbeatResponse, MetricsReport, RegisterConnectorRequest,
    RegisterConnectorResponse, RegistrationStatus, StreamMessage,
};

/// Acts on one message from a connector on `link`.
pub(crate) async fn on_message(
    state: &Arc<GatewayState>,
    link: &Arc<ConnectorLink>,
    msg: StreamMessage,
) {
    let push = |m: Message| StreamMessage { message: Some(m) };
    match msg.message {
        Some(Message::RegisterRequest(req)) => {
            if state.faults.drop_on_register() {
                tracing::info!(
                    link_id = link.id,
                    "dropping the connection instead of registering (test hook)"
                );
                link.kill.cancel();
                return;
            }
            let verdict = decide(state, link, &req).await;
            state.faults.hold_register(&link.kill).await;
            answer_register(state, link, &req, verdict).await;
        }
        Some(Message::HeartbeatRequest(hb)) => {
            if state.faults.answer_app_heartbeats() {
                let resp = HeartbeatResponse {
                    gateway_id: hb.gateway_id,
                    timestamp_ms: hb.timestamp_ms,
                    should_reconnect: false,
                };
                link.push(&push(Message::HeartbeatResponse(resp))).await;
            }
        }
        Some(Message::ExecuteResponse(resp)) => {
            let waiter = link
                .pending
                .lock()
                .expect("pending lock")
                .complete(&resp.request_id);
            match waiter {
                Some(tx) => {
                    let _ = tx.send(resp);
                }
                None => {
                    tracing::warn!(link_id = link.id, request_id = %resp.request_id, "execute response for no pending request");
                    state.counters.drop_frame("unknown_request_id");
                }
            }
        }
        Some(Message::InvokeRequest(req)) => super::invoke::on_invoke(state, link, req).await,
        Some(Message::MetricsReport(report)) => metrics_report(state, link, report),
        Some(Message::HeartbeatResponse(_)) => {}
        None => state.counters.drop_frame("empty"),
        Some(_) => state.counters.drop_frame("unexpected_message"),
    }
}

/// Keeps a report as its registration's latest, if that registration is on this
/// link; a report for any other ARN is dropped, so a connection can neither fill the
/// registry with unknown names nor overwrite another connection's numbers.
fn metrics_report(state: &GatewayState, link: &ConnectorLink, report: MetricsReport) {
    let arn = report.connector_arn.clone();
    if !state.registry().record_metrics(link.id, report) {
        tracing::warn!(link_id = link.id, %arn, "metrics report for no registration of this link");
        state.counters.drop_frame("unknown_arn");
    }
}

/// What a register's identity and credentials decided, before the registry is asked.
enum Verdict {
    /// Refused before reaching the registry, with this response.
    Refused(Box<RegisterConnectorResponse>),
    /// To be registered with this status (approved: with this session token).
    Admit {
        status: RegistrationState,
        session_token: String,
    },
}

/// Decides a register (the approval contract, `approvals.rs`): in auto mode every
/// well-formed register is approved; in manual mode its credentials decide between
/// APPROVED, PENDING, REJECTED and a refusal naming the bad credential. A refused
/// register still carries the ARN it would have had, for the client's demux.
///
/// A JWT of a trusted external issuer may make the decision wait for that issuer's
/// JWKS (at most `jwks_fetch_timeout`). It is awaited here, in this link's handler,
/// with no lock held, so only this link waits and its answers stay in order; other
/// links go on (`issuers.rs`).
async fn decide(
    state: &GatewayState,
    link: &ConnectorLink,
    req: &RegisterConnectorRequest,
) -> Verdict {
    let key = RegistrationKey::new(&req.tenant_id, &req.connector_type, &req.instance_id);
    let refuse = |error: String, status: RegistrationStatus| {
        Verdict::Refused(Box::new(refusal(link, req, error, status)))
    };
    if state.faults.refuse_registers() {
        return refuse(
            "registrations are refused by this gateway right now".into(),
            RegistrationStatus::Rejected,
        );
    }
    if let Some(reason) = state.registry().refusal(link.id, &key) {
        return refuse(reason, RegistrationStatus::Rejected);
    }
    let decision = match state.approvals.mode {
        ApprovalMode::Manual => {
            state
                .approvals
                .decide(&key, &req.session_token, &req.jwt_token)
                .await
        }
        _ => Decision::Approved {
            session_token: session_token(),
        },
    };
    match decision {
        Decision::Approved { session_token } => Verdict::Admit {
            status: RegistrationState::Approved,
            session_token,
        },
        Decision::Pending => Verdict::Admit {
            status: RegistrationState::Pending,
            session_token: String::new(),
        },
        Decision::Invalid(error) => refuse(error, RegistrationStatus::Unspecified),
        Decision::Rejected(error) => refuse(error, RegistrationStatus::Rejected),
    }
}

/// The refusal of `req`, carrying the ARN it would have had.
fn refusal(
    link: &ConnectorLink,
    req: &RegisterConnectorRequest,
    error: String,
    status: RegistrationStatus,
) -> RegisterConnectorResponse {
    let key = RegistrationKey::new(&req.tenant_id, &req.connector_type, &req.instance_id);
    let arn = Arn::for_key(&key).to_string();
    tracing::info!(link_id = link.id, tenant = %tenant_of(req), %arn, %error, "register refused");
    RegisterConnectorResponse {
        success: false,
        connector_arn: arn,
        error,
        status: status as i32,
        ..Default::default()
    }
}

/// Answers a register and, when the registry accepts it, makes the registration
/// visible in the same step: a place in the link's writer queue is reserved first,
/// then the registry is updated and the response queued under the registry's lock. So
/// by the time anyone can find the registration (the HTTP API, an execute, an invoke,
/// an approval, [`super::Gateway::wait_for_registrations`]), the response that tells
/// the connector its ARN is queued ahead of anything addressed to it; the connector
/// drops an execute for an ARN it has not been told.
async fn answer_register(
    state: &GatewayState,
    link: &Arc<ConnectorLink>,
    req: &RegisterConnectorRequest,
    verdict: Verdict,
) {
    let response = |r| StreamMessage {
        message: Some(Message::RegisterResponse(r)),
    };
    let Some(slot) = link.reserve().await else {
        return;
    };
    let (status, session_token) = match verdict {
        Verdict::Refused(resp) => {
            slot.send(&response(*resp));
            return;
        }
        Verdict::Admit {
            status,
            session_token,
        } => (status, session_token),
    };
    let mut registry = state.registry();
    if !link.joined() {
        // The lobby channel closed meanwhile (a test hook ended it): the answer would
        // go nowhere, and the registration would outlive its channel.
        return;
    }
    let outcome = registry.register_as(
        link.id,
        link.transport(),
        req,
        link.clone(),
        status,
        now_ms(),
    );
    let resp = match outcome {
        RegisterOutcome::Accepted { arn } => {
            tracing::debug!(link_id = link.id, %arn, ?status, "registered");
            let status = match status {
                RegistrationState::Approved => RegistrationStatus::Approved,
                RegistrationState::Pending => RegistrationStatus::Pending,
            };
            RegisterConnectorResponse {
                success: true,
                connector_arn: arn,
                status: status as i32,
                session_token,
                ..Default::default()
            }
        }
        // Another register on this link bound it to another tenant in between.
        RegisterOutcome::Refused { reason, .. } => {
            refusal(link, req, reason, RegistrationStatus::Rejected)
        }
    };
    let accepted = resp.success;
    slot.send(&response(resp));
    drop(registry);
    if accepted {
        state.publish_registration_count();
    }
}

fn session_token() -> String {
    use rand::Rng as _;
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
