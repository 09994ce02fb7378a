//! Dispatcher metrics, exposed at `/metrics` beside the ingress ones.
//!
//! Names (prefix `switchboard_dispatch_`), per `binding`: `dispatched_total` (attempts
//! that succeeded), `failed_total{kind}` (attempts that failed, by failure kind),
//! `retried_total`, `dead_lettered_total`, `annotated_total` (dead-letter handlers that
//! gave up), `throttled_total` (rows given back because the binding's `throttle`
//! window was full), `in_flight` (attempts running now), `enqueue_to_start_seconds` (from when
//! a row became due to when its attempt started) and `handler_seconds`. Process-wide:
//! `released_total` (claimed rows given back for want of a permit),
//! `stale_finishes_total` (finishes that found their lease taken over),
//! `store_errors_total` and `depth_dropped_total` (handler-produced events past
//! the maximum depth, dropped).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// Histogram buckets: 100 µs to about 6.5 s, doubling. Enqueue-to-start is
/// sub-millisecond when the dispatcher is woken by notification, seconds when it
/// waits for a poll or a permit; handler latency spans both.
#[derive(Clone, Copy, Debug, Default)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.0001, 2.0, 17))
    }
}

/// The dispatcher's counters and histograms. Shared by the dispatcher's tasks and the
/// admin API; every method is lock-free but the families' label lookups.
pub struct DispatchMetrics {
    registry: Registry,
    dispatched: Family<Labels, Counter>,
    failed: Family<Labels, Counter>,
    retried: Family<Labels, Counter>,
    dead_lettered: Family<Labels, Counter>,
    annotated: Family<Labels, Counter>,
    throttled: Family<Labels, Counter>,
    in_flight: Family<Labels, Gauge>,
    enqueue_to_start: Family<Labels, Histogram, Buckets>,
    handler: Family<Labels, Histogram, Buckets>,
    released: Counter,
    stale: Counter,
    store_errors: Counter,
    depth_dropped: Counter,
    /// Mirrors `crate::telemetry::spans_dropped` (a process-wide count) on render.
    spans_dropped: Counter,
}

impl std::fmt::Debug for DispatchMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchMetrics").finish_non_exhaustive()
    }
}

impl Default for DispatchMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn binding(id: &str) -> Labels {
    vec![("binding", id.to_owned())]
}

/// Counts of one binding, for `GET /api/v1/triggers`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BindingCounts {
    /// Attempts that succeeded.
    pub dispatched: u64,
    /// Attempts that failed.
    pub failed: u64,
    /// Failures rescheduled.
    pub retried: u64,
    /// Rows dead-lettered.
    pub dead_lettered: u64,
    /// Attempts running now.
    pub in_flight: i64,
}

impl DispatchMetrics {
    /// Registers every metric.
    pub fn new() -> DispatchMetrics {
        let mut registry = Registry::with_prefix("switchboard_dispatch");
        let m = DispatchMetrics {
            dispatched: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            dead_lettered: Family::default(),
            annotated: Family::default(),
            throttled: Family::default(),
            in_flight: Family::default(),
            enqueue_to_start: Family::new_with_constructor(Buckets),
            handler: Family::new_with_constructor(Buckets),
            released: Counter::default(),
            stale: Counter::default(),
            store_errors: Counter::default(),
            depth_dropped: Counter::default(),
            spans_dropped: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "dispatched",
            "Attempts that succeeded",
            m.dispatched.clone(),
        );
        registry.register("failed", "Attempts that failed, by kind", m.failed.clone());
        registry.register("retried", "Failed rows rescheduled", m.retried.clone());
        registry.register(
            "dead_lettered",
            "Rows dead-lettered",
            m.dead_lettered.clone(),
        );
        registry.register(
            "annotated",
            "Dead-letter handler deliveries that gave up (annotated, not dead-lettered)",
            m.annotated.clone(),
        );
        registry.register(
            "throttled",
            "Rows given back because the binding's throttle window was full",
            m.throttled.clone(),
        );
        registry.register("in_flight", "Attempts running", m.in_flight.clone());
        registry.register(
            "enqueue_to_start_seconds",
            "From when a row became due to when its attempt started",
            m.enqueue_to_start.clone(),
        );
        registry.register("handler_seconds", "Attempt duration", m.handler.clone());
        registry.register(
            "released",
            "Claimed rows given back because no permit was free",
            m.released.clone(),
        );
        registry.register(
            "stale_finishes",
            "Finishes whose lease had been taken over by another claim",
            m.stale.clone(),
        );
        registry.register(
            "store_errors",
            "Store operations of the dispatcher that failed",
            m.store_errors.clone(),
        );
        registry.register(
            "depth_dropped",
            "Handler-produced events past the maximum depth, dropped",
            m.depth_dropped.clone(),
        );
        registry.register(
            "spans_dropped",
            "Trace spans of this process lost before the collector had them (export queue full, export failed or timed out)",
            m.spans_dropped.clone(),
        );
        DispatchMetrics { registry, ..m }
    }

    pub(crate) fn started(&self, binding_id: &str, waited_s: f64) {
        let labels = binding(binding_id);
        self.in_flight.get_or_create(&labels).inc();
        self.enqueue_to_start
            .get_or_create(&labels)
            .observe(waited_s.max(0.0));
    }

    pub(crate) fn ended(&self, binding_id: &str, took_s: f64, failure: Option<&'static str>) {
        let labels = binding(binding_id);
        self.in_flight.get_or_create(&labels).dec();
        self.handler.get_or_create(&labels).observe(took_s.max(0.0));
        match failure {
            None => self.dispatched.get_or_create(&labels).inc(),
            Some(kind) => self
                .failed
                .get_or_create(&vec![
                    ("binding", binding_id.to_owned()),
                    ("kind", kind.to_owned()),
                ])
                .inc(),
        };
    }

    pub(crate) fn retried(&self, binding_id: &str) {
        self.retried.get_or_create(&binding(binding_id)).inc();
    }

    pub(crate) fn dead_lettered(&self, binding_id: &str) {
        self.dead_lettered.get_or_create(&binding(binding_id)).inc();
    }

    pub(crate) fn annotated(&self, binding_id: &str) {
        self.annotated.get_or_create(&binding(binding_id)).inc();
    }

    pub(crate) fn throttled(&self, binding_id: &str) {
        self.throttled.get_or_create(&binding(binding_id)).inc();
    }

    pub(crate) fn released(&self, n: u64) {
        self.released.inc_by(n);
    }

    pub(crate) fn stale(&self, n: u64) {
        self.stale.inc_by(n);
    }

    pub(crate) fn store_error(&self) {
        self.store_errors.inc();
    }

    /// Counts a handler-produced event dropped past the maximum depth.
    pub fn depth_dropped(&self) {
        self.depth_dropped.inc();
    }

    /// Handler-produced events dropped so far.
    pub fn depth_dropped_total(&self) -> u64 {
        self.depth_dropped.get()
    }

    /// One binding's counts so far. Reads only: a binding or failure kind never seen
    /// reads as zero and creates no series in `/metrics`.
    pub fn counts(&self, binding_id: &str) -> BindingCounts {
        fn read<M, F: Fn(&M) -> T, T: Default>(
            family: Option<impl std::ops::Deref<Target = M>>,
            f: F,
        ) -> T {
            family.map(|m| f(&m)).unwrap_or_default()
        }
        let labels = binding(binding_id);
        let failed = ["validation", "handler", "overloaded", "timeout", "platform"]
            .iter()
            .map(|kind| {
                let labels = vec![
                    ("binding", binding_id.to_owned()),
                    ("kind", (*kind).to_owned()),
                ];
                read(self.failed.get(&labels), Counter::get)
            })
            .sum();
        BindingCounts {
            dispatched: read(self.dispatched.get(&labels), Counter::get),
            failed,
            retried: read(self.retried.get(&labels), Counter::get),
            dead_lettered: read(self.dead_lettered.get(&labels), Counter::get),
            in_flight: read(self.in_flight.get(&labels), Gauge::get),
        }
    }

    /// The Prometheus text format.
    pub fn render(&self) -> String {
        // The process-wide count (crate::telemetry), brought up to date on read.
        let behind = crate::telemetry::spans_dropped().saturating_sub(self.spans_dropped.get());
        if behind > 0 {
            self.spans_dropped.inc_by(behind);
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
