//! What a span is made of, shared by the span facade (`telemetry/mod.rs`) and its
//! OpenTelemetry half (`otel.rs`): kinds, relationships, attributes, and the count of
//! spans lost on the way to the collector.
#![cfg_attr(not(all(feature = "runtime", feature = "gateway")), allow(dead_code))]

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::trace_context::TraceParent;

/// A span's kind, as OpenTelemetry defines them (the messaging conventions use
/// `Producer` for the span that creates a message and `Consumer` for processing it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanKind {
    /// Makes a remote call and waits for it (the gateway's round trip).
    Client,
    /// Creates messages for later processing (ingress storing an event).
    Producer,
    /// Processes a message (a dispatch attempt).
    Consumer,
}

/// How a dispatch attempt's span relates to its row's creation context
/// (`[telemetry] span_relationship`).
///
/// The messaging conventions require a link to the creation context (processing may
/// be batched, and a parent cannot be several contexts) and allow it as the parent
/// when one message is processed, which is always so here. The default, `Child`,
/// therefore does both: the attempt is a child of the context AND links it, so one
/// trace follows an event from its sender into the connector. `Link` starts each
/// attempt in a trace of its own that links back: for backends that handle traces
/// spanning hours badly (a row retried over a day makes its trace a day long).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Relationship {
    /// Child of the creation context, and linked to it.
    #[default]
    Child,
    /// A new trace, linked to the creation context.
    Link,
}

/// How a span relates to the context it starts from.
#[derive(Debug, Clone, Copy)]
// Without `otel` the relationship is read by nobody: an unrecorded span passes its
// parent on whatever it is.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) enum Parent {
    /// No context: a new root.
    None,
    /// A plain child of a remote context.
    Child(TraceParent),
    /// A message's processing: by [`Relationship`].
    Message(TraceParent, Relationship),
}

impl Parent {
    /// A plain child of `ctx`, or a root without one.
    pub(crate) fn child_of(ctx: Option<TraceParent>) -> Self {
        ctx.map_or(Parent::None, Parent::Child)
    }

    pub(crate) fn context(self) -> Option<TraceParent> {
        match self {
            Parent::None => None,
            Parent::Child(c) | Parent::Message(c, _) => Some(c),
        }
    }
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A string.
    Str(Cow<'static, str>),
    /// An integer.
    Int(i64),
}

impl From<&'static str> for Value {
    fn from(s: &'static str) -> Self {
        Value::Str(Cow::Borrowed(s))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(Cow::Owned(s))
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

/// An attribute: a key from the conventions (or `switchboard.*`) and its value.
pub(crate) type Attribute = (&'static str, Value);

/// Spans lost before reaching the collector: the export queue was full, or an export
/// failed or timed out (a collector that is down loses spans, never deliveries).
/// Shown as `switchboard_spans_dropped_total` by both processes' `/metrics`.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// See [`DROPPED`].
pub(crate) fn spans_dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) fn count_dropped(n: u64) {
    DROPPED.fetch_add(n, Ordering::Relaxed);
}
