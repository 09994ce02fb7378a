//! The trigger registry: the resolved bindings, and which of them an event goes to.
//! (Skeleton: matching lands with the config loader.)

use std::collections::HashMap;
use std::sync::Arc;

use super::binding::Binding;
use super::TriggerEvent;
use crate::error::Result;
use crate::outbox::model::Enqueue;

/// What routing one event produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routed {
    /// One row per matching binding, in binding order.
    pub enqueue: Vec<Enqueue>,
    /// Bindings whose filter or ordering key failed to evaluate on this event, with the
    /// error: each is counted and skipped for this event; the others still match.
    pub errors: Vec<(String, String)>,
}

/// The bindings of one configuration.
#[derive(Debug, Clone, Default)]
pub struct TriggerRegistry {
    bindings: Vec<Arc<Binding>>,
    by_id: HashMap<String, usize>,
}

impl TriggerRegistry {
    /// Builds the registry; refuses duplicate ids and dead-letter scopes that name an
    /// unknown binding.
    pub fn new(bindings: Vec<Binding>) -> Result<TriggerRegistry> {
        let by_id = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id.clone(), i))
            .collect();
        Ok(TriggerRegistry {
            bindings: bindings.into_iter().map(Arc::new).collect(),
            by_id,
        })
    }

    /// Every binding, in configuration order.
    pub fn bindings(&self) -> &[Arc<Binding>] {
        &self.bindings
    }

    /// One binding by id.
    pub fn get(&self, id: &str) -> Option<&Arc<Binding>> {
        self.by_id.get(id).map(|&i| &self.bindings[i])
    }

    /// The rows an event produced at `depth` hops goes to.
    pub fn route(&self, event: &TriggerEvent, depth: u32) -> Routed {
        let _ = (event, depth);
        Routed::default()
    }

    /// The row for `binding` and `event` (its ordering key evaluated), whether or not
    /// the binding's sources, events and filter match: for `outbox.enqueue` and replays
    /// that name the binding.
    pub fn enqueue_for(
        &self,
        binding: &Binding,
        event: &TriggerEvent,
        depth: u32,
    ) -> std::result::Result<Enqueue, String> {
        let _ = event;
        let mut row = Enqueue::dispatch(&binding.id, &binding.fingerprint);
        row.depth = depth;
        Ok(row)
    }

    /// The dead-letter handler bindings that report on `failed_binding`'s dead letters.
    pub fn dead_letter_handlers<'a>(
        &'a self,
        failed_binding: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Binding>> + 'a {
        self.bindings
            .iter()
            .filter(move |b| b.dead_letter_for.covers(&b.id, failed_binding))
    }
}
