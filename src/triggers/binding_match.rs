//! Binding matching at ingest: which trigger bindings an accepted event goes to, decided
//! before the store write so the outbox rows commit in the event's own transaction.
//!
//! Ingress and every cron source share one [`BindingMatcher`]. A binding whose filter or
//! ordering key fails on an event is skipped for that event (the others still get
//! it), counted in `switchboard_ingress_trigger_filter_errors_total{binding}`
//! ([`super::match_metrics`]) and
//! logged at warn with the binding and the event id: the event itself is still
//! stored and acknowledged, since refusing it would make the provider retry an event
//! that will fail the same way.

use std::sync::Arc;

use super::filter_breaker::{Breakers, Change};
use super::live::LiveTriggers;
use super::match_metrics::MatchMetrics;
use super::TriggerEvent;
use crate::outbox::model::Enqueue;

/// The bindings and the counters their failures go to. Cheap to clone.
#[derive(Clone)]
pub(crate) struct BindingMatcher {
    triggers: Arc<LiveTriggers>,
    metrics: Arc<MatchMetrics>,
    breakers: Arc<Breakers>,
}

impl BindingMatcher {
    /// A router over the bindings in force (the active version of each, as of each
    /// event), counting failures in `metrics`.
    pub(crate) fn new(triggers: Arc<LiveTriggers>, metrics: Arc<MatchMetrics>) -> Self {
        BindingMatcher {
            triggers,
            metrics,
            breakers: Arc::default(),
        }
    }

    /// What matching counted per binding (reported by the admin API and the console).
    pub(crate) fn counts(&self) -> &Arc<MatchMetrics> {
        &self.metrics
    }

    /// The bindings' filter breakers (their state is reported by the admin API).
    pub(crate) fn breakers(&self) -> &Arc<Breakers> {
        &self.breakers
    }

    /// The rows for `event`, which came from outside (a webhook or a tick: depth 0).
    pub(crate) fn route(&self, event: &TriggerEvent) -> Vec<Enqueue> {
        let registry = self.triggers.routing();
        let now = self.breakers.now_ms();
        // Bindings whose filter breaker is open are skipped, not evaluated.
        let mut open = Vec::new();
        for b in registry.bindings() {
            let Some(breaker) = &b.breaker else { continue };
            let cool_off = breaker.cool_off.as_millis() as i64;
            let (is_open, closed) = self.breakers.check(&b.id, breaker.errors, cool_off, now);
            if closed {
                tracing::info!(binding = %b.id, "trigger filter breaker closed; the binding takes events again");
            }
            if is_open && b.takes(&event.source, &event.kind) {
                self.metrics.breaker_skipped(&b.id);
                open.push(b.id.as_str());
            }
        }
        let routed = registry.route_skipping(event, 0, &|id| open.contains(&id));
        for id in &routed.received {
            let Some(b) = registry.get(id) else { continue };
            if b.breaker.is_none() {
                continue;
            }
            let failed = routed.errors.iter().any(|(e, _)| e == id);
            if let Change::Opened(until) = self.breakers.record(id, failed, now) {
                self.metrics.breaker_opened(id);
                tracing::warn!(
                    binding = %id,
                    cool_off_ms = until - now,
                    "trigger filter keeps failing; its breaker is open: the binding's events are skipped (counted) for the cool-off"
                );
            }
        }
        let now_s = crate::clock::now_ms() as f64 / 1000.0;
        for binding in &routed.received {
            self.metrics.received(binding, now_s);
        }
        for row in &routed.enqueue {
            self.metrics.matched(&row.binding_id);
        }
        for (binding, error) in &routed.errors {
            self.metrics.filter_error(binding);
            tracing::warn!(
                binding = %binding,
                event_id = %event.id,
                source = %event.source,
                kind = %event.kind,
                %error,
                "trigger skipped for this event: its filter or ordering key failed"
            );
        }
        routed.enqueue
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::triggers::binding::{Binding, Handler};
    use crate::triggers::filter::Expression;
    use crate::triggers::registry::TriggerRegistry;

    /// The exposition under ingest's prefix, as `/metrics` shows it.
    fn render(metrics: &MatchMetrics) -> String {
        let mut registry =
            prometheus_client::registry::Registry::with_prefix("switchboard_ingress");
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_filter_that_keeps_failing_opens_its_breaker_for_the_cool_off() {
        let mut b = Binding::new("fragile", Handler::Queue { queue: "q".into() });
        // `payload.n > 1` fails on a string `n` (an error, not `false`).
        b.filter = Some(Expression::compile("fragile", "filter", "payload.n > 1").unwrap());
        b.breaker = Some(crate::triggers::flow::BreakerSettings {
            errors: 3,
            cool_off: std::time::Duration::from_secs(60),
        });
        b.fingerprint = b.definition_fingerprint();
        let metrics = Arc::new(MatchMetrics::default());
        let router = BindingMatcher::new(
            Arc::new(LiveTriggers::fixed(&TriggerRegistry::new(vec![b]).unwrap())),
            metrics.clone(),
        );
        let bad = crate::triggers::testing::event("gh", "push", json!({"n": "x"}));
        let good = crate::triggers::testing::event("gh", "push", json!({"n": 2}));
        assert_eq!(router.route(&good).len(), 1);
        for _ in 0..3 {
            assert!(router.route(&bad).is_empty());
        }
        assert!(router.breakers().is_open("fragile"));
        // Open: even a good event is skipped, and counted as skipped.
        assert!(router.route(&good).is_empty());
        tokio::time::advance(std::time::Duration::from_secs(59)).await;
        assert!(router.route(&good).is_empty());
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(router.route(&good).len(), 1, "closed after the cool-off");
        assert!(!router.breakers().is_open("fragile"));
        let text = render(&metrics);
        for line in [
            "switchboard_ingress_trigger_breaker_opened_total{binding=\"fragile\"} 1",
            "switchboard_ingress_trigger_breaker_skipped_total{binding=\"fragile\"} 2",
            "switchboard_ingress_trigger_filter_errors_total{binding=\"fragile\"} 3",
        ] {
            assert!(text.contains(line), "no {line} in {text}");
        }
    }

    #[test]
    fn a_failing_filter_is_counted_per_binding_and_the_rest_still_route() {
        let mut broken = Binding::new("broken", Handler::Queue { queue: "q".into() });
        broken.filter = Some(Expression::compile("broken", "filter", "payload.nope").unwrap());
        let fine = Binding::new("fine", Handler::Queue { queue: "q".into() });
        let metrics = Arc::new(MatchMetrics::default());
        let router = BindingMatcher::new(
            Arc::new(LiveTriggers::fixed(
                &TriggerRegistry::new(vec![broken, fine]).unwrap(),
            )),
            metrics.clone(),
        );
        let ev = crate::triggers::testing::event("gh", "push", json!({}));
        let rows = router.route(&ev);
        router.route(&ev);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].binding_id, "fine");
        let text = render(&metrics);
        assert!(
            text.contains("switchboard_ingress_trigger_filter_errors_total{binding=\"broken\"} 2"),
            "{text}"
        );
        assert!(
            !text.contains("trigger_filter_errors_total{binding=\"fine\"}"),
            "{text}"
        );
        assert!(
            text.contains("switchboard_ingress_trigger_matched_total{binding=\"fine\"} 2"),
            "{text}"
        );
    }
}
