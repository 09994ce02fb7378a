//! The dispatcher's permit gates: one per binding version (its `max_concurrent`) and one
//! per process (`max_in_flight`). A draining version and its successor each keep their
//! own gate, so the old rows finish under the old limit; gates of versions that left
//! are forgotten once nothing holds them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::triggers::binding::{Binding, Handler};

/// The dispatcher's permit gates: one per binding version (its `max_concurrent`; a
/// draining version and its successor each keep their own, so the old rows finish
/// under the old limit) and one per process (`max_in_flight`). Cheap to clone.
#[derive(Clone)]
pub struct Permits {
    pub(super) size: usize,
    pub(super) global: Arc<Semaphore>,
    gates: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    can_deliver: Arc<dyn Fn(&Binding) -> bool + Send + Sync>,
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permits")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Why no permit was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPermit {
    /// This process does not deliver the binding.
    NotServed,
    /// The binding's `max_concurrent` or the process's `max_in_flight` is taken.
    Busy,
}

impl Permits {
    /// Gates for the bindings `can_deliver` accepts (queue bindings are pulled, never
    /// dispatched), with `max_in_flight` process permits. A version's gate is made the
    /// first time it is asked for.
    pub fn new(
        can_deliver: impl Fn(&Binding) -> bool + Send + Sync + 'static,
        max_in_flight: usize,
    ) -> Permits {
        Permits {
            size: max_in_flight.max(1),
            global: Arc::new(Semaphore::new(max_in_flight.max(1))),
            gates: Arc::default(),
            can_deliver: Arc::new(can_deliver),
        }
    }

    /// Whether this process delivers `binding`.
    pub fn serves(&self, binding: &Binding) -> bool {
        !matches!(binding.handler, Handler::Queue { .. }) && (self.can_deliver)(binding)
    }

    fn gate(&self, binding: &Binding) -> Option<Arc<Semaphore>> {
        if !self.serves(binding) {
            return None;
        }
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        Some(
            gates
                .entry(binding.fingerprint.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(binding.max_concurrent.max(1))))
                .clone(),
        )
    }

    /// Whether `binding` is served and has a free permit of its own.
    pub(super) fn has_room(&self, binding: &Binding) -> bool {
        self.gate(binding)
            .is_some_and(|g| g.available_permits() > 0)
    }

    /// Forgets the gates of versions not in `keep` that nothing holds.
    pub(super) fn prune(&self, keep: &std::collections::HashSet<&str>) {
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        gates.retain(|fp, g| keep.contains(fp.as_str()) || Arc::strong_count(g) > 1);
    }

    /// Both permits for one attempt of `binding`, at once or not at all.
    pub fn try_acquire(&self, binding: &Binding) -> Result<[OwnedSemaphorePermit; 2], NoPermit> {
        let gate = self.gate(binding).ok_or(NoPermit::NotServed)?;
        let g = self
            .global
            .clone()
            .try_acquire_owned()
            .map_err(|_| NoPermit::Busy)?;
        let b = gate.try_acquire_owned().map_err(|_| NoPermit::Busy)?;
        Ok([g, b])
    }
}
