//! Connector-to-connector invokes through the reference gateway, with raw WebSocket
//! clients on both ends speaking the protocol directly: routing by ARN and by dot key,
//! refusals answered at once (`not_found`, `forbidden`), `CONNECTOR_SCOPE_GLOBAL`
//! across tenants, the gateway's own deadline, fire-and-forget, the outcome counters,
//! and a shutdown with an invoke in flight.
#![cfg(feature = "gateway")]

mod common;
#[path = "gateway_http/raw.rs"]
mod raw;

use std::time::Duration;

use common::{eventually, DEADLINE};
use raw::{
    answer, next_execute, next_invoke_response, raw_client, register_response, register_scoped,
    registered, send_proto, Raw,
};
use switchboard::gateway::{GatewayConfig, TestGateway};
use switchboard::proto::{
    stream_message::Message, ConnectorScope, ExecuteResponse, InvokeCapabilityRequest,
    PayloadEncoding,
};

/// `GET url` as JSON.
async fn get_json(url: &str) -> serde_json::Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// A `timeout_ms` far beyond the tests' [`DEADLINE`]: an answer that arrives within the
/// deadline cannot be the gateway's timeout.
const LONG_TIMEOUT_MS: i32 = 3_600_000;

const TARGET: &str = "matrix:acme:raw:target";

fn invoke(request_id: &str, target: &str) -> InvokeCapabilityRequest {
    InvokeCapabilityRequest {
        request_id: request_id.into(),
        target_address: target.into(),
        capability_id: "cap".into(),
        payload: br#"{"x":1}"#.to_vec().into(),
        payload_encoding: PayloadEncoding::Json as i32,
        context: [("trace".to_owned(), "t1".to_owned())].into(),
        timeout_ms: LONG_TIMEOUT_MS,
        ..Default::default()
    }
}

async fn send_invoke(ws: &mut Raw, req: InvokeCapabilityRequest) {
    send_proto(ws, 30, Message::InvokeRequest(req)).await;
}

/// A caller and a target registration of tenant `acme`, each on its own socket, so
/// that which socket receives what is unambiguous.
async fn caller_and_target(gw: &TestGateway) -> (Raw, Raw) {
    let caller = registered(gw, "acme", &["caller"]).await;
    let target = registered(gw, "acme", &["target"]).await;
    (caller, target)
}

#[tokio::test]
async fn an_invoke_by_arn_or_dot_key_returns_the_targets_answer_and_context() {
    let gw = TestGateway::start().await;
    let (mut caller, mut target) = caller_and_target(&gw).await;
    for (n, address) in [TARGET, "acme.raw.target"].into_iter().enumerate() {
        let id = format!("call-{n}");
        send_invoke(
            &mut caller,
            InvokeCapabilityRequest {
                // Not the default, so the context shows it was passed on; long, so no
                // stall of a loaded machine can make it fire before the answer.
                timeout_ms: 120_000,
                ..invoke(&id, address)
            },
        )
        .await;
        let req = next_execute(&mut target).await;
        assert_eq!(req.context["connector_arn"], TARGET, "{address}");
        assert_eq!(
            req.context["trace"], "t1",
            "the caller's context is sent along"
        );
        assert_eq!(req.context["timeout_ms"], "120000");
        assert_eq!(req.capability_id, "cap");
        assert_eq!(&req.payload[..], br#"{"x":1}"#);
        assert_ne!(req.request_id, id, "the gateway uses its own request id");
        let resp = ExecuteResponse {
            request_id: req.request_id,
            success: true,
            payload: b"\x01\x02".to_vec().into(),
            payload_encoding: PayloadEncoding::RawBytes as i32,
            duration_ms: 7,
            ..Default::default()
        };
        send_proto(&mut target, 40, Message::ExecuteResponse(resp)).await;
        let done = next_invoke_response(&mut caller).await;
        assert_eq!(done.request_id, id);
        assert!(done.success, "{}", done.error);
        assert_eq!(&done.payload[..], b"\x01\x02");
        assert_eq!(done.payload_encoding, PayloadEncoding::RawBytes as i32);
        assert_eq!(done.duration_ms, 7);
        assert_eq!(done.context["target_arn"], TARGET, "{address}");
        assert_eq!(done.context["trace"], "t1");
        assert!(done.error_details.is_empty(), "{:?}", done.error_details);
    }
}

#[tokio::test]
async fn an_invoke_of_an_unknown_target_is_answered_at_once_with_not_found() {
    let gw = TestGateway::start().await;
    let mut caller = registered(&gw, "acme", &["caller"]).await;
    let addresses = [
        "matrix:acme:raw:nobody",
        "acme.raw.nobody",
        "acme.raw",
        "not an address",
    ];
    for address in addresses {
        send_invoke(&mut caller, invoke("lost", address)).await;
        let resp = next_invoke_response(&mut caller).await;
        assert_eq!(resp.request_id, "lost");
        assert!(!resp.success);
        assert_eq!(resp.error_details["code"], "not_found", "{address}");
        assert!(resp.error.contains(address), "{}", resp.error);
        assert_eq!(resp.context["trace"], "t1");
        assert!(!resp.context.contains_key("target_arn"));
    }
    let stats = gw.stats();
    assert_eq!(stats.executes_routed, 0);
    assert_eq!(stats.invokes["not_found"], addresses.len() as u64);
}

#[tokio::test]
async fn a_cross_tenant_invoke_is_forbidden_unless_the_target_is_global() {
    let gw = TestGateway::start().await;
    let mut caller = registered(&gw, "alpha", &["caller"]).await;
    let _local = registered(&gw, "beta", &["local"]).await;
    let mut global = raw_client(&gw).await;
    send_proto(
        &mut global,
        2,
        register_scoped("beta", "shared", ConnectorScope::Global),
    )
    .await;
    assert!(register_response(&mut global).await.success);

    for address in ["matrix:beta:raw:local", "beta.raw.local"] {
        send_invoke(&mut caller, invoke("nope", address)).await;
        let refused = next_invoke_response(&mut caller).await;
        assert!(!refused.success);
        assert_eq!(refused.error_details["code"], "forbidden", "{address}");
        assert!(
            refused.error.contains("CONNECTOR_SCOPE_GLOBAL") && refused.error.contains("alpha"),
            "{}",
            refused.error
        );
    }
    // A socket with no registration belongs to no tenant, so it is refused too.
    let mut anonymous = raw_client(&gw).await;
    send_invoke(&mut anonymous, invoke("anon", "beta.raw.local")).await;
    let refused = next_invoke_response(&mut anonymous).await;
    assert_eq!(refused.error_details["code"], "forbidden");
    assert_eq!(gw.stats().executes_routed, 0, "a refusal touches no target");

    send_invoke(&mut caller, invoke("yes", "beta.raw.shared")).await;
    let req = next_execute(&mut global).await;
    assert_eq!(req.context["connector_arn"], "matrix:beta:raw:shared");
    answer(&mut global, &req, br#"{"ok":true}"#).await;
    let done = next_invoke_response(&mut caller).await;
    assert_eq!(done.request_id, "yes");
    assert!(done.success, "{}", done.error);
    assert_eq!(&done.payload[..], br#"{"ok":true}"#);
    assert_eq!(done.context["target_arn"], "matrix:beta:raw:shared");
}

#[tokio::test]
async fn an_invoke_the_target_never_answers_is_answered_with_code_timeout() {
    let gw = TestGateway::start().await;
    let (mut caller, mut target) = caller_and_target(&gw).await;
    send_invoke(
        &mut caller,
        InvokeCapabilityRequest {
            timeout_ms: 100,
            ..invoke("slow", TARGET)
        },
    )
    .await;
    let req = next_execute(&mut target).await;
    assert_eq!(req.context["timeout_ms"], "100");
    let resp = next_invoke_response(&mut caller).await;
    assert_eq!(resp.request_id, "slow");
    assert!(!resp.success);
    assert_eq!(resp.error_details["code"], "timeout");
    assert_eq!(resp.context["target_arn"], TARGET);
    // The gateway stopped waiting: an answer now finds no pending request.
    answer(&mut target, &req, b"{}").await;
    eventually("the late answer to be dropped", || async {
        gw.stats().frames_dropped.get("unknown_request_id") == Some(&1)
    })
    .await;
}

#[tokio::test]
async fn a_fire_and_forget_invoke_is_executed_but_never_answered() {
    let gw = TestGateway::start().await;
    let (mut caller, mut target) = caller_and_target(&gw).await;
    send_invoke(
        &mut caller,
        InvokeCapabilityRequest {
            fire_and_forget: true,
            ..invoke("forget", TARGET)
        },
    )
    .await;
    let req = next_execute(&mut target).await;
    assert_eq!(req.context["trace"], "t1");
    answer(&mut target, &req, b"{}").await;
    // The outcome is counted after the invoke's answer would have been queued.
    eventually("the fire-and-forget invoke to finish", || async {
        gw.stats().invokes["ok"] == 1
    })
    .await;
    send_invoke(&mut caller, invoke("second", TARGET)).await;
    let req = next_execute(&mut target).await;
    answer(&mut target, &req, b"{}").await;
    assert_eq!(
        next_invoke_response(&mut caller).await.request_id,
        "second",
        "the first response the caller sees is the ordinary invoke's"
    );
}

#[tokio::test]
async fn invoke_outcomes_are_counted_in_stats_and_metrics() {
    let gw = TestGateway::start().await;
    let (mut caller, mut target) = caller_and_target(&gw).await;
    let _other_tenant = registered(&gw, "beta", &["local"]).await;

    send_invoke(&mut caller, invoke("ok", TARGET)).await;
    let req = next_execute(&mut target).await;
    answer(&mut target, &req, b"{}").await;
    assert!(next_invoke_response(&mut caller).await.success);

    send_invoke(&mut caller, invoke("error", TARGET)).await;
    let req = next_execute(&mut target).await;
    let failed = ExecuteResponse {
        request_id: req.request_id,
        success: false,
        error: "upstream said no".into(),
        ..Default::default()
    };
    send_proto(&mut target, 41, Message::ExecuteResponse(failed)).await;
    let resp = next_invoke_response(&mut caller).await;
    assert_eq!(
        (resp.success, resp.error.as_str()),
        (false, "upstream said no")
    );
    assert_eq!(resp.error_details["code"], "connector");

    send_invoke(&mut caller, invoke("not_found", "acme.raw.nobody")).await;
    next_invoke_response(&mut caller).await;
    send_invoke(&mut caller, invoke("forbidden", "beta.raw.local")).await;
    next_invoke_response(&mut caller).await;
    send_invoke(
        &mut caller,
        InvokeCapabilityRequest {
            timeout_ms: 50,
            ..invoke("timeout", TARGET)
        },
    )
    .await;
    next_execute(&mut target).await;
    assert_eq!(
        next_invoke_response(&mut caller).await.error_details["code"],
        "timeout"
    );

    // The console's views count them too: the executes routed to the target and
    // the invokes addressed to it, by outcome (counted just after the answer).
    let base = gw.http_url();
    eventually("the target's live figures", || async {
        let page = get_json(&format!("{base}/api/v1/registrations?q=raw:target")).await;
        let t = &page["items"][0];
        let received = &t["invokes_received"];
        t["executes"] == 3
            && t["execute_errors"] == 2
            && t["execute_timeouts"] == 1
            && received["ok"] == 1
            && received["error"] == 1
            && received["timeout"] == 1
            && received["forbidden"] == 0
    })
    .await;

    send_invoke(&mut caller, invoke("closed", TARGET)).await;
    next_execute(&mut target).await;
    drop(target);
    assert_eq!(
        next_invoke_response(&mut caller).await.error_details["code"],
        "connection_closed"
    );

    let counted = gw.stats().invokes;
    let metrics = reqwest::get(format!("{}/metrics", gw.http_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (outcome, n) in [
        ("ok", 1),
        ("error", 1),
        ("not_found", 1),
        ("forbidden", 1),
        ("timeout", 1),
        ("closed", 1),
        ("overloaded", 0),
    ] {
        assert_eq!(counted[outcome], n, "{outcome}: {counted:?}");
        eventually("the caller's link counts what it sent", || async {
            let page = get_json(&format!("{base}/api/v1/connections")).await;
            page["items"].as_array().unwrap().iter().any(|link| {
                link["arns"][0] == "matrix:acme:raw:caller" && link["invokes_sent"][outcome] == n
            })
        })
        .await;
        let line = format!("switchboard_gateway_invokes_total{{outcome=\"{outcome}\"}} {n}\n");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

#[tokio::test]
async fn shutdown_with_an_invoke_in_flight_leaves_no_task_running() {
    let hour = Duration::from_secs(3600);
    let gw = TestGateway::start_with(
        GatewayConfig::default()
            .with_default_execute_timeout(hour)
            .with_max_execute_timeout(hour),
    )
    .await;
    let (mut caller, mut target) = caller_and_target(&gw).await;
    let before = gw.tracked_tasks();
    assert_eq!(before, 4, "a reader and a writer per socket");
    send_invoke(
        &mut caller,
        InvokeCapabilityRequest {
            timeout_ms: 0,
            ..invoke("pending", TARGET)
        },
    )
    .await;
    next_execute(&mut target).await;
    assert_eq!(
        gw.tracked_tasks(),
        before + 1,
        "the invoke in flight is a tracked task"
    );
    let left = tokio::time::timeout(DEADLINE, gw.shutdown())
        .await
        .expect("shutdown returns");
    assert_eq!(left, 0, "no task outlives shutdown");
}
