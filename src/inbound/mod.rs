//! Inbound connectors: the public extension point through which events enter the
//! runtime (feature `runtime`).
//!
//! A connector developer implements [`InboundConnector`] for a provider (`github`,
//! `shopify`, an internal system): a stable provider id, the [`SourceKind`]s it can
//! back, and [`InboundConnector::init`], which checks one `[[sources]]` entry's options
//! and returns the running [`InboundSource`]. The runtime then drives that source by
//! its kind:
//!
//! - **webhook**: every `POST /hooks/{source}` (after the source's rate limit and body
//!   limit) goes to [`InboundSource::receive`], which verifies and normalises the raw
//!   request into one event, a batch, an immediate response with events, or a
//!   refusal ([`Received`]);
//! - **poll**: [`InboundSource::poll`] is called with the last committed cursor and
//!   returns events, the next cursor and when to poll again ([`Polled`]); the events
//!   and the cursor commit in one transaction;
//! - **stream**: [`InboundSource::stream`] holds a long-lived connection and hands
//!   events with their cursor to an [`EventSink`], which commits them together; the
//!   runtime reconnects with backoff and jitter from the stored cursor.
//!
//! Whatever the kind, the runtime turns each [`InboundEvent`] into a stored event
//! (id, trace id, tenant, redacted headers), claims its dedupe key, matches the
//! bindings and writes the outbox rows, all in the transaction that stores the event.
//! Every built-in provider (GitHub, Slack, Linear, Notion, Stripe, Standard Webhooks,
//! generic HMAC, cron, `http_poll`) is an implementation of this trait registered by
//! default; a program adds its own with `RuntimeBuilder::inbound_connector`.
//!
//! Each source is also a registration on the runtime's gateway connection (connector
//! type = provider id, instance = source id): its [`InboundSource::capabilities`] are
//! the connector's outbound side, which other connectors call through the execute
//! channel.
//!
//! This module holds only the contract (types and traits, no I/O); the runtime's
//! `ingress` layer hosts the sources and holds the built-ins.

pub(crate) mod context;
pub(crate) mod event;
pub(crate) mod metrics;
pub(crate) mod rate_limit;

use std::time::Instant;

use async_trait::async_trait;

use crate::connector::{Capability, ExecuteContext};
use crate::encoding::Payload;
use crate::error::{Error, Result};

pub(crate) use context::{ContextParts, StateBackend};
pub use context::{SourceContext, SourceState};
pub(crate) use event::Commit;
pub use event::{
    Committed, EventSink, InboundEvent, InboundRequest, InboundResponse, Polled, Received, Refusal,
};
pub use metrics::SourceMetrics;
pub use rate_limit::{RateLimit, RateLimiter};

/// How a source produces events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SourceKind {
    /// The provider POSTs deliveries to `/hooks/{source}`.
    Webhook,
    /// The runtime asks the provider for what is new, on the source's schedule.
    Poll,
    /// The source holds a connection on which the provider pushes events.
    Stream,
}

impl SourceKind {
    /// The label used in listings and the registration's metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Webhook => "webhook",
            SourceKind::Poll => "poll",
            SourceKind::Stream => "stream",
        }
    }
}

/// A provider of inbound events: the factory of its [`InboundSource`]s, one per
/// `[[sources]]` entry that names its [`provider`](Self::provider).
///
/// Register one with `Runtime::builder(config).inbound_connector(MyProvider)`; a
/// provider id registered twice is a configuration error, and a program's connector
/// may not take a built-in's id (register under another id and point the sources at
/// it), so a source's behaviour never depends on registration order.
#[async_trait]
pub trait InboundConnector: Send + Sync + 'static {
    /// The stable provider id: what `provider = "…"` names in `[[sources]]`, what
    /// stored events carry as their provider, and the connector type of the source's
    /// registration on the gateway. Letters, digits and `_`.
    fn provider(&self) -> &str;

    /// The kinds of source this connector can back. Each source picks one
    /// ([`InboundSource::kind`]), which must be among these.
    fn kinds(&self) -> Vec<SourceKind>;

    /// Checks one source's options ([`SourceContext::options`], errors naming the
    /// source and the option), reads what it needs (secrets, stored state) and
    /// returns the running source. Called once per source when the runtime starts; an
    /// error stops the start, so a misconfigured source is found at once rather than
    /// at its first delivery.
    async fn init(&self, ctx: SourceContext) -> Result<Box<dyn InboundSource>>;

    /// A JSON Schema of the payload of this provider's events, advertised in the
    /// source's registration metadata (`event_schema`). Default: none.
    fn event_schema(&self) -> Option<serde_json::Value> {
        None
    }
}

/// One configured source at run time, as its connector's [`InboundConnector::init`]
/// made it. Only [`kind`](Self::kind) is required; the runtime calls the method of
/// that kind (a webhook source's [`receive`](Self::receive), a poll source's
/// [`poll`](Self::poll), a stream source's [`stream`](Self::stream)), and the
/// defaults of the others refuse.
#[async_trait]
pub trait InboundSource: Send + Sync + 'static {
    /// How this source produces events.
    fn kind(&self) -> SourceKind;

    /// Told which bindings match this source's events, after init and after every
    /// binding reload (a provider that subscribes per event type can narrow its
    /// subscription). Default: nothing.
    async fn activate(&self, bindings: &[String]) -> Result<()> {
        let _ = bindings;
        Ok(())
    }

    /// Webhook kind: verify and normalise one raw request. Runs with the ingress
    /// limits already applied (rate limit, body limit) and under the listener's
    /// request deadline, so it must not wait on anything slow; whatever events it
    /// returns are stored (with their claims and outbox rows) before the sender gets
    /// its answer. Default: refuse with 405.
    async fn receive(&self, request: &InboundRequest<'_>) -> Received {
        let _ = request;
        Received::Reject(Refusal::new(
            405,
            "not_accepted",
            "this source takes no HTTP deliveries",
        ))
    }

    /// Poll kind: what is new since `cursor` (the last committed one; `None` at the
    /// first poll), at `now_ms`. The runtime stores [`Polled::events`] and the new
    /// cursor in ONE transaction, never runs two polls of one source at once, and
    /// after an error polls again with backoff and jitter from the same cursor.
    async fn poll(&self, cursor: Option<&str>, now_ms: i64) -> Result<Polled> {
        let _ = (cursor, now_ms);
        Err(Error::Config("this source is not a poll source".into()))
    }

    /// Stream kind: connect, resume after `cursor` (the last committed one), and hand
    /// events to `sink` until the connection ends. Return `Ok(())` when the provider
    /// closed the stream, an error when it failed; either way the runtime reconnects
    /// with backoff and jitter from the last cursor `sink` committed. The future is
    /// dropped at shutdown.
    async fn stream(&self, cursor: Option<String>, sink: EventSink) -> Result<()> {
        let _ = (cursor, sink);
        Err(Error::Config("this source is not a stream source".into()))
    }

    /// The outbound side: capabilities other connectors (and bindings' `invoke`
    /// handlers) call through the gateway, on this source's registration. Default:
    /// none.
    fn capabilities(&self) -> Vec<Capability> {
        Vec::new()
    }

    /// Answers one call of a [`capability`](Self::capabilities). Default: unknown
    /// capability.
    async fn execute(
        &self,
        capability: Option<&str>,
        payload: Payload,
        ctx: &ExecuteContext,
    ) -> Result<Payload> {
        let _ = (payload, ctx);
        Err(Error::Connector(format!(
            "this source has no capability {:?}",
            capability.unwrap_or("")
        )))
    }

    /// Names of request headers that carry a secret in this source's deliveries,
    /// beyond the standard list the runtime always blanks (`authorization`, the
    /// providers' signature headers, cookies): blanked in the stored event.
    /// Default: none.
    fn secret_headers(&self) -> &[String] {
        &[]
    }

    /// What the admin API shows of this source beside the runtime's own fields, as
    /// a JSON object (a schedule, whether a verification token was captured): the
    /// source list shows `full = false`, `GET /api/v1/sources/{id}` `full = true`
    /// (for something an operator must copy, shown nowhere else). Never a secret the
    /// operator did not need. Default: nothing.
    async fn describe(&self, full: bool) -> serde_json::Value {
        let _ = full;
        serde_json::Value::Null
    }

    /// The runtime is stopping: finish or abandon what is in flight by `deadline`.
    /// Default: nothing.
    async fn shutdown(&self, deadline: Instant) {
        let _ = deadline;
    }
}
