//! Fixtures the store's unit tests share: an event and a claim request.

use crate::outbox::model::ClaimRequest;
use crate::triggers::{SignatureStatus, TriggerEvent};

/// An event of source `s` with dedupe key `d` and this body.
pub(crate) fn event(body: Vec<u8>) -> TriggerEvent {
    TriggerEvent::new(
        "s",
        "github",
        "k".into(),
        0,
        None,
        "d".into(),
        "t".into(),
        "default",
        Default::default(),
        body,
        serde_json::Value::Null,
        SignatureStatus::Verified,
    )
}

/// A claim of up to 10 rows of binding `b` at time 0, leased until 1 with token 1.
pub(crate) fn claim() -> ClaimRequest {
    ClaimRequest {
        now_ms: 0,
        lease_until_ms: 1,
        token: 1,
        limit: 10,
        bindings: vec!["b".into()],
        holder: None,
    }
}
