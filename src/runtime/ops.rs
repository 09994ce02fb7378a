//! The deliver half's operations, shared by the admin API (HTTP) and the runtime's own
//! registration (its capabilities, executed through the gateway): enqueue, one
//! synchronous attempt of a binding, queue receive/ack/nack, dead letters, stats.
//! Both front ends translate [`OpError`] into their own status codes, so a caller
//! gets the same answer whichever way it came.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::dispatch::deliver::{AttemptInput, Deliver};
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::permits::{NoPermit, Permits};
use crate::encoding::Payload;
use crate::error::Error;
use crate::outbox::model::{
    DeadLetter, DeadLetterQuery, Destination, Enqueue, OutboxStats, ReceiveRequest, Received,
    RunRecord,
};
use crate::outbox::outcome::{AttemptFailure, FailureKind};
use crate::store::{now_ms, Appended, Store};
use crate::triggers::binding::Handler;
use crate::triggers::live::LiveTriggers;
use crate::triggers::{new_event_id, trace_id_from, SignatureStatus, TriggerEvent};

/// The source id of events that enter through `outbox.enqueue`, `triggers.invoke` and
/// their HTTP twins. Configured source ids cannot contain `@`, so it never collides.
pub(crate) const API_SOURCE: &str = "@api";
/// Most messages one `queue.receive` hands out.
pub(crate) const MAX_RECEIVE: usize = 100;
/// Messages a `queue.receive` hands out when it names no maximum.
pub(crate) const DEFAULT_RECEIVE: usize = 10;
/// Largest page of dead letters.
pub(crate) const MAX_DEAD_LETTER_PAGE: usize = 500;

/// A queue's limits, from `[[queues]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueLimits {
    /// How long a received message stays invisible to other receivers.
    pub visibility: Duration,
    /// Receives after which a message is dead-lettered instead.
    pub max_receives: u32,
}

/// Why an operation failed.
#[derive(Debug)]
pub enum OpError {
    /// The named binding, queue or dead letter does not exist.
    NotFound(String),
    /// The request is malformed or names something that cannot take it.
    Invalid(String),
    /// No permit is free for the binding (its `max_concurrent` or the process's
    /// `max_in_flight`).
    Busy(String),
    /// The store failed; nothing was changed.
    Store(Error),
    /// The synchronous attempt ran and failed.
    Failed(AttemptFailure),
    /// The request conflicts with the current state (a binding id already
    /// registered); nothing was changed.
    Conflict(String),
}

impl OpError {
    /// The HTTP status: 404, 422, 503, 503 (store) or the failure's own status.
    pub fn status(&self) -> u16 {
        match self {
            OpError::NotFound(_) => 404,
            OpError::Conflict(_) => 409,
            OpError::Invalid(_) => 422,
            OpError::Busy(_) | OpError::Store(_) => 503,
            OpError::Failed(f) => f.kind.http_status(),
        }
    }

    /// A stable label for the error body.
    pub fn code(&self) -> &'static str {
        match self {
            OpError::NotFound(_) => "not_found",
            OpError::Conflict(_) => "conflict",
            OpError::Invalid(_) => "validation",
            OpError::Busy(_) => "overloaded",
            OpError::Store(_) => "store_unavailable",
            OpError::Failed(f) => f.kind.as_str(),
        }
    }

    /// What went wrong, for a person.
    pub fn message(&self) -> String {
        match self {
            OpError::NotFound(m)
            | OpError::Invalid(m)
            | OpError::Busy(m)
            | OpError::Conflict(m) => m.clone(),
            OpError::Store(e) => e.to_string(),
            OpError::Failed(f) => f.message.clone(),
        }
    }

    /// As the crate's error, for an execute answer: the remote caller sees its code.
    pub fn into_error(self) -> Error {
        match self {
            OpError::NotFound(m) => Error::NotFound(m),
            OpError::Conflict(m) => Error::Conflict(m),
            OpError::Invalid(m) => Error::Payload(m),
            OpError::Busy(m) => Error::Overloaded(m),
            OpError::Store(e) => e,
            OpError::Failed(f) => Error::Connector(format!("{}: {}", f.kind.as_str(), f.message)),
        }
    }
}

impl From<Error> for OpError {
    /// A store error, except the group commit's "queue full" ([`Error::Overloaded`]),
    /// which is a load signal (503 `overloaded`) rather than a store fault, and the
    /// lifecycle's refusals: an invalid binding (422), an unknown one (404), a
    /// conflicting one (409).
    fn from(e: Error) -> Self {
        match e {
            Error::Overloaded(m) => OpError::Busy(m),
            Error::Config(m) | Error::Payload(m) => OpError::Invalid(m),
            Error::NotFound(m) => OpError::NotFound(m),
            Error::Conflict(m) => OpError::Conflict(m),
            e => OpError::Store(e),
        }
    }
}

/// An enqueue request: build one with [`EnqueueRequest::to_binding`] or
/// [`EnqueueRequest::to_queue`] and the `with_*` setters (the struct is
/// `#[non_exhaustive]`, so new options can come without breaking callers).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EnqueueRequest {
    /// The binding to deliver it (exactly one of `binding` and `queue`).
    pub binding: Option<String>,
    /// The queue to put it in.
    pub queue: Option<String>,
    /// The payload, stored as the event's body.
    pub payload: Vec<u8>,
    /// The event kind. Default `enqueue`.
    pub kind: Option<String>,
    /// Repeating a request with the same key (for the same binding or queue) within
    /// the event retention enqueues nothing more.
    pub idempotency_key: Option<String>,
    /// Handler hops behind this request (0 from outside; the depth of the delivery it
    /// was made in, plus one, from inside a handler).
    pub depth: u32,
    /// The trace id to keep, if the request continues a trace.
    pub trace_id: Option<String>,
}

impl EnqueueRequest {
    /// Delivers `payload` (stored as the event's body) through the named binding.
    pub fn to_binding(binding: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        EnqueueRequest {
            binding: Some(binding.into()),
            payload: payload.into(),
            ..EnqueueRequest::default()
        }
    }

    /// Puts `payload` in the named pull queue.
    pub fn to_queue(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        EnqueueRequest {
            queue: Some(queue.into()),
            payload: payload.into(),
            ..EnqueueRequest::default()
        }
    }

    /// The event kind bindings filter on. Default `enqueue`.
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// A key that makes a repeated request (same binding or queue, within the event
    /// retention) enqueue nothing more and return the first event's id.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Continues this trace instead of starting a new one.
    pub fn with_trace_id(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }
}

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Enqueued {
    /// The event id (an earlier one's, for a repeated idempotency key).
    pub event_id: String,
    /// The idempotency key had been used: nothing new was enqueued.
    pub duplicate: bool,
    /// Past the maximum depth: dropped and counted, not stored.
    pub dropped: bool,
}

/// What [`DeliverOps::stats`] answers (`GET /api/v1/outbox/stats`, the
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

/// The operations, over one store, registry and set of handlers.
pub struct DeliverOps {
    pub(crate) store: Store,
    pub(crate) triggers: Arc<LiveTriggers>,
    pub(crate) control: Arc<super::trigger_control::TriggerControl>,
    /// Ingest's per-binding counts (received, matched, last received).
    pub(crate) ingest: Option<Arc<crate::webhooks::metrics::IngressMetrics>>,
    /// Ingest's filter breakers (a binding's `breaker_open` state).
    pub(crate) breakers: Option<Arc<crate::webhooks::breaker::Breakers>>,
    pub(crate) deliver: Arc<dyn Deliver>,
    pub(crate) permits: Permits,
    pub(crate) metrics: Arc<DispatchMetrics>,
    pub(crate) queues: HashMap<String, QueueLimits>,
    pub(crate) max_depth: u32,
    pub(crate) retention_ms: i64,
    /// The outbox depth over the last minutes (`outbox_series`), sampled by a task
    /// the runtime starts.
    pub(crate) series: Arc<std::sync::Mutex<super::outbox_series::SeriesRing>>,
    pub(crate) tenant: String,
}

impl std::fmt::Debug for DeliverOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliverOps").finish_non_exhaustive()
    }
}

impl DeliverOps {
    fn api_event(
        &self,
        kind: String,
        dedupe_key: String,
        payload: Vec<u8>,
        trace: Option<&str>,
    ) -> TriggerEvent {
        let now = now_ms();
        let parsed = serde_json::from_slice(&payload).unwrap_or(Value::Null);
        let trace_id = match trace {
            Some(t) if t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit()) => t.to_owned(),
            _ => trace_id_from(None),
        };
        TriggerEvent::new(
            API_SOURCE,
            "api",
            kind,
            now,
            None,
            dedupe_key,
            trace_id,
            &self.tenant,
            Default::default(),
            payload,
            parsed,
            SignatureStatus::Internal,
        )
    }

    /// Stores an event for one binding or queue, with its row, in one transaction.
    pub async fn enqueue(&self, req: EnqueueRequest) -> Result<Enqueued, OpError> {
        if req.depth > self.max_depth {
            self.metrics.depth_dropped();
            tracing::warn!(
                depth = req.depth,
                max = self.max_depth,
                "handler-produced event past the maximum depth; dropped"
            );
            return Ok(Enqueued {
                event_id: String::new(),
                duplicate: false,
                dropped: true,
            });
        }
        let (target, row) = match (&req.binding, &req.queue) {
            (Some(b), None) => {
                let current = self.triggers.current();
                let binding = current
                    .active(b)
                    .ok_or_else(|| OpError::NotFound(format!("no trigger binding {b:?}")))?;
                if binding.is_dead_letter_handler() {
                    return Err(OpError::Invalid(format!(
                        "binding {b:?} is a dead-letter handler; it takes dead letters only"
                    )));
                }
                (format!("binding:{b}"), None)
            }
            (None, Some(q)) => {
                if !self.queues.contains_key(q) {
                    return Err(OpError::NotFound(format!("no queue {q:?}")));
                }
                let mut row = Enqueue::dispatch(format!("queue:{q}"), "");
                row.destination = Destination::Queue(q.clone());
                row.depth = req.depth;
                (format!("queue:{q}"), Some(row))
            }
            _ => {
                return Err(OpError::Invalid(
                    "name exactly one of `binding` and `queue`".into(),
                ))
            }
        };
        let event_id_hint = new_event_id(now_ms());
        let dedupe_key = match &req.idempotency_key {
            Some(k) if k.is_empty() || k.len() > 256 => {
                return Err(OpError::Invalid(
                    "an idempotency key is 1 to 256 characters".into(),
                ))
            }
            Some(k) => format!("{target}:{k}"),
            None => event_id_hint,
        };
        let event = self.api_event(
            req.kind.unwrap_or_else(|| "enqueue".into()),
            dedupe_key,
            req.payload,
            req.trace_id.as_deref(),
        );
        let row = match row {
            Some(r) => r,
            None => {
                let current = self.triggers.current();
                let binding = current
                    .active(req.binding.as_deref().unwrap_or_default())
                    .ok_or_else(|| {
                        OpError::NotFound(format!("no trigger binding {:?}", req.binding))
                    })?;
                current
                    .routing()
                    .enqueue_for(binding, &event, req.depth)
                    .map_err(|e| OpError::Invalid(format!("binding {:?}: {e}", binding.id)))?
            }
        };
        let event_id = event.id.clone();
        match self
            .store
            .append_enqueue(event, now_ms() + self.retention_ms, vec![row])
            .await?
        {
            Appended::Stored(_) => Ok(Enqueued {
                event_id,
                duplicate: false,
                dropped: false,
            }),
            Appended::Duplicate(existing) => Ok(Enqueued {
                event_id: existing,
                duplicate: true,
                dropped: false,
            }),
        }
    }

    /// Runs ONE attempt of `binding_id` with `payload`, never retried, and answers with
    /// the handler's result. The attempt runs in a task of its own: if the caller goes
    /// away (its HTTP connection closes, its invoke times out), the attempt still ends
    /// and its result is recorded as abandoned.
    pub async fn invoke_now(
        &self,
        binding_id: &str,
        payload: Vec<u8>,
        depth: u32,
        trace_id: Option<&str>,
    ) -> Result<Payload, OpError> {
        let binding = self
            .triggers
            .current()
            .active(binding_id)
            .cloned()
            .ok_or_else(|| OpError::NotFound(format!("no trigger binding {binding_id:?}")))?;
        if let Handler::Queue { queue } = &binding.handler {
            return Err(OpError::Invalid(format!(
                "binding {binding_id:?} feeds queue {queue:?}; there is no handler to invoke"
            )));
        }
        let permits = self.permits.try_acquire(&binding).map_err(|e| match e {
            NoPermit::NotServed => OpError::Failed(AttemptFailure::new(
                FailureKind::Platform,
                format!("this runtime cannot deliver binding {binding_id:?} (its connector or gateway is not here)"),
            )),
            NoPermit::Busy => OpError::Busy(format!(
                "binding {binding_id:?} is at its max_concurrent ({}) or the runtime at its max_in_flight",
                binding.max_concurrent
            )),
        })?;
        let event = self.api_event("invoke".into(), new_event_id(now_ms()), payload, trace_id);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let deliver = self.deliver.clone();
        let store = self.store.clone();
        tokio::spawn(async move {
            let started = now_ms();
            let t0 = tokio::time::Instant::now();
            let input = AttemptInput {
                binding: &binding,
                event_id: &event.id,
                trace_id: &event.trace_id,
                attempt: 1,
                depth,
                dead_letter_id: None,
                payload: &event.body,
                dead_letter: None,
            };
            let result = match tokio::time::timeout(binding.timeout, deliver.deliver(input)).await {
                Ok(r) => r,
                Err(_) => Err(AttemptFailure::new(
                    FailureKind::Timeout,
                    format!("the handler did not answer within {:?}", binding.timeout),
                )),
            };
            // The permits go before the answer, so a caller that invokes again as soon
            // as it has one is not refused by its own finished attempt.
            drop(permits);
            let (status, error) = match &result {
                Ok(_) => ("ok".to_owned(), None),
                Err(f) => (f.kind.as_str().to_owned(), Some(f.message.clone())),
            };
            let abandoned = tx.send(result).is_err();
            let run = RunRecord {
                binding_id: binding.id.clone(),
                event_id: event.id.clone(),
                started_at_ms: started,
                duration_ms: t0.elapsed().as_millis() as i64,
                status,
                error,
                abandoned,
                fingerprint: binding.fingerprint.clone(),
            };
            if abandoned {
                tracing::info!(binding = %run.binding_id, status = %run.status, "sync invocation finished after its caller left; recorded as abandoned");
            }
            if let Err(e) = store.backend().record_run(&run).await {
                tracing::warn!(error = %e, "could not record a sync invocation");
            }
        });
        match rx.await {
            Ok(Ok(payload)) => Ok(payload),
            Ok(Err(f)) => Err(OpError::Failed(f)),
            Err(_) => Err(OpError::Failed(AttemptFailure::new(
                FailureKind::Platform,
                "the attempt task ended without an answer",
            ))),
        }
    }

    fn queue(&self, name: &str) -> Result<QueueLimits, OpError> {
        self.queues
            .get(name)
            .copied()
            .ok_or_else(|| OpError::NotFound(format!("no queue {name:?}")))
    }

    /// Receives up to `max` messages (default [`DEFAULT_RECEIVE`], at most
    /// [`MAX_RECEIVE`]), invisible to others for `visibility` (default: the queue's).
    pub async fn receive(
        &self,
        queue: &str,
        max: Option<usize>,
        visibility: Option<Duration>,
    ) -> Result<Received, OpError> {
        let limits = self.queue(queue)?;
        let req = ReceiveRequest {
            queue: queue.to_owned(),
            max: max.unwrap_or(DEFAULT_RECEIVE).clamp(1, MAX_RECEIVE),
            now_ms: now_ms(),
            visibility_ms: visibility.unwrap_or(limits.visibility).as_millis() as i64,
            max_receives: limits.max_receives,
        };
        Ok(self.store.backend().receive(&req).await?)
    }

    /// Deletes a received message; `false` when the receipt no longer holds it.
    pub async fn ack(&self, queue: &str, id: i64, receipt: i64) -> Result<bool, OpError> {
        self.queue(queue)?;
        Ok(self.store.backend().ack(queue, id, receipt).await?)
    }

    /// Makes a received message visible again after `delay`.
    pub async fn nack(
        &self,
        queue: &str,
        id: i64,
        receipt: i64,
        delay: Duration,
    ) -> Result<bool, OpError> {
        self.queue(queue)?;
        let at = now_ms() + delay.as_millis() as i64;
        Ok(self.store.backend().nack(queue, id, receipt, at).await?)
    }

    /// Dead letters, newest first.
    pub async fn dead_letters(
        &self,
        mut query: DeadLetterQuery,
    ) -> Result<Vec<DeadLetter>, OpError> {
        query.limit = query.limit.clamp(1, MAX_DEAD_LETTER_PAGE);
        Ok(self.store.backend().dead_letters(&query).await?)
    }

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
                let breaker_open = self.breakers.as_ref().is_some_and(|b| b.is_open(&view.id));
                let state = super::binding_metrics::state_word(
                    view.paused,
                    breaker_open,
                    view.active.is_some(),
                    draining,
                );
                let ingest = self.ingest.as_ref().map(|ingest| {
                    let (received, matched, last) = ingest.binding_counts(&view.id);
                    IngestCounts {
                        received,
                        matched,
                        last_received_ms: last.map(|s| (s * 1000.0) as i64),
                    }
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
