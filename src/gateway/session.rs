//! The protocol's messages from a connector, whichever transport carried them:
//! register, heartbeat, execute responses, invokes and metrics reports.
//!
//! A Phoenix socket (`socket.rs`) unwraps its `proto` pushes and binary frames into
//! `StreamMessage`s, a gRPC stream (`grpc.rs`) receives them as they are; both hand
//! each one to [`on_message`] with the [`SocketLink`] it came on, so the registration
//! logic, correlation and limits are the same code for both.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::approvals::{now_ms, Decision};
use super::config::ApprovalMode;
use super::link::SocketLink;
use super::registry::{tenant_of, RegisterOutcome, Status};
use super::shared::Shared;
use crate::identity::{Arn, RegistrationKey};
use crate::proto::{
    stream_message::Message, HeartbeatResponse, MetricsReport, RegisterConnectorRequest,
    RegisterConnectorResponse, RegistrationStatus, StreamMessage,
};

/// Acts on one message from a connector on `link`.
pub(crate) async fn on_message(shared: &Arc<Shared>, link: &Arc<SocketLink>, msg: StreamMessage) {
    let push = |m: Message| StreamMessage { message: Some(m) };
    match msg.message {
        Some(Message::RegisterRequest(req)) => {
            if shared.drop_on_register.load(Relaxed) {
                tracing::info!(
                    link_id = link.id,
                    "dropping the connection instead of registering (test hook)"
                );
                link.kill.cancel();
                return;
            }
            let resp = register(shared, link, &req).await;
            link.push(&push(Message::RegisterResponse(resp))).await;
        }
        Some(Message::HeartbeatRequest(hb)) => {
            if shared.answer_app_heartbeats.load(Relaxed) {
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
                    shared.counters.drop_frame("unknown_request_id");
                }
            }
        }
        Some(Message::InvokeRequest(req)) => super::invoke::on_invoke(shared, link, req).await,
        Some(Message::MetricsReport(report)) => metrics_report(shared, link, report),
        Some(Message::HeartbeatResponse(_)) => {}
        None => shared.counters.drop_frame("empty"),
        Some(_) => shared.counters.drop_frame("unexpected_message"),
    }
}

/// Keeps a report as its registration's latest, if that registration is on this
/// link; a report for any other ARN is dropped, so a connection can neither fill the
/// registry with unknown names nor overwrite another connection's numbers.
fn metrics_report(shared: &Shared, link: &SocketLink, report: MetricsReport) {
    let arn = report.connector_arn.clone();
    if !shared.registry().record_metrics(link.id, report) {
        tracing::warn!(link_id = link.id, %arn, "metrics report for no registration of this link");
        shared.counters.drop_frame("unknown_arn");
    }
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
async fn register(
    shared: &Shared,
    link: &Arc<SocketLink>,
    req: &RegisterConnectorRequest,
) -> RegisterConnectorResponse {
    let key = RegistrationKey::new(&req.tenant_id, &req.connector_type, &req.instance_id);
    let arn = Arn::for_key(&key).to_string();
    let refuse = |error: String, status: RegistrationStatus| {
        tracing::info!(link_id = link.id, tenant = %tenant_of(req), %arn, %error, "register refused");
        RegisterConnectorResponse {
            success: false,
            connector_arn: arn.clone(),
            error,
            status: status as i32,
            ..Default::default()
        }
    };
    if shared.refuse_registers.load(Relaxed) {
        return refuse(
            "registrations are refused by this gateway right now".into(),
            RegistrationStatus::Rejected,
        );
    }
    if let Some(reason) = shared.registry().refusal(link.id, &key) {
        return refuse(reason, RegistrationStatus::Rejected);
    }
    let decision = match shared.approvals.mode {
        ApprovalMode::Manual => {
            shared
                .approvals
                .decide(&key, &req.session_token, &req.jwt_token)
                .await
        }
        _ => Decision::Approved {
            session_token: session_token(),
        },
    };
    let (status, session_token) = match decision {
        Decision::Approved { session_token } => (Status::Approved, session_token),
        Decision::Pending => (Status::Pending, String::new()),
        Decision::Invalid(error) => return refuse(error, RegistrationStatus::Unspecified),
        Decision::Rejected(error) => return refuse(error, RegistrationStatus::Rejected),
    };
    let outcome = shared.registry().register_as(
        link.id,
        link.transport(),
        req,
        link.clone(),
        status,
        now_ms(),
    );
    match outcome {
        RegisterOutcome::Accepted { arn } => {
            shared.publish_registration_count();
            tracing::debug!(link_id = link.id, %arn, ?status, "registered");
            let status = match status {
                Status::Approved => RegistrationStatus::Approved,
                Status::Pending => RegistrationStatus::Pending,
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
        RegisterOutcome::Refused { reason, .. } => refuse(reason, RegistrationStatus::Rejected),
    }
}

fn session_token() -> String {
    use rand::Rng as _;
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
