//! The lobby join and the liveness rules: Phoenix heartbeats, application
//! heartbeats, the idle watchdog.

use std::time::Duration;

use super::support::*;
use super::wire::*;
use crate::mux::core::Incoming;
use crate::phoenix::{LOBBY_TOPIC, PHOENIX_TOPIC};
use crate::proto::{stream_message::Message, HeartbeatRequest, HeartbeatResponse};

/// Options whose idle watchdog fires long before any heartbeat is due.
fn short_idle() -> crate::mux::core::CoreOptions {
    let mut o = opts();
    o.heartbeat.inbound_idle_timeout = Duration::from_secs(10);
    o
}

#[test]
fn connecting_sends_a_join_on_the_lobby() {
    let mut h = Harness::new([spec("a")]);
    h.conn.handle_connected(h.now());
    let frames = h.frames();
    assert!(
        matches!(frames.as_slice(), [j] if j.topic == LOBBY_TOPIC && j.event == "phx_join" && j.join_ref.is_some() && j.join_ref == j.msg_ref),
        "{frames:?}"
    );
}

#[test]
fn an_accepted_join_sends_a_register_for_every_registration() {
    let mut h = Harness::new([spec("a"), spec("b")]);
    h.connect();
    h.reply_join("ok");
    assert_eq!(registers(&h.sent()), ["a", "b"]);
}

#[test]
fn nothing_is_registered_before_the_join_reply() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    assert!(h.frames().is_empty());
}

#[test]
fn a_refused_join_asks_for_a_reconnect() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    h.reply_join("error");
    let events = h.events();
    assert!(
        reconnect_reason(&events).is_some_and(|w| w.starts_with("join refused")),
        "{events:?}"
    );
}

#[test]
fn the_join_deadline_is_the_next_timeout_after_connecting() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    assert_eq!(h.conn.poll_timeout(), Some(h.in_(JOIN_TIMEOUT)));
}

#[test]
fn no_join_reply_by_the_join_deadline_asks_for_a_reconnect() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    h.tick(JOIN_TIMEOUT - ms(1));
    assert!(reconnect_reason(&h.events()).is_none());
    h.tick(ms(1));
    let events = h.events();
    assert!(
        reconnect_reason(&events).is_some_and(|w| w.contains("no join reply")),
        "{events:?}"
    );
}

#[test]
fn a_phoenix_heartbeat_is_sent_at_the_phoenix_interval() {
    let mut h = joined([spec("a")]);
    h.tick(PHOENIX_INTERVAL - ms(1));
    assert!(h.frames().is_empty());
    h.tick(ms(1));
    let frames = h.frames();
    assert!(
        matches!(frames.as_slice(), [hb] if hb.topic == PHOENIX_TOPIC && hb.event == "heartbeat" && hb.join_ref.is_none()),
        "{frames:?}"
    );
}

#[test]
fn a_phoenix_heartbeat_unanswered_when_the_next_is_due_asks_for_a_reconnect() {
    let mut h = joined([spec("a")]);
    h.tick(PHOENIX_INTERVAL);
    h.frames();
    h.tick(PHOENIX_INTERVAL);
    let events = h.events();
    assert!(
        reconnect_reason(&events).is_some_and(|w| w.contains("Phoenix heartbeat")),
        "{events:?}"
    );
}

#[test]
fn an_answered_phoenix_heartbeat_is_followed_by_the_next_one() {
    let mut h = joined([spec("a")]);
    h.tick(PHOENIX_INTERVAL);
    let hb = h.frames().remove(0);
    h.text(&heartbeat_reply(&hb));
    h.tick(PHOENIX_INTERVAL);
    let frames = h.frames();
    assert_eq!(
        frames.iter().filter(|f| f.event == "heartbeat").count(),
        1,
        "{frames:?}"
    );
    assert!(reconnect_reason(&h.events()).is_none());
}

#[test]
fn an_app_heartbeat_request_is_sent_at_the_app_interval_while_joined() {
    let mut h = joined([spec("a")]);
    h.tick(APP_INTERVAL - ms(1));
    assert!(h.sent().is_empty(), "only the Phoenix heartbeat so far");
    h.tick(ms(1));
    let now_ms = h.now().unix_ms;
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::HeartbeatRequest(r)] if r.gateway_id == TENANT && r.timestamp_ms == now_ms),
        "{sent:?}"
    );
}

#[test]
fn no_app_heartbeat_is_sent_before_the_join_completes() {
    let mut o = opts();
    o.join_timeout = Duration::from_secs(3600);
    let mut h = Harness::with_opts(o, [spec("a")]);
    h.connect();
    h.tick(APP_INTERVAL);
    assert!(h.sent().is_empty());
}

#[test]
fn no_inbound_data_for_the_idle_timeout_asks_for_a_reconnect() {
    let mut h = Harness::with_opts(short_idle(), [spec("a")]);
    h.join_and_register();
    h.tick(Duration::from_secs(10) - ms(1));
    assert!(reconnect_reason(&h.events()).is_none());
    h.tick(ms(1));
    let events = h.events();
    assert!(
        reconnect_reason(&events).is_some_and(|w| w.contains("no inbound data")),
        "{events:?}"
    );
}

#[test]
fn a_control_frame_postpones_the_idle_watchdog() {
    let mut h = Harness::with_opts(short_idle(), [spec("a")]);
    h.join_and_register();
    h.tick(Duration::from_secs(6));
    h.conn.handle_frame(h.now(), Incoming::Activity);
    h.tick(Duration::from_secs(6));
    assert!(reconnect_reason(&h.events()).is_none());
}

#[test]
fn an_inbound_heartbeat_request_is_answered_with_its_timestamp() {
    let mut h = joined([spec("a")]);
    h.deliver(Message::HeartbeatRequest(HeartbeatRequest {
        gateway_id: "gw".into(),
        timestamp_ms: 1234,
    }));
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::HeartbeatResponse(r)] if r.timestamp_ms == 1234 && !r.should_reconnect),
        "{sent:?}"
    );
}

fn heartbeat_response(should_reconnect: bool) -> Message {
    Message::HeartbeatResponse(HeartbeatResponse {
        gateway_id: "gw".into(),
        timestamp_ms: UNIX_START_MS,
        should_reconnect,
    })
}

#[test]
fn a_heartbeat_response_with_should_reconnect_asks_for_a_reconnect() {
    let mut h = joined([spec("a")]);
    h.deliver(heartbeat_response(true));
    assert!(reconnect_reason(&h.events()).is_some());
}

#[test]
fn a_plain_heartbeat_response_asks_for_nothing() {
    let mut h = joined([spec("a")]);
    h.deliver(heartbeat_response(false));
    assert!(h.events().is_empty());
}
