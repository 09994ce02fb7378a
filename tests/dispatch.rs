//! The dispatcher end to end: bindings in a runtime config, rows enqueued through the
//! admin API, delivered to local connectors (and through a real gateway), on a real
//! SQLite store (and PostgreSQL where it matters).

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use common::eventually;
use dsupport::{Recorder, Rt};
use serde_json::json;

const ONE_LOCAL: &str = r#"
[[triggers]]
id = "audit"
handler = { local = "rec", capability = "record" }
retry = { max_attempts = 3, backoff = "constant", base = "20ms", jitter = 0.0 }
"#;

#[tokio::test]
async fn an_enqueued_row_is_delivered_once_to_its_local_connector_with_its_context() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite(ONE_LOCAL, &[("rec", rec.clone())]).await;
    let id = rt.enqueue("audit", json!({"n": 1})).await;
    eventually("the delivery", || async { rec.count() == 1 }).await;
    let seen = &rec.seen()[0];
    assert_eq!(seen.payload, json!({"n": 1}));
    assert_eq!(seen.ctx("switchboard.event_id"), id);
    assert_eq!(seen.ctx("switchboard.binding"), "audit");
    assert_eq!(seen.ctx("switchboard.attempt"), "1");
    eventually("the row to be gone", || async {
        rt.get("/api/v1/outbox/stats").await["by_binding"]["audit"]["due"]
            .as_u64()
            .unwrap_or(0)
            == 0
            && rt.get("/api/v1/triggers").await["triggers"][0]["counts"]["dispatched"] == 1
    })
    .await;
    rt.stop().await;
    assert_eq!(rec.count(), 1, "delivered exactly once");
}
