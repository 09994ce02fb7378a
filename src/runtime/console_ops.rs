//! The deliver half's operations the console needs beyond the CLI's: one event with
//! everything that became of it ([`DeliverOps::event_detail`]), a filtered bulk replay
//! of dead letters ([`DeliverOps::replay_dead_letters`]) and the outbox depth over
//! time ([`DeliverOps::outbox_series`]). The admin API (`runtime::admin`) answers with
//! exactly what these return, and the console's HTML handlers call them directly, so
//! the two views cannot drift and the console never calls its own HTTP API.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Serialize;
use serde_json::{json, Value};

use super::ops::{DeliverOps, OpError};
use super::outbox_series::SeriesView;
use crate::outbox::model::{AttemptError, DeadLetterQuery};
use crate::store::EventQuery;
use crate::triggers::lifecycle::label;
use crate::triggers::{SignatureStatus, TriggerEvent};

/// Most dead letters one bulk replay call replays; a larger selection is replayed in
/// several calls, each resuming at the previous answer's `next`, so one request never
/// holds the store (or the HTTP client) for long.
pub(crate) const MAX_BULK_REPLAY: usize = 1000;

/// Which dead letters a bulk replay takes: newest first, all filters combined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeadLetterSelection {
    /// Only this binding's.
    pub(crate) binding: Option<String>,
    /// Only those whose last attempt failed with this kind (`handler`, `timeout`, …).
    pub(crate) error_kind: Option<String>,
    /// Only those dead-lettered at or after this instant (unix ms).
    pub(crate) since_ms: Option<i64>,
    /// Only those dead-lettered before this instant (unix ms).
    pub(crate) before_ms: Option<i64>,
    /// Resume below this dead-letter id (the previous call's `next`).
    pub(crate) after_id: Option<i64>,
    /// At most this many, 1 to [`MAX_BULK_REPLAY`].
    pub(crate) limit: usize,
    /// Replayed ones too (by default only dead letters never replayed are taken, so
    /// repeating a call replays nothing twice).
    pub(crate) include_replayed: bool,
}

/// The body as the detail shows it: JSON as a value, UTF-8 as text, anything else
/// base64, with the encoding named so a reader never has to guess.
fn decoded_body(event: &TriggerEvent) -> (&'static str, Value) {
    if let Ok(v) = serde_json::from_slice::<Value>(&event.body) {
        return ("json", v);
    }
    match std::str::from_utf8(&event.body) {
        Ok(text) => ("text", Value::String(text.to_owned())),
        Err(_) => (
            "base64",
            Value::String(base64::engine::general_purpose::STANDARD.encode(&event.body)),
        ),
    }
}

/// The newest error of a history, as `{"kind", "message", "at_ms"}`.
fn last_error(errors: &[AttemptError]) -> Value {
    errors.last().map_or(Value::Null, |e| json!(e))
}

/// What a bulk replay of dead letters answers ([`DeliverOps::replay_dead_letters`]).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BulkReplay {
    /// How many were replayed.
    pub(crate) replayed: usize,
    /// Their ids, newest first.
    pub(crate) ids: Vec<i64>,
    /// Those that could not be (their binding gone, say), with why.
    pub(crate) failed: Vec<ReplayFailure>,
    /// Set when the page was full (more may match): pass it as `after`.
    pub(crate) next: Option<i64>,
}

/// A dead letter a bulk replay could not replay.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplayFailure {
    pub(crate) id: i64,
    /// The error's stable code (`not_found`, `invalid`, …).
    pub(crate) error: &'static str,
    pub(crate) message: String,
}

/// One event in full, with what became of it ([`DeliverOps::event_detail`],
/// `GET /api/v1/events/{id}`, the console's event page).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EventDetail {
    pub(crate) event: EventView,
    pub(crate) deliveries: Vec<Delivery>,
}

/// The event of an [`EventDetail`]: its facts, its stored (already redacted) headers
/// and its body decoded ([`decoded_body`]).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EventView {
    pub(crate) id: String,
    pub(crate) seq: i64,
    pub(crate) source: String,
    pub(crate) provider: String,
    pub(crate) kind: String,
    /// The dedupe key as stored.
    pub(crate) delivery_id: String,
    pub(crate) received_at_ms: i64,
    pub(crate) occurred_at_ms: Option<i64>,
    pub(crate) tenant: String,
    pub(crate) trace_id: String,
    pub(crate) signature: SignatureStatus,
    pub(crate) headers: BTreeMap<String, String>,
    /// `json`, `text` or `base64`: how `payload` holds the body.
    pub(crate) encoding: &'static str,
    pub(crate) payload: Value,
}

/// One delivery of the event detail, whatever table it came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Delivery {
    /// `outbox`, `queue`, `dead_letter` or `run`.
    pub(crate) record: &'static str,
    /// The record's id in its table (`null` for a run).
    pub(crate) id: Option<i64>,
    pub(crate) binding_id: String,
    pub(crate) fingerprint: String,
    /// `id@vN` when the version is known to this process.
    pub(crate) version: Option<String>,
    /// `due`, `scheduled`, `leased`, `queued`, `received`, `dead`, or a run's status.
    pub(crate) state: String,
    pub(crate) attempts: u32,
    /// The newest error, as `{"kind", "message", "at_ms"}` (a run's: its status as
    /// the kind); `null` when none.
    pub(crate) last_error: Value,
    pub(crate) next_attempt_at_ms: Option<i64>,
    pub(crate) errors: Vec<AttemptError>,
    /// Extra facts of the record's kind (a queue's name, a dead letter's replays, …).
    #[serde(flatten)]
    pub(crate) more: serde_json::Map<String, Value>,
}

impl DeliverOps {
    /// One event in full, with what became of it: `{"event": {id, source, provider,
    /// kind, delivery_id, received_at_ms, occurred_at_ms, tenant, trace_id, signature,
    /// headers, encoding, payload}, "deliveries": [...]}`. The headers are the stored,
    /// already redacted ones; the body is decoded ([`decoded_body`]). Each delivery is
    /// a pending outbox row, a queue message, a dead letter or a run record, with its
    /// binding, version, state, attempts, last error, next attempt and error history.
    /// `NotFound` for an id the store does not hold.
    pub(crate) async fn event_detail(&self, event_id: &str) -> Result<EventDetail, OpError> {
        let backend = self.store.backend();
        let found = backend
            .events(&EventQuery {
                limit: 1,
                event_id: Some(event_id.to_owned()),
                ..EventQuery::default()
            })
            .await?;
        let Some(stored) = found.into_iter().next() else {
            return Err(OpError::NotFound(format!(
                "no event {event_id:?} (expired, or never stored)"
            )));
        };
        let e = stored.event;
        let d = backend.event_deliveries(&e.id).await?;
        let current = self.triggers.current();
        let version = |b: &str, fp: &str| current.number(b, fp).map(|n| label(b, n));
        let now = crate::store::now_ms();
        let mut deliveries = Vec::new();
        for r in d.pending {
            let state = if r.leased && r.next_attempt_at_ms > now {
                "leased"
            } else if r.next_attempt_at_ms > now {
                "scheduled"
            } else {
                "due"
            };
            deliveries.push(Delivery {
                record: "outbox",
                id: Some(r.id),
                version: version(&r.binding_id, &r.fingerprint),
                state: state.into(),
                attempts: r.attempts,
                last_error: last_error(&r.errors),
                next_attempt_at_ms: Some(r.next_attempt_at_ms),
                binding_id: r.binding_id,
                fingerprint: r.fingerprint,
                errors: r.errors,
                more: Default::default(),
            });
        }
        for m in d.queued {
            let mut more = serde_json::Map::new();
            more.insert("queue".into(), json!(m.queue));
            deliveries.push(Delivery {
                record: "queue",
                id: Some(m.id),
                version: version(&m.binding_id, &m.fingerprint),
                state: if m.received { "received" } else { "queued" }.into(),
                attempts: m.receives,
                last_error: Value::Null,
                next_attempt_at_ms: Some(m.visible_at_ms),
                binding_id: m.binding_id,
                fingerprint: m.fingerprint,
                errors: Vec::new(),
                more,
            });
        }
        for dl in d.dead {
            let mut more = serde_json::Map::new();
            more.insert("dead_at_ms".into(), json!(dl.dead_at_ms));
            more.insert("replays".into(), json!(dl.replays));
            more.insert("annotations".into(), json!(dl.annotations));
            more.insert("queue".into(), json!(dl.queue));
            deliveries.push(Delivery {
                record: "dead_letter",
                id: Some(dl.id),
                version: version(&dl.binding_id, &dl.fingerprint),
                state: "dead".into(),
                attempts: dl.attempts,
                last_error: last_error(&dl.errors),
                next_attempt_at_ms: None,
                binding_id: dl.binding_id,
                fingerprint: dl.fingerprint,
                errors: dl.errors,
                more,
            });
        }
        for run in d.runs {
            let mut more = serde_json::Map::new();
            more.insert("started_at_ms".into(), json!(run.started_at_ms));
            more.insert("duration_ms".into(), json!(run.duration_ms));
            more.insert("abandoned".into(), json!(run.abandoned));
            let last = run.error.as_ref().map_or(
                Value::Null,
                |m| json!({"kind": run.status, "message": m, "at_ms": run.started_at_ms}),
            );
            deliveries.push(Delivery {
                record: "run",
                id: None,
                version: version(&run.binding_id, &run.fingerprint),
                state: run.status,
                attempts: 1,
                last_error: last,
                next_attempt_at_ms: None,
                binding_id: run.binding_id,
                fingerprint: run.fingerprint,
                errors: Vec::new(),
                more,
            });
        }
        let (encoding, payload) = decoded_body(&e);
        Ok(EventDetail {
            event: EventView {
                id: e.id,
                seq: stored.seq,
                source: e.source,
                provider: e.provider,
                kind: e.kind,
                delivery_id: e.dedupe_key,
                received_at_ms: e.received_at_ms,
                occurred_at_ms: e.occurred_at_ms,
                tenant: e.tenant,
                trace_id: e.trace_id,
                signature: e.signature,
                headers: e.headers,
                encoding,
                payload,
            },
            deliveries,
        })
    }

    /// Replays the dead letters `sel` selects, newest first, each through the single
    /// replay ([`DeliverOps::replay_dead_letter`]: under the version it ran under),
    /// at most `sel.limit` of them. Answers `{"replayed": n, "failed": [{"id",
    /// "error", "message"}], "ids": [...], "next": id or null}`: `next` is set when
    /// the page was full (more may match); pass it as `after` to go on. A dead letter
    /// that cannot be replayed (its binding gone, say) is reported in `failed` and
    /// does not stop the others.
    pub(crate) async fn replay_dead_letters(
        &self,
        sel: &DeadLetterSelection,
    ) -> Result<BulkReplay, OpError> {
        if !(1..=MAX_BULK_REPLAY).contains(&sel.limit) {
            return Err(OpError::Invalid(format!(
                "limit must be from 1 to {MAX_BULK_REPLAY}"
            )));
        }
        let query = DeadLetterQuery {
            binding_id: sel.binding.clone(),
            limit: sel.limit,
            before_id: sel.after_id,
            since_ms: sel.since_ms,
            until_ms: sel.before_ms,
            error_kind: sel.error_kind.clone(),
            unreplayed: !sel.include_replayed,
        };
        let page = self.store.backend().dead_letters(&query).await?;
        let mut ids = Vec::new();
        let mut failed = Vec::new();
        for dl in &page {
            match self.replay_dead_letter(dl.id, None).await {
                Ok(_) => ids.push(dl.id),
                Err(OpError::Store(e)) => return Err(OpError::Store(e)),
                Err(e) => failed.push(ReplayFailure {
                    id: dl.id,
                    error: e.code(),
                    message: e.message(),
                }),
            }
        }
        let next = if page.len() == sel.limit {
            page.last().map(|d| d.id)
        } else {
            None
        };
        Ok(BulkReplay {
            replayed: ids.len(),
            ids,
            failed,
            next,
        })
    }

    /// The outbox depth over the last minutes, one sample per interval, oldest first:
    /// `{"interval_ms", "points": [{"at_ms", "due", "leased", "dead_letters"}]}`.
    pub(crate) fn outbox_series(&self) -> SeriesView {
        let ring = self.series.lock().unwrap_or_else(|p| p.into_inner());
        SeriesView {
            interval_ms: ring.interval_ms(),
            points: ring.points(),
        }
    }
}
