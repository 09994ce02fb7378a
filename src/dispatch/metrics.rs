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
//! the maximum depth, dropped), `spans_dropped_total` (trace spans lost on the way to
//! the collector).
//!
//! End to end, per `binding`, `version`, `source`, `provider` and `tenant`:
//! `accepted_to_delivered_seconds` and `accepted_to_dead_lettered_seconds`, from when
//! the row was enqueued (for an event's rows, when ingress accepted it) to the attempt
//! that delivered it or gave up. Per `binding`: `retry_delay_seconds` (how far ahead a
//! failed row's next attempt was scheduled) and `sync_abandoned_total` (synchronous
//! invocations that finished after their caller had left). Per `queue`:
//! `queue_dead_lettered_total` (messages past their maximum receives). Per `binding`
//! and `outcome` (`walked`, `enqueued`, `skipped`, `filtered`):
//! `backfill_events_total`, what this process's backfill steps did (one series per
//! outcome, not per job: jobs are many over time, bindings are configuration).
//!
//! Cardinality: bindings, their versions, sources and tenants are configuration, not
//! traffic, so the series are bounded by the configuration; a reload that makes a new
//! version adds that version's series (reset with the process), and no label carries
//! an event id, a kind or anything a sender chooses.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::outbox::model::{ClaimedRow, Finish};
use crate::triggers::binding::Binding;

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

/// Buckets of the end-to-end and retry histograms: 1 ms to about 70 minutes,
/// quadrupling; a row retried for an hour still lands in a bucket.
#[derive(Clone, Copy, Debug, Default)]
struct LongBuckets;

impl MetricConstructor<Histogram> for LongBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.001, 4.0, 12))
    }
}

/// Which binding (and version) took which source's event for which tenant: the
/// labels of the end-to-end histograms.
#[derive(Debug, Clone, Copy)]
struct EndLabels<'a> {
    binding: &'a str,
    version: u32,
    source: &'a str,
    provider: &'a str,
    tenant: &'a str,
}

impl EndLabels<'_> {
    fn labels(self) -> Labels {
        vec![
            ("binding", self.binding.to_owned()),
            ("version", self.version.to_string()),
            ("source", self.source.to_owned()),
            ("provider", self.provider.to_owned()),
            ("tenant", self.tenant.to_owned()),
        ]
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
    delivered_after: Family<Labels, Histogram, LongBuckets>,
    dead_lettered_after: Family<Labels, Histogram, LongBuckets>,
    retry_delay: Family<Labels, Histogram, LongBuckets>,
    sync_abandoned: Family<Labels, Counter>,
    queue_dead_lettered: Family<Labels, Counter>,
    backfill_events: Family<Labels, Counter>,
    /// The attempts this process runs: row id → (binding, when its row was claimed,
    /// unix ms), for the lease-age gauge ([`DispatchMetrics::lease_ages`]). The
    /// binding is shared, not copied: an attempt's start allocates no string.
    attempts: std::sync::Mutex<std::collections::HashMap<i64, (Arc<Binding>, i64)>>,
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
            delivered_after: Family::new_with_constructor(LongBuckets),
            dead_lettered_after: Family::new_with_constructor(LongBuckets),
            retry_delay: Family::new_with_constructor(LongBuckets),
            sync_abandoned: Family::default(),
            queue_dead_lettered: Family::default(),
            backfill_events: Family::default(),
            attempts: Default::default(),
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
        registry.register(
            "accepted_to_delivered_seconds",
            "From when a row was enqueued (an event's: when ingress accepted it) to the attempt that delivered it",
            m.delivered_after.clone(),
        );
        registry.register(
            "accepted_to_dead_lettered_seconds",
            "From when a row was enqueued to the attempt after which it was dead-lettered",
            m.dead_lettered_after.clone(),
        );
        registry.register(
            "retry_delay_seconds",
            "How far ahead a failed row's next attempt was scheduled",
            m.retry_delay.clone(),
        );
        registry.register(
            "sync_abandoned",
            "Synchronous invocations that finished after their caller had left",
            m.sync_abandoned.clone(),
        );
        registry.register(
            "queue_dead_lettered",
            "Queue messages moved to the dead letters past their maximum receives",
            m.queue_dead_lettered.clone(),
        );
        registry.register(
            "backfill_events",
            "What backfill steps did with the events they walked, by outcome",
            m.backfill_events.clone(),
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

    pub(crate) fn retried(&self, binding_id: &str, delay_s: f64) {
        let labels = binding(binding_id);
        self.retried.get_or_create(&labels).inc();
        self.retry_delay
            .get_or_create(&labels)
            .observe(delay_s.max(0.0));
    }

    /// What an attempt of `row` under `binding` came to, at `now_ms`: its attempt is
    /// over, and the finish is counted (retried with its delay; delivered or
    /// dead-lettered with the time since the row was enqueued; annotated).
    pub(crate) fn finished(
        &self,
        binding: &Binding,
        row: &ClaimedRow,
        finish: &Finish,
        now_ms: i64,
    ) {
        self.attempt_over(row.id);
        let end = EndLabels {
            binding: &binding.id,
            version: binding.version,
            source: &row.source,
            provider: &row.provider,
            tenant: &row.tenant,
        };
        let after_s = (now_ms - row.enqueued_at_ms) as f64 / 1000.0;
        match finish {
            Finish::Retry { at_ms, .. } => {
                self.retried(&binding.id, (at_ms - now_ms) as f64 / 1000.0)
            }
            Finish::Done { .. } => self.finished_after(end, after_s, false),
            Finish::DeadLetter { .. } => {
                self.finished_after(end, after_s, true);
                self.dead_lettered(&binding.id)
            }
            Finish::Annotate { .. } => self.annotated(&binding.id),
        }
    }

    /// A row's last attempt: delivered, or given up on (`dead`), `after_s` after its
    /// row was enqueued.
    fn finished_after(&self, labels: EndLabels<'_>, after_s: f64, dead: bool) {
        let family = if dead {
            &self.dead_lettered_after
        } else {
            &self.delivered_after
        };
        family
            .get_or_create(&labels.labels())
            .observe(after_s.max(0.0));
    }

    /// A backfill step into `binding_id` committed: events walked, rows enqueued,
    /// events skipped as handled and left to the binding's filter.
    pub(crate) fn backfill_step(&self, binding_id: &str, counts: [(&'static str, u64); 4]) {
        for (outcome, n) in counts {
            if n > 0 {
                self.backfill_events
                    .get_or_create(&vec![
                        ("binding", binding_id.to_owned()),
                        ("outcome", outcome.to_owned()),
                    ])
                    .inc_by(n);
            }
        }
    }

    /// A synchronous invocation of `binding_id` finished after its caller left.
    pub(crate) fn sync_abandoned(&self, binding_id: &str) {
        self.sync_abandoned
            .get_or_create(&binding(binding_id))
            .inc();
    }

    /// `n` messages of `queue` were dead-lettered by a receive.
    pub(crate) fn queue_dead_lettered(&self, queue: &str, n: u64) {
        if n > 0 {
            self.queue_dead_lettered
                .get_or_create(&vec![("queue", queue.to_owned())])
                .inc_by(n);
        }
    }

    /// Row `row` of `binding`, claimed at `claimed_ms`, is being attempted here.
    pub(crate) fn attempt_began(&self, row: i64, binding: &Arc<Binding>, claimed_ms: i64) {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(row, (binding.clone(), claimed_ms));
    }

    /// Row `row`'s attempt here is over.
    pub(crate) fn attempt_over(&self, row: i64) {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&row);
    }

    /// Per binding, how long ago (ms) the oldest attempt this process runs had its
    /// row claimed: a handler stuck in one attempt shows as a growing age.
    pub(crate) fn lease_ages(&self, now_ms: i64) -> std::collections::BTreeMap<String, i64> {
        let mut out = std::collections::BTreeMap::new();
        for (b, at) in self
            .attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let age = (now_ms - at).max(0);
            let e = out.entry(b.id.clone()).or_insert(0);
            *e = (*e).max(age);
        }
        out
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
