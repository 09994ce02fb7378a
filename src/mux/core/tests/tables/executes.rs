//! The executes table on its own: admission (start, queue, refuse), deadlines, freed
//! permits, and cancellation, with the lanes' counts and the deadlines checked after
//! every step.

use std::time::Instant;

use super::super::support::*;
use super::super::wire::execute_request;
use crate::mux::core::executes::{Admission, Ended, Executes, Start};
use crate::mux::core::timers::{Timer, Timers};
use crate::mux::core::{ExecId, Now};
use crate::mux::routing::HandleId;
use crate::proto::{stream_message::Message, ExecuteResponse};

/// A table with lane `1` for "a" (and lane `2` for "b"), `running` permits and
/// `queued` places each.
fn table(running: usize, queued: usize) -> (Executes, Timers, Clock) {
    let mut ex = Executes::default();
    for (h, instance) in [(1, "a"), (2, "b")] {
        let spec = spec(instance)
            .max_concurrent(running)
            .max_queued(queued)
            .build();
        ex.add(h, &spec);
    }
    (ex, Timers::default(), Clock::new())
}

fn arrive(ex: &mut Executes, timers: &mut Timers, now: Now, h: HandleId, id: &str) -> Admission {
    ex.arrive(timers, now, h, execute_request(id, ""), false)
        .expect("the lane exists")
}

/// The execute an admission started.
fn started(a: Admission) -> Start {
    match a {
        Admission::Start(s) => s,
        other => panic!("expected a start, got {other:?}"),
    }
}

/// The request id and error of an answer.
fn answered(m: &Message) -> (&str, &str) {
    match m {
        Message::ExecuteResponse(r) => (&r.request_id, &r.error),
        Message::InvokeResponse(r) => (&r.request_id, &r.error),
        other => panic!("not an answer: {other:?}"),
    }
}

fn response(request_id: &str) -> ExecuteResponse {
    ExecuteResponse {
        request_id: request_id.into(),
        success: true,
        ..Default::default()
    }
}

/// Pops the next due execute deadline at `at`.
fn due(timers: &mut Timers, at: Instant) -> ExecId {
    match timers.pop_due(at) {
        Some(Timer::Execute(exec)) => exec,
        other => panic!("expected an execute deadline, got {other:?}"),
    }
}

#[test]
fn an_execute_starts_within_the_permits_waits_beyond_them_and_is_refused_when_the_queue_is_full() {
    let (mut ex, mut timers, clock) = table(1, 1);
    let now = clock.now();
    let start = started(arrive(&mut ex, &mut timers, now, 1, "r1"));
    assert_eq!((start.handle, start.request.request_id.as_str()), (1, "r1"));
    assert!(matches!(
        arrive(&mut ex, &mut timers, now, 1, "r2"),
        Admission::Queued
    ));
    let Admission::Refused(answer) = arrive(&mut ex, &mut timers, now, 1, "r3") else {
        panic!("a full queue refuses");
    };
    let (id, error) = answered(&answer);
    assert!(id == "r3" && error.starts_with("overloaded: "), "{error}");
    assert_eq!(ex.lane(1), Some((1, 1)));
    assert_eq!((ex.len(), timers.len()), (2, 2), "a refusal holds nothing");
    assert!(matches!(
        arrive(&mut ex, &mut timers, now, 2, "b1"),
        Admission::Start(_)
    ));
}

#[test]
fn an_execute_for_a_registration_without_a_lane_is_not_admitted() {
    let (mut ex, mut timers, clock) = table(1, 0);
    let req = execute_request("r1", "");
    assert!(ex.arrive(&mut timers, clock.now(), 9, req, false).is_none());
    assert_eq!((ex.len(), timers.len()), (0, 0));
}

#[test]
fn a_finished_execute_is_answered_once_and_its_permit_starts_the_oldest_waiting_one() {
    let (mut ex, mut timers, clock) = table(1, 2);
    let now = clock.now();
    let first = started(arrive(&mut ex, &mut timers, now, 1, "r1")).exec;
    arrive(&mut ex, &mut timers, now, 1, "r2");
    arrive(&mut ex, &mut timers, now, 1, "r3");
    let Some(Ended {
        cancel: None,
        answer,
        next: Some(next),
    }) = ex.done(&mut timers, first, response("r1"))
    else {
        panic!("r1 ends and r2 starts");
    };
    assert_eq!(answered(&answer), ("r1", ""));
    assert_eq!(next.request.request_id, "r2");
    assert_eq!(ex.lane(1), Some((1, 1)));
    assert_eq!((ex.len(), timers.len()), (2, 2));
    assert!(ex.done(&mut timers, first, response("r1")).is_none());
}

#[test]
fn a_queued_execute_past_its_deadline_leaves_the_queue_and_is_answered_without_a_cancel() {
    let (mut ex, mut timers, clock) = table(1, 1);
    let now = clock.now();
    arrive(&mut ex, &mut timers, now, 1, "r1");
    let mut req = execute_request("r2", "");
    req.context.insert("timeout_ms".into(), "1000".into());
    ex.arrive(&mut timers, now, 1, req, false);
    let exec = due(&mut timers, now.instant + ms(1000));
    let Some(Ended {
        cancel: None,
        answer,
        next: None,
    }) = ex.timed_out(exec)
    else {
        panic!("a queued execute is neither cancelled nor replaced");
    };
    let (id, error) = answered(&answer);
    assert!(id == "r2" && error.starts_with("timeout: "), "{error}");
    assert_eq!(ex.lane(1), Some((1, 0)));
    assert_eq!((ex.len(), timers.len()), (1, 1));
}

#[test]
fn a_running_execute_past_its_deadline_is_cancelled_and_its_permit_starts_the_next() {
    let (mut ex, mut timers, clock) = table(1, 1);
    let now = clock.now();
    let first = started(arrive(&mut ex, &mut timers, now, 1, "r1")).exec;
    arrive(&mut ex, &mut timers, now, 1, "r2");
    assert_eq!(due(&mut timers, now.instant + EXECUTE_TIMEOUT), first);
    let Some(Ended {
        cancel: Some(cancelled),
        next: Some(next),
        ..
    }) = ex.timed_out(first)
    else {
        panic!("r1 is cancelled and r2 starts");
    };
    assert_eq!((cancelled, next.request.request_id.as_str()), (first, "r2"));
    assert_eq!(ex.lane(1), Some((1, 0)));
    assert!(ex.done(&mut timers, first, response("r1")).is_none());
}

#[test]
fn the_gateways_deadline_counts_only_when_it_is_shorter() {
    for (timeout_ms, deadline) in [
        ("1000", ms(1000)),
        ("600000", EXECUTE_TIMEOUT),
        ("0", EXECUTE_TIMEOUT),
        ("soon", EXECUTE_TIMEOUT),
    ] {
        let (mut ex, mut timers, clock) = table(1, 0);
        let mut req = execute_request("r1", "");
        req.context.insert("timeout_ms".into(), timeout_ms.into());
        ex.arrive(&mut timers, clock.now(), 1, req, false);
        assert_eq!(
            timers.next(),
            Some(clock.now().instant + deadline),
            "{timeout_ms}"
        );
    }
}

#[test]
fn an_invoke_delivered_as_an_execute_is_answered_as_an_invoke() {
    let (mut ex, mut timers, clock) = table(1, 0);
    let now = clock.now();
    let exec = match ex.arrive(&mut timers, now, 1, execute_request("i1", ""), true) {
        Some(Admission::Start(s)) => s.exec,
        other => panic!("{other:?}"),
    };
    let refused = ex.arrive(&mut timers, now, 1, execute_request("i2", ""), true);
    assert!(
        matches!(&refused, Some(Admission::Refused(m)) if matches!(&**m, Message::InvokeResponse(r) if r.request_id == "i2")),
        "{refused:?}"
    );
    let ended = ex.done(&mut timers, exec, response("i1")).expect("held");
    assert!(
        matches!(&ended.answer, Message::InvokeResponse(r) if r.request_id == "i1" && r.success),
        "{ended:?}"
    );
}

#[test]
fn clearing_cancels_the_running_drops_the_queued_and_keeps_the_lanes() {
    let (mut ex, mut timers, clock) = table(1, 1);
    let now = clock.now();
    let a = started(arrive(&mut ex, &mut timers, now, 1, "r1")).exec;
    arrive(&mut ex, &mut timers, now, 1, "r2");
    let b = started(arrive(&mut ex, &mut timers, now, 2, "b1")).exec;
    let mut cancelled = ex.clear(&mut timers);
    cancelled.sort();
    assert_eq!(cancelled, [a, b]);
    assert_eq!((ex.len(), timers.len()), (0, 0));
    assert_eq!((ex.lane(1), ex.lane(2)), (Some((0, 0)), Some((0, 0))));
    assert!(ex.done(&mut timers, a, response("r1")).is_none());
    assert!(matches!(
        arrive(&mut ex, &mut timers, now, 1, "r3"),
        Admission::Start(_)
    ));
}

#[test]
fn removing_a_lane_cancels_only_its_executes() {
    let (mut ex, mut timers, clock) = table(1, 1);
    let now = clock.now();
    let a = started(arrive(&mut ex, &mut timers, now, 1, "r1")).exec;
    arrive(&mut ex, &mut timers, now, 1, "r2");
    started(arrive(&mut ex, &mut timers, now, 2, "b1"));
    assert_eq!(ex.remove(&mut timers, 1), [a]);
    assert_eq!((ex.lane(1), ex.lane(2)), (None, Some((1, 0))));
    assert_eq!((ex.len(), timers.len()), (1, 1));
    let req = execute_request("r3", "");
    assert!(ex.arrive(&mut timers, now, 1, req, false).is_none());
}

#[test]
fn execute_ids_are_never_reused() {
    let (mut ex, mut timers, clock) = table(2, 0);
    let now = clock.now();
    let first = started(arrive(&mut ex, &mut timers, now, 1, "r1")).exec;
    ex.done(&mut timers, first, response("r1"));
    let second = started(arrive(&mut ex, &mut timers, now, 1, "r2")).exec;
    assert_ne!(first, second);
}
