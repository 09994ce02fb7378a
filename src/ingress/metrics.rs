//! Ingress counters, exposed at `/metrics` in the Prometheus text format.
//!
//! Names (prefix `switchboard_ingress_`): `requests_total{source,outcome}` with outcome
//! one of `stored`, `duplicate` (every event of the delivery was one), `handshake`
//! (the source answered without events), `rejected`, `rate_limited`,
//! `receive_timeout` (the source's `receive` overran its deadline),
//! `store_unavailable`, `overloaded` (over `max_concurrent_requests`, with source
//! `""`, or the write queue full), `body_timeout`, `unknown_source`;
//! `rejections_total{source,reason}`;
//! `audit_skipped_total{source}` (refusals over the audit budget, counted not written);
//! the bindings' counts at ingest, `trigger_*{binding}` (kept by
//! `triggers::match_metrics`, which lists them, and registered here);
//! `request_duration_seconds` (a histogram of the time from receipt to answer, store
//! commit included); the counters sources keep themselves
//! (`switchboard_ingress_{name}_total{source,…}`, e.g. Notion's
//! `notion_rechecks_total{source,outcome}`: `read`, `shared` or `skipped`); and the
//! group commit's `store_batches_total`,
//! `store_batched_writes_total` and `store_dropped_audit_total`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::store::GroupCommitStats;
use crate::triggers::match_metrics::MatchMetrics;

type Labels = Vec<(&'static str, String)>;

/// One source's counts since the process started, as `GET /api/v1/sources` and the
/// console show them. Kept beside the Prometheus families because those cannot be
/// read back per label set without knowing every label value (refusal reasons are
/// open-ended), and the console needs them as numbers, not as exposition text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SourceTally {
    /// Requests whose events were stored.
    pub(crate) accepted: u64,
    /// Requests by outcome (`stored`, `duplicate`, `rejected`, `rate_limited`, …).
    pub(crate) outcomes: BTreeMap<String, u64>,
    /// Refusals by reason (`bad_signature`, `stale_timestamp`, …).
    pub(crate) refusals: BTreeMap<String, u64>,
    /// When the source last stored an event (unix ms).
    pub(crate) last_event_ms: Option<i64>,
    /// When the source last refused a request (unix ms).
    pub(crate) last_refusal_ms: Option<i64>,
}

/// The ingress metrics. Shared by all handlers; every method is lock-free but the
/// families' label lookups.
pub(crate) struct IngressMetrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    rejections: Family<Labels, Counter>,
    audit_skipped: Family<Labels, Counter>,
    /// The bindings' counts at ingest, registered here so that they render under
    /// this prefix and in this place, as they always have.
    pub(crate) matches: Arc<MatchMetrics>,
    duration: Histogram,
    batches: Counter,
    batched_writes: Counter,
    dropped_audit: Counter,
    /// Per-source counts for the admin API (see [`SourceTally`]).
    tallies: Mutex<HashMap<String, SourceTally>>,
}

impl Default for IngressMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl IngressMetrics {
    /// Registers every metric.
    pub(crate) fn new() -> IngressMetrics {
        let mut registry = Registry::with_prefix("switchboard_ingress");
        let requests = Family::<Labels, Counter>::default();
        let rejections = Family::<Labels, Counter>::default();
        let audit_skipped = Family::<Labels, Counter>::default();
        // 100 µs … ~3.3 s: a commit takes a few ms; Slack's deadline is 3 s.
        let duration = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.0001, 2.0, 16,
        ));
        let (batches, batched_writes, dropped_audit) =
            (Counter::default(), Counter::default(), Counter::default());
        registry.register(
            "requests",
            "Ingress requests by source and outcome",
            requests.clone(),
        );
        registry.register(
            "rejections",
            "Refused deliveries by source and reason",
            rejections.clone(),
        );
        registry.register(
            "audit_skipped",
            "Refusals not written to the audit table (over the per-source audit budget)",
            audit_skipped.clone(),
        );
        let matches = Arc::new(MatchMetrics::default());
        matches.register(&mut registry);
        registry.register(
            "request_duration_seconds",
            "Receipt to answer, store commit included",
            duration.clone(),
        );
        registry.register(
            "store_batches",
            "Group-commit transactions",
            batches.clone(),
        );
        registry.register(
            "store_batched_writes",
            "Writes carried by group-commit transactions",
            batched_writes.clone(),
        );
        registry.register(
            "store_dropped_audit",
            "Audit rows dropped because the write queue was full",
            dropped_audit.clone(),
        );
        IngressMetrics {
            registry,
            requests,
            rejections,
            audit_skipped,
            matches,
            duration,
            batches,
            batched_writes,
            dropped_audit,
            tallies: Mutex::default(),
        }
    }

    fn tally(&self, source: &str, f: impl FnOnce(&mut SourceTally)) {
        // Requests to unknown ids (or refused before a source was chosen) are not
        // tallied: anyone can send them, and the map must stay bounded by the
        // configured sources.
        if source.is_empty() {
            return;
        }
        let mut all = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        match all.get_mut(source) {
            Some(t) => f(t),
            None => f(all.entry(source.to_owned()).or_default()),
        }
    }

    /// One source's counts since start (zeros when it has seen nothing).
    pub(crate) fn source_tally(&self, source: &str) -> SourceTally {
        let all = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        all.get(source).cloned().unwrap_or_default()
    }

    /// Counts a request's outcome.
    pub(crate) fn outcome(&self, source: &str, outcome: &'static str) {
        if outcome != "unknown_source" {
            let now = crate::clock::now_ms();
            self.tally(source, |t| {
                match t.outcomes.get_mut(outcome) {
                    Some(n) => *n += 1,
                    None => drop(t.outcomes.insert(outcome.to_owned(), 1)),
                }
                if outcome == "stored" {
                    t.accepted += 1;
                    t.last_event_ms = Some(now);
                }
            });
        }
        self.requests
            .get_or_create(&vec![
                ("source", source.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// Counts a refusal by reason.
    pub(crate) fn rejection(&self, source: &str, reason: &str) {
        let now = crate::clock::now_ms();
        self.tally(source, |t| {
            *t.refusals.entry(reason.to_owned()).or_default() += 1;
            t.last_refusal_ms = Some(now);
        });
        self.rejections
            .get_or_create(&vec![
                ("source", source.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// Counts a refusal that was not written to the audit table (over the per-source
    /// audit budget).
    pub(crate) fn audit_skipped(&self, source: &str) {
        self.audit_skipped
            .get_or_create(&vec![("source", source.to_owned())])
            .inc();
    }

    /// Records a request's duration.
    pub(crate) fn observe(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    /// Renders the text format, with the store's counters brought up to date.
    pub(crate) fn render(&self, store: GroupCommitStats) -> String {
        for (c, v) in [
            (&self.batches, store.batches),
            (&self.batched_writes, store.writes),
            (&self.dropped_audit, store.dropped_audit),
        ] {
            c.inc_by(v.saturating_sub(c.get()));
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_tally_counts_outcomes_and_refusals_and_ignores_unknown_sources() {
        let m = IngressMetrics::new();
        m.outcome("gh", "stored");
        m.outcome("gh", "stored");
        m.outcome("gh", "duplicate");
        m.outcome("gh", "rejected");
        m.rejection("gh", "bad_signature");
        m.outcome("nope", "unknown_source");
        m.outcome("", "overloaded");
        let t = m.source_tally("gh");
        assert_eq!(t.accepted, 2);
        assert_eq!(t.outcomes["duplicate"], 1);
        assert_eq!(t.refusals["bad_signature"], 1);
        assert!(t.last_event_ms.is_some() && t.last_refusal_ms.is_some());
        assert_eq!(m.source_tally("nope"), SourceTally::default());
        assert_eq!(m.tallies.lock().unwrap().len(), 1);
    }
}
