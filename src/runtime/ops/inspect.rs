//! What an operator reads: the outbox report, the bindings report, the depth series
//! and one event in full.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use serde::Serialize;
use serde_json::{json, Value};

use super::base::{OpError, Operations};
use crate::clock::now_ms;
use crate::outbox::model::{AttemptError, OutboxStats};
use crate::runtime::outbox_series::SeriesView;
use crate::store::EventQuery;
use crate::triggers::lifecycle::label;
use crate::triggers::{SignatureStatus, TriggerEvent};

/// What [`Operations::stats`] answers (`GET /api/v1/outbox/stats`, the
/// `outbox.stats` capability, the console's outbox cards): the outbox's depth in
/// total, per binding and per queue, and the events dropped for exceeding the
/// handler-hop limit. Serialised with the [`OutboxStats`] fields at the top level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutboxReport {
    /// The store's counts.
    #[serde(flatten)]
    pub stats: OutboxStats,
    /// Events a handler produced one hop past `max_depth`, dropped since start.
    pub depth_dropped: u64,
}

impl Operations {
    /// Outbox totals, per binding and queue, plus the depth drops.
    pub async fn stats(&self) -> Result<OutboxReport, OpError> {
        let stats = self.store.backend().stats(now_ms()).await?;
        Ok(OutboxReport {
            stats,
            depth_dropped: self.metrics.depth_dropped_total(),
        })
    }

    /// Every binding: its versions (number, state, fingerprint), whether it is paused,
    /// the active version's definition, whether this process delivers it, and its
    /// counts (`GET /api/v1/triggers`, the console's bindings pages).
    pub fn triggers(&self) -> TriggersReport {
        let current = self.triggers.current();
        let triggers = current
            .view()
            .into_iter()
            .map(|view| {
                let active = current.active(&view.id).cloned();
                let draining = view
                    .versions
                    .iter()
                    .any(|v| v.state == crate::triggers::versions::VersionState::Draining);
                let breaker_open = self.matcher.breakers().is_open(&view.id);
                let state = crate::runtime::binding_metrics::state_word(
                    view.paused,
                    breaker_open,
                    view.active.is_some(),
                    draining,
                );
                let (received, matched, last) = self.matcher.counts().binding_counts(&view.id);
                let ingest = Some(IngestCounts {
                    received,
                    matched,
                    last_received_ms: last.map(|s| (s * 1000.0) as i64),
                });
                BindingReport {
                    served: active.as_ref().map(|a| self.permits.serves(a)),
                    definition: active,
                    state,
                    counts: BindingFigures {
                        dispatch: self.metrics.counts(&view.id),
                        ingest,
                    },
                    view,
                }
            })
            .collect();
        TriggersReport { triggers }
    }
}

/// `GET /api/v1/triggers`: every binding, in configuration order.
#[derive(Debug, Clone, Serialize)]
pub struct TriggersReport {
    pub(crate) triggers: Vec<BindingReport>,
}

impl TriggersReport {
    /// The binding `id`, if known.
    pub(crate) fn find(&self, id: &str) -> Option<&BindingReport> {
        self.triggers.iter().find(|b| b.view.id == id)
    }
}

/// One binding as an operator sees it: its versions and whether it is paused (the
/// lifecycle's view, at the top level), the active version's definition and whether
/// this process delivers it (absent without an active version), its state word and
/// its counts.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BindingReport {
    #[serde(flatten)]
    pub(crate) view: crate::triggers::lifecycle::BindingView,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "active_definition"
    )]
    pub(crate) definition: Option<Arc<crate::triggers::binding::Binding>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) served: Option<bool>,
    /// `active`, `paused`, `draining`, `breaker_open`, … (`binding_metrics::state_word`).
    pub(crate) state: &'static str,
    pub(crate) counts: BindingFigures,
}

/// Serialises the definition behind its `Arc` (serde's `rc` feature is not on).
fn active_definition<S: serde::Serializer>(
    definition: &Option<Arc<crate::triggers::binding::Binding>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    definition.as_deref().serialize(s)
}

/// A binding's counts: the dispatcher's, and the ingress's when this runtime ingests.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BindingFigures {
    #[serde(flatten)]
    pub(crate) dispatch: crate::dispatch::metrics::BindingCounts,
    #[serde(flatten)]
    pub(crate) ingest: Option<IngestCounts>,
}

/// Events the ingress routed to a binding.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct IngestCounts {
    /// Events of its sources it saw.
    pub(crate) received: u64,
    /// Of those, events its filter took.
    pub(crate) matched: u64,
    /// When the last one arrived (unix ms).
    pub(crate) last_received_ms: Option<i64>,
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

/// One event in full, with what became of it ([`Operations::event_detail`],
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

impl Operations {
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
        let now = crate::clock::now_ms();
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
