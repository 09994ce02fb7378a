//! Removing a registration: its executes, its invokes, its ARN, the socket.

use super::support::*;
use super::wire::*;
use crate::error::Error;
use crate::mux::core::Event;

/// A joined core with "a" and "b"; returns "a"'s handle.
fn two() -> (Harness, u64) {
    let h = joined([spec("a"), spec("b")]);
    let a = h.handles[0];
    (h, a)
}

fn remove(h: &mut Harness, handle: u64) {
    let now = h.now();
    assert!(
        h.conn.remove(now, handle).is_some(),
        "handle {handle} known"
    );
}

#[test]
fn removing_a_registration_cancels_its_running_executes() {
    let (mut h, a) = two();
    h.deliver(execute("r1", &arn("a")));
    let exec = starts(&h.events())[0].0;
    remove(&mut h, a);
    assert_eq!(cancels(&h.events()), [exec]);
}

#[test]
fn a_removed_registrations_executes_are_never_answered() {
    let (mut h, a) = two();
    h.deliver(execute("r1", &arn("a")));
    let exec = starts(&h.events())[0].0;
    remove(&mut h, a);
    h.finish(exec, "r1");
    assert!(h.frames().is_empty());
}

#[test]
fn removing_a_registration_leaves_the_others_executes_running() {
    let (mut h, a) = two();
    h.deliver(execute("r1", &arn("b")));
    h.events();
    remove(&mut h, a);
    assert!(cancels(&h.events()).is_empty());
}

#[test]
fn removing_a_registration_fails_its_pending_invokes_with_shutdown() {
    let (mut h, a) = two();
    let now = h.now();
    assert!(h.conn.invoke(now, a, invoke_spec("i1"), 7).is_ok());
    remove(&mut h, a);
    let events = h.events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::InvokeDone {
                waiter: 7,
                result: Err(Error::Shutdown)
            }
        )),
        "{events:?}"
    );
}

#[test]
fn an_execute_for_a_removed_registrations_arn_is_dropped_as_unknown_arn() {
    let (mut h, a) = two();
    remove(&mut h, a);
    h.deliver(execute("r1", &arn("a")));
    assert_eq!(h.dropped("unknown_arn"), 1);
}

#[test]
fn an_execute_for_a_removed_registrations_arn_is_never_given_to_a_survivor() {
    let (mut h, a) = two();
    remove(&mut h, a);
    h.events();
    h.deliver(execute("r1", &arn("a")));
    assert!(h.events().is_empty());
}

#[test]
fn removing_the_last_registration_asks_to_close_the_socket() {
    let mut h = joined([spec("a")]);
    let a = h.handles[0];
    remove(&mut h, a);
    assert!(h.events().iter().any(|e| matches!(e, Event::Close)));
}

#[test]
fn removing_one_of_two_registrations_keeps_the_socket() {
    let (mut h, a) = two();
    remove(&mut h, a);
    assert!(!h.events().iter().any(|e| matches!(e, Event::Close)));
}
