//! The core under [`Framing::Stream`] (one gRPC `Connect` stream): no channel to
//! join, messages as they are, the same registration and liveness rules.

use super::support::*;
use super::wire::*;
use crate::mux::core::{Framing, Incoming, Transmit};
use crate::proto::{stream_message::Message, StreamMessage};

fn stream_opts() -> crate::mux::core::CoreOptions {
    let mut o = opts();
    o.framing = Framing::Stream;
    o.max_handlers = 1;
    o
}

/// Drains a stream core's transmits, which are all raw messages.
fn messages(h: &mut Harness) -> Vec<Message> {
    std::iter::from_fn(|| h.conn.poll_transmit())
        .map(|t| match t {
            Transmit::Message(m) => m.message.expect("a message"),
            Transmit::Text(t) => panic!("a stream core wrote a Phoenix frame: {t}"),
            Transmit::Binary(b) => panic!("a stream core wrote a binary frame: {b:?}"),
        })
        .collect()
}

fn feed(h: &mut Harness, message: Message) {
    let msg = StreamMessage {
        message: Some(message),
    };
    h.conn.handle_frame(h.now(), Incoming::Message(msg));
}

/// A stream core whose registration is registered.
fn open() -> Harness {
    let mut h = Harness::with_opts(stream_opts(), [spec("a")]);
    h.conn.handle_connected(h.now());
    assert_eq!(registers(&messages(&mut h)), ["a"]);
    feed(&mut h, registered("a"));
    h.events();
    h
}

#[test]
fn an_opened_stream_sends_the_register_first_and_no_join() {
    let mut h = Harness::with_opts(stream_opts(), [spec("a")]);
    h.conn.handle_connected(h.now());
    let sent = messages(&mut h);
    assert!(
        matches!(sent.as_slice(), [Message::RegisterRequest(r)] if r.instance_id == "a"),
        "{sent:?}"
    );
}

#[test]
fn a_register_answer_on_the_stream_registers() {
    let mut h = Harness::with_opts(stream_opts(), [spec("a")]);
    h.conn.handle_connected(h.now());
    messages(&mut h);
    feed(&mut h, registered("a"));
    let events = h.events();
    assert!(
        events.iter().any(
            |e| matches!(e, crate::mux::core::Event::Registered { arn, .. } if *arn == arn_of("a"))
        ),
        "{events:?}"
    );
}

fn arn_of(instance: &str) -> String {
    super::support::arn(instance)
}

#[test]
fn an_execute_on_the_stream_is_answered_on_the_stream() {
    let mut h = open();
    feed(&mut h, execute("r1", &arn_of("a")));
    let events = h.events();
    let [(exec, ref id)] = starts(&events)[..] else {
        panic!("one start: {events:?}");
    };
    assert_eq!(id, "r1");
    h.finish(exec, "r1");
    let sent = messages(&mut h);
    assert!(
        matches!(sent.as_slice(), [Message::ExecuteResponse(r)] if r.request_id == "r1" && r.success),
        "{sent:?}"
    );
}

#[test]
fn a_stream_sends_application_heartbeats_and_no_phoenix_ones() {
    let mut h = open();
    h.tick(PHOENIX_INTERVAL);
    assert!(
        messages(&mut h).is_empty(),
        "no Phoenix heartbeat on a stream"
    );
    h.tick(APP_INTERVAL - PHOENIX_INTERVAL);
    let sent = messages(&mut h);
    assert!(
        matches!(sent.as_slice(), [Message::HeartbeatRequest(_)]),
        "{sent:?}"
    );
}

#[test]
fn a_silent_stream_is_declared_dead_at_its_idle_timeout() {
    let mut h = open();
    h.tick(IDLE_TIMEOUT - ms(1));
    assert_eq!(reconnect_reason(&h.events()), None);
    h.tick(ms(1));
    let events = h.events();
    assert!(
        reconnect_reason(&events).is_some_and(|w| w.starts_with("no inbound data")),
        "{events:?}"
    );
}

#[test]
fn a_message_while_the_stream_is_down_is_ignored() {
    let mut h = Harness::with_opts(stream_opts(), [spec("a")]);
    feed(&mut h, execute("r1", &arn_of("a")));
    assert!(h.events().is_empty());
    assert!(messages(&mut h).is_empty());
    h.conn.handle_connected(h.now());
    messages(&mut h);
    h.conn.handle_disconnected(h.now(), "test");
    h.events();
    feed(&mut h, execute("r2", &arn_of("a")));
    assert!(starts(&h.events()).is_empty());
}

#[test]
fn a_lost_stream_re_registers_when_it_opens_again() {
    let mut h = open();
    h.conn.handle_disconnected(h.now(), "test");
    assert_eq!(unregistered(&h.events()).len(), 1);
    h.conn.handle_connected(h.now());
    assert_eq!(registers(&messages(&mut h)), ["a"]);
}
