//! Spans over the W3C trace context: the one place the crate starts, annotates and
//! ends a span, so that every hop (ingress, a dispatch attempt, the gateway's round
//! trip, the SDK's execute) is traced the same way whether spans are exported or not.
//!
//! Without the `otel` feature, or with it but no exporter installed
//! ([`crate::Telemetry::from_env`] found no `OTEL_*` endpoint), a [`Span`] records
//! nothing and costs nothing beyond its context: it passes its parent's context on
//! unchanged (the next hop's span then becomes the child of the last span anybody
//! recorded), or, without a parent, starts a new root. Attributes are taken as a
//! closure, called only when the span records, so an unexported hop builds none.
//!
//! With an exporter installed, a span's context is its own, so the next hop nests
//! under it; it is a real OpenTelemetry span (`otel.rs`) when the sampler keeps it,
//! and a context marked not sampled when it does not (so the whole trace is sampled,
//! or not, as one).
// The SDK uses the execute span; the runtime and the gateway the rest.
#![cfg_attr(not(all(feature = "runtime", feature = "gateway")), allow(dead_code))]

use crate::trace_context::TraceParent;

pub(crate) mod model;
#[cfg(feature = "otel")]
pub(crate) mod otel;

#[cfg_attr(
    not(all(feature = "runtime", feature = "gateway")),
    allow(unused_imports)
)]
pub(crate) use model::{spans_dropped, Attribute, Parent, Relationship, SpanKind};

/// One hop's span (module doc). Ends when [`Span::end`] is called or it is dropped.
#[derive(Debug)]
pub(crate) struct Span {
    context: TraceParent,
    /// Whether `context` is this span's own (a tracer made it, sampled or not) rather
    /// than the parent's passed through.
    own: bool,
    #[cfg(feature = "otel")]
    live: Option<otel::Live>,
}

impl Span {
    /// Starts a span named `{operation} {target}` (the conventions' shape, e.g.
    /// `process to-tickets`): recorded when an exporter is installed and its sampler
    /// keeps it, else a context only. `tracestate` is the sender's, carried in the
    /// span's context. The name is formatted, and `attributes` called, only for a span
    /// that records: the sampler sees the name, kind, parent and links but no
    /// attributes, which the built-in samplers do not read, so a span sampled out
    /// allocates nothing.
    pub(crate) fn start(
        operation: &'static str,
        target: &str,
        kind: SpanKind,
        parent: Parent,
        tracestate: &str,
        attributes: impl FnOnce() -> Vec<Attribute>,
    ) -> Span {
        #[cfg(feature = "otel")]
        if let Some((live, context)) =
            otel::start((operation, target), kind, parent, tracestate, attributes)
        {
            return Span {
                context,
                own: true,
                live,
            };
        }
        #[cfg(not(feature = "otel"))]
        let _ = (operation, target, kind, tracestate, attributes);
        let context = parent.context().unwrap_or_else(|| TraceParent {
            trace_id: rand::random::<u128>().max(1),
            parent_id: rand::random::<u64>().max(1),
            flags: 0,
        });
        Span {
            context,
            own: false,
            #[cfg(feature = "otel")]
            live: None,
        }
    }

    /// Whether [`Span::context`] is this span's own, so the next hop should carry it
    /// instead of the context it came with (module doc).
    pub(crate) fn owns_context(&self) -> bool {
        self.own
    }

    /// The context the next hop continues: this span's own when it records, else its
    /// parent's (module doc).
    pub(crate) fn context(&self) -> TraceParent {
        self.context
    }

    /// Adds an event (a point in time with attributes), e.g. `dead_lettered`.
    pub(crate) fn event(
        &mut self,
        name: &'static str,
        attributes: impl FnOnce() -> Vec<Attribute>,
    ) {
        #[cfg(feature = "otel")]
        if let Some(live) = &mut self.live {
            live.event(name, attributes());
        }
        #[cfg(not(feature = "otel"))]
        let _ = (name, attributes);
    }

    /// Sets attributes learnt after the start (an outcome, a status code).
    pub(crate) fn set(&mut self, attributes: impl FnOnce() -> Vec<Attribute>) {
        #[cfg(feature = "otel")]
        if let Some(live) = &mut self.live {
            live.set(attributes());
        }
        #[cfg(not(feature = "otel"))]
        let _ = attributes;
    }

    /// Marks the span failed with `message` (status `Error`).
    pub(crate) fn fail(&mut self, message: impl FnOnce() -> String) {
        #[cfg(feature = "otel")]
        if let Some(live) = &mut self.live {
            live.fail(message());
        }
        #[cfg(not(feature = "otel"))]
        let _ = message;
    }

    /// Ends the span now (dropping it does the same).
    pub(crate) fn end(self) {}
}

/// OpenTelemetry export of this process's spans, installed from the standard
/// environment variables (feature `otel`).
///
/// Read: `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (export
/// is on when one is set), `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc`, the only one built
/// in), `OTEL_EXPORTER_OTLP_HEADERS` and `_TIMEOUT`, `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` / `_ARG` (default
/// `parentbased_always_on`), and `OTEL_SDK_DISABLED` / `OTEL_TRACES_EXPORTER=none`
/// (off). With none of them set nothing is installed and nothing is paid: spans stay
/// contexts only.
///
/// `switchboard serve`, `switchboard gateway` and [`crate::run`] install it
/// themselves; a program that embeds a `Runtime` or runs a `MultiConnectorRunner`
/// calls [`Telemetry::from_env`] once inside its Tokio runtime, adds
/// [`Telemetry::layer`] to its `tracing` subscriber (so a connector's execute, and the
/// connector's own spans inside it, are exported) and calls [`Telemetry::shutdown`]
/// before it exits. Spans that cannot be queued or exported are dropped and counted
/// (`switchboard_dispatch_spans_dropped_total` on the runtime's `/metrics`,
/// `switchboard_gateway_spans_dropped_total` on the gateway's); a collector that is down never slows a delivery.
#[cfg(feature = "otel")]
#[derive(Debug)]
pub struct Telemetry {
    installed: otel::Installed,
}

#[cfg(feature = "otel")]
impl Telemetry {
    /// Installs export when the environment asks for it (type doc); `Ok(None)` when it
    /// does not. Call once per process, inside a Tokio runtime. Errors: an unsupported
    /// protocol, an exporter that cannot be built, a second installation.
    pub fn from_env() -> crate::Result<Option<Telemetry>> {
        if !otel::wanted(|k| std::env::var(k).ok()) {
            return Ok(None);
        }
        otel::install().map(|installed| Some(Telemetry { installed }))
    }

    /// The `tracing` layer that exports `tracing` spans through this pipeline: add it
    /// to the process's subscriber. It takes spans at `info` and above, and none from
    /// the HTTP/2 and gRPC stacks (the exporter's own calls would otherwise trace
    /// themselves).
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        self.installed.layer()
    }

    /// Exports what is still queued (waiting at most 5 s) and stops.
    pub async fn shutdown(self) {
        self.installed
            .shutdown(std::time::Duration::from_secs(5))
            .await;
    }
}

/// The `tracing` span a connector's `execute` runs inside, so the connector's own
/// `tracing` spans nest under it: `execute {capability}`, kind SERVER, continuing the
/// `traceparent` of `context` (the execute request's context map).
///
/// With the `otel` feature and its `tracing` layer installed (`Telemetry::layer`,
/// which `switchboard::run` and the binary install), the span is exported and
/// `context`'s `traceparent` is rewritten to the span's own, so an invoke made inside
/// the execute nests under it. Otherwise it is a plain `tracing` span (its fields
/// still correlate logs by trace id) and `context` is left as it came.
pub(crate) fn execute_span(
    capability: &str,
    request_id: &str,
    context: &mut std::collections::HashMap<String, String>,
) -> tracing::Span {
    let parent = context
        .get(crate::context_keys::CONTEXT_TRACEPARENT)
        .and_then(|v| TraceParent::parse(v));
    // Formatted only if a subscriber records the field: an execute pays nothing for it
    // otherwise (this runs for every execute of every connector).
    let trace_id = TraceIdField(parent.map(|p| p.trace_id));
    let span = tracing::info_span!(
        "execute",
        otel.name = %format_args!("execute {capability}"),
        otel.kind = "server",
        rpc.method = %capability,
        switchboard.request_id = %request_id,
        trace_id = %trace_id,
    );
    #[cfg(feature = "otel")]
    otel::continue_in(&span, parent, context);
    span
}

/// A trace id as the execute span's field shows it: 32 hex digits, empty when the
/// execute came without a context.
struct TraceIdField(Option<u128>);

impl std::fmt::Display for TraceIdField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id:032x}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: TraceParent = TraceParent {
        trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
        parent_id: 0x00f067aa0ba902b7,
        flags: 1,
    };

    #[test]
    fn an_unrecorded_span_passes_its_parent_on_and_builds_no_attributes() {
        for parent in [Parent::Child(CTX), Parent::Message(CTX, Relationship::Link)] {
            let s = Span::start("x", "y", SpanKind::Consumer, parent, "", || {
                panic!("attributes are built only for a recorded span")
            });
            assert_eq!(s.context(), CTX);
            assert!(!s.owns_context());
        }
    }

    #[test]
    fn an_unrecorded_root_gets_a_valid_new_context() {
        let a = Span::start("x", "y", SpanKind::Producer, Parent::None, "", Vec::new).context();
        let b = Span::start("x", "y", SpanKind::Producer, Parent::None, "", Vec::new).context();
        assert_ne!(a.trace_id, b.trace_id);
        assert!(TraceParent::parse(&a.header()).is_some());
        assert_eq!(
            a.flags, 0,
            "nothing recorded it, so it is not marked sampled"
        );
    }
}
