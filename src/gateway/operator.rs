//! The operator's actions on pending registrations, written once for the JSON API
//! (`auth_api.rs`) and the console's buttons (`console.rs`), so both do exactly the
//! same thing: approve (the connector is told, then given a one-time token for its
//! key) or reject (the connector is told why).

use rand::Rng as _;

use super::approvals::{credentials_issued, notification, now_ms};
use super::state::GatewayState;
use crate::proto::RegistrationStatus;

/// No registration with that ARN is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotPending;

/// Approves the pending registration `arn` and tells its connector, with the one-time
/// token it registers its key with.
pub(crate) async fn approve(state: &GatewayState, arn: &str) -> Result<(), NotPending> {
    let Some((key, link)) = state.registry().approve(arn) else {
        return Err(NotPending);
    };
    let now = now_ms();
    let lifetime = u64::try_from(state.approvals.ott_lifetime.as_millis()).unwrap_or(u64::MAX);
    let random: [u8; 32] = rand::rng().random();
    let ott = state
        .approvals
        .with(|c| c.issue_ott(&key, now, lifetime, random));
    tracing::info!(%arn, "registration approved by the operator");
    let approved = notification(
        &key,
        RegistrationStatus::Approved,
        format!("{arn} approved; register a key with the one-time token that follows"),
    );
    let creds = credentials_issued(&key, ott, &state.approvals.issuer, now);
    if !(link.push(&approved).await && link.push(&creds).await) {
        tracing::warn!(%arn, link_id = link.id, "approved, but its link closed before it was told");
    }
    Ok(())
}

/// Rejects the pending registration `arn` with `reason` (a default when blank), tells
/// its connector, and forgets it.
pub(crate) async fn reject(
    state: &GatewayState,
    arn: &str,
    reason: &str,
) -> Result<(), NotPending> {
    let reason = if reason.trim().is_empty() {
        "rejected by the gateway operator".to_owned()
    } else {
        reason.to_owned()
    };
    let Some((key, link)) = state.registry().remove_pending(arn) else {
        return Err(NotPending);
    };
    state.publish_registration_count();
    state.approvals.with(|c| c.reject(&key, &reason, now_ms()));
    tracing::info!(%arn, %reason, "registration rejected by the operator");
    let msg = notification(&key, RegistrationStatus::Rejected, reason);
    if !link.push(&msg).await {
        tracing::debug!(%arn, "rejected after its link closed");
    }
    Ok(())
}
