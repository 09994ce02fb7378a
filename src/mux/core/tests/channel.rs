//! Losing the channel (`phx_error`, `phx_close`), losing the socket, and binary
//! frames.

use bytes::Bytes;
use prost::Message as _;

use super::super::Transmit;
use super::support::*;
use super::wire::*;
use crate::proto::{stream_message::Message, HeartbeatRequest, StreamMessage, WebSocketFrame};

/// A joined core with two registrations and the current join ref.
fn two() -> (Harness, String) {
    let h = joined([spec("a"), spec("b")]);
    let jr = h.join_ref.clone().expect("joined");
    (h, jr)
}

#[test]
fn phx_error_for_the_current_join_unregisters_every_registration() {
    let (mut h, jr) = two();
    h.lobby_event(&jr, "phx_error");
    assert_eq!(unregistered(&h.events()), h.handles);
}

#[test]
fn phx_close_for_the_current_join_unregisters_every_registration() {
    let (mut h, jr) = two();
    h.lobby_event(&jr, "phx_close");
    assert_eq!(unregistered(&h.events()), h.handles);
}

#[test]
fn a_lost_channel_is_rejoined_on_the_same_socket_with_a_new_join_ref() {
    let (mut h, jr) = two();
    h.lobby_event(&jr, "phx_error");
    let new = h.expect_rejoin();
    assert_ne!(new, jr);
}

#[test]
fn a_lost_channel_does_not_ask_for_a_reconnect() {
    let (mut h, jr) = two();
    h.lobby_event(&jr, "phx_close");
    assert!(reconnect_reason(&h.events()).is_none());
}

#[test]
fn a_channel_lost_again_before_the_rejoin_is_answered_asks_for_a_reconnect() {
    let (mut h, jr) = two();
    h.lobby_event(&jr, "phx_error");
    let new = h.expect_rejoin();
    h.events();
    h.lobby_event(&new, "phx_error");
    let events = h.events();
    let why = reconnect_reason(&events).expect("a reconnect");
    assert!(why.starts_with("rejoin failed"), "{why}");
}

#[test]
fn registrations_re_register_after_the_rejoin_reply() {
    let (mut h, jr) = two();
    h.lobby_event(&jr, "phx_error");
    h.expect_rejoin();
    h.reply_join("ok");
    assert_eq!(registers(&h.sent()), ["a", "b"]);
}

#[test]
fn a_lost_channel_cancels_running_executes() {
    let (mut h, jr) = two();
    h.deliver(execute("r1", &arn("a")));
    let exec = starts(&h.events())[0].0;
    h.lobby_event(&jr, "phx_error");
    assert_eq!(cancels(&h.events()), [exec]);
}

#[test]
fn phx_close_for_an_earlier_join_is_ignored() {
    let (mut h, old) = two();
    h.lobby_event(&old, "phx_error");
    h.expect_rejoin();
    h.reply_join("ok");
    h.answer_registers();
    h.lobby_event(&old, "phx_close");
    assert!(h.events().is_empty());
    assert!(h.frames().is_empty());
}

#[test]
fn an_execute_request_in_a_binary_frame_starts_an_execute() {
    let mut h = joined([spec("a")]);
    h.binary(binary_of(execute("r1", &arn("a"))));
    assert_eq!(started(&h.events()), ["r1"]);
}

#[test]
fn after_a_binary_frame_data_goes_out_in_binary_until_the_socket_is_replaced() {
    let mut h = joined([spec("a")]);
    h.binary(binary_of(execute("r1", &arn("a"))));
    let [(exec, _)] = starts(&h.events())[..] else {
        panic!("one execute started")
    };
    h.finish(exec, "r1");
    let out = h.conn.poll_transmit().expect("the execute's answer");
    let Transmit::Binary(bytes) = out else {
        panic!("the answer to a binary gateway is binary: {out:?}")
    };
    let answer = StreamMessage::decode(bytes).expect("a raw StreamMessage");
    assert!(
        matches!(answer.message, Some(Message::ExecuteResponse(ref r)) if r.request_id == "r1"),
        "{answer:?}"
    );

    // A new socket starts on text again, whatever the last one spoke.
    h.conn.handle_disconnected(h.now(), "test");
    h.join_and_register();
    h.deliver(execute("r2", &arn("a")));
    let [(exec, _)] = starts(&h.events())[..] else {
        panic!("one execute started")
    };
    h.finish(exec, "r2");
    assert!(
        matches!(&h.sent()[..], [Message::ExecuteResponse(r)] if r.request_id == "r2"),
        "a text answer on the new socket"
    );
}

#[test]
fn a_garbage_binary_frame_is_dropped_and_counted() {
    let mut h = joined([spec("a")]);
    // Field 1, length 5, and no bytes after it.
    h.binary(Bytes::from_static(&[0x0a, 0x05]));
    assert!(h.events().is_empty());
    assert_eq!(h.dropped("bad_protobuf"), 1);
}

#[test]
fn a_binary_frame_before_the_join_completes_is_dropped_and_counted() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    h.binary(binary_of(execute("r1", "")));
    assert!(h.events().is_empty());
    assert_eq!(h.dropped("binary_before_join"), 1);
}

#[test]
fn transmits_not_written_before_a_disconnect_are_dropped_and_counted() {
    let mut h = joined([spec("a")]);
    h.deliver(Message::HeartbeatRequest(HeartbeatRequest::default()));
    h.conn.handle_disconnected(h.now(), "test");
    assert!(h.frames().is_empty());
    assert_eq!(h.dropped("outbound_while_disconnected"), 1);
}

#[test]
fn messages_sent_while_down_are_dropped_and_counted() {
    let mut h = joined([spec("a")]);
    h.conn.handle_disconnected(h.now(), "test");
    h.conn.send(Message::WsFrame(WebSocketFrame::default()));
    assert!(h.frames().is_empty());
    assert_eq!(h.dropped("outbound_while_disconnected"), 1);
}

#[test]
fn a_disconnect_unregisters_every_registration() {
    let (mut h, _) = two();
    h.conn.handle_disconnected(h.now(), "test");
    assert_eq!(unregistered(&h.events()), h.handles);
}

#[test]
fn a_disconnect_cancels_running_executes() {
    let mut h = joined([spec("a")]);
    h.deliver(execute("r1", &arn("a")));
    let exec = starts(&h.events())[0].0;
    h.conn.handle_disconnected(h.now(), "test");
    assert_eq!(cancels(&h.events()), [exec]);
}

#[test]
fn after_a_reconnect_and_join_the_registrations_re_register() {
    let (mut h, _) = two();
    h.conn.handle_disconnected(h.now(), "test");
    h.events();
    h.connect();
    h.reply_join("ok");
    assert_eq!(registers(&h.sent()), ["a", "b"]);
}

#[test]
fn frames_while_down_are_ignored() {
    let mut h = joined([spec("a")]);
    h.conn.handle_disconnected(h.now(), "test");
    h.events();
    h.deliver(execute("r1", ""));
    assert!(h.events().is_empty());
}
