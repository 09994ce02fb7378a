//! A graceful stop: new and queued executes are refused with a recoverable error,
//! running ones may finish, the rest are answered when the grace ends, and the
//! channel is left; and the link's timestamps in the socket's counters.

use std::sync::atomic::Ordering::Relaxed;

use super::support::*;
use super::wire::*;
use crate::proto::stream_message::Message;

/// The errors of the execute responses in `sent`, by request id.
fn errors(sent: &[Message]) -> Vec<(String, String)> {
    sent.iter()
        .filter_map(|m| match m {
            Message::ExecuteResponse(r) if !r.success => {
                Some((r.request_id.clone(), r.error.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_stop_refuses_queued_and_new_executes_and_lets_running_ones_answer() {
    let mut h = joined([spec("a").max_concurrent(1).max_queued(1)]);
    h.deliver(execute("r1", &arn("a")));
    let (exec, _) = starts(&h.events())[0].clone();
    h.deliver(execute("r2", &arn("a")));
    h.conn.stop(h.now());
    h.deliver(execute("r3", &arn("a")));
    let refused = errors(&h.sent());
    assert_eq!(refused.len(), 2, "{refused:?}");
    for (id, error) in &refused {
        assert!(["r2", "r3"].contains(&id.as_str()), "{id}");
        assert!(
            error.starts_with("connection_closed:") && error.contains("shutting down"),
            "{error}"
        );
    }
    assert!(!h.conn.executes_idle(), "r1 still runs");
    assert!(
        started(&h.events()).is_empty(),
        "nothing starts during a stop"
    );
    h.finish(exec, "r1");
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::ExecuteResponse(r)] if r.request_id == "r1" && r.success),
        "{sent:?}"
    );
    assert!(h.conn.executes_idle());
}

#[test]
fn finishing_a_stop_answers_running_executes_and_leaves_the_channel() {
    let mut h = joined([spec("a")]);
    h.deliver(execute("r1", &arn("a")));
    let (exec, _) = starts(&h.events())[0].clone();
    h.conn.stop(h.now());
    h.conn.finish_stop(h.now());
    assert_eq!(cancels(&h.events()), [exec]);
    let frames = h.frames();
    let events: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(events, ["proto", "phx_leave"], "the answer, then the leave");
    assert_eq!(
        frames[1].join_ref, h.join_ref,
        "the leave is under the current join"
    );
    let answer = frames[0].proto().unwrap().message.unwrap();
    let error = errors(&[answer]).pop().unwrap().1;
    assert!(error.contains("stop grace"), "{error}");
    // A late answer from the connector is ignored: exactly one answer per execute.
    h.finish(exec, "r1");
    assert!(h.sent().is_empty());
}

#[test]
fn a_stopping_core_sends_no_register() {
    let mut h = Harness::new([spec("a")]);
    h.conn.stop(h.now());
    h.connect();
    h.reply_join("ok");
    assert!(registers(&h.sent()).is_empty());
}

#[test]
fn the_socket_counters_keep_when_it_joined_and_when_and_why_it_went_down() {
    let mut h = joined([spec("a")]);
    let joined_at = UNIX_START_MS as u64;
    assert_eq!(h.metrics.link().connected_since_ms, Some(joined_at));
    assert_eq!(h.metrics.connects.load(Relaxed), 1);
    h.clock.advance(ms(1_500));
    h.conn.handle_disconnected(h.now(), "read failed: reset");
    let link = h.metrics.link().clone();
    assert_eq!(link.connected_since_ms, None);
    assert_eq!(link.last_disconnect_ms, Some(joined_at + 1_500));
    assert_eq!(
        link.last_disconnect_reason.as_deref(),
        Some("read failed: reset")
    );
}
