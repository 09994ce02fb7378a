//! What the gateway keeps and tells beyond a request itself: the latest metrics report
//! of each registration (shown by the HTTP API), and each execute's deadline in the
//! context of its `execute_request`.

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard::gateway::{TestGateway, TEST_EXECUTE_TIMEOUT};
use switchboard::proto::{stream_message::Message, MetricsReport};

use crate::common::eventually;
use crate::raw::{answer, next_execute, registered, send_proto, Raw};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn report(arn: &str, requests_received: i64) -> Message {
    Message::MetricsReport(MetricsReport {
        connector_arn: arn.into(),
        timestamp_ms: 1_700_000_000_000,
        requests_received,
        requests_processed: 9,
        requests_failed: 1,
        avg_latency_ms: 2.5,
        bytes_received: 100,
        bytes_sent: 200,
        reconnection_attempts: 3,
        total_disconnects: 2,
        uptime_seconds: 60.0,
        last_request_at_ms: 1_699_999_999_000,
        custom_metrics: [("queue_depth".to_owned(), 4.0)].into(),
        ..Default::default()
    })
}

#[tokio::test]
async fn a_metrics_report_is_shown_with_its_registration_and_a_foreign_one_is_dropped() {
    let gw = TestGateway::start().await;
    let mut one = registered(&gw, "acme", &["one"]).await;
    let _two = registered(&gw, "acme", &["two"]).await;
    // The foreign reports go first: a socket's frames are handled in order, so once the
    // valid one shows, both were handled.
    let before = now_ms();
    send_proto(&mut one, 20, report("matrix:acme:raw:two", 99)).await;
    send_proto(&mut one, 21, report("matrix:acme:raw:nobody", 98)).await;
    send_proto(&mut one, 22, report("matrix:acme:raw:one", 10)).await;
    eventually("the report to be kept", || async {
        gw.registrations()[0].metrics.is_some()
    })
    .await;
    let after = now_ms();

    let list: Vec<Value> = reqwest::get(format!("{}/api/v1/connectors", gw.http_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list[0]["arn"], "matrix:acme:raw:one");
    let m = &list[0]["metrics"];
    for (field, value) in [
        ("timestamp_ms", json!(1_700_000_000_000i64)),
        ("requests_received", json!(10)),
        ("requests_processed", json!(9)),
        ("requests_failed", json!(1)),
        ("avg_latency_ms", json!(2.5)),
        ("bytes_received", json!(100)),
        ("bytes_sent", json!(200)),
        ("reconnection_attempts", json!(3)),
        ("total_disconnects", json!(2)),
        ("uptime_seconds", json!(60.0)),
        ("last_request_at_ms", json!(1_699_999_999_000i64)),
        ("custom_metrics", json!({"queue_depth": 4.0})),
    ] {
        assert_eq!(m[field], value, "{field} in {m}");
    }
    let received = m["received_at_ms"].as_i64().unwrap();
    assert!(
        (before..=after).contains(&received),
        "the gateway's own receive time, not the report's: {received} not in {before}..={after}"
    );
    assert_eq!(list[1]["arn"], "matrix:acme:raw:two");
    assert!(
        list[1]["metrics"].is_null(),
        "another socket cannot report for it"
    );
    assert_eq!(list[0]["scope"], "tenant");
    assert_eq!(gw.stats().frames_dropped.get("unknown_arn"), Some(&2));

    // Another socket taking the registration over starts without the old report.
    let _again = registered(&gw, "acme", &["one"]).await;
    assert_eq!(gw.registrations()[0].metrics, None);
}

/// The `timeout_ms` context of the execute `call` sends, which the raw client answers.
async fn deadline_of(ws: &mut Raw, call: impl Future) -> String {
    let serve = async {
        let req = next_execute(ws).await;
        answer(ws, &req, b"{}").await;
        req.context["timeout_ms"].clone()
    };
    tokio::join!(call, serve).1
}

#[tokio::test]
async fn every_execute_request_carries_its_deadline_in_the_context() {
    let gw = TestGateway::start().await;
    let mut ws = registered(&gw, "acme", &["one"]).await;
    let arn = "matrix:acme:raw:one";
    assert_eq!(
        deadline_of(&mut ws, gw.execute(arn, json!({}))).await,
        TEST_EXECUTE_TIMEOUT.as_millis().to_string(),
        "the default deadline"
    );
    let explicit = gw.execute_with(arn, json!({}), None, Duration::from_millis(1234));
    assert_eq!(deadline_of(&mut ws, explicit).await, "1234");
    let http = reqwest::Client::new()
        .post(format!("{}/api/v1/connectors/{arn}/execute", gw.http_url()))
        .json(&json!({"payload": {}, "timeout_ms": 4321}))
        .send();
    assert_eq!(deadline_of(&mut ws, http).await, "4321");
}
