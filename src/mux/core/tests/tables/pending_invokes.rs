//! The pending-invoke table on its own: every way an invoke leaves the routing
//! table's pending map takes its deadline with it and hands its waiter one result.

use std::time::Duration;

use super::super::support::*;
use super::super::wire::invoke_spec;
use crate::error::Error;
use crate::identity::RegistrationKey;
use crate::mux::core::pending_invokes::{self, Opened, Routes};
use crate::mux::core::timers::{Timer, Timers};
use crate::mux::core::{Event, InvokeSpec};
use crate::mux::routing::{Route, RoutingTable};
use crate::proto::{stream_message::Message, InvokeCapabilityResponse, StreamMessage};

/// Routes with registrations `1` ("a") and `2` ("b") admitted, no deadlines, a clock.
fn table() -> (Routes<u32>, Timers, Clock) {
    let mut routes = RoutingTable::new(TENANT, 8);
    for (h, instance) in [(1, "a"), (2, "b")] {
        routes
            .admit(h, RegistrationKey::new(TENANT, TYPE, instance))
            .expect("admitted");
    }
    (routes, Timers::default(), Clock::new())
}

/// Opens `spec` from `h` with `waiter`; it must await its answer.
fn open(
    routes: &mut Routes<u32>,
    timers: &mut Timers,
    clock: &Clock,
    h: u64,
    spec: InvokeSpec,
    waiter: u32,
) {
    match pending_invokes::open(routes, timers, clock.now(), h, spec, waiter) {
        Ok(Opened::Awaiting(_)) => {}
        Ok(Opened::Sent(..)) => panic!("not fire-and-forget"),
        Err((_, e)) => panic!("refused: {e}"),
    }
}

/// The waiter and error of a failed invoke.
fn failure(e: Event<u32>) -> (u32, Error) {
    match e {
        Event::InvokeDone {
            waiter,
            result: Err(e),
        } => (waiter, e),
        other => panic!("expected a failed invoke, got {other:?}"),
    }
}

#[test]
fn an_invoke_is_pending_with_one_deadline_until_its_answer_takes_both() {
    let (mut routes, mut timers, clock) = table();
    let opened = pending_invokes::open(
        &mut routes,
        &mut timers,
        clock.now(),
        1,
        invoke_spec("i1"),
        7,
    );
    assert!(
        matches!(&opened, Ok(Opened::Awaiting(r)) if r.request_id == "i1" && r.timeout_ms == 5000),
        "{opened:?}"
    );
    assert_eq!((routes.pending_len(), timers.len()), (1, 1));
    assert_eq!(
        timers.next(),
        Some(clock.now().instant + Duration::from_secs(5))
    );
    let answer = StreamMessage {
        message: Some(Message::InvokeResponse(InvokeCapabilityResponse {
            request_id: "i1".into(),
            success: true,
            ..Default::default()
        })),
    };
    let Route::Response(1, pending) = routes.route(&answer) else {
        panic!("the answer is routed to its invoke");
    };
    let Some(Message::InvokeResponse(resp)) = answer.message else {
        unreachable!()
    };
    let done = pending.answered(&mut timers, resp);
    assert!(
        matches!(done, Event::InvokeDone { waiter: 7, result: Ok(Some(ref r)) } if r.request_id == "i1"),
        "{done:?}"
    );
    assert_eq!((routes.pending_len(), timers.len()), (0, 0));
}

#[test]
fn a_fire_and_forget_invoke_is_done_at_once_and_nothing_is_pending() {
    let (mut routes, mut timers, clock) = table();
    let spec = InvokeSpec {
        fire_and_forget: true,
        ..invoke_spec("f1")
    };
    let opened = pending_invokes::open(&mut routes, &mut timers, clock.now(), 1, spec, 7);
    assert!(
        matches!(&opened, Ok(Opened::Sent(r, Event::InvokeDone { waiter: 7, result: Ok(None) })) if r.fire_and_forget),
        "{opened:?}"
    );
    assert_eq!((routes.pending_len(), timers.len()), (0, 0));
}

#[test]
fn a_request_id_already_pending_hands_the_waiter_back_and_arms_nothing() {
    let (mut routes, mut timers, clock) = table();
    open(&mut routes, &mut timers, &clock, 1, invoke_spec("i1"), 7);
    let refused = pending_invokes::open(
        &mut routes,
        &mut timers,
        clock.now(),
        2,
        invoke_spec("i1"),
        8,
    );
    assert!(matches!(refused, Err((8, Error::Config(_)))), "{refused:?}");
    assert_eq!((routes.pending_len(), timers.len()), (1, 1));
}

#[test]
fn a_cancelled_invoke_leaves_no_deadline() {
    let (mut routes, mut timers, clock) = table();
    open(&mut routes, &mut timers, &clock, 1, invoke_spec("i1"), 7);
    pending_invokes::cancel(&mut routes, &mut timers, "i1");
    assert_eq!((routes.pending_len(), timers.len()), (0, 0));
    pending_invokes::cancel(&mut routes, &mut timers, "i1");
    assert!(pending_invokes::timed_out(&mut routes, "i1").is_none());
}

#[test]
fn an_invoke_past_its_deadline_fails_with_a_timeout_once() {
    let (mut routes, mut timers, clock) = table();
    open(&mut routes, &mut timers, &clock, 1, invoke_spec("i1"), 7);
    let at = clock.now().instant + Duration::from_secs(5);
    assert_eq!(timers.pop_due(at), Some(Timer::Invoke("i1".into())));
    let done = pending_invokes::timed_out(&mut routes, "i1").expect("pending");
    let (waiter, error) = failure(done);
    assert!(
        waiter == 7
            && matches!(error, Error::Timeout { after, .. } if after == Duration::from_secs(5)),
        "{error:?}"
    );
    assert_eq!(routes.pending_len(), 0);
    assert!(pending_invokes::timed_out(&mut routes, "i1").is_none());
}

#[test]
fn a_disconnect_fails_every_pending_invoke_and_clears_their_deadlines() {
    let (mut routes, mut timers, clock) = table();
    open(&mut routes, &mut timers, &clock, 1, invoke_spec("i1"), 7);
    open(&mut routes, &mut timers, &clock, 2, invoke_spec("i2"), 8);
    let failed: Vec<_> = pending_invokes::fail_all(&mut routes, &mut timers)
        .map(failure)
        .collect();
    assert!(
        matches!(
            failed.as_slice(),
            [
                (7, Error::ConnectionClosed(_)),
                (8, Error::ConnectionClosed(_))
            ]
        ),
        "{failed:?}"
    );
    assert_eq!((routes.pending_len(), timers.len()), (0, 0));
}

#[test]
fn a_removed_owner_fails_only_its_invokes_with_shutdown() {
    let (mut routes, mut timers, clock) = table();
    open(&mut routes, &mut timers, &clock, 1, invoke_spec("i1"), 7);
    open(&mut routes, &mut timers, &clock, 2, invoke_spec("i2"), 8);
    let orphans = routes.remove(1);
    let failed: Vec<_> = pending_invokes::fail_orphans(orphans, &mut timers)
        .map(failure)
        .collect();
    assert!(
        matches!(failed.as_slice(), [(7, Error::Shutdown)]),
        "{failed:?}"
    );
    assert_eq!((routes.pending_len(), timers.len()), (1, 1));
}
