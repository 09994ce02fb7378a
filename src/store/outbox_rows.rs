//! What the SQLite and PostgreSQL outbox code share, written once so both backends
//! store and hand out the same bytes: the JSON of the `errors` and `annotations`
//! columns, the payload of a dead-letter handler's row, the error a queue message past
//! its maximum receives is dead-lettered with, and the assembly of
//! [`OutboxStats`] from the three `GROUP BY` queries both backends run.
//!
//! Plain functions of their inputs, no I/O, so they are tested here once.

use crate::outbox::model::OutboxStats;
use crate::outbox::model::{AttemptError, DeadLetter, Depth, Destination, Enqueue};

/// `next_attempt_at` of a parked row: one waiting behind an earlier row of its binding
/// and ordering key (migration 8 in either backend's schema parks and unparks them).
/// Past every claim's range, so a claim never walks a key's queue; the row's own due
/// time stays in `due_at`, which the counts and the event view report instead.
pub(crate) const PARKED: i64 = i64::MAX;

/// The SQL of a row's effective next attempt: its `due_at` while it is parked
/// ([`PARKED`], whose literal this is), else `next_attempt_at`. A macro so that the
/// backends' statements can be `concat!`ed constants.
macro_rules! next_attempt_sql {
    () => {
        "(CASE WHEN next_attempt_at = 9223372036854775807 THEN due_at ELSE next_attempt_at END)"
    };
}
pub(crate) use next_attempt_sql;

/// The label of the error a queue message gets when it is dead-lettered for having
/// been received `max_receives` times without an ack.
pub(crate) const MAX_RECEIVES_KIND: &str = "max_receives";

/// One attempt error as a JSON object, for appending to an `errors` column.
pub(crate) fn error_json(error: &AttemptError) -> String {
    serde_json::to_string(error).unwrap_or_else(|_| "{}".into())
}

/// A whole error history as a JSON array.
pub(crate) fn errors_json(errors: &[AttemptError]) -> String {
    serde_json::to_string(errors).unwrap_or_else(|_| "[]".into())
}

/// Reads an `errors` column. A value this build cannot read (written by hand, or by a
/// newer build with other fields) yields an empty history and a log line rather than
/// failing the claim: the history is for people, the delivery matters more.
pub(crate) fn parse_errors(text: &str) -> Vec<AttemptError> {
    serde_json::from_str(text).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "unreadable outbox error history; shown as empty");
        Vec::new()
    })
}

/// Reads an `annotations` column (a JSON array of strings), tolerantly as
/// [`parse_errors`] does.
pub(crate) fn parse_annotations(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "unreadable dead-letter annotations; shown as empty");
        Vec::new()
    })
}

/// The annotation a failed dead-letter handler leaves on the dead letter it reported.
pub(crate) fn annotation(binding_id: &str, error: &AttemptError) -> String {
    format!("{binding_id}: {}: {}", error.kind, error.message)
}

/// The error a queue message is dead-lettered with after `receives` receives. The
/// message names only the limit, so PostgreSQL can build the error for many messages
/// in one statement from one text.
pub(crate) fn max_receives_error(receives: u32, max_receives: u32, now_ms: i64) -> AttemptError {
    AttemptError {
        attempt: receives,
        at_ms: now_ms,
        kind: MAX_RECEIVES_KIND.into(),
        message: format!(
            "not acked after {max_receives} receives (max_receives); replay the dead \
             letter once its consumer is fixed"
        ),
        took_ms: None,
    }
}

/// The payload of a dead-letter handler's row: `{"dead_letter": …, "event": …}`, where
/// `event` is the payload the failed attempt delivered, parsed as JSON, or as a string
/// (invalid UTF-8 replaced) when it is not JSON, so a handler always receives JSON.
pub(crate) fn fanout_payload(dead_letter: &DeadLetter, delivered: &[u8]) -> Vec<u8> {
    let event = serde_json::from_slice::<serde_json::Value>(delivered).unwrap_or_else(|_| {
        serde_json::Value::String(String::from_utf8_lossy(delivered).into_owned())
    });
    serde_json::to_vec(&serde_json::json!({ "dead_letter": dead_letter, "event": event }))
        .unwrap_or_default()
}

/// Readies a dead letter's fan-out rows: each reports `dead_letter` (its id) and, unless
/// it brings a payload of its own, carries [`fanout_payload`].
pub(crate) fn fanout_rows(
    fanout: Vec<Enqueue>,
    dead_letter: &DeadLetter,
    delivered: &[u8],
) -> Vec<Enqueue> {
    let mut payload = None;
    fanout
        .into_iter()
        .map(|mut row| {
            row.dead_letter_id = Some(dead_letter.id);
            if row.payload.is_none() {
                row.payload = Some(
                    payload
                        .get_or_insert_with(|| fanout_payload(dead_letter, delivered))
                        .clone(),
                );
            }
            row
        })
        .collect()
}

/// The queue an [`Enqueue`] goes to, or `None` for an outbox row.
pub(crate) fn queue_of(row: &Enqueue) -> Option<&str> {
    match &row.destination {
        Destination::Dispatch => None,
        Destination::Queue(name) => Some(name),
    }
}

/// A row's first due time: its `not_before_ms`, or the commit's clock; for a
/// debounced row, no earlier than the commit's clock plus its window.
pub(crate) fn due_at(row: &Enqueue, now_ms: i64) -> i64 {
    let due = row.not_before_ms.unwrap_or(now_ms);
    match (&row.debounce_key, row.debounce_window_ms) {
        (Some(_), Some(window)) => due.max(now_ms.saturating_add(window)),
        _ => due,
    }
}

/// The `dedupe_claims` source under which a binding's own dedupe keys are claimed:
/// `binding:<id>`, which no source id can be (they have no `:`).
pub(crate) fn binding_dedupe_source(binding_id: &str) -> String {
    format!("binding:{binding_id}")
}

/// A depth or attempt counter as the databases store it (`INT`), saturating.
pub(crate) fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A stored counter back as `u32`; a negative one (never written) reads as 0.
pub(crate) fn to_u32(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// One `GROUP BY` row of the outbox or a queue: (name, due, leased, scheduled, oldest
/// enqueue time).
pub(crate) type DepthRow = (String, i64, i64, i64, Option<i64>);

/// Builds [`OutboxStats`] from the per-binding outbox counts, the per-queue counts,
/// the dead-letter counts per (binding, queue) and the superseded rows per binding.
/// Totals cover the outbox rows only (the queues have their own entries);
/// `dead_letters` counts every dead letter, and a queue's dead letters are counted
/// under the queue, not the binding.
pub(crate) fn assemble_stats(
    now_ms: i64,
    outbox: Vec<DepthRow>,
    queues: Vec<DepthRow>,
    dead: Vec<(String, Option<String>, i64)>,
    superseded: Vec<(String, i64)>,
) -> OutboxStats {
    let depth = |(_, due, leased, scheduled, oldest): &DepthRow| Depth {
        due: due.max(&0).unsigned_abs(),
        leased: leased.max(&0).unsigned_abs(),
        scheduled: scheduled.max(&0).unsigned_abs(),
        oldest_age_ms: oldest.map(|t| (now_ms - t).max(0)),
        dead_letters: 0,
        superseded: 0,
    };
    let mut stats = OutboxStats::default();
    for row in &outbox {
        let d = depth(row);
        stats.total.due += d.due;
        stats.total.leased += d.leased;
        stats.total.scheduled += d.scheduled;
        stats.total.oldest_age_ms = stats.total.oldest_age_ms.max(d.oldest_age_ms);
        stats.by_binding.insert(row.0.clone(), d);
    }
    stats.queues = queues.iter().map(|r| (r.0.clone(), depth(r))).collect();
    for (binding, queue, n) in dead {
        let n = n.max(0).unsigned_abs();
        stats.total.dead_letters += n;
        let entry = match queue {
            Some(q) => stats.queues.entry(q),
            None => stats.by_binding.entry(binding),
        };
        entry.or_default().dead_letters += n;
    }
    for (binding, n) in superseded {
        let n = n.max(0).unsigned_abs();
        stats.total.superseded += n;
        stats.by_binding.entry(binding).or_default().superseded += n;
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead_letter() -> DeadLetter {
        DeadLetter {
            id: 7,
            binding_id: "b".into(),
            fingerprint: "f".into(),
            event_id: "evt_1".into(),
            trace_id: "t".into(),
            attempts: 3,
            errors: vec![],
            enqueued_at_ms: 1,
            dead_at_ms: 2,
            annotations: vec![],
            replays: 0,
            replayed_at_ms: None,
            queue: None,
        }
    }

    #[test]
    fn fanout_payload_embeds_json_events_as_json_and_other_bodies_as_text() {
        let dl = dead_letter();
        let json: serde_json::Value =
            serde_json::from_slice(&fanout_payload(&dl, br#"{"a":1}"#)).unwrap();
        assert_eq!(json["event"]["a"], 1);
        assert_eq!(json["dead_letter"]["id"], 7);
        let text: serde_json::Value =
            serde_json::from_slice(&fanout_payload(&dl, b"plain \xff")).unwrap();
        assert_eq!(text["event"], "plain \u{fffd}");
    }

    #[test]
    fn fanout_rows_get_the_dead_letter_id_and_keep_their_own_payload() {
        let dl = dead_letter();
        let mut own = Enqueue::dispatch("h2", "f2");
        own.payload = Some(b"mine".to_vec());
        let rows = fanout_rows(vec![Enqueue::dispatch("h1", "f1"), own], &dl, b"{}");
        assert!(rows.iter().all(|r| r.dead_letter_id == Some(7)));
        assert_eq!(rows[1].payload.as_deref(), Some(&b"mine"[..]));
        let first: serde_json::Value =
            serde_json::from_slice(rows[0].payload.as_ref().unwrap()).unwrap();
        assert_eq!(first["dead_letter"]["binding_id"], "b");
    }

    #[test]
    fn stats_total_the_outbox_and_file_queue_dead_letters_under_the_queue() {
        let s = assemble_stats(
            100,
            vec![
                ("a".into(), 1, 2, 3, Some(40)),
                ("b".into(), 4, 0, 0, Some(90)),
            ],
            vec![("q".into(), 5, 1, 0, Some(50))],
            vec![("a".into(), None, 2), ("c".into(), Some("q".into()), 1)],
            vec![("b".into(), 4)],
        );
        assert_eq!((s.total.due, s.total.leased, s.total.scheduled), (5, 2, 3));
        assert_eq!(s.total.oldest_age_ms, Some(60));
        assert_eq!(s.total.dead_letters, 3);
        assert_eq!(s.by_binding["a"].dead_letters, 2);
        assert_eq!(s.queues["q"].dead_letters, 1);
        assert_eq!(s.queues["q"].due, 5);
        assert!(!s.by_binding.contains_key("c"));
        assert_eq!((s.total.superseded, s.by_binding["b"].superseded), (4, 4));
    }

    #[test]
    fn an_unreadable_history_reads_as_empty_instead_of_failing() {
        assert!(parse_errors("not json").is_empty());
        assert!(parse_annotations("{").is_empty());
        let e = max_receives_error(3, 3, 9);
        assert_eq!(
            parse_errors(&errors_json(std::slice::from_ref(&e))),
            vec![e]
        );
    }
}

#[cfg(test)]
mod parked_tests {
    #[test]
    fn the_sql_literal_is_parked() {
        assert!(next_attempt_sql!().contains(&super::PARKED.to_string()));
    }
}
