//! The values that cross the [`InboundSource`](super::InboundSource) boundary: a raw
//! request in ([`InboundRequest`]), normalised events out ([`InboundEvent`]), the
//! answer to a delivery ([`Received`], [`Refusal`], [`InboundResponse`]), a poll's
//! page ([`Polled`]) and a stream's way to commit ([`EventSink`]).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;

/// One HTTP delivery as the listener received it, its body already read under the
/// source's limit.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct InboundRequest<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// Path and query as received (some signature schemes sign it).
    pub path: &'a str,
    /// Headers whose values are UTF-8, names lower-case, in arrival order.
    pub headers: &'a [(&'a str, &'a str)],
    /// The raw body, byte for byte (signatures are over it).
    pub body: &'a [u8],
    /// The peer's address, when the listener knows it.
    pub remote_addr: Option<SocketAddr>,
    /// When it was received, Unix milliseconds: the time to judge freshness against.
    pub received_at_ms: i64,
}

impl<'a> InboundRequest<'a> {
    /// A request, for tests and for hosting a source outside the runtime's listener.
    pub fn new(
        method: &'a str,
        path: &'a str,
        headers: &'a [(&'a str, &'a str)],
        body: &'a [u8],
        received_at_ms: i64,
    ) -> InboundRequest<'a> {
        InboundRequest {
            method,
            path,
            headers,
            body,
            remote_addr: None,
            received_at_ms,
        }
    }

    /// The first value of header `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// One event as a source normalised it. The runtime adds what every stored event has
/// (id, trace id, tenant, source, provider, receipt time, the delivery's redacted
/// headers) so those rules live in one place.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InboundEvent {
    /// The event's kind (`issues.opened`, `orders/create`): what bindings match on.
    pub kind: String,
    /// The key under which a redelivery of the same event is recognised (claimed for
    /// the source's `dedupe_retention_secs`).
    pub dedupe_key: String,
    /// When the provider says it happened, Unix milliseconds.
    pub occurred_at_ms: Option<i64>,
    /// The payload bindings filter on and handlers receive.
    pub payload: Value,
    /// The bytes stored as the event's body. `None`: the payload's JSON.
    pub body: Option<Vec<u8>>,
}

impl InboundEvent {
    /// An event of `kind`, deduplicated by `dedupe_key`, carrying `payload`.
    pub fn new(
        kind: impl Into<String>,
        dedupe_key: impl Into<String>,
        payload: Value,
    ) -> InboundEvent {
        InboundEvent {
            kind: kind.into(),
            dedupe_key: dedupe_key.into(),
            occurred_at_ms: None,
            payload,
            body: None,
        }
    }

    /// When it happened, Unix milliseconds.
    pub fn occurred_at(mut self, ms: Option<i64>) -> InboundEvent {
        self.occurred_at_ms = ms;
        self
    }

    /// Stores `body` (typically the raw delivery, so it can be verified again later)
    /// instead of the payload's JSON.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> InboundEvent {
        self.body = Some(body.into());
        self
    }
}

/// An HTTP answer a source chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundResponse {
    /// The status code.
    pub status: u16,
    /// Headers to send (name, value).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl InboundResponse {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: impl Into<String>) -> InboundResponse {
        InboundResponse {
            status,
            headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            body: body.into().into_bytes(),
        }
    }

    /// An `application/json` answer.
    pub fn json(status: u16, body: &Value) -> InboundResponse {
        InboundResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> InboundResponse {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A delivery refused: nothing is stored; the refusal is counted per source and
/// reason and (within the source's audit budget) written to the rejection audit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The status to answer (4xx for a delivery that will not get better).
    pub status: u16,
    /// A stable label for counters and the audit (`bad_signature`, `stale_timestamp`).
    pub reason: Cow<'static, str>,
    /// What was wrong, for the sender and the audit row. Never a secret.
    pub detail: String,
    /// Headers added to the answer (Slack's `x-slack-no-retry`).
    pub headers: Vec<(String, String)>,
    /// The answer to send instead of the runtime's `{"error", "message"}` JSON.
    pub response: Option<InboundResponse>,
}

impl Refusal {
    /// A refusal answered with `status` and the runtime's JSON error body.
    pub fn new(
        status: u16,
        reason: impl Into<Cow<'static, str>>,
        detail: impl Into<String>,
    ) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
            detail: detail.into(),
            headers: Vec::new(),
            response: None,
        }
    }

    /// Adds a header to the answer.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Refusal {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Answers with `response` instead of the runtime's JSON error body.
    pub fn respond_with(mut self, response: InboundResponse) -> Refusal {
        self.response = Some(response);
        self
    }
}

/// What a webhook source made of one delivery.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Received {
    /// Store these events (one, a batch, or none), then answer 200 with their ids:
    /// `{"id", "duplicate"}` for one event, `{"events": [{"id", "duplicate"}, …]}`
    /// otherwise. Every event of a batch is stored with its claim and outbox rows in
    /// ONE transaction.
    Events(Vec<InboundEvent>),
    /// Store these events as [`Received::Events`] does, then send `response` (a
    /// handshake such as Slack's URL verification, with no events; or a provider's
    /// own acknowledgement format). The answer waits for the commit: if the store
    /// cannot take the events, the sender gets 503 and retries.
    Respond {
        /// The answer.
        response: InboundResponse,
        /// The events to store first.
        events: Vec<InboundEvent>,
    },
    /// Refuse: store nothing.
    Reject(Refusal),
}

impl Received {
    /// One event.
    pub fn event(event: InboundEvent) -> Received {
        Received::Events(vec![event])
    }
}

/// A poll's result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Polled {
    /// The events read, oldest first.
    pub events: Vec<InboundEvent>,
    /// The cursor to pass to the next poll, committed with the events. `None` keeps
    /// the current one.
    pub cursor: Option<String>,
    /// When to poll next, Unix milliseconds. `None`: at once when `more` is set,
    /// otherwise after the source's configured interval.
    pub next_poll_at_ms: Option<i64>,
    /// There is more to read now (another page): poll again at once.
    pub more: bool,
}

impl Polled {
    /// `events`, then `cursor`.
    pub fn new(events: Vec<InboundEvent>, cursor: Option<String>) -> Polled {
        Polled {
            events,
            cursor,
            next_poll_at_ms: None,
            more: false,
        }
    }

    /// Poll next at `at_ms` (Unix milliseconds).
    pub fn next_poll_at(mut self, at_ms: i64) -> Polled {
        self.next_poll_at_ms = Some(at_ms);
        self
    }

    /// Another page is ready: poll again at once.
    pub fn more(mut self) -> Polled {
        self.more = true;
        self
    }
}

/// What a commit of events did: one entry per event, `true` for a new event, `false`
/// for a duplicate of one already stored.
pub type Committed = Vec<bool>;

/// The runtime's side of an [`EventSink`].
#[async_trait]
pub(crate) trait Commit: Send + Sync + 'static {
    async fn commit(&self, events: Vec<InboundEvent>, cursor: Option<String>) -> Result<Committed>;
}

/// Where a stream source hands its events: each call stores the events and the
/// stream's new cursor in ONE transaction and returns once both are durable, so a
/// reconnect resumes exactly after what was committed.
#[derive(Clone)]
pub struct EventSink {
    commit: Arc<dyn Commit>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSink")
    }
}

impl EventSink {
    pub(crate) fn new(commit: Arc<dyn Commit>) -> EventSink {
        EventSink { commit }
    }

    /// Stores `events` and moves the cursor to `cursor` (`None` keeps it), durably;
    /// returns, per event, whether it was new. An error means nothing was stored:
    /// return it from [`stream`](super::InboundSource::stream) and the runtime
    /// reconnects from the last committed cursor.
    pub async fn emit(
        &self,
        events: Vec<InboundEvent>,
        cursor: Option<String>,
    ) -> Result<Committed> {
        self.commit.commit(events, cursor).await
    }
}
