//! The trigger registry: the resolved bindings, and which of them an event goes to.
//!
//! Routing is a plain function of the bindings and the event, no I/O and no clock:
//! ingress and the cron ticker call [`TriggerRegistry::route`] before the store write,
//! and the rows it returns go into the same transaction as the event's dedupe claim.
//! A binding whose filter, ordering key, debounce key or dedupe key fails on one event
//! is skipped for that event and reported in [`Routed::errors`]; it never stops the
//! other bindings from matching, and it never matches by accident.

use std::collections::HashMap;
use std::sync::Arc;

use super::binding::{Binding, DeadLetterScope, Handler};
use super::filter::EventContext;
use super::TriggerEvent;
use crate::error::{Error, Result};
use crate::outbox::model::{Destination, Enqueue};

/// What routing one event produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routed {
    /// One row per matching binding, in binding order.
    pub enqueue: Vec<Enqueue>,
    /// Bindings whose filter or a key (ordering, debounce, dedupe) failed to evaluate on
    /// this event, with the
    /// error: each is counted and skipped for this event; the others still match.
    pub errors: Vec<(String, String)>,
    /// Bindings whose sources and event kinds took the event (before their filter):
    /// what "received" counts per binding.
    pub received: Vec<String>,
}

/// The bindings of one configuration.
#[derive(Debug, Clone, Default)]
pub struct TriggerRegistry {
    bindings: Vec<Arc<Binding>>,
    by_id: HashMap<String, usize>,
}

impl TriggerRegistry {
    /// Builds the registry; refuses duplicate ids and dead-letter scopes that name an
    /// unknown binding, the handler itself, or another dead-letter handler (whose
    /// failures annotate a dead letter instead of making one, so there is nothing to
    /// report on).
    pub fn new(bindings: Vec<Binding>) -> Result<TriggerRegistry> {
        let registry = TriggerRegistry::from_checked(bindings.into_iter().map(Arc::new).collect());
        registry.check()?;
        Ok(registry)
    }

    /// A registry of bindings already checked together (the lifecycle's active set,
    /// each change of which went through [`TriggerRegistry::new`] first).
    pub(crate) fn from_checked(bindings: Vec<Arc<Binding>>) -> TriggerRegistry {
        let by_id = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id.clone(), i))
            .collect();
        TriggerRegistry { bindings, by_id }
    }

    fn check(&self) -> Result<()> {
        let bindings = &self.bindings;
        let mut seen = HashMap::with_capacity(bindings.len());
        for (i, b) in bindings.iter().enumerate() {
            if seen.insert(b.id.clone(), i).is_some() {
                return Err(Error::Config(format!(
                    "two triggers have the id {:?}",
                    b.id
                )));
            }
        }
        for b in bindings {
            let DeadLetterScope::Bindings(ids) = &b.dead_letter_for else {
                continue;
            };
            for target in ids {
                let problem = match seen.get(target).map(|&i| &bindings[i]) {
                    None => "which is not a configured trigger",
                    Some(t) if t.id == b.id => "itself; a dead-letter handler never reports on itself",
                    Some(t) if t.is_dead_letter_handler() => {
                        "a dead-letter handler, whose failures annotate a dead letter instead of making one"
                    }
                    Some(_) => continue,
                };
                return Err(Error::Config(format!(
                    "trigger {:?}: dead_letter_for names {target:?}, {problem}",
                    b.id
                )));
            }
        }
        Ok(())
    }

    /// Every binding, in configuration order.
    pub fn bindings(&self) -> &[Arc<Binding>] {
        &self.bindings
    }

    /// Copies of the bindings but `except` (none, for `None`), in order: the set a
    /// change starts from.
    pub(crate) fn to_vec_except(&self, except: Option<&str>) -> Vec<Binding> {
        self.bindings
            .iter()
            .filter(|b| Some(b.id.as_str()) != except)
            .map(|b| (**b).clone())
            .collect()
    }

    /// One binding by id.
    pub fn get(&self, id: &str) -> Option<&Arc<Binding>> {
        self.by_id.get(id).map(|&i| &self.bindings[i])
    }

    /// The rows an event produced at `depth` hops goes to: one per binding that is not
    /// a dead-letter handler, whose sources and event patterns take it and whose filter
    /// is true. The event's variables are converted for CEL once, on the first
    /// expression that needs them, and shared by every binding.
    pub fn route(&self, event: &TriggerEvent, depth: u32) -> Routed {
        self.route_skipping(event, depth, &|_| false)
    }

    /// [`TriggerRegistry::route`], skipping the bindings `skip` names (an open filter
    /// breaker): they are neither evaluated nor counted as received.
    pub(crate) fn route_skipping(
        &self,
        event: &TriggerEvent,
        depth: u32,
        skip: &dyn Fn(&str) -> bool,
    ) -> Routed {
        let ctx = EventContext::new(event);
        let mut routed = Routed::default();
        for b in &self.bindings {
            if b.is_dead_letter_handler() || !b.takes(&event.source, &event.kind) || skip(&b.id) {
                continue;
            }
            routed.received.push(b.id.clone());
            let matched = match &b.filter {
                None => Ok(true),
                Some(f) => f.eval_bool_in(&ctx).map_err(|e| format!("filter: {e}")),
            };
            let row = matched.and_then(|m| m.then(|| row_for(b, &ctx, depth)).transpose());
            match row {
                Ok(Some(row)) => routed.enqueue.push(row),
                Ok(None) => {}
                Err(e) => routed.errors.push((b.id.clone(), e)),
            }
        }
        routed
    }

    /// The row for `binding` and `event` (its keys evaluated), whether or not the
    /// binding's sources, events and filter match: for `outbox.enqueue`, replays and
    /// dead-letter fan-out, which name the binding. `Err` is a key's evaluation error.
    pub fn enqueue_for(
        &self,
        binding: &Binding,
        event: &TriggerEvent,
        depth: u32,
    ) -> std::result::Result<Enqueue, String> {
        row_for(binding, &EventContext::new(event), depth)
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

/// A duration in whole milliseconds, as rows carry them.
fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The row of `binding` for the event behind `ctx`: its ordering, debounce and dedupe
/// keys evaluated (a `null` key means none), its priority copied. `Err` names the
/// option whose key failed to evaluate.
fn row_for(
    binding: &Binding,
    ctx: &EventContext<'_>,
    depth: u32,
) -> std::result::Result<Enqueue, String> {
    let mut row = Enqueue::dispatch(&binding.id, &binding.fingerprint);
    row.depth = depth;
    if let Some(key) = &binding.ordering_key {
        row.ordering_key = key
            .eval_key_in(ctx)
            .map_err(|e| format!("ordering_key: {e}"))?;
    }
    row.priority = binding.priority;
    if let Some(debounce) = &binding.debounce {
        row.debounce_key = debounce
            .key
            .eval_key_in(ctx)
            .map_err(|e| format!("debounce: {e}"))?;
        row.debounce_window_ms = row.debounce_key.as_ref().map(|_| ms(debounce.window));
    }
    if let Some(dedupe) = &binding.dedupe {
        let key = dedupe
            .key
            .eval_key_in(ctx)
            .map_err(|e| format!("dedupe_key: {e}"))?;
        row.dedupe = key.map(|k| (k, ms(dedupe.retention)));
    }
    if let Handler::Queue { queue } = &binding.handler {
        row.destination = Destination::Queue(queue.clone());
    }
    Ok(row)
}

#[cfg(test)]
mod tests;
