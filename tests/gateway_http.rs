//! The reference gateway's HTTP API and server-side protocol handling, driven with a
//! real HTTP client and a raw WebSocket client speaking Phoenix frames.

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
