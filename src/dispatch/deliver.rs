//! Running one attempt: turning a claimed row into a handler call.
//!
//! [`Deliver`] is the seam between the dispatcher (which decides when and how often)
//! and the handlers (which do the work); [`Handlers`] is the runtime's implementation:
//! `invoke` handlers go through the gateway as an `invoke_request` over the runtime's
//! own registration, `local` handlers call a [`BaseConnector`] in this process, `http`
//! handlers POST to an endpoint through the runtime's outbound client
//! ([`super::http`]).
//! Tests and benchmarks put their own [`Deliver`] in its place.
//!
//! Every attempt carries its identity in the context (the keys below), so a handler
//! can deduplicate (`switchboard.event_id` + `switchboard.binding` is unique per
//! delivery) and tell a retry from a first attempt.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::connector::InvokeOptions;
use crate::connector::{BaseConnector, ExecuteContext};
use crate::context_keys::{
    CONTEXT_ATTEMPT, CONTEXT_BACKFILL, CONTEXT_BINDING, CONTEXT_BINDING_VERSION,
    CONTEXT_DEAD_LETTER_ATTEMPTS, CONTEXT_DEAD_LETTER_BINDING, CONTEXT_DEAD_LETTER_ERRORS,
    CONTEXT_DEAD_LETTER_FIRST_ATTEMPT_MS, CONTEXT_DEAD_LETTER_ID,
    CONTEXT_DEAD_LETTER_LAST_ATTEMPT_MS, CONTEXT_DEAD_LETTER_LAST_ERROR,
    CONTEXT_DEAD_LETTER_LAST_ERROR_KIND, CONTEXT_DEPTH, CONTEXT_EVENT_ID, CONTEXT_TRACEPARENT,
    CONTEXT_TRACESTATE, CONTEXT_TRACE_ID,
};
use crate::encoding::{decode_payload, Payload};
use crate::mux::RegistrationHandle;
use crate::outbound::http::HttpDelivery;
use crate::outbox::model::DeadLetter;
use crate::outbox::outcome::{AttemptFailure, FailureKind};
use crate::proto::PayloadEncoding;
use crate::trace_context::TraceParent;
use crate::triggers::binding::{Binding, Handler};

/// One attempt's input.
#[derive(Debug, Clone, Copy)]
pub struct AttemptInput<'a> {
    /// The binding.
    pub binding: &'a Binding,
    /// The event's id.
    pub event_id: &'a str,
    /// The event's trace id.
    pub trace_id: &'a str,
    /// The attempt's trace context (its span's, or the row's creation context when
    /// spans are not recorded): the handler's `traceparent`. `None` for a row whose
    /// event carries no context (stored before schema 10 and without a trace id).
    pub(crate) traceparent: Option<TraceParent>,
    /// The event's `tracestate`, passed on with `traceparent` (may be empty).
    pub(crate) tracestate: &'a str,
    /// This attempt's number (1-based).
    pub attempt: u32,
    /// Handler hops that produced the event.
    pub depth: u32,
    /// For a dead-letter handler's delivery: the dead letter.
    pub dead_letter_id: Option<i64>,
    /// The backfill job that enqueued the row, if one did.
    pub backfill: Option<i64>,
    /// The payload bytes (the event's body, or the row's own payload).
    pub payload: &'a [u8],
    /// For a dead-letter handler's delivery: the dead letter, whose facts (the
    /// attempts, the last error, the history's length, the first and last attempt
    /// times) go into the context, so the handler needs no lookup.
    pub dead_letter: Option<&'a DeadLetter>,
}

impl AttemptInput<'_> {
    /// The context entries every handler gets.
    pub fn context(&self) -> HashMap<String, String> {
        let mut values = HashMap::with_capacity(8);
        values.insert(CONTEXT_EVENT_ID.to_owned(), self.event_id.to_owned());
        values.insert(CONTEXT_TRACE_ID.to_owned(), self.trace_id.to_owned());
        if let Some(tp) = self.traceparent {
            values.insert(CONTEXT_TRACEPARENT.to_owned(), tp.header());
            if !self.tracestate.is_empty() {
                values.insert(CONTEXT_TRACESTATE.to_owned(), self.tracestate.to_owned());
            }
        }
        values.insert(CONTEXT_ATTEMPT.to_owned(), self.attempt.to_string());
        values.insert(CONTEXT_BINDING.to_owned(), self.binding.id.clone());
        if self.binding.version > 0 {
            values.insert(
                CONTEXT_BINDING_VERSION.to_owned(),
                format!("{}@v{}", self.binding.id, self.binding.version),
            );
        }
        values.insert(CONTEXT_DEPTH.to_owned(), self.depth.to_string());
        if let Some(id) = self.dead_letter_id {
            values.insert(CONTEXT_DEAD_LETTER_ID.to_owned(), id.to_string());
        }
        if let Some(id) = self.backfill {
            values.insert(CONTEXT_BACKFILL.to_owned(), id.to_string());
        }
        if let Some(dl) = self.dead_letter {
            let last = dl.errors.last();
            let facts = [
                (CONTEXT_DEAD_LETTER_BINDING, Some(dl.binding_id.clone())),
                (CONTEXT_DEAD_LETTER_ATTEMPTS, Some(dl.attempts.to_string())),
                (
                    CONTEXT_DEAD_LETTER_ERRORS,
                    Some(dl.errors.len().to_string()),
                ),
                (
                    CONTEXT_DEAD_LETTER_LAST_ERROR,
                    last.map(|e| e.message.clone()),
                ),
                (
                    CONTEXT_DEAD_LETTER_LAST_ERROR_KIND,
                    last.map(|e| e.kind.clone()),
                ),
                (
                    CONTEXT_DEAD_LETTER_FIRST_ATTEMPT_MS,
                    dl.errors.first().map(|e| e.at_ms.to_string()),
                ),
                (
                    CONTEXT_DEAD_LETTER_LAST_ATTEMPT_MS,
                    last.map(|e| e.at_ms.to_string()),
                ),
            ];
            for (key, value) in facts {
                if let Some(v) = value {
                    values.insert(key.to_owned(), v);
                }
            }
        }
        values
    }
}

/// Runs one attempt. The dispatcher bounds it by the binding's timeout and drops the
/// future when it passes, so implementations need no timer of their own.
#[async_trait]
pub trait Deliver: Send + Sync + 'static {
    /// Delivers `input`, returning the handler's answer or why it failed.
    async fn deliver(&self, input: AttemptInput<'_>) -> Result<Payload, AttemptFailure>;

    /// Whether an attempt of `binding` can run now. While it cannot (the gateway
    /// connection is down), the dispatcher leaves the binding's rows due instead of
    /// burning their attempts; they are delivered when it returns. Default: always.
    fn ready(&self, binding: &Binding) -> bool {
        let _ = binding;
        true
    }
}

/// The runtime's handlers: the gateway registration (for `invoke`), the local
/// connectors the embedding program registered (for `local`) and the outbound HTTP
/// client (for `http`).
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    gateway: Option<RegistrationHandle>,
    local: HashMap<String, Arc<dyn BaseConnector>>,
    http: Option<Arc<HttpDelivery>>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field(
                "gateway",
                &self.gateway.as_ref().map(|h| h.key().to_string()),
            )
            .field("local", &self.local.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Handlers {
    /// Handlers that deliver `invoke` bindings over `gateway` (if any) and `local` ones
    /// to `local`, keyed by the name bindings use.
    pub(crate) fn new(
        gateway: Option<RegistrationHandle>,
        local: HashMap<String, Arc<dyn BaseConnector>>,
    ) -> Handlers {
        Handlers {
            gateway,
            local,
            http: None,
        }
    }

    /// These handlers, delivering `http` bindings through `client`.
    pub(crate) fn with_http(mut self, client: Arc<HttpDelivery>) -> Handlers {
        self.http = Some(client);
        self
    }

    /// Whether this process can deliver `binding` at all (its connector is here, or it
    /// invokes and a gateway is configured). Rows of bindings it cannot deliver are
    /// left for a process that can.
    pub(crate) fn can_deliver(&self, binding: &Binding) -> bool {
        match &binding.handler {
            Handler::Invoke { .. } => self.gateway.is_some(),
            Handler::Local { connector, .. } => self.local.contains_key(connector),
            Handler::Queue { .. } => false,
            Handler::Http { .. } => self.http.is_some(),
        }
    }
}

/// Decodes the payload bytes in `encoding`; bytes that do not decode are the input's
/// fault, so the failure is a validation failure (422 on the sync path).
fn payload_in(bytes: &[u8], encoding: PayloadEncoding) -> Result<Payload, AttemptFailure> {
    decode_payload(bytes, encoding).map_err(|e| {
        AttemptFailure::new(
            FailureKind::Validation,
            format!(
                "the payload does not decode as {}: {e}",
                encoding.as_str_name()
            ),
        )
    })
}

#[async_trait]
impl Deliver for Handlers {
    fn ready(&self, binding: &Binding) -> bool {
        match &binding.handler {
            Handler::Invoke { .. } => self.gateway.as_ref().is_some_and(|g| g.arn().is_some()),
            _ => true,
        }
    }

    async fn deliver(&self, input: AttemptInput<'_>) -> Result<Payload, AttemptFailure> {
        match &input.binding.handler {
            Handler::Invoke {
                target,
                capability,
                encoding,
            } => {
                let gateway = self.gateway.as_ref().ok_or_else(|| {
                    AttemptFailure::new(FailureKind::Platform, "no [gateway] is configured")
                })?;
                // The decoded payload declares its own wire encoding (JSON, RAW_BYTES
                // or JSON_LINES); `InvokeOptions::encoding` is only for bytes in an
                // encoding this crate does not decode, and is refused otherwise.
                let payload = payload_in(input.payload, *encoding)?;
                let mut options = InvokeOptions::default().with_timeout(input.binding.timeout);
                options.context = input.context();
                let answer = gateway
                    .invoke(target, capability, payload, options)
                    .await
                    .map_err(|e| AttemptFailure::from_error(&e))?;
                answer.payload().map_err(|e| AttemptFailure::from_error(&e))
            }
            Handler::Local {
                connector,
                capability,
            } => {
                let local = self.local.get(connector).ok_or_else(|| {
                    AttemptFailure::new(
                        FailureKind::Platform,
                        format!("no local connector {connector:?} is registered with the runtime"),
                    )
                })?;
                // JSON when it parses, the raw bytes otherwise: a local connector gets
                // what the sender sent.
                let payload = payload_in(input.payload, PayloadEncoding::Json)
                    .unwrap_or_else(|_| Payload::Bytes(input.payload.to_vec()));
                let request_id =
                    format!("{}:{}:{}", input.binding.id, input.event_id, input.attempt);
                let context = match &self.gateway {
                    Some(g) => {
                        ExecuteContext::attached(request_id, input.context(), g.invoker.clone())
                    }
                    None => ExecuteContext::detached(request_id, input.context()),
                };
                local
                    .execute_with_context(payload, Some(capability), &context)
                    .await
                    .map_err(|e| AttemptFailure::from_error(&e))
            }
            Handler::Http {
                url,
                secret_env,
                secret_file,
                timeout,
                retry_4xx,
            } => {
                let client = self.http.as_ref().ok_or_else(|| {
                    AttemptFailure::new(FailureKind::Platform, "no outbound HTTP client is set up")
                })?;
                let target = super::http::HttpTarget {
                    url,
                    secret_env,
                    secret_file,
                    timeout: *timeout,
                    retry_4xx: *retry_4xx,
                };
                let context = input.context();
                let delivery = super::http::HttpInput {
                    event_id: input.event_id,
                    binding_id: &input.binding.id,
                    payload: input.payload,
                    context: &context,
                };
                super::http::deliver(client, delivery, target).await
            }
            Handler::Queue { queue } => Err(AttemptFailure::new(
                FailureKind::Platform,
                format!(
                    "binding {:?} feeds queue {queue:?}; queues are pulled, not dispatched",
                    input.binding.id
                ),
            )),
        }
    }
}
