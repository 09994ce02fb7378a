//! The dispatcher end to end: bindings in a runtime config, rows enqueued through the
//! admin API, delivered to local connectors (and through a real gateway), on a real
//! SQLite store (and PostgreSQL where it matters).

#[path = "common/mod.rs"]
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

#[tokio::test]
async fn an_invoke_binding_delivers_its_json_payload_through_the_gateway() {
    use switchboard::gateway::{Gateway, GatewayConfig};
    use switchboard::{ConnectorConfig, Registration, RunnerOptions};

    let gateway = Gateway::start(GatewayConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let rec = Recorder::default();
    let cfg = ConnectorConfig::builder(gateway.ws_url(), "acme")
        .instance_id("main")
        .build()
        .unwrap();
    let (runner, run) = common::start(
        RunnerOptions::default(),
        vec![Registration::new(cfg, rec.clone())],
    )
    .await;
    let config = format!(
        r#"
[gateway]
url = "{}"
tenant = "acme"

[[triggers]]
id = "to-recorder"
handler = {{ invoke = "acme.recorder.main", capability = "record" }}
retry = {{ max_attempts = 1 }}
"#,
        gateway.ws_url()
    );
    let mut rt = Rt::sqlite(&config, &[]).await;
    rt.rt()
        .registration()
        .unwrap()
        .wait_registered(common::DEADLINE)
        .await
        .unwrap();
    let id = rt.enqueue("to-recorder", json!({"n": 1})).await;
    eventually("the invoke", || async { rec.count() == 1 }).await;
    let seen = &rec.seen()[0];
    assert_eq!(seen.payload, json!({"n": 1}));
    assert_eq!(seen.ctx("switchboard.event_id"), id);
    eventually("the dispatcher to count it delivered", || async {
        rt.get("/api/v1/triggers").await["triggers"][0]["counts"]["dispatched"] == 1
    })
    .await;
    rt.stop().await;
    runner.shutdown_handle().shutdown();
    let _ = run.await;
    gateway.shutdown().await;
}
