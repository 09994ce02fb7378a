//! Events for the triggers tests.

use std::collections::BTreeMap;

use super::{SignatureStatus, TriggerEvent};

/// An event of `source` and `kind` with `payload` as its body, a GitHub-style
/// `x-github-event` header, received at 1 000 ms.
pub(crate) fn event(source: &str, kind: &str, payload: serde_json::Value) -> TriggerEvent {
    let headers = BTreeMap::from([("x-github-event".to_owned(), kind.to_owned())]);
    TriggerEvent::new(
        source,
        "github",
        kind.to_owned(),
        1_000,
        None,
        format!("dedupe-{kind}"),
        "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        "acme",
        headers,
        payload.to_string().into_bytes(),
        payload,
        SignatureStatus::Verified,
    )
}
