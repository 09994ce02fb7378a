//! The reference gateway's HTTP API and server-side protocol handling, driven with a
//! real HTTP client and a raw WebSocket client speaking Phoenix frames.
#![cfg(feature = "gateway")]

mod common;

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use common::{eventually, start, tagged, DEADLINE};
use futures_util::{SinkExt, StreamExt};
use prost::Message as _;
use serde_json::{json, Value};
use switchboard::gateway::{GatewayConfig, TestGateway};
use switchboard::phoenix::{encode_proto, Frame, LOBBY_TOPIC};
use switchboard::proto::{
    stream_message::Message, ExecuteResponse, RegisterConnectorRequest, StreamMessage,
};
use switchboard::{BaseConnector, Error, Payload, Registration, RunnerOptions};
use tokio_tungstenite::tungstenite::Message as Ws;

/// Fails every execute.
struct Failing;

#[async_trait]
impl BaseConnector for Failing {
    fn connector_type(&self) -> &str {
        "failing"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Err(Error::Connector("upstream said no".into()))
    }
}

/// Never answers.
struct Silent;

#[async_trait]
impl BaseConnector for Silent {
    fn connector_type(&self) -> &str {
        "silent"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        std::future::pending().await
    }
}

async fn post(url: String, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn http_api_lists_executes_and_maps_failures_to_status_codes() {
    let gw = TestGateway::start().await;
    let cfg = |i: &str| {
        switchboard::ConnectorConfig::builder(gw.ws_url(), "acme")
            .instance_id(i)
            .build()
            .unwrap()
    };
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "ok"),
        Registration::new(cfg("bad"), Failing),
        Registration::new(cfg("mute"), Silent),
    ];
    let (_runner, _join) = start(RunnerOptions::default(), regs).await;
    let base = gw.http_url();

    let list: Vec<Value> = reqwest::get(format!("{base}/api/v1/connectors"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let arns: Vec<&str> = list.iter().map(|r| r["arn"].as_str().unwrap()).collect();
    assert_eq!(
        arns,
        [
            "matrix:acme:failing:bad",
            "matrix:acme:silent:mute",
            "matrix:acme:tagged:ok"
        ]
    );
    assert_eq!(list[0]["tenant_id"], "acme");
    assert_eq!(list[0]["transport"], "websocket");
    assert!(list[0]["socket_id"].is_u64());

    let (code, v) = post(
        format!("{base}/api/v1/connectors/matrix:acme:tagged:ok/execute"),
        json!({"payload": {"a": 1}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(v["success"], true);
    assert_eq!(v["payload"]["echo"], json!({"a": 1}));
    assert!(v["duration_ms"].is_i64());

    let (code, v) = post(
        format!("{base}/api/v1/connectors/matrix:acme:tagged:nobody/execute"),
        json!({"payload": {}}),
    )
    .await;
    assert_eq!((code, v["code"].as_str()), (404, Some("not_found")));

    let (code, v) = post(
        format!("{base}/api/v1/connectors/matrix:acme:failing:bad/execute"),
        json!({"payload": {}}),
    )
    .await;
    assert_eq!(code, 502);
    assert_eq!(v["success"], false);
    assert!(
        v["error"].as_str().unwrap().contains("upstream said no"),
        "{v}"
    );

    let (code, _) = post(
        format!("{base}/api/v1/connectors/matrix:acme:silent:mute/execute"),
        json!({"payload": {}, "timeout_ms": 100}),
    )
    .await;
    assert_eq!(code, 504);

    let resp = reqwest::Client::new()
        .post(format!(
            "{base}/api/v1/connectors/matrix:acme:tagged:ok/execute"
        ))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("payload"), "{v}");

    let stats: Value = reqwest::get(format!("{base}/api/v1/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["registrations"], 3);
    assert_eq!(stats["sockets_open"], 1);
    assert_eq!(
        stats["executes_routed"], 3,
        "ok, failing and silent; the 404 and the 400 route nothing"
    );
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("switchboard_gateway_registrations 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchboard_gateway_executes_routed_total"),
        "{metrics}"
    );
}

type Raw =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn raw_client(gw: &TestGateway) -> Raw {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}?vsn=2.0.0", gw.ws_url()))
        .await
        .unwrap();
    ws.send(Ws::text(r#"["1","1","connector:lobby","phx_join",{}]"#))
        .await
        .unwrap();
    let reply = next_frame(&mut ws).await.expect("join reply");
    assert_eq!(reply.reply_status(), Some("ok"));
    ws
}

/// The next text frame, or `None` when the server closed the socket.
async fn next_frame(ws: &mut Raw) -> Option<Frame> {
    loop {
        match tokio::time::timeout(DEADLINE, ws.next())
            .await
            .expect("a frame before the deadline")
        {
            Some(Ok(Ws::Text(t))) => return Some(Frame::decode(t.as_str()).unwrap()),
            Some(Ok(Ws::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => continue,
        }
    }
}

async fn send_proto(ws: &mut Raw, n: u32, msg: Message) {
    let text = encode_proto(
        Some("1"),
        Some(&n.to_string()),
        LOBBY_TOPIC,
        &StreamMessage { message: Some(msg) },
    );
    ws.send(Ws::text(text)).await.unwrap();
}

fn register(tenant: &str, instance: &str) -> Message {
    Message::RegisterRequest(RegisterConnectorRequest {
        tenant_id: tenant.into(),
        connector_type: "raw".into(),
        instance_id: instance.into(),
        ..Default::default()
    })
}

async fn register_response(ws: &mut Raw) -> switchboard::proto::RegisterConnectorResponse {
    let frame = next_frame(ws).await.unwrap();
    match frame.proto().unwrap().message {
        Some(Message::RegisterResponse(r)) => r,
        other => panic!("expected a register response, got {other:?}"),
    }
}

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
async fn malformed_frames_from_a_client_are_dropped_by_reason_and_the_socket_keeps_working() {
    let gw = TestGateway::start_with(GatewayConfig::default().with_max_frame_bytes(1024)).await;
    let mut ws = raw_client(&gw).await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let unknown_response = StreamMessage {
        message: Some(Message::ExecuteResponse(ExecuteResponse {
            request_id: "never-sent".into(),
            ..Default::default()
        })),
    };
    for text in [
        "not json at all".to_owned(),
        r#"["1","2","connector:lobby"]"#.to_owned(),
        r#"["1","3","connector:lobby","mystery",{}]"#.to_owned(),
        r#"["1","4","connector:lobby","proto",{"data":"%%%"}]"#.to_owned(),
        format!(
            r#"["1","5","connector:lobby","proto",{{"data":"{}"}}]"#,
            b64(&[0x0a, 0x05])
        ),
        format!(
            r#"["1","6","connector:lobby","proto",{{"data":"{}"}}]"#,
            b64(&unknown_response.encode_to_vec())
        ),
        format!(
            r#"["1","7","connector:lobby","proto",{{"data":"{}"}}]"#,
            "A".repeat(2048)
        ),
    ] {
        ws.send(Ws::text(text)).await.unwrap();
    }
    // Still alive: a Phoenix heartbeat is answered after all of that.
    ws.send(Ws::text(r#"[null,"8","phoenix","heartbeat",{}]"#))
        .await
        .unwrap();
    let hb = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (hb.topic.as_str(), hb.msg_ref.as_deref(), hb.reply_status()),
        ("phoenix", Some("8"), Some("ok"))
    );
    let dropped = gw.stats().frames_dropped;
    for reason in [
        "not_json",
        "bad_shape",
        "unknown_event",
        "bad_base64",
        "bad_protobuf",
        "unknown_request_id",
        "too_large",
    ] {
        assert_eq!(dropped.get(reason), Some(&1), "{reason}: {dropped:?}");
    }
}

#[tokio::test]
async fn pushes_on_unjoined_topics_get_unmatched_topic() {
    let gw = TestGateway::start().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    ws.send(Ws::text(
        r#"[null,"1","connector:lobby","proto",{"data":""}]"#,
    ))
    .await
    .unwrap();
    let reply = next_frame(&mut ws).await.unwrap();
    assert_eq!(reply.reply_status(), Some("error"));
    assert_eq!(reply.reply_reason(), Some("unmatched topic"));
}

#[tokio::test]
async fn a_duplicate_join_closes_the_old_channel_with_its_join_ref() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    ws.send(Ws::text(r#"["9","9","connector:lobby","phx_join",{}]"#))
        .await
        .unwrap();
    let close = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (close.event.as_str(), close.join_ref.as_deref()),
        ("phx_close", Some("1"))
    );
    let reply = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (reply.reply_status(), reply.join_ref.as_deref()),
        (Some("ok"), Some("9"))
    );
}

#[tokio::test]
async fn idle_sockets_are_closed() {
    let gw = TestGateway::start_with(
        GatewayConfig::default().with_idle_timeout(Duration::from_millis(150)),
    )
    .await;
    let mut ws = raw_client(&gw).await;
    assert!(
        next_frame(&mut ws).await.is_none(),
        "the gateway closes a silent socket"
    );
    eventually("the socket to be counted closed", || async {
        gw.stats().sockets_open == 0
    })
    .await;
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

/// The next `proto` message, skipping nothing: the test controls what is in flight.
async fn next_message(ws: &mut Raw) -> Message {
    let frame = next_frame(ws).await.expect("socket open");
    assert_eq!(frame.event, "proto", "{frame:?}");
    assert_eq!(
        frame.msg_ref, None,
        "server pushes carry a null ref, as Phoenix's do"
    );
    frame.proto().unwrap().message.expect("a message")
}

async fn registered(gw: &TestGateway, tenant: &str, instances: &[&str]) -> Raw {
    let mut ws = raw_client(gw).await;
    for (n, i) in instances.iter().enumerate() {
        send_proto(&mut ws, 10 + n as u32, register(tenant, i)).await;
        assert!(register_response(&mut ws).await.success);
    }
    ws
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
                payload: bytes.clone(),
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
            payload: br#"{"x":1}"#.to_vec(),
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
        payload: br#"{"y":2}"#.to_vec(),
        payload_encoding: PayloadEncoding::Json as i32,
        ..Default::default()
    };
    send_proto(&mut ws, 31, Message::ExecuteResponse(resp)).await;
    let Message::InvokeResponse(done) = next_message(&mut ws).await else {
        panic!("expected the invoke response")
    };
    assert_eq!(done.request_id, "caller-7");
    assert!(done.success, "{}", done.error);
    assert_eq!(done.payload, br#"{"y":2}"#);

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
async fn a_leave_is_acknowledged_then_the_channel_is_closed_and_unmatched() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    ws.send(Ws::text(r#"["1","2","connector:lobby","phx_leave",{}]"#))
        .await
        .unwrap();
    let reply = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (reply.reply_status(), reply.msg_ref.as_deref()),
        (Some("ok"), Some("2"))
    );
    let close = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (close.event.as_str(), close.join_ref.as_deref()),
        ("phx_close", Some("1"))
    );
    send_proto(&mut ws, 3, register("acme", "late")).await;
    let unmatched = next_frame(&mut ws).await.unwrap();
    assert_eq!(unmatched.reply_reason(), Some("unmatched topic"));
    assert_eq!(gw.stats().registrations, 0);
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
