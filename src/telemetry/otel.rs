//! The `otel` feature's half of [`super`]: real OpenTelemetry spans, the OTLP
//! exporter configured by the standard environment variables, and the export queue.
//!
//! Export runs through [`QueueProcessor`] rather than the SDK's batch processor for
//! one reason: a span the queue cannot take, or an export that fails, must be counted
//! (`switchboard_dispatch_spans_dropped_total`, `switchboard_gateway_spans_dropped_total`), and the SDK's processor only logs its drops
//! at shutdown. Ending a span is a `try_send` on a bounded queue (never a wait); one
//! task exports batches with a timeout, so a collector that is slow or down costs
//! spans, never delivery time.

use std::str::FromStr as _;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter as _};
use tokio::sync::mpsc;

use super::model::{count_dropped, Attribute, Parent, Relationship, SpanKind, Value};
use crate::trace_context::TraceParent;

/// Spans the export queue holds before it drops (`OTEL_BSP_MAX_QUEUE_SIZE`'s default).
const QUEUE: usize = 2048;
/// Spans per export (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`'s default).
const BATCH: usize = 512;
/// How long a batch waits to fill once its first span is in.
const LINGER: Duration = Duration::from_millis(200);
/// How long one export may take before its spans count as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The installed tracer: set once, by [`install`].
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// A recording span.
#[derive(Debug)]
pub(crate) struct Live(opentelemetry_sdk::trace::Span);

impl Live {
    pub(super) fn event(&mut self, name: &'static str, attributes: Vec<Attribute>) {
        self.0.add_event(name, key_values(attributes));
    }

    pub(super) fn set(&mut self, attributes: Vec<Attribute>) {
        self.0.set_attributes(key_values(attributes));
    }

    pub(super) fn fail(&mut self, message: String) {
        self.0.set_status(Status::error(message));
    }
}

/// `ctx` as OpenTelemetry's remote span context.
pub(crate) fn span_context(ctx: TraceParent, tracestate: &str) -> SpanContext {
    SpanContext::new(
        TraceId::from(ctx.trace_id),
        SpanId::from(ctx.parent_id),
        TraceFlags::new(ctx.flags & 1),
        true,
        TraceState::from_str(tracestate).unwrap_or_default(),
    )
}

/// OpenTelemetry's span context as a `traceparent`'s fields.
pub(crate) fn trace_parent(sc: &SpanContext) -> Option<TraceParent> {
    sc.is_valid().then(|| TraceParent {
        trace_id: u128::from_be_bytes(sc.trace_id().to_bytes()),
        parent_id: u64::from_be_bytes(sc.span_id().to_bytes()),
        flags: sc.trace_flags().to_u8(),
    })
}

/// The span's context, and the span itself when the sampler kept it; `None` when no
/// exporter is installed (the caller then passes the parent on). A span sampled out
/// still has a context of its own (not sampled): passing it on keeps the next hops in
/// the same trace, so a ratio sampler decides for the whole trace once, and a
/// parent-based one downstream drops it too.
pub(super) fn start(
    (operation, target): (&'static str, &str),
    kind: SpanKind,
    parent: Parent,
    tracestate: &str,
    attributes: impl FnOnce() -> Vec<Attribute>,
) -> Option<(Option<Live>, TraceParent)> {
    let tracer = TRACER.get()?;
    let kind = match kind {
        SpanKind::Client => opentelemetry::trace::SpanKind::Client,
        SpanKind::Producer => opentelemetry::trace::SpanKind::Producer,
        SpanKind::Consumer => opentelemetry::trace::SpanKind::Consumer,
    };
    let mut builder = tracer
        .span_builder(format!("{operation} {target}"))
        .with_kind(kind);
    let cx = match parent {
        Parent::None => Context::new(),
        Parent::Child(p) => Context::new().with_remote_span_context(span_context(p, tracestate)),
        Parent::Message(p, relationship) => {
            let sc = span_context(p, tracestate);
            builder = builder.with_links(vec![Link::with_context(sc.clone())]);
            match relationship {
                Relationship::Child => Context::new().with_remote_span_context(sc),
                Relationship::Link => Context::new(),
            }
        }
    };
    let mut span = builder.start_with_context(tracer, &cx);
    let ctx = trace_parent(span.span_context())?;
    if !span.is_recording() {
        return Some((None, ctx));
    }
    span.set_attributes(key_values(attributes()));
    Some((Some(Live(span)), ctx))
}

/// [`super::execute_span`]'s OpenTelemetry half: parents `span` on `parent` and, when
/// the layer gave it a context, writes that context into the execute's map.
pub(super) fn continue_in(
    span: &tracing::Span,
    parent: Option<TraceParent>,
    context: &mut std::collections::HashMap<String, String>,
) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let state = context
        .get(crate::context_keys::CONTEXT_TRACESTATE)
        .map_or("", String::as_str);
    if let Some(p) = parent {
        let cx = Context::new().with_remote_span_context(span_context(p, state));
        if span.set_parent(cx).is_err() {
            return; // No OpenTelemetry layer: the context passes on as it came.
        }
    }
    let own = span.context();
    if let Some(tp) = trace_parent(own.span().span_context()) {
        context.insert(
            crate::context_keys::CONTEXT_TRACEPARENT.to_owned(),
            tp.header(),
        );
    }
}

/// The context of the current `tracing` span when the OpenTelemetry layer gave it one.
pub(crate) fn current_context() -> Option<TraceParent> {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = tracing::Span::current().context();
    trace_parent(cx.span().span_context())
}

fn key_values(attributes: Vec<Attribute>) -> Vec<KeyValue> {
    attributes
        .into_iter()
        .map(|(k, v)| match v {
            Value::Str(s) => KeyValue::new(k, s),
            Value::Int(i) => KeyValue::new(k, i),
        })
        .collect()
}

/// Whether the environment asks for export: an OTLP endpoint is set (for traces or
/// for every signal), and `OTEL_TRACES_EXPORTER` / `OTEL_SDK_DISABLED` do not say
/// otherwise.
pub(crate) fn wanted(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| var(k).is_some_and(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let exporter_none = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
    !disabled
        && !exporter_none
        && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The installed pipeline: shut it down to export what the queue still holds.
#[derive(Debug)]
pub(crate) struct Installed {
    provider: SdkTracerProvider,
    worker: tokio::task::JoinHandle<()>,
}

impl Installed {
    /// Closes the queue and waits (at most `grace`) for the last batch to go out.
    pub(crate) async fn shutdown(self, grace: Duration) {
        let _ = self.provider.shutdown();
        let _ = tokio::time::timeout(grace, self.worker).await;
    }

    /// A `tracing` layer that makes `tracing` spans OpenTelemetry spans of this
    /// pipeline (the SDK's execute span, and the connector's own spans inside it).
    pub(crate) fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use tracing_subscriber::filter::{LevelFilter, Targets};
        use tracing_subscriber::Layer as _;
        let quiet = [
            "h2",
            "hyper",
            "hyper_util",
            "tonic",
            "tower",
            "opentelemetry",
            "reqwest",
        ];
        let filter = quiet.iter().fold(
            Targets::new().with_default(LevelFilter::INFO),
            |t, target| t.with_target(*target, LevelFilter::OFF),
        );
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("switchboard"))
            .with_filter(filter)
    }
}

/// Builds the exporter from the `OTEL_*` variables (endpoint, protocol, headers,
/// timeout: the exporter crate reads them; the sampler and resource: the SDK does) and
/// installs the tracer. Must run inside a Tokio runtime (the export task and the gRPC
/// channel live on it). Fails when already installed or the variables are invalid.
pub(crate) fn install() -> crate::Result<Installed> {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|_| "grpc".into());
    if protocol.trim() != "grpc" {
        return Err(crate::Error::Config(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={protocol:?} is not supported by this build: switchboard exports OTLP over gRPC only (`grpc`, port 4317); point it at a collector's gRPC receiver"
        )));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|e| crate::Error::Config(format!("OpenTelemetry exporter: {e}")))?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let worker = tokio::spawn(export_loop(exporter, rx));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(QueueProcessor {
            tx: Mutex::new(Some(tx)),
        })
        .with_resource(opentelemetry_sdk::Resource::builder().build())
        .build();
    let tracer = provider.tracer("switchboard");
    TRACER.set(tracer).map_err(|_| {
        crate::Error::Config("OpenTelemetry is already installed in this process".into())
    })?;
    Ok(Installed { provider, worker })
}

/// Ending a span queues it (module doc).
#[derive(Debug)]
struct QueueProcessor {
    tx: Mutex<Option<mpsc::Sender<SpanData>>>,
}

impl opentelemetry_sdk::trace::SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let sent = match &*self.tx.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(tx) => tx.try_send(span).is_ok(),
            None => false,
        };
        if !sent {
            count_dropped(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        // Closing the queue lets the export task send what it holds and stop.
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        Ok(())
    }
}

/// Sends batches of up to [`BATCH`] spans, each after at most [`LINGER`] of filling;
/// ends when the queue is closed and empty.
async fn export_loop(exporter: opentelemetry_otlp::SpanExporter, mut rx: mpsc::Receiver<SpanData>) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            return;
        }
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < BATCH {
            let room = BATCH - batch.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut batch, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let spans = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
        let n = spans.len() as u64;
        match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(spans)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                count_dropped(n);
                tracing::debug!(error = %e, spans = n, "span export failed; spans dropped");
            }
            Err(_) => {
                count_dropped(n);
                tracing::debug!(spans = n, "span export timed out; spans dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_is_wanted_only_when_an_endpoint_is_set_and_nothing_turns_it_off() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!wanted(env(&[])));
        assert!(wanted(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://c:4317"
        )])));
        assert!(wanted(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4317"
        )])));
        assert!(!wanted(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(!wanted(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ])));
        assert!(!wanted(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])));
    }

    #[test]
    fn contexts_convert_both_ways() {
        let ctx = TraceParent {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            parent_id: 0x00f067aa0ba902b7,
            flags: 1,
        };
        let sc = span_context(ctx, "congo=t61");
        assert_eq!(trace_parent(&sc), Some(ctx));
        assert_eq!(sc.trace_state().header(), "congo=t61");
        assert!(sc.is_remote());
    }
}
