//! Binary frames from clients, and the test hooks that make the gateway send what it
//! would not on its own (a binary frame, any push, `phx_error` / `phx_close`), each
//! checked on a raw client.

use futures_util::{SinkExt, StreamExt};
use prost::Message as _;
use serde_json::json;
use switchboard::gateway::{GatewayConfig, LobbyEvent, TestGateway};
use switchboard::phoenix::{encode_proto, LOBBY_TOPIC};
use switchboard::proto::{
    stream_message::Message, ExecuteResponse, HeartbeatResponse, PayloadEncoding, StreamMessage,
};
use switchboard::Error;
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::common::DEADLINE;
use crate::raw::{
    next_binary, next_execute, next_frame, raw_client, register, register_response, registered,
    send_proto, socket_of, Raw,
};

fn binary(msg: Message) -> Ws {
    Ws::binary(StreamMessage { message: Some(msg) }.encode_to_vec())
}

#[tokio::test]
async fn messages_in_binary_frames_are_handled_like_proto_frames_and_answered_in_kind() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    ws.send(binary(register("acme", "bin"))).await.unwrap();
    let Message::RegisterResponse(resp) = next_binary(&mut ws).await else {
        panic!("expected a register response")
    };
    assert!(resp.success, "{}", resp.error);
    assert_eq!(resp.connector_arn, "matrix:acme:raw:bin");

    let exec = gw.execute("matrix:acme:raw:bin", json!({"q": 1}));
    let serve = async {
        let Message::ExecuteRequest(req) = next_binary(&mut ws).await else {
            panic!("expected an execute request")
        };
        let resp = ExecuteResponse {
            request_id: req.request_id,
            success: true,
            payload: br#"{"a":1}"#.to_vec().into(),
            payload_encoding: PayloadEncoding::Json as i32,
            ..Default::default()
        };
        ws.send(binary(Message::ExecuteResponse(resp)))
            .await
            .unwrap();
    };
    let (out, ()) = tokio::join!(exec, serve);
    assert_eq!(out.unwrap().payload, json!({"a": 1}));
}

/// Joins the lobby with `payload` and registers `instance` in a `proto` text frame.
async fn join_and_register(gw: &TestGateway, payload: &str, instance: &str) -> Raw {
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    ws.send(Ws::text(format!(
        r#"["1","1","{LOBBY_TOPIC}","phx_join",{payload}]"#
    )))
    .await
    .unwrap();
    let reply = next_frame(&mut ws).await.expect("join reply");
    assert_eq!(
        reply.reply_status(),
        Some("ok"),
        "the join reply stays text"
    );
    send_proto(&mut ws, 2, register("acme", instance)).await;
    ws
}

#[tokio::test]
async fn a_join_that_asks_for_binary_frames_gets_its_data_in_binary() {
    let gw = TestGateway::start().await;
    let mut ws = join_and_register(&gw, r#"{"frames":"binary"}"#, "hint").await;
    let Message::RegisterResponse(resp) = next_binary(&mut ws).await else {
        panic!("expected a register response")
    };
    assert!(resp.success, "{}", resp.error);
}

#[tokio::test]
async fn binary_frames_go_only_where_asked_for_and_never_when_turned_off() {
    let gw = TestGateway::start().await;
    let mut plain = join_and_register(&gw, "{}", "plain").await;
    assert!(register_response(&mut plain).await.success, "text: no hint");

    let off = TestGateway::start_with(GatewayConfig::default().with_binary_frames(false)).await;
    let mut hinted = join_and_register(&off, r#"{"frames":"binary"}"#, "hinted").await;
    assert!(
        register_response(&mut hinted).await.success,
        "text: turned off"
    );
    // Nor does a connector's own binary frame switch its socket there.
    hinted
        .send(binary(register("acme", "second")))
        .await
        .unwrap();
    assert!(
        register_response(&mut hinted).await.success,
        "text: still off"
    );
}

#[tokio::test]
async fn binary_frames_before_joining_or_undecodable_are_dropped_by_reason() {
    let gw = TestGateway::start().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    ws.send(binary(register("acme", "early"))).await.unwrap();
    ws.send(Ws::text(r#"["1","1","connector:lobby","phx_join",{}]"#))
        .await
        .unwrap();
    assert_eq!(
        next_frame(&mut ws).await.unwrap().reply_status(),
        Some("ok")
    );
    ws.send(Ws::binary(vec![0x0a, 0x05])).await.unwrap();
    ws.send(Ws::text(r#"[null,"2","phoenix","heartbeat",{}]"#))
        .await
        .unwrap();
    let hb = next_frame(&mut ws).await.unwrap();
    assert_eq!(hb.msg_ref.as_deref(), Some("2"), "still alive: {hb:?}");
    let stats = gw.stats();
    assert_eq!(stats.registrations, 0, "the early register was not handled");
    assert_eq!(stats.frames_dropped.get("not_joined"), Some(&1));
    assert_eq!(stats.frames_dropped.get("bad_protobuf"), Some(&1));
}

#[tokio::test]
async fn push_sends_a_message_on_the_current_join_and_nothing_on_a_closed_channel() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    let id = gw.socket_ids()[0];
    let msg = StreamMessage {
        message: Some(Message::HeartbeatResponse(HeartbeatResponse {
            gateway_id: "acme.raw.one".into(),
            timestamp_ms: 5,
            should_reconnect: true,
        })),
    };
    assert!(gw.push(id, msg.clone()));
    let frame = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (frame.join_ref.as_deref(), frame.msg_ref.as_deref()),
        (Some("1"), None)
    );
    assert_eq!(frame.proto().unwrap(), msg);

    ws.send(Ws::text(r#"["7","7","connector:lobby","phx_join",{}]"#))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut ws).await.unwrap().event, "phx_close");
    assert_eq!(
        next_frame(&mut ws).await.unwrap().reply_status(),
        Some("ok")
    );
    assert!(gw.push(id, msg.clone()));
    let frame = next_frame(&mut ws).await.unwrap();
    assert_eq!(frame.join_ref.as_deref(), Some("7"), "the new join's ref");

    ws.send(Ws::text(r#"["7","8","connector:lobby","phx_leave",{}]"#))
        .await
        .unwrap();
    assert_eq!(
        next_frame(&mut ws).await.unwrap().reply_status(),
        Some("ok")
    );
    assert_eq!(next_frame(&mut ws).await.unwrap().event, "phx_close");
    assert!(!gw.push(id, msg.clone()), "no channel to push on");
    assert!(!gw.push(id + 1000, msg), "no such socket");
}

#[tokio::test]
async fn send_raw_binary_sends_a_binary_frame() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    assert!(gw.send_raw_binary(gw.socket_ids()[0], vec![1, 2, 3]));
    let got = tokio::time::timeout(DEADLINE, ws.next())
        .await
        .expect("a frame before the deadline");
    match got {
        Some(Ok(Ws::Binary(b))) => assert_eq!(&b[..], [1, 2, 3]),
        other => panic!("expected a binary frame, got {other:?}"),
    }
}

#[tokio::test]
async fn a_channel_event_ends_the_lobby_under_its_join_ref_and_the_client_can_rejoin() {
    for (event, name) in [
        (LobbyEvent::Error, "phx_error"),
        (LobbyEvent::Close, "phx_close"),
    ] {
        let gw = TestGateway::start().await;
        let mut ws = registered(&gw, "acme", &["one"]).await;
        let id = socket_of(&gw, "matrix:acme:raw:one");
        let exec = gw.execute("matrix:acme:raw:one", json!({}));
        let end = async {
            next_execute(&mut ws).await;
            assert!(gw.send_channel_event(id, event));
            let frame = next_frame(&mut ws).await.unwrap();
            assert_eq!(
                (
                    frame.topic.as_str(),
                    frame.event.as_str(),
                    frame.join_ref.as_deref(),
                    frame.msg_ref.as_deref()
                ),
                (LOBBY_TOPIC, name, Some("1"), Some("1"))
            );
        };
        let (result, ()) = tokio::join!(exec, end);
        assert!(
            matches!(result, Err(Error::ConnectionClosed(_))),
            "{name}: the pending execute fails with the channel: {result:?}"
        );
        assert_eq!(gw.stats().registrations, 0, "{name}");
        assert!(!gw.send_channel_event(id, event), "nothing left to end");

        // The channel is gone on the server too, as in Phoenix.
        send_proto(&mut ws, 3, register("acme", "one")).await;
        assert_eq!(
            next_frame(&mut ws).await.unwrap().reply_reason(),
            Some("unmatched topic")
        );
        // Rejoining gets a plain ok (no phx_close for the dead channel), and a register.
        ws.send(Ws::text(r#"["4","4","connector:lobby","phx_join",{}]"#))
            .await
            .unwrap();
        let reply = next_frame(&mut ws).await.unwrap();
        assert_eq!(
            (reply.reply_status(), reply.join_ref.as_deref()),
            (Some("ok"), Some("4"))
        );
        let again = encode_proto(
            Some("4"),
            Some("5"),
            LOBBY_TOPIC,
            &StreamMessage {
                message: Some(register("acme", "one")),
            },
        );
        ws.send(Ws::text(again)).await.unwrap();
        assert!(register_response(&mut ws).await.success, "{name}");
    }
}
