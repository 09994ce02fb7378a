//! Enqueue (`outbox.enqueue`, `POST /api/v1/enqueue`) and one synchronous attempt of
//! a binding (`triggers.invoke`): the ways an event enters without a source.

use serde::Serialize;
use serde_json::Value;

use super::base::{OpError, Operations, API_SOURCE};
use crate::clock::now_ms;
use crate::context_keys::{CONTEXT_TRACEPARENT, CONTEXT_TRACESTATE, CONTEXT_TRACE_ID};
use crate::dispatch::deliver::AttemptInput;
use crate::dispatch::permits::NoPermit;
use crate::encoding::Payload;
use crate::outbox::model::{Destination, Enqueue, RunRecord};
use crate::outbox::outcome::{AttemptFailure, FailureKind};
use crate::store::Appended;
use crate::trace_context::TraceParent;
use crate::triggers::binding::Handler;
use crate::triggers::{new_event_id, root_context, SignatureStatus, TriggerEvent};

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
    /// The W3C `traceparent` the event is created under, if the request continues a
    /// trace (wins over `trace_id` when valid).
    pub traceparent: Option<String>,
    /// The `tracestate` that goes with `traceparent`.
    pub tracestate: Option<String>,
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

    /// Creates the event under this W3C context (a `traceparent` header's value, and
    /// the `tracestate` beside it if any), so its deliveries' spans nest under the
    /// caller's. An invalid `traceparent` is ignored.
    pub fn with_traceparent(
        mut self,
        traceparent: impl Into<String>,
        tracestate: Option<String>,
    ) -> Self {
        self.traceparent = Some(traceparent.into());
        self.tracestate = tracestate;
        self
    }
}

/// The trace an event made through the operations continues: the caller's W3C
/// context when it has a valid one, else its trace id alone, else a new trace.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiTrace<'a> {
    /// A trace id (32 hex digits), for a caller without a full context.
    pub trace_id: Option<&'a str>,
    /// The caller's `traceparent`.
    pub traceparent: Option<&'a str>,
    /// The caller's `tracestate`.
    pub tracestate: Option<&'a str>,
}

impl<'a> ApiTrace<'a> {
    /// The trace of an execute's context (`switchboard.trace_id`, `traceparent`,
    /// `tracestate`): an event a handler makes continues its delivery's trace.
    pub(crate) fn of_context(get: impl Fn(&str) -> Option<&'a str>) -> Self {
        ApiTrace {
            trace_id: get(CONTEXT_TRACE_ID),
            traceparent: get(CONTEXT_TRACEPARENT),
            tracestate: get(CONTEXT_TRACESTATE),
        }
    }

    /// The event's trace id, `traceparent` and `tracestate`.
    fn resolve(self) -> (String, String, String) {
        let parent = self.traceparent.and_then(TraceParent::parse);
        let state = parent
            .and(self.tracestate)
            .and_then(crate::trace_context::tracestate)
            .unwrap_or_default();
        let ctx = parent.unwrap_or_else(|| {
            let trace = self
                .trace_id
                .filter(|t| t.len() == 32)
                .and_then(|t| u128::from_str_radix(t, 16).ok())
                .unwrap_or_else(rand::random);
            root_context(trace, rand::random())
        });
        (ctx.trace_id_hex(), ctx.header(), state.to_owned())
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

impl Operations {
    fn api_event(
        &self,
        kind: String,
        dedupe_key: String,
        payload: Vec<u8>,
        trace: ApiTrace<'_>,
    ) -> TriggerEvent {
        let now = now_ms();
        let parsed = serde_json::from_slice(&payload).unwrap_or(Value::Null);
        let (trace_id, traceparent, tracestate) = trace.resolve();
        let mut event = TriggerEvent::new(
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
        );
        event.traceparent = traceparent;
        event.tracestate = tracestate;
        event
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
            ApiTrace {
                trace_id: req.trace_id.as_deref(),
                traceparent: req.traceparent.as_deref(),
                tracestate: req.tracestate.as_deref(),
            },
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
        trace: ApiTrace<'_>,
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
        let event = self.api_event("invoke".into(), new_event_id(now_ms()), payload, trace);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let deliver = self.deliver.clone();
        let store = self.store.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let started = now_ms();
            let t0 = tokio::time::Instant::now();
            let input = AttemptInput {
                binding: &binding,
                event_id: &event.id,
                trace_id: &event.trace_id,
                traceparent: TraceParent::parse(&event.traceparent),
                tracestate: &event.tracestate,
                attempt: 1,
                depth,
                dead_letter_id: None,
                backfill: None,
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
                metrics.sync_abandoned(&run.binding_id);
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
}
