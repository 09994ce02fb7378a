//! Execute admission: permits, the wait queue, overload, deadlines, and exactly one
//! answer per execute.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::support::*;
use super::wire::*;
use crate::mux::core::ExecId;
use crate::proto::{stream_message::Message, InvokeCapabilityRequest};

/// A joined registration "a" with `running` permits and room for `queued` waiting
/// executes.
fn with_permits(running: usize, queued: usize) -> Harness {
    joined([spec("a").max_concurrent(running).max_queued(queued)])
}

/// Delivers an execute for "a" and returns its id; it must start at once.
fn start(h: &mut Harness, request_id: &str) -> ExecId {
    h.deliver(execute(request_id, &arn("a")));
    match starts(&h.events()).as_slice() {
        [(exec, id)] if id == request_id => *exec,
        other => panic!("expected {request_id} to start, got {other:?}"),
    }
}

/// The single execute response among `sent`: its request id and error.
fn answer(sent: &[Message]) -> (&str, &str) {
    match sent {
        [Message::ExecuteResponse(r)] => (&r.request_id, &r.error),
        other => panic!("expected one execute response, got {other:?}"),
    }
}

/// An execute for "a" whose gateway deadline is `ms` milliseconds.
fn execute_within(request_id: &str, ms: u64) -> Message {
    let mut req = execute_request(request_id, &arn("a"));
    req.context.insert("timeout_ms".into(), ms.to_string());
    Message::ExecuteRequest(req)
}

#[test]
fn executes_under_max_concurrent_start_at_once() {
    let mut h = with_permits(2, 0);
    h.deliver(execute("r1", &arn("a")));
    h.deliver(execute("r2", &arn("a")));
    assert_eq!(started(&h.events()), ["r1", "r2"]);
}

#[test]
fn an_execute_beyond_max_concurrent_waits_in_the_queue() {
    let mut h = with_permits(1, 1);
    start(&mut h, "r1");
    h.deliver(execute("r2", &arn("a")));
    assert!(h.events().is_empty());
    assert!(h.sent().is_empty(), "a queued execute is not answered");
}

#[test]
fn a_finished_execute_is_answered_with_its_request_id() {
    let mut h = with_permits(1, 0);
    let exec = start(&mut h, "r1");
    h.finish(exec, "r1");
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::ExecuteResponse(r)] if r.request_id == "r1" && r.success && r.payload.as_ref() == b"done"),
        "{sent:?}"
    );
}

#[test]
fn a_finished_execute_starts_the_oldest_queued_one() {
    let mut h = with_permits(1, 2);
    let exec = start(&mut h, "r1");
    h.deliver(execute("r2", &arn("a")));
    h.deliver(execute("r3", &arn("a")));
    h.finish(exec, "r1");
    assert_eq!(started(&h.events()), ["r2"]);
}

#[test]
fn with_the_queue_full_an_execute_is_answered_overloaded_at_once() {
    let mut h = with_permits(1, 0);
    start(&mut h, "r1");
    h.deliver(execute("r2", &arn("a")));
    let sent = h.sent();
    let (id, error) = answer(&sent);
    assert_eq!(id, "r2");
    assert!(error.starts_with("overloaded:"), "{error}");
}

#[test]
fn an_execute_refused_as_overloaded_is_counted() {
    let s = spec("a");
    let counters = s.counters();
    let mut h = joined([s]);
    start(&mut h, "r1");
    h.deliver(execute("r2", &arn("a")));
    assert_eq!(counters.requests_rejected_overloaded.load(Relaxed), 1);
}

#[test]
fn a_running_execute_past_execute_timeout_is_cancelled() {
    let mut h = with_permits(1, 0);
    let exec = start(&mut h, "r1");
    h.tick(EXECUTE_TIMEOUT - ms(1));
    assert!(cancels(&h.events()).is_empty());
    h.tick(ms(1));
    assert_eq!(cancels(&h.events()), [exec]);
}

#[test]
fn a_running_execute_past_execute_timeout_is_answered_with_a_timeout_error() {
    let mut h = with_permits(1, 0);
    start(&mut h, "r1");
    h.tick(EXECUTE_TIMEOUT);
    let sent = h.sent();
    let (id, error) = answer(&sent);
    assert_eq!(id, "r1");
    assert!(error.starts_with("timeout:"), "{error}");
}

#[test]
fn a_timed_out_execute_frees_its_permit_for_the_queued_one() {
    let mut h = with_permits(1, 1);
    start(&mut h, "r1");
    h.tick(Duration::from_secs(1));
    h.deliver(execute("r2", &arn("a")));
    h.tick(EXECUTE_TIMEOUT - Duration::from_secs(1));
    assert_eq!(started(&h.events()), ["r2"]);
}

#[test]
fn the_gateways_shorter_timeout_ms_decides_the_deadline() {
    let mut h = with_permits(1, 0);
    h.deliver(execute_within("r1", 2000));
    let exec = starts(&h.events())[0].0;
    h.tick(ms(1999));
    assert!(cancels(&h.events()).is_empty());
    h.tick(ms(1));
    assert_eq!(cancels(&h.events()), [exec]);
}

#[test]
fn a_longer_timeout_ms_does_not_extend_execute_timeout() {
    let mut h = with_permits(1, 0);
    h.deliver(execute_within("r1", 3_600_000));
    let exec = starts(&h.events())[0].0;
    h.tick(EXECUTE_TIMEOUT);
    assert_eq!(cancels(&h.events()), [exec]);
}

#[test]
fn a_queued_execute_times_out_in_the_queue() {
    let mut h = with_permits(1, 1);
    start(&mut h, "r1");
    h.deliver(execute_within("r2", 2000));
    h.tick(ms(2000));
    let sent = h.sent();
    let (id, error) = answer(&sent);
    assert_eq!(id, "r2");
    assert!(error.starts_with("timeout:"), "{error}");
}

#[test]
fn an_execute_that_timed_out_in_the_queue_never_starts() {
    let mut h = with_permits(1, 1);
    let exec = start(&mut h, "r1");
    h.deliver(execute_within("r2", 2000));
    h.tick(ms(2000));
    h.finish(exec, "r1");
    assert!(started(&h.events()).is_empty());
}

#[test]
fn a_late_answer_for_a_timed_out_execute_transmits_nothing() {
    let mut h = with_permits(1, 0);
    let exec = start(&mut h, "r1");
    h.tick(EXECUTE_TIMEOUT);
    h.sent();
    h.finish(exec, "r1");
    assert!(h.frames().is_empty());
}

#[test]
fn an_answered_execute_never_times_out() {
    let mut h = with_permits(1, 0);
    let exec = start(&mut h, "r1");
    h.finish(exec, "r1");
    h.sent();
    h.tick(EXECUTE_TIMEOUT);
    assert!(h.sent().is_empty());
}

fn invoke_request(request_id: &str) -> Message {
    let mut req = InvokeCapabilityRequest {
        request_id: request_id.into(),
        ..Default::default()
    };
    req.context.insert("connector_arn".into(), arn("a"));
    Message::InvokeRequest(req)
}

#[test]
fn an_invoke_request_delivered_to_the_connector_is_executed() {
    let mut h = with_permits(1, 0);
    h.deliver(invoke_request("i1"));
    assert_eq!(started(&h.events()), ["i1"]);
}

#[test]
fn an_executed_invoke_request_is_answered_as_an_invoke_response() {
    let mut h = with_permits(1, 0);
    h.deliver(invoke_request("i1"));
    let exec = starts(&h.events())[0].0;
    h.finish(exec, "i1");
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::InvokeResponse(r)] if r.request_id == "i1" && r.success),
        "{sent:?}"
    );
}
