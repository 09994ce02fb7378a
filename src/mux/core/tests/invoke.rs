//! Invokes: the request, its four exits (answer, deadline, cancellation,
//! disconnect), and the refusals.

use std::time::Duration;

use super::support::*;
use super::wire::*;
use crate::error::Error;
use crate::mux::core::{Event, InvokeSpec};
use crate::proto::stream_message::Message;

/// The waiter the tests hand to invokes.
const WAITER: u32 = 7;

/// Sends `spec` from registration "a"; it must be accepted.
fn invoke(h: &mut Harness, spec: InvokeSpec, waiter: u32) {
    let (now, a) = (h.now(), h.handles[0]);
    if let Err((_, e)) = h.conn.invoke(now, a, spec, waiter) {
        panic!("invoke refused: {e}");
    }
}

/// A joined "a" with invoke "i1" sent and its transmit read.
fn pending() -> Harness {
    let mut h = joined([spec("a")]);
    invoke(&mut h, invoke_spec("i1"), WAITER);
    h.sent();
    h
}

/// The error an invoke from "a" is refused with at once.
fn refusal(h: &mut Harness, spec: InvokeSpec, waiter: u32) -> (u32, Error) {
    let (now, a) = (h.now(), h.handles[0]);
    h.conn
        .invoke(now, a, spec, waiter)
        .expect_err("the invoke is refused")
}

fn fire_and_forget() -> InvokeSpec {
    InvokeSpec {
        fire_and_forget: true,
        ..invoke_spec("f1")
    }
}

#[test]
fn an_invoke_sends_an_invoke_request_with_the_specs_id_target_and_timeout() {
    let mut h = joined([spec("a")]);
    invoke(&mut h, invoke_spec("i1"), WAITER);
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::InvokeRequest(r)]
            if r.request_id == "i1" && r.target_address == "t.other.1" && r.capability_id == "cap" && r.timeout_ms == 5000 && !r.fire_and_forget),
        "{sent:?}"
    );
}

#[test]
fn an_invoke_response_completes_the_invoke() {
    let mut h = pending();
    h.deliver(invoke_response("i1"));
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::InvokeDone { waiter: WAITER, result: Ok(Some(r)) }] if r.request_id == "i1" && r.success),
        "{events:?}"
    );
}

#[test]
fn an_answered_invoke_leaves_nothing_pending() {
    let mut h = pending();
    h.deliver(invoke_response("i1"));
    assert_eq!(h.conn.routes.pending_len(), 0);
}

#[test]
fn an_answered_invoke_never_times_out() {
    let mut h = pending();
    h.deliver(invoke_response("i1"));
    h.events();
    h.tick(Duration::from_secs(5));
    assert!(h.events().is_empty());
}

#[test]
fn an_unanswered_invoke_fails_with_a_timeout_at_its_deadline() {
    let mut h = pending();
    h.tick(Duration::from_secs(5) - ms(1));
    assert!(h.events().is_empty());
    h.tick(ms(1));
    let events = h.events();
    assert!(
        matches!(
            events.as_slice(),
            [Event::InvokeDone {
                waiter: WAITER,
                result: Err(Error::Timeout { .. })
            }]
        ),
        "{events:?}"
    );
}

#[test]
fn a_response_after_the_invoke_timed_out_is_dropped_as_unknown_request_id() {
    let mut h = pending();
    h.tick(Duration::from_secs(5));
    h.events();
    h.deliver(invoke_response("i1"));
    assert!(h.events().is_empty());
    assert_eq!(h.dropped("unknown_request_id"), 1);
}

#[test]
fn a_cancelled_invoke_leaves_nothing_pending() {
    let mut h = pending();
    h.conn.cancel_invoke("i1");
    assert_eq!(h.conn.routes.pending_len(), 0);
}

#[test]
fn a_response_to_a_cancelled_invoke_is_dropped_as_unknown_request_id() {
    let mut h = pending();
    h.conn.cancel_invoke("i1");
    h.deliver(invoke_response("i1"));
    assert!(h.events().is_empty());
    assert_eq!(h.dropped("unknown_request_id"), 1);
}

#[test]
fn a_cancelled_invoke_never_times_out() {
    let mut h = pending();
    h.conn.cancel_invoke("i1");
    h.tick(Duration::from_secs(5));
    assert!(h.events().is_empty());
}

#[test]
fn a_disconnect_fails_every_pending_invoke_at_once_with_a_recoverable_error() {
    let mut h = pending();
    invoke(&mut h, invoke_spec("i2"), 8);
    h.conn.handle_disconnected(h.now(), "test");
    let mut failed: Vec<u32> = h
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::InvokeDone {
                waiter,
                result: Err(e @ Error::ConnectionClosed(_)),
            } if e.is_recoverable() => Some(waiter),
            _ => None,
        })
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, [WAITER, 8]);
}

#[test]
fn a_disconnect_leaves_nothing_pending() {
    let mut h = pending();
    h.conn.handle_disconnected(h.now(), "test");
    assert_eq!(h.conn.routes.pending_len(), 0);
}

#[test]
fn an_invoke_before_the_registration_is_registered_fails_at_once() {
    let mut h = Harness::new([spec("a")]);
    h.connect();
    h.reply_join("ok");
    let refused = refusal(&mut h, invoke_spec("i1"), WAITER);
    assert!(
        matches!(refused, (WAITER, Error::ConnectionClosed(_))),
        "{refused:?}"
    );
}

#[test]
fn an_invoke_while_the_link_is_down_fails_at_once() {
    let mut h = joined([spec("a")]);
    h.conn.handle_disconnected(h.now(), "test");
    let refused = refusal(&mut h, invoke_spec("i1"), WAITER);
    assert!(
        matches!(refused, (WAITER, Error::ConnectionClosed(_))),
        "{refused:?}"
    );
}

#[test]
fn a_fire_and_forget_invoke_is_transmitted() {
    let mut h = joined([spec("a")]);
    invoke(&mut h, fire_and_forget(), WAITER);
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::InvokeRequest(r)] if r.request_id == "f1" && r.fire_and_forget),
        "{sent:?}"
    );
}

#[test]
fn a_fire_and_forget_invoke_completes_at_once_with_no_response() {
    let mut h = joined([spec("a")]);
    invoke(&mut h, fire_and_forget(), WAITER);
    let events = h.events();
    assert!(
        matches!(
            events.as_slice(),
            [Event::InvokeDone {
                waiter: WAITER,
                result: Ok(None)
            }]
        ),
        "{events:?}"
    );
}

#[test]
fn a_duplicate_request_id_is_refused_with_its_waiter_handed_back() {
    let mut h = pending();
    let refused = refusal(&mut h, invoke_spec("i1"), 8);
    assert!(matches!(refused, (8, Error::Config(_))), "{refused:?}");
}

#[test]
fn a_refused_duplicate_leaves_the_first_invoke_pending() {
    let mut h = pending();
    refusal(&mut h, invoke_spec("i1"), 8);
    h.deliver(invoke_response("i1"));
    let events = h.events();
    assert!(
        matches!(
            events.as_slice(),
            [Event::InvokeDone {
                waiter: WAITER,
                result: Ok(Some(_))
            }]
        ),
        "{events:?}"
    );
}

#[test]
fn an_execute_response_under_an_invokes_id_fails_the_invoke_with_a_protocol_error() {
    let mut h = pending();
    h.deliver(Message::ExecuteResponse(crate::proto::ExecuteResponse {
        request_id: "i1".into(),
        success: true,
        ..Default::default()
    }));
    let events = h.events();
    assert!(
        matches!(
            events.as_slice(),
            [Event::InvokeDone {
                waiter: WAITER,
                result: Err(Error::Protocol(_))
            }]
        ),
        "{events:?}"
    );
    assert_eq!(h.conn.routes.pending_len(), 0);
}
