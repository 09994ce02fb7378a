//! What binding matching counts, per binding: the `trigger_*` families of `/metrics`
//! (under ingest's prefix, `switchboard_ingress_`, where they have always been):
//!
//! - `trigger_received_total{binding}`: events whose source and kind the binding
//!   takes (before its filter), and `trigger_last_received_timestamp_seconds{binding}`;
//! - `trigger_matched_total{binding}`: rows it enqueued (its filter passed);
//! - `trigger_filter_errors_total{binding}`: events it skipped because its filter or
//!   ordering key failed to evaluate on them;
//! - `trigger_breaker_opened_total{binding}` and `trigger_breaker_skipped_total{binding}`:
//!   its filter breaker opening, and the events it skipped while open.
//!
//! Kept beside the matcher ([`super::binding_match`]) that counts them; ingest's
//! registry registers them ([`MatchMetrics::register`]) so one exposition holds both.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The per-binding counters of matching. Lock-free but the families' label lookups.
#[derive(Debug, Default)]
pub(crate) struct MatchMetrics {
    filter_errors: Family<Labels, Counter>,
    received: Family<Labels, Counter>,
    matched: Family<Labels, Counter>,
    breaker_opened: Family<Labels, Counter>,
    breaker_skipped: Family<Labels, Counter>,
    last_received: Family<Labels, Gauge<f64, AtomicU64>>,
}

fn binding(id: &str) -> Labels {
    vec![("binding", id.to_owned())]
}

impl MatchMetrics {
    /// Adds the families to `registry` (whose prefix names them).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "trigger_filter_errors",
            "Events a trigger binding skipped because its filter or ordering key failed on them",
            self.filter_errors.clone(),
        );
        registry.register(
            "trigger_received",
            "Events whose source and kind a trigger binding takes (before its filter)",
            self.received.clone(),
        );
        registry.register(
            "trigger_matched",
            "Rows a trigger binding enqueued (its filter passed)",
            self.matched.clone(),
        );
        registry.register(
            "trigger_breaker_opened",
            "Times a trigger binding's filter breaker opened (its filter kept failing)",
            self.breaker_opened.clone(),
        );
        registry.register(
            "trigger_breaker_skipped",
            "Events a trigger binding skipped while its filter breaker was open",
            self.breaker_skipped.clone(),
        );
        registry.register(
            "trigger_last_received_timestamp_seconds",
            "When a trigger binding last received an event (unix seconds)",
            self.last_received.clone(),
        );
    }

    /// Counts an event that `id` skipped because its filter or ordering key failed to
    /// evaluate on it.
    pub(crate) fn filter_error(&self, id: &str) {
        self.filter_errors.get_or_create(&binding(id)).inc();
    }

    /// Counts an event `id` received (its sources and kinds took it) at `now_s`.
    pub(crate) fn received(&self, id: &str, now_s: f64) {
        let labels = binding(id);
        self.received.get_or_create(&labels).inc();
        self.last_received.get_or_create(&labels).set(now_s);
    }

    /// Counts a row `id` enqueued.
    pub(crate) fn matched(&self, id: &str) {
        self.matched.get_or_create(&binding(id)).inc();
    }

    /// Counts `id`'s filter breaker opening.
    pub(crate) fn breaker_opened(&self, id: &str) {
        self.breaker_opened.get_or_create(&binding(id)).inc();
    }

    /// Counts an event `id` skipped because its filter breaker was open.
    pub(crate) fn breaker_skipped(&self, id: &str) {
        self.breaker_skipped.get_or_create(&binding(id)).inc();
    }

    /// What was counted for `id`: received, matched, and when it last received an
    /// event (unix seconds).
    pub(crate) fn binding_counts(&self, id: &str) -> (u64, u64, Option<f64>) {
        let labels = binding(id);
        let received = self.received.get(&labels).map_or(0, |c| c.get());
        let matched = self.matched.get(&labels).map_or(0, |c| c.get());
        let last = self.last_received.get(&labels).map(|g| g.get());
        (received, matched, last)
    }
}
