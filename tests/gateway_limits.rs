//! The reference gateway's bounds on untrusted input, driven by raw WebSocket clients:
//! an oversized message closes its socket alone, executes and invokes beyond the
//! per-socket in-flight cap are refused at once, and no caller can name a deadline
//! beyond `max_execute_timeout`. (The memory side of the message limit is measured
//! alone in `gateway_frame_memory.rs`.)
#![cfg(feature = "gateway")]

mod common;
#[path = "gateway_http/raw.rs"]
mod raw;

use std::time::Duration;

use common::{eventually, DEADLINE};
use futures_util::SinkExt;
use raw::{
    answer, next_execute, next_frame, next_invoke_response, raw_client, registered, send_proto,
};
use serde_json::{json, Value};
use switchboard::gateway::{GatewayConfig, TestGateway};
use switchboard::proto::{stream_message::Message, InvokeCapabilityRequest};
use switchboard::Error;
use tokio_tungstenite::tungstenite::Message as Ws;

const TARGET: &str = "matrix:acme:raw:target";

async fn post_execute(gw: &TestGateway, arn: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/connectors/{arn}/execute", gw.http_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn invoke(request_id: &str, target: &str, timeout_ms: i32) -> Message {
    Message::InvokeRequest(InvokeCapabilityRequest {
        request_id: request_id.into(),
        target_address: target.into(),
        payload: b"{}".to_vec().into(),
        timeout_ms,
        ..Default::default()
    })
}

#[tokio::test]
async fn an_oversized_message_closes_only_its_socket_and_is_counted() {
    let limit = 4096;
    let gw = TestGateway::start_with(GatewayConfig::default().with_max_frame_bytes(limit)).await;
    let mut good = registered(&gw, "acme", &["target"]).await;
    let mut bad = raw_client(&gw).await;
    bad.send(Ws::text("x".repeat(2 * limit))).await.unwrap();
    assert!(
        next_frame(&mut bad).await.is_none(),
        "the gateway closes the socket that sent it"
    );
    eventually("the socket to be counted closed as too large", || async {
        let stats = gw.stats();
        stats.sockets_open == 1 && stats.frames_dropped.get("too_large") == Some(&1)
    })
    .await;
    let exec = gw.execute(TARGET, json!({"still": "here"}));
    let serve = async {
        let req = next_execute(&mut good).await;
        answer(&mut good, &req, br#"{"ok":1}"#).await;
    };
    let (out, ()) = tokio::join!(exec, serve);
    assert_eq!(
        out.unwrap().payload,
        json!({"ok": 1}),
        "the other socket works"
    );
}

#[tokio::test]
async fn executes_beyond_the_in_flight_cap_are_refused_at_once() {
    let gw =
        TestGateway::start_with(GatewayConfig::default().with_max_in_flight_per_socket(2)).await;
    let mut target = registered(&gw, "acme", &["target"]).await;
    let first = gw.execute_with(TARGET, json!(1), None, DEADLINE);
    let second = gw.execute_with(TARGET, json!(2), None, DEADLINE);
    let at_cap = async {
        let a = next_execute(&mut target).await;
        let b = next_execute(&mut target).await;
        let third = gw.execute_with(TARGET, json!(3), None, DEADLINE).await;
        assert!(
            matches!(&third, Err(Error::Overloaded(m)) if m.contains("max_in_flight_per_socket")),
            "{third:?}"
        );
        let (status, body) = post_execute(&gw, TARGET, json!({"payload": 4})).await;
        assert_eq!((status, body["code"].as_str()), (503, Some("overloaded")));
        answer(&mut target, &a, b"1").await;
        answer(&mut target, &b, b"2").await;
    };
    let (first, second, ()) = tokio::join!(first, second, at_cap);
    assert!(first.unwrap().success && second.unwrap().success);
    assert_eq!(
        gw.stats().executes_routed,
        2,
        "the refused ones were never sent"
    );
    // Answered executes give their slots back.
    let again = gw.execute(TARGET, json!(5));
    let serve = async {
        let req = next_execute(&mut target).await;
        answer(&mut target, &req, b"5").await;
    };
    let (again, ()) = tokio::join!(again, serve);
    assert!(again.unwrap().success);
}

#[tokio::test]
async fn invokes_beyond_the_callers_in_flight_cap_are_answered_with_overloaded() {
    let gw =
        TestGateway::start_with(GatewayConfig::default().with_max_in_flight_per_socket(2)).await;
    let mut caller = registered(&gw, "acme", &["caller"]).await;
    // Two targets on two sockets, so that only the caller's socket reaches the cap.
    let mut one = registered(&gw, "acme", &["one"]).await;
    let mut two = registered(&gw, "acme", &["two"]).await;
    send_proto(&mut caller, 30, invoke("a", "acme.raw.one", 0)).await;
    send_proto(&mut caller, 31, invoke("b", "acme.raw.two", 0)).await;
    let a = next_execute(&mut one).await;
    let b = next_execute(&mut two).await;
    send_proto(&mut caller, 32, invoke("c", "acme.raw.one", 0)).await;
    let refused = next_invoke_response(&mut caller).await;
    assert_eq!(refused.request_id, "c");
    assert!(!refused.success);
    assert_eq!(refused.error_details["code"], "overloaded");
    assert_eq!(gw.stats().invokes["overloaded"], 1);
    assert_eq!(gw.stats().executes_routed, 2);
    answer(&mut one, &a, b"{}").await;
    answer(&mut two, &b, b"{}").await;
    let mut done = [
        next_invoke_response(&mut caller).await.request_id,
        next_invoke_response(&mut caller).await.request_id,
    ];
    done.sort();
    assert_eq!(done, ["a", "b"]);
}

#[tokio::test]
async fn every_deadline_is_capped_at_max_execute_timeout() {
    let cap = Duration::from_millis(250);
    let gw = TestGateway::start_with(GatewayConfig::default().with_max_execute_timeout(cap)).await;
    let mut caller = registered(&gw, "acme", &["caller"]).await;
    let mut target = registered(&gw, "acme", &["target"]).await;

    // HTTP: an hour asked for, the cap applied (else this would wait out the hour).
    let http = post_execute(&gw, TARGET, json!({"payload": {}, "timeout_ms": 3_600_000}));
    let (http, req) = tokio::join!(http, next_execute(&mut target));
    assert_eq!(req.context["timeout_ms"], "250");
    assert_eq!((http.0, http.1["code"].as_str()), (504, Some("timeout")));

    // The test kit's own execute.
    let direct = gw.execute_with(TARGET, json!({}), None, Duration::from_secs(3600));
    let (direct, req) = tokio::join!(direct, next_execute(&mut target));
    assert_eq!(req.context["timeout_ms"], "250");
    assert!(
        matches!(direct, Err(Error::Timeout { after, .. }) if after == cap),
        "{direct:?}"
    );

    // An invoke naming the largest timeout the protocol can carry.
    send_proto(&mut caller, 30, invoke("long", TARGET, i32::MAX)).await;
    let req = next_execute(&mut target).await;
    assert_eq!(req.context["timeout_ms"], "250");
    let resp = next_invoke_response(&mut caller).await;
    assert_eq!(resp.error_details["code"], "timeout");
}
