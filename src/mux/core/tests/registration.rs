//! Register phases (success, refusal, timeout, retry, session token) and the routing
//! rules of PROTOCOL.md §5 as the core applies them.

use super::support::*;
use super::wire::*;
use crate::mux::core::Event;
use crate::proto::stream_message::Message;

/// A joined channel whose registers were sent but not answered.
fn registering(specs: impl IntoIterator<Item = Spec>) -> Harness {
    let mut h = Harness::new(specs);
    h.connect();
    h.reply_join("ok");
    h.frames();
    h
}

/// The session token of the single register request among `sent`.
fn register_token(sent: &[Message]) -> &str {
    match sent {
        [Message::RegisterRequest(r)] => &r.session_token,
        other => panic!("expected one register request, got {other:?}"),
    }
}

/// Disconnects, reconnects and completes the join; the register is left unread.
fn reconnect(h: &mut Harness) {
    h.conn.handle_disconnected(h.now(), "test");
    h.events();
    h.connect();
    h.reply_join("ok");
}

#[test]
fn a_successful_register_reports_registered_with_its_arn() {
    let mut h = registering([spec("a")]);
    h.deliver(registered("a"));
    let a = h.handles[0];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::Registered { handle, arn: got, .. }] if *handle == a && *got == arn("a")),
        "{events:?}"
    );
}

#[test]
fn the_first_register_carries_no_session_token() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    h.reply_join("ok");
    assert_eq!(register_token(&h.sent()), "");
}

#[test]
fn the_session_token_is_reused_on_the_register_after_a_reconnect() {
    let mut h = joined([spec("a")]);
    reconnect(&mut h);
    assert_eq!(register_token(&h.sent()), session_token("a"));
}

#[test]
fn a_refused_register_reports_register_failed() {
    let mut h = registering([spec("a")]);
    h.deliver(refused("a"));
    let a = h.handles[0];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::RegisterFailed { handle, error }] if *handle == a && error == "unauthorized"),
        "{events:?}"
    );
}

#[test]
fn a_refused_register_is_retried_after_the_backoff() {
    let mut h = registering([spec("a")]);
    h.deliver(refused("a"));
    h.tick(RETRY_INITIAL - ms(1));
    assert!(h.sent().is_empty());
    h.tick(ms(1));
    assert_eq!(registers(&h.sent()), ["a"]);
}

#[test]
fn the_retry_of_a_refused_register_is_the_cores_next_deadline() {
    let mut h = registering([spec("a")]);
    h.deliver(refused("a"));
    assert_eq!(h.conn.poll_timeout(), Some(h.in_(RETRY_INITIAL)));
    h.fire_next();
    assert_eq!(registers(&h.sent()), ["a"]);
}

#[test]
fn a_refused_register_clears_the_session_token() {
    let mut h = joined([spec("a")]);
    reconnect(&mut h);
    h.sent();
    h.deliver(refused("a"));
    h.tick(RETRY_INITIAL);
    assert_eq!(register_token(&h.sent()), "");
}

#[test]
fn an_unanswered_register_fails_at_the_register_timeout() {
    let mut h = registering([spec("a")]);
    h.tick(REGISTER_TIMEOUT - ms(1));
    assert!(h.events().is_empty());
    h.tick(ms(1));
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::RegisterFailed { .. }]),
        "{events:?}"
    );
}

#[test]
fn a_timed_out_register_is_retried_after_the_backoff() {
    let mut h = registering([spec("a")]);
    h.tick(REGISTER_TIMEOUT);
    h.tick(RETRY_INITIAL - ms(1));
    assert!(h.sent().is_empty());
    h.tick(ms(1));
    assert_eq!(registers(&h.sent()), ["a"]);
}

#[test]
fn registered_since_connect_is_false_until_a_register_succeeds() {
    let mut h = registering([spec("a")]);
    assert!(!h.conn.registered_since_connect());
    h.deliver(registered("a"));
    assert!(h.conn.registered_since_connect());
}

#[test]
fn registered_since_connect_starts_over_on_a_new_socket() {
    let mut h = joined([spec("a")]);
    reconnect(&mut h);
    assert!(!h.conn.registered_since_connect());
}

#[test]
fn a_refused_register_does_not_count_as_registered_since_connect() {
    let mut h = registering([spec("a")]);
    h.deliver(refused("a"));
    assert!(!h.conn.registered_since_connect());
}

#[test]
fn a_register_response_goes_to_the_registration_its_arn_names() {
    let mut h = registering([spec("a"), spec("b")]);
    h.deliver(registered("b"));
    let b = h.handles[1];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::Registered { handle, .. }] if *handle == b),
        "{events:?}"
    );
}

#[test]
fn an_execute_for_an_unknown_arn_is_never_given_to_the_only_registration() {
    let mut h = joined([spec("a")]);
    h.deliver(execute("r1", &arn("elsewhere")));
    assert!(h.events().is_empty());
}

#[test]
fn an_execute_for_an_unknown_arn_is_counted_as_unknown_arn() {
    let mut h = joined([spec("a")]);
    h.deliver(execute("r1", &arn("elsewhere")));
    assert_eq!(h.dropped("unknown_arn"), 1);
}

#[test]
fn an_execute_without_an_arn_goes_to_the_only_registration() {
    let mut h = joined([spec("a")]);
    h.deliver(execute("r1", ""));
    let a = h.handles[0];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::StartExecute { handle, .. }] if *handle == a),
        "{events:?}"
    );
}

#[test]
fn an_execute_goes_to_the_registration_its_arn_names() {
    let mut h = joined([spec("a"), spec("b")]);
    h.deliver(execute("r1", &arn("b")));
    let b = h.handles[1];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::StartExecute { handle, .. }] if *handle == b),
        "{events:?}"
    );
}
