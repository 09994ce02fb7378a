//! A raw Phoenix client for the gateway tests: frames built with `switchboard::phoenix`
//! and sent over plain `tokio-tungstenite`, so each test controls every byte.
// Shared by several test binaries, each of which uses only some of the helpers.
#![allow(dead_code)]

use futures_util::{SinkExt, StreamExt};
use prost::Message as _;
use switchboard::gateway::TestGateway;
use switchboard::phoenix::{encode_proto, Frame, LOBBY_TOPIC};
use switchboard::proto::{
    stream_message::Message, ConnectorScope, ExecuteRequest, ExecuteResponse,
    InvokeCapabilityResponse, PayloadEncoding, RegisterConnectorRequest, StreamMessage,
};
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::common::DEADLINE;

pub(crate) type Raw =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) async fn raw_client(gw: &TestGateway) -> Raw {
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

/// The next text frame (a binary one fails the test), or `None` when the server
/// closed the socket.
pub(crate) async fn next_frame(ws: &mut Raw) -> Option<Frame> {
    loop {
        match tokio::time::timeout(DEADLINE, ws.next())
            .await
            .expect("a frame before the deadline")
        {
            Some(Ok(Ws::Text(t))) => return Some(Frame::decode(t.as_str()).unwrap()),
            Some(Ok(Ws::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(Ws::Binary(b))) => panic!("expected a text frame, got binary {b:?}"),
            Some(Ok(_)) => continue,
        }
    }
}

pub(crate) async fn send_proto(ws: &mut Raw, n: u32, msg: Message) {
    let text = encode_proto(
        Some("1"),
        Some(&n.to_string()),
        LOBBY_TOPIC,
        &StreamMessage { message: Some(msg) },
    );
    ws.send(Ws::text(text)).await.unwrap();
}

pub(crate) fn register(tenant: &str, instance: &str) -> Message {
    register_scoped(tenant, instance, ConnectorScope::Unspecified)
}

pub(crate) fn register_scoped(tenant: &str, instance: &str, scope: ConnectorScope) -> Message {
    Message::RegisterRequest(RegisterConnectorRequest {
        tenant_id: tenant.into(),
        connector_type: "raw".into(),
        instance_id: instance.into(),
        scope: scope as i32,
        ..Default::default()
    })
}

pub(crate) async fn register_response(
    ws: &mut Raw,
) -> switchboard::proto::RegisterConnectorResponse {
    let frame = next_frame(ws).await.unwrap();
    match frame.proto().unwrap().message {
        Some(Message::RegisterResponse(r)) => r,
        other => panic!("expected a register response, got {other:?}"),
    }
}

/// The next data message, which must come in a binary frame (a raw protobuf
/// `StreamMessage`), skipping nothing.
pub(crate) async fn next_binary(ws: &mut Raw) -> Message {
    match tokio::time::timeout(DEADLINE, ws.next())
        .await
        .expect("a frame before the deadline")
    {
        Some(Ok(Ws::Binary(b))) => StreamMessage::decode(b)
            .expect("a raw StreamMessage")
            .message
            .expect("a message"),
        other => panic!("expected a binary frame, got {other:?}"),
    }
}

/// The next `proto` message, skipping nothing: the test controls what is in flight.
pub(crate) async fn next_message(ws: &mut Raw) -> Message {
    let frame = next_frame(ws).await.expect("socket open");
    assert_eq!(frame.event, "proto", "{frame:?}");
    assert_eq!(
        frame.msg_ref, None,
        "server pushes carry a null ref, as Phoenix's do"
    );
    frame.proto().unwrap().message.expect("a message")
}

pub(crate) async fn registered(gw: &TestGateway, tenant: &str, instances: &[&str]) -> Raw {
    let mut ws = raw_client(gw).await;
    for (n, i) in instances.iter().enumerate() {
        send_proto(&mut ws, 10 + n as u32, register(tenant, i)).await;
        assert!(register_response(&mut ws).await.success);
    }
    ws
}

/// The next message, which must be an `execute_request`.
pub(crate) async fn next_execute(ws: &mut Raw) -> ExecuteRequest {
    match next_message(ws).await {
        Message::ExecuteRequest(req) => req,
        other => panic!("expected an execute request, got {other:?}"),
    }
}

/// The next message, which must be an `invoke_response`.
pub(crate) async fn next_invoke_response(ws: &mut Raw) -> InvokeCapabilityResponse {
    match next_message(ws).await {
        Message::InvokeResponse(resp) => resp,
        other => panic!("expected an invoke response, got {other:?}"),
    }
}

/// Answers `req` with success and a JSON `payload`.
pub(crate) async fn answer(ws: &mut Raw, req: &ExecuteRequest, payload: &[u8]) {
    let resp = ExecuteResponse {
        request_id: req.request_id.clone(),
        success: true,
        payload: payload.to_vec().into(),
        payload_encoding: PayloadEncoding::Json as i32,
        ..Default::default()
    };
    send_proto(ws, 90, Message::ExecuteResponse(resp)).await;
}

/// The id of the socket carrying the registration `arn`.
pub(crate) fn socket_of(gw: &TestGateway, arn: &str) -> u64 {
    gw.registrations()
        .into_iter()
        .find(|r| r.arn == arn)
        .unwrap_or_else(|| panic!("{arn} is registered"))
        .socket_id
}
