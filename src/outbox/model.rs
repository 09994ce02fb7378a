//! The outbox's data: what ingest asks to enqueue, what a claim hands the dispatcher,
//! how an attempt ends, and what the admin API reports. Plain data, shared by both
//! backends and the dispatcher; no I/O here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a matched event goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Destination {
    /// An outbox row that the dispatcher delivers (`invoke` and `local` handlers).
    Dispatch,
    /// A message in the named queue, pulled by consumers (`queue` handlers).
    Queue(String),
}

/// One row to create beside an appended event, in the same transaction. Built by the
/// trigger registry for each binding that matches; written only when the event's dedupe
/// claim is new, so a duplicate delivery enqueues nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The binding that matched.
    pub binding_id: String,
    /// That binding's definition fingerprint at match time.
    pub fingerprint: String,
    /// The ordering key the binding's `ordering_key` expression gave, if any: rows of
    /// one binding with the same key run one at a time, in enqueue order.
    pub ordering_key: Option<String>,
    /// How many handler hops produced this event (0 for a webhook or a cron tick).
    pub depth: u32,
    /// Outbox row or queue message.
    pub destination: Destination,
    /// When the first attempt is due (unix ms); `None` = at once (the commit time).
    pub not_before_ms: Option<i64>,
    /// A payload that replaces the event's body for this row (dead-letter fan-out rows
    /// carry the dead letter and the event); `None` = the event's body.
    pub payload: Option<Vec<u8>>,
    /// For a dead-letter handler's row: the dead letter it reports. Such a row's own
    /// exhaustion annotates that dead letter instead of dead-lettering again.
    pub dead_letter_id: Option<i64>,
    /// The binding's priority: among due rows, higher is claimed first. Queue messages
    /// ignore it.
    pub priority: i32,
    /// The debounce key the binding's `debounce` expression gave, if any: writing this
    /// row deletes every not-yet-started outbox row of the binding with the same key
    /// (recording each as superseded), so of a burst only the last runs.
    pub debounce_key: Option<String>,
    /// With a debounce key: the window (ms). The row is first due at the commit time
    /// plus the window (or at `not_before_ms`, if later), so that a later row of its
    /// key can still supersede it. The commit time, not the routing time, because
    /// under group commit only the transaction knows when the row is written.
    pub debounce_window_ms: Option<i64>,
    /// The binding's dedupe key and its retention (ms): if the binding claimed that key
    /// within the retention, the row is not written; otherwise the claim is taken
    /// (until the commit time plus the retention) in the row's transaction.
    pub dedupe: Option<(String, i64)>,
    /// The backfill job that enqueued this row, if one did: its handler's context
    /// carries it (`switchboard.backfill`).
    pub backfill: Option<i64>,
}

impl Enqueue {
    /// A dispatch row for `binding_id` due at once, with no ordering key, depth 0,
    /// priority 0 and no debounce or dedupe.
    pub fn dispatch(binding_id: impl Into<String>, fingerprint: impl Into<String>) -> Enqueue {
        Enqueue {
            binding_id: binding_id.into(),
            fingerprint: fingerprint.into(),
            ordering_key: None,
            depth: 0,
            destination: Destination::Dispatch,
            not_before_ms: None,
            payload: None,
            dead_letter_id: None,
            priority: 0,
            debounce_key: None,
            debounce_window_ms: None,
            dedupe: None,
            backfill: None,
        }
    }

    /// Whether writing this row does more than an insert (a dedupe check, a debounce):
    /// such rows are written one by one, in order, where a backend would batch.
    pub fn has_flow_control(&self) -> bool {
        self.debounce_key.is_some() || self.dedupe.is_some()
    }
}

/// One failed attempt, as kept on the row and, when attempts run out, in the dead
/// letter's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// Which attempt (1-based).
    pub attempt: u32,
    /// When it ended (unix ms).
    pub at_ms: i64,
    /// A stable label: `handler`, `timeout`, `overloaded`, `platform`, `validation`,
    /// `breaker_open`, `egress_refused`.
    pub kind: String,
    /// What went wrong, for a person.
    pub message: String,
    /// How long the attempt ran (ms), when the dispatcher timed it: the console's
    /// timeline draws the attempt from `at_ms - took_ms` to `at_ms`. `None` for
    /// errors not made by an attempt (a stranded row, a queue message past its
    /// receives) and for those stored before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<i64>,
}

/// What a claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The claimer's clock (unix ms): rows due at or before it are claimable.
    pub now_ms: i64,
    /// The lease: until then no other claimer gets these rows; past it, a crashed
    /// claimer's rows are due again.
    pub lease_until_ms: i64,
    /// Identifies this claim; finishing, releasing and extending name it, so a claimer
    /// whose lease expired (and whose rows were claimed again) changes nothing.
    pub token: i64,
    /// At most this many rows.
    pub limit: usize,
    /// Only rows of these bindings (the ones this process can deliver). Empty = none.
    pub bindings: Vec<String>,
    /// The claiming process's identity (`process_id`), stamped on the rows as their
    /// `lease_holder`, so that process, started again, recognises what it held
    /// (`OutboxStore::release_holder`). `None` stamps nothing: such
    /// rows wait their lease out after a crash.
    pub holder: Option<String>,
}

/// What `OutboxStore::release_holder` did at a process's start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HolderRelease {
    /// Rows the identity held under a live lease, now due.
    pub released: u64,
    /// Rows other holders hold under a live lease, per holder (`None`: a claim that
    /// stamped no identity), with the last of their leases' ends (unix ms): what this
    /// process will see due only when those leases end, unless their holders finish
    /// or release them first.
    pub held_by_others: Vec<HeldRows>,
}

/// Rows one other holder holds under a live lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRows {
    /// The holder's identity, if its claim stamped one.
    pub holder: Option<String>,
    /// How many rows.
    pub rows: u64,
    /// When the last of their leases ends (unix ms).
    pub until_ms: i64,
}

/// A claimed row, with everything its attempt needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRow {
    /// Row id: increasing in enqueue order.
    pub id: i64,
    /// The claim token it was claimed under.
    pub token: i64,
    /// The binding it is for.
    pub binding_id: String,
    /// The binding's fingerprint when the row was enqueued.
    pub fingerprint: String,
    /// The event it delivers.
    pub event_id: String,
    /// The event's source, kind and trace id (for the handler's context and logs).
    pub source: String,
    /// The event's kind.
    pub kind: String,
    /// The provider rule that accepted the event (`github`, `cron`, `api`, …); empty
    /// when the event is gone.
    pub provider: String,
    /// The event's W3C trace id.
    pub trace_id: String,
    /// The row's creation context: its event's `traceparent` (empty for an event
    /// stored before schema 10, or a row whose event was swept), from which each
    /// attempt's span and the handler's `traceparent` derive.
    pub traceparent: String,
    /// The event's `tracestate`, passed on with `traceparent`.
    pub tracestate: String,
    /// The event's tenant.
    pub tenant: String,
    /// This attempt's number (1-based): attempts made before it, plus one. An attempt
    /// interrupted by a crash counts, so a row that crashes its dispatcher cannot loop
    /// for ever.
    pub attempt: u32,
    /// Handler hops that produced the event.
    pub depth: u32,
    /// The row's ordering key.
    pub ordering_key: Option<String>,
    /// When the row was enqueued (unix ms).
    pub enqueued_at_ms: i64,
    /// When this attempt became due (unix ms): enqueue-to-start latency is measured
    /// from the later of this and `enqueued_at_ms`.
    pub due_at_ms: i64,
    /// The payload: the row's own, or the event's body.
    pub payload: Vec<u8>,
    /// For a dead-letter handler's row: the dead letter it reports.
    pub dead_letter_id: Option<i64>,
    /// Earlier failed attempts, oldest first.
    pub errors: Vec<AttemptError>,
    /// The backfill job that enqueued the row, if one did.
    pub backfill: Option<i64>,
}

/// How one claimed row ends. Finishes name the row and its claim token; a finish whose
/// token no longer matches (the lease expired and another claimer took the row) is
/// ignored, and the store's `finish` reports how many applied.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// Delivered: delete the row.
    Done {
        /// Row id.
        id: i64,
        /// Claim token.
        token: i64,
    },
    /// Failed with attempts left: due again at `at_ms`, the error appended.
    Retry {
        /// Row id.
        id: i64,
        /// Claim token.
        token: i64,
        /// When the next attempt is due (unix ms).
        at_ms: i64,
        /// This attempt's error.
        error: AttemptError,
    },
    /// Failed for the last time: move the row to the dead letters with its history
    /// (plus `error`), and enqueue one row per dead-letter handler, in one transaction.
    /// Each `fanout` row gets the new dead letter's id; its `payload`, if `None`, is
    /// the dead letter as JSON (a dead-letter record) with the event's payload under `event`.
    DeadLetter {
        /// Row id.
        id: i64,
        /// Claim token.
        token: i64,
        /// The last attempt's error.
        error: AttemptError,
        /// Rows for the dead-letter handlers.
        fanout: Vec<Enqueue>,
    },
    /// A dead-letter handler's row that failed for the last time: delete it and append
    /// the error to its dead letter's annotations. Never dead-lettered again.
    Annotate {
        /// Row id.
        id: i64,
        /// Claim token.
        token: i64,
        /// The dead letter the row reported.
        dead_letter_id: i64,
        /// The handler binding that failed.
        binding_id: String,
        /// The last attempt's error.
        error: AttemptError,
    },
}

impl Finish {
    /// The attempt's error, when the finish records one (a retry, a dead letter, an
    /// annotation), for what is learnt of the attempt after the decision (its
    /// duration).
    pub fn error_mut(&mut self) -> Option<&mut AttemptError> {
        match self {
            Finish::Retry { error, .. }
            | Finish::DeadLetter { error, .. }
            | Finish::Annotate { error, .. } => Some(error),
            Finish::Done { .. } => None,
        }
    }
}

/// A dead letter: a row whose attempts ran out, with its error history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Dead letter id.
    pub id: i64,
    /// The binding whose attempts ran out.
    pub binding_id: String,
    /// Its fingerprint at enqueue time.
    pub fingerprint: String,
    /// The event (or the queue message's event).
    pub event_id: String,
    /// The event's trace id.
    pub trace_id: String,
    /// Attempts made (or, for a queue message, receives).
    pub attempts: u32,
    /// Every attempt's error, oldest first.
    pub errors: Vec<AttemptError>,
    /// When the original row was enqueued (unix ms).
    pub enqueued_at_ms: i64,
    /// When it was dead-lettered (unix ms).
    pub dead_at_ms: i64,
    /// Failures of dead-letter handlers that reported it (`binding: error`).
    pub annotations: Vec<String>,
    /// How many times it was replayed.
    pub replays: u32,
    /// The last replay (unix ms).
    pub replayed_at_ms: Option<i64>,
    /// The queue it came from, for a queue message past its maximum receives.
    pub queue: Option<String>,
}

/// Which dead letters to list: newest first, `limit` at most, ids below `before_id`.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterQuery {
    /// Only this binding's.
    pub binding_id: Option<String>,
    /// At most this many (callers clamp it).
    pub limit: usize,
    /// Paging cursor: only ids below this one.
    pub before_id: Option<i64>,
    /// Only those dead-lettered at or after this instant (unix ms).
    pub since_ms: Option<i64>,
    /// Only those dead-lettered before this instant (unix ms).
    pub until_ms: Option<i64>,
    /// Only those whose LAST attempt failed with this kind (`handler`, `timeout`, …):
    /// a bulk replay after fixing one cause should not replay the others.
    pub error_kind: Option<String>,
    /// Only those never replayed: what a bulk replay takes by default, so a second
    /// click (or a retry after an error half way) replays nothing twice.
    pub unreplayed: bool,
}

/// The three totals the outbox depth chart samples once a second: cheaper than
/// [`OutboxStats`], which groups every row by binding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutboxDepth {
    /// Rows due now (leased or not, as [`OutboxStats::due`] counts them).
    pub due: u64,
    /// Rows under a live lease.
    pub leased: u64,
    /// Dead letters kept.
    pub dead_letters: u64,
}

/// Everything the outbox holds about one event, for its detail view: the rows still
/// pending, its queue messages, its dead letters and its synchronous run records.
/// Each list is read through an index on `event_id`, so it costs the event's own
/// rows, never a scan.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventDeliveries {
    /// Outbox rows not yet finished.
    pub pending: Vec<PendingRow>,
    /// Queue messages not yet acknowledged.
    pub queued: Vec<QueuedMessage>,
    /// Dead letters of the event.
    pub dead: Vec<DeadLetter>,
    /// Synchronous runs recorded under the event id.
    pub runs: Vec<RunRecord>,
}

/// An outbox row as the event detail shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingRow {
    /// Row id.
    pub id: i64,
    /// The binding that delivers it.
    pub binding_id: String,
    /// The binding version it was enqueued under.
    pub fingerprint: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is due next, or when its lease ends (unix ms).
    pub next_attempt_at_ms: i64,
    /// A claim holds it (an attempt is in flight, if the lease is live).
    pub leased: bool,
    /// Every failed attempt, oldest first.
    pub errors: Vec<AttemptError>,
}

/// A queue message as the event detail shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueuedMessage {
    /// Message id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// The binding that put it there.
    pub binding_id: String,
    /// That binding's version.
    pub fingerprint: String,
    /// How many times it was received.
    pub receives: u32,
    /// When it is visible (again) to receivers (unix ms).
    pub visible_at_ms: i64,
    /// A receiver holds it.
    pub received: bool,
}

/// How deep a part of the outbox is: one binding's rows, one queue's, or all the
/// bindings' together ([`OutboxStats::total`]). One struct for the three, so a figure
/// added to one is added to all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Depth {
    /// Rows due now and not leased (a queue's: visible).
    pub due: u64,
    /// Rows under a live lease, in flight somewhere (a queue's: received, not acked).
    pub leased: u64,
    /// Rows waiting for a later attempt (`next_attempt_at` in the future, no lease).
    pub scheduled: u64,
    /// Age of the oldest row (ms since it was enqueued), if any.
    pub oldest_age_ms: Option<i64>,
    /// Dead letters kept.
    pub dead_letters: u64,
    /// Rows superseded by a later row of their debounce key (records kept for the
    /// event retention).
    #[serde(default)]
    pub superseded: u64,
}

/// Outbox totals and per-binding counts, as `GET /api/v1/outbox/stats` shows them
/// (the totals' fields at the top level).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxStats {
    /// Over all bindings (the queues have their own entries); `dead_letters` counts
    /// every dead letter, a queue's included.
    #[serde(flatten)]
    pub total: Depth,
    /// Per binding id.
    pub by_binding: BTreeMap<String, Depth>,
    /// Per queue name: `due` = visible, `leased` = received and not yet acked.
    pub queues: BTreeMap<String, Depth>,
}

/// What a queue receive asks for.
#[derive(Debug, Clone)]
pub struct ReceiveRequest {
    /// The queue.
    pub queue: String,
    /// At most this many messages.
    pub max: usize,
    /// The receiver's clock (unix ms).
    pub now_ms: i64,
    /// How long received messages stay invisible to other receivers (ms).
    pub visibility_ms: i64,
    /// A message that has already been received this many times is dead-lettered
    /// instead of being handed out again.
    pub max_receives: u32,
}

/// A received queue message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueMessage {
    /// Message id.
    pub id: i64,
    /// The queue.
    pub queue: String,
    /// The receipt: ack and nack must name it, so a receiver whose visibility expired
    /// (and whose message went to someone else) cannot ack another's receive.
    pub receipt: i64,
    /// How many times it has been received, this time included.
    pub receives: u32,
    /// The binding that enqueued it.
    pub binding_id: String,
    /// The event.
    pub event_id: String,
    /// The event's kind.
    pub kind: String,
    /// The event's trace id.
    pub trace_id: String,
    /// Handler hops that produced the event.
    pub depth: u32,
    /// When it was enqueued (unix ms).
    pub enqueued_at_ms: i64,
    /// The payload (the event's body).
    #[serde(with = "crate::outbox::model::bytes_as_text")]
    pub payload: Vec<u8>,
}

/// What a receive did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReceiveOutcome {
    /// The messages handed out.
    pub messages: Vec<QueueMessage>,
    /// Messages past the maximum receives moved to the dead letters instead.
    pub dead_lettered: u64,
}

/// What a retention sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Events older than the retention that no row, message or dead letter references.
    pub events: u64,
    /// Dead letters older than the retention.
    pub dead_letters: u64,
    /// Sync invocation records older than the retention.
    pub runs: u64,
    /// Records of debounced rows superseded before the retention.
    pub superseded: u64,
    /// Records of what backfills enqueued, older than the retention.
    pub backfilled: u64,
}

/// One synchronous invocation (`triggers.invoke`, `POST /api/v1/triggers/{id}/invoke`),
/// kept for audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The binding.
    pub binding_id: String,
    /// The event id given to the handler.
    pub event_id: String,
    /// When it started (unix ms).
    pub started_at_ms: i64,
    /// How long the attempt took (ms).
    pub duration_ms: i64,
    /// `ok`, `handler`, `timeout`, `overloaded`, `platform` or `validation`.
    pub status: String,
    /// The error, if any.
    pub error: Option<String>,
    /// The caller went away before the answer; the result was recorded, not returned.
    pub abandoned: bool,
    /// The fingerprint of the binding version the run used, so a run can be told
    /// apart from runs of another definition of the same binding id (empty for runs
    /// recorded before versions were kept).
    #[serde(default)]
    pub fingerprint: String,
}

/// Serialises bytes as UTF-8 text when they are, else as base64 under `{"base64": …}`.
pub(crate) mod bytes_as_text {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => text.serialize(s),
            Err(_) => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
                serde_json::json!({ "base64": b64 }).serialize(s)
            }
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(s.into_bytes()),
            serde_json::Value::Object(m) => match m.get("base64").and_then(|v| v.as_str()) {
                Some(b) => base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(serde::de::Error::custom),
                None => Err(serde::de::Error::custom("expected text or {\"base64\": …}")),
            },
            _ => Err(serde::de::Error::custom("expected text or {\"base64\": …}")),
        }
    }
}
