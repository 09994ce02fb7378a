//! Binding matching at ingest: which trigger bindings an accepted event goes to, decided
//! before the store write so the outbox rows commit in the event's own transaction.
//!
//! Ingress and every cron source share one [`BindingMatcher`]. A binding whose filter or
//! ordering key fails on an event is skipped for that event (the others still get
//! it), counted in `switchboard_ingress_trigger_filter_errors_total{binding}` and
//! logged at warn with the binding and the event id: the event itself is still
//! stored and acknowledged, since refusing it would make the provider retry an event
//! that will fail the same way.

use std::sync::Arc;

use super::metrics::IngressMetrics;
use crate::outbox::model::Enqueue;
use crate::triggers::live::LiveTriggers;
use crate::triggers::TriggerEvent;

/// The bindings and the counters their failures go to. Cheap to clone.
#[derive(Clone)]
pub(crate) struct BindingMatcher {
    triggers: Arc<LiveTriggers>,
    metrics: Arc<IngressMetrics>,
}

impl BindingMatcher {
    /// A router over the bindings in force (the active version of each, as of each
    /// event), counting failures in `metrics`.
    pub(crate) fn new(triggers: Arc<LiveTriggers>, metrics: Arc<IngressMetrics>) -> Self {
        BindingMatcher { triggers, metrics }
    }

    /// The rows for `event`, which came from outside (a webhook or a tick: depth 0).
    pub(crate) fn route(&self, event: &TriggerEvent) -> Vec<Enqueue> {
        let routed = self.triggers.routing().route(event, 0);
        let now_s = crate::clock::now_ms() as f64 / 1000.0;
        for binding in &routed.received {
            self.metrics.trigger_received(binding, now_s);
        }
        for row in &routed.enqueue {
            self.metrics.trigger_matched(&row.binding_id);
        }
        for (binding, error) in &routed.errors {
            self.metrics.trigger_filter_error(binding);
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

    #[test]
    fn a_failing_filter_is_counted_per_binding_and_the_rest_still_route() {
        let mut broken = Binding::new("broken", Handler::Queue { queue: "q".into() });
        broken.filter = Some(Expression::compile("broken", "filter", "payload.nope").unwrap());
        let fine = Binding::new("fine", Handler::Queue { queue: "q".into() });
        let metrics = Arc::new(IngressMetrics::new());
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
        let text = metrics.render(Default::default());
        assert!(
            text.contains("switchboard_ingress_trigger_filter_errors_total{binding=\"broken\"} 2"),
            "{text}"
        );
        assert!(!text.contains("binding=\"fine\""), "{text}");
    }
}
