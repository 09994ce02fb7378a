//! What gateways of the protocol family send that a connector must take, each driven
//! through the reference gateway's raw-frame hooks over a real socket: binary frames
//! carrying a raw protobuf `StreamMessage`, `phx_error` / `phx_close` on the lobby,
//! `heartbeat_response` with `should_reconnect`, WebSocket proxy messages; and the
//! `metrics_report` a connector sends, as the gateway's API shows it.
#![cfg(feature = "gateway")]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{eventually, start, tagged};
use prost::Message as _;
use serde_json::json;
use switchboard::gateway::{LobbyEvent, TestGateway};
use switchboard::proto::{
    stream_message::Message, ExecuteRequest, HeartbeatResponse, PayloadEncoding, StreamMessage,
    WebSocketFrame, WebSocketOpenRequest,
};
use switchboard::{BaseConnector, Payload, Registration, RegistrationHandle, RunnerOptions};

fn msg(m: Message) -> StreamMessage {
    StreamMessage { message: Some(m) }
}

async fn one(
    gw: &TestGateway,
    r: Registration,
) -> (
    Arc<switchboard::MultiConnectorRunner>,
    RegistrationHandle,
    u64,
) {
    let (runner, _join) = start(RunnerOptions::default(), vec![r]).await;
    let h = runner.registrations()[0].clone();
    (runner, h, gw.socket_ids()[0])
}

#[tokio::test]
async fn a_binary_frame_carrying_a_protobuf_execute_is_served() {
    let gw = TestGateway::start().await;
    let (_runner, h, socket) = one(&gw, tagged(&gw.ws_url(), "acme", "a")).await;
    let req = ExecuteRequest {
        request_id: "bin-1".into(),
        payload: br#"{"via":"binary"}"#.to_vec().into(),
        payload_encoding: PayloadEncoding::Json as i32,
        context: HashMap::from([("connector_arn".to_owned(), h.arn().unwrap())]),
        capability_id: String::new(),
    };
    assert!(gw.send_raw_binary(socket, msg(Message::ExecuteRequest(req)).encode_to_vec()));
    eventually("the binary execute to be served", || async {
        h.metrics().requests_processed == 1
    })
    .await;
    assert_eq!(h.metrics().disconnects, 0);
}

#[tokio::test]
async fn phx_error_and_phx_close_on_the_lobby_make_the_client_rejoin_on_the_same_socket() {
    let gw = TestGateway::start().await;
    let (_runner, h, socket) = one(&gw, tagged(&gw.ws_url(), "acme", "a")).await;
    for (round, event) in [LobbyEvent::Error, LobbyEvent::Close]
        .into_iter()
        .enumerate()
    {
        assert!(gw.send_channel_event(socket, event));
        eventually("re-registration after the rejoin", || async {
            h.metrics().registrations as usize >= round + 2 && h.arn().is_some()
        })
        .await;
    }
    assert_eq!(
        h.metrics().disconnects,
        0,
        "a lost channel is rejoined, not redialled"
    );
    assert_eq!(gw.socket_ids(), vec![socket]);
    let out = gw
        .execute(&h.arn().unwrap(), json!({"n": 1}))
        .await
        .unwrap();
    assert_eq!(out.payload["echo"], json!({"n": 1}));
}

#[tokio::test]
async fn a_heartbeat_response_asking_for_a_reconnect_is_obeyed() {
    let gw = TestGateway::start().await;
    let (_runner, h, socket) = one(&gw, tagged(&gw.ws_url(), "acme", "a")).await;
    let resp = HeartbeatResponse {
        gateway_id: "acme".into(),
        timestamp_ms: 0,
        should_reconnect: true,
    };
    assert!(gw.push(socket, msg(Message::HeartbeatResponse(resp))));
    eventually("a reconnect and re-registration", || async {
        let m = h.metrics();
        m.disconnects == 1 && m.registrations >= 2 && h.arn().is_some()
    })
    .await;
    assert_ne!(gw.socket_ids(), vec![socket], "a new socket");
}

/// What the proxy connector saw.
#[derive(Default)]
struct Seen {
    frames: Mutex<Vec<Vec<u8>>>,
}

/// Reports a custom figure and accepts proxied streams, recording their frames.
struct Proxy(Arc<Seen>);

#[async_trait]
impl BaseConnector for Proxy {
    fn connector_type(&self) -> &str {
        "proxy"
    }
    async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Ok(payload)
    }
    fn custom_metrics(&self) -> HashMap<String, f64> {
        HashMap::from([(
            "frames_seen".to_owned(),
            self.0.frames.lock().unwrap().len() as f64,
        )])
    }
    fn ws_open(&self, _: &WebSocketOpenRequest) -> switchboard::Result<()> {
        Ok(())
    }
    fn ws_frame(&self, frame: &WebSocketFrame) {
        self.0.frames.lock().unwrap().push(frame.data.to_vec());
    }
}

#[tokio::test]
async fn proxied_websocket_frames_reach_the_connectors_hooks() {
    let gw = TestGateway::start().await;
    let seen = Arc::new(Seen::default());
    let cfg = switchboard::ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("p")
        .build()
        .unwrap();
    let (_runner, _h, socket) = one(&gw, Registration::new(cfg, Proxy(seen.clone()))).await;
    let open = WebSocketOpenRequest {
        connection_id: "c1".into(),
        path: "/stream".into(),
        ..Default::default()
    };
    assert!(gw.push(socket, msg(Message::WsOpenRequest(open))));
    let frame = WebSocketFrame {
        connection_id: "c1".into(),
        frame_type: 1,
        data: b"hello".to_vec().into(),
    };
    assert!(gw.push(socket, msg(Message::WsFrame(frame))));
    eventually("the frame to reach the hook", || async {
        seen.frames.lock().unwrap().as_slice() == [b"hello".to_vec()]
    })
    .await;
}

#[tokio::test]
async fn metrics_reports_with_custom_figures_appear_in_the_gateways_api() {
    let gw = TestGateway::start().await;
    let proxy = Proxy(Arc::default());
    let cfg = switchboard::ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("m")
        .metrics_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let (_runner, h, _socket) = one(&gw, Registration::new(cfg, proxy)).await;
    let out = gw
        .execute(&h.arn().unwrap(), json!({"n": 1}))
        .await
        .unwrap();
    assert!(out.success);
    eventually("a report counting the execute", || async {
        gw.registrations().iter().any(|r| {
            r.metrics.as_ref().is_some_and(|m| {
                m.requests_processed == 1 && m.custom_metrics.get("frames_seen") == Some(&0.0)
            })
        })
    })
    .await;
    // And over HTTP, as an operator sees it.
    let listed: serde_json::Value = reqwest::get(format!("{}/api/v1/connectors", gw.http_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed[0]["metrics"]["requests_processed"],
        json!(1),
        "{listed}"
    );
}
