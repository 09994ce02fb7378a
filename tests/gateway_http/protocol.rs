//! The connector protocol on the gateway's side: registration and tenant binding,
//! executes and their answers, invokes, application heartbeats, and what a closing
//! socket or a restart does to registrations and pending executes.

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use switchboard::gateway::TestGateway;
use switchboard::proto::{stream_message::Message, ExecuteResponse};
use switchboard::Error;
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::common::{eventually, DEADLINE};
use crate::raw::{
    next_frame, next_message, raw_client, register, register_response, registered, send_proto,
};

#[tokio::test]
async fn a_socket_is_bound_to_the_tenant_of_its_first_registration() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    send_proto(&mut ws, 2, register("alpha", "one")).await;
    let ok = register_response(&mut ws).await;
    assert!(ok.success);
    assert_eq!(ok.connector_arn, "matrix:alpha:raw:one");
    assert!(!ok.session_token.is_empty());
    send_proto(&mut ws, 3, register("beta", "two")).await;
    let refused = register_response(&mut ws).await;
    assert!(!refused.success);
    assert_eq!(
        refused.connector_arn, "matrix:beta:raw:two",
        "the refusal carries its ARN for the client's demux"
    );
    assert!(
        refused.error.contains("bound to tenant"),
        "{}",
        refused.error
    );
    assert_eq!(gw.stats().registrations, 1);
}

#[tokio::test]
async fn the_newest_socket_registering_an_arn_takes_it_over() {
    let gw = TestGateway::start().await;
    let _old = registered(&gw, "acme", &["same"]).await;
    let first = gw.registrations()[0].socket_id;
    let _new = registered(&gw, "acme", &["same"]).await;
    let regs = gw.registrations();
    assert_eq!(regs.len(), 1);
    assert_ne!(regs[0].socket_id, first);
}

#[tokio::test]
async fn refused_registers_carry_their_would_be_arn() {
    let gw = TestGateway::start().await;
    gw.set_refuse_registers(true);
    let mut ws = raw_client(&gw).await;
    send_proto(&mut ws, 2, register("acme", "one")).await;
    let refused = register_response(&mut ws).await;
    assert!(!refused.success);
    assert_eq!(refused.connector_arn, "matrix:acme:raw:one");
    gw.set_refuse_registers(false);
    send_proto(&mut ws, 3, register("acme", "one")).await;
    assert!(register_response(&mut ws).await.success);
    assert!(gw.wait_for_registrations(1, DEADLINE).await);
}

#[tokio::test]
async fn an_execute_is_stamped_with_its_arn_and_its_answer_decoded_by_encoding() {
    use switchboard::proto::PayloadEncoding;
    let gw = TestGateway::start().await;
    let mut ws = registered(&gw, "acme", &["one"]).await;
    for (encoding, bytes, expected) in [
        (
            PayloadEncoding::Json,
            br#"{"a":2}"#.to_vec(),
            json!({"a": 2}),
        ),
        (PayloadEncoding::Unspecified, b"[1]".to_vec(), json!([1])),
        (
            PayloadEncoding::RawBytes,
            b"\x00\x01".to_vec(),
            json!("AAE="),
        ),
    ] {
        let exec = gw.execute_with(
            "matrix:acme:raw:one",
            json!({"q": 1}),
            Some("cap"),
            DEADLINE,
        );
        let answer = async {
            let Message::ExecuteRequest(req) = next_message(&mut ws).await else {
                panic!("expected an execute request")
            };
            assert_eq!(req.context["connector_arn"], "matrix:acme:raw:one");
            assert_eq!(req.payload_encoding, PayloadEncoding::Json as i32);
            assert_eq!(
                serde_json::from_slice::<Value>(&req.payload).unwrap(),
                json!({"q": 1})
            );
            assert_eq!(req.capability_id, "cap");
            let resp = ExecuteResponse {
                request_id: req.request_id,
                success: true,
                payload: bytes.clone().into(),
                payload_encoding: encoding as i32,
                duration_ms: 3,
                ..Default::default()
            };
            send_proto(&mut ws, 20, Message::ExecuteResponse(resp)).await;
        };
        let (out, ()) = tokio::join!(exec, answer);
        let out = out.unwrap();
        assert!(out.success);
        assert_eq!(out.payload, expected, "{encoding:?}");
        assert_eq!(out.duration_ms, 3);
    }
    assert_eq!(gw.stats().executes_routed, 3);
}

#[tokio::test]
async fn an_invoke_reaches_its_target_and_is_answered_under_the_callers_request_id() {
    use switchboard::proto::{InvokeCapabilityRequest, PayloadEncoding};
    let gw = TestGateway::start().await;
    let mut ws = registered(&gw, "acme", &["caller", "target"]).await;
    let invoke = |target: &str| {
        Message::InvokeRequest(InvokeCapabilityRequest {
            request_id: "caller-7".into(),
            target_address: target.into(),
            payload: br#"{"x":1}"#.to_vec().into(),
            payload_encoding: PayloadEncoding::Json as i32,
            context: [("trace".to_owned(), "t1".to_owned())].into(),
            ..Default::default()
        })
    };
    send_proto(&mut ws, 30, invoke("matrix:acme:raw:target")).await;
    let Message::ExecuteRequest(req) = next_message(&mut ws).await else {
        panic!("expected the target's execute request")
    };
    assert_eq!(req.context["connector_arn"], "matrix:acme:raw:target");
    assert_eq!(req.context["trace"], "t1", "the caller's context is copied");
    assert_ne!(
        req.request_id, "caller-7",
        "the gateway uses a fresh request id"
    );
    let resp = ExecuteResponse {
        request_id: req.request_id,
        success: true,
        payload: br#"{"y":2}"#.to_vec().into(),
        payload_encoding: PayloadEncoding::Json as i32,
        ..Default::default()
    };
    send_proto(&mut ws, 31, Message::ExecuteResponse(resp)).await;
    let Message::InvokeResponse(done) = next_message(&mut ws).await else {
        panic!("expected the invoke response")
    };
    assert_eq!(done.request_id, "caller-7");
    assert!(done.success, "{}", done.error);
    assert_eq!(&done.payload[..], br#"{"y":2}"#);

    send_proto(&mut ws, 32, invoke("matrix:acme:raw:nobody")).await;
    let Message::InvokeResponse(missing) = next_message(&mut ws).await else {
        panic!("expected the invoke response")
    };
    assert_eq!(missing.request_id, "caller-7");
    assert!(!missing.success);
    assert!(
        missing.error.contains("matrix:acme:raw:nobody"),
        "{}",
        missing.error
    );
}

#[tokio::test]
async fn application_heartbeats_are_echoed_and_can_be_switched_off() {
    use switchboard::proto::HeartbeatRequest;
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    let hb = || {
        Message::HeartbeatRequest(HeartbeatRequest {
            gateway_id: "acme.raw.one".into(),
            timestamp_ms: 1234,
        })
    };
    send_proto(&mut ws, 2, hb()).await;
    let Message::HeartbeatResponse(resp) = next_message(&mut ws).await else {
        panic!("expected a heartbeat response")
    };
    assert_eq!(
        (resp.gateway_id.as_str(), resp.timestamp_ms),
        ("acme.raw.one", 1234)
    );
    gw.set_answer_app_heartbeats(false);
    send_proto(&mut ws, 3, hb()).await;
    // The Phoenix heartbeat sent after it is answered first: the app heartbeat was not.
    ws.send(Ws::text(r#"[null,"4","phoenix","heartbeat",{}]"#))
        .await
        .unwrap();
    let next = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (next.topic.as_str(), next.msg_ref.as_deref()),
        ("phoenix", Some("4"))
    );
}

#[tokio::test]
async fn a_closed_socket_removes_its_registrations_and_fails_pending_executes() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    send_proto(&mut ws, 2, register("acme", "gone")).await;
    assert!(register_response(&mut ws).await.success);
    let exec = gw.execute_with("matrix:acme:raw:gone", json!({}), None, DEADLINE);
    let drop_it = async {
        // Wait until the execute reached the client, then vanish without answering.
        let f = next_frame(&mut ws).await.unwrap();
        assert!(matches!(
            f.proto().unwrap().message,
            Some(Message::ExecuteRequest(_))
        ));
        drop(ws);
    };
    let (result, ()) = tokio::join!(exec, drop_it);
    assert!(
        matches!(result, Err(Error::ConnectionClosed(_))),
        "{result:?}"
    );
    eventually("the registration to be removed", || async {
        gw.stats().registrations == 0
    })
    .await;
}

#[tokio::test]
async fn a_dropped_execute_leaves_no_pending_entry_and_a_late_answer_is_counted() {
    let gw = TestGateway::start().await;
    let mut ws = registered(&gw, "acme", &["slow"]).await;
    let exec = gw.execute_with(
        "matrix:acme:raw:slow",
        json!({}),
        None,
        Duration::from_millis(50),
    );
    let (result, frame) = tokio::join!(exec, next_message(&mut ws));
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    let Message::ExecuteRequest(req) = frame else {
        panic!("expected an execute")
    };
    // The answer comes after the caller gave up: its entry is gone, so it is dropped.
    let late = ExecuteResponse {
        request_id: req.request_id,
        success: true,
        ..Default::default()
    };
    send_proto(&mut ws, 5, Message::ExecuteResponse(late)).await;
    ws.send(Ws::text(r#"[null,"6","phoenix","heartbeat",{}]"#))
        .await
        .unwrap();
    assert_eq!(
        next_frame(&mut ws).await.unwrap().msg_ref.as_deref(),
        Some("6")
    );
    assert_eq!(
        gw.stats().frames_dropped.get("unknown_request_id"),
        Some(&1)
    );
}

#[tokio::test]
async fn shutdown_releases_the_port_for_a_new_gateway() {
    let mut gw = TestGateway::start().await;
    let addr = gw.local_addr();
    let _ws = registered(&gw, "acme", &["one"]).await;
    gw.restart().await;
    assert_eq!(gw.local_addr(), addr);
    assert_eq!(gw.stats().registrations, 0);
    let _again = registered(&gw, "acme", &["one"]).await;
}
