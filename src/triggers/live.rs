//! The bindings in force, shared by everything that routes or delivers while they
//! change: ingest and the cron sources route with [`LiveTriggers::routing`], the
//! dispatcher resolves each claimed row's version with [`LiveTriggers::current`], the
//! admin API lists them. A change builds a whole new [`Lifecycle`] and swaps it in, so a
//! reader sees one consistent set, never half of a reload.

use std::sync::{Arc, RwLock};

use super::lifecycle::Lifecycle;
use super::registry::TriggerRegistry;

/// The current lifecycle, swapped as a whole.
#[derive(Debug)]
pub(crate) struct LiveTriggers {
    current: RwLock<Arc<Lifecycle>>,
    /// Woken after every swap (the dispatcher claims again: a version may have come,
    /// a binding may have been resumed).
    changed: tokio::sync::Notify,
}

impl LiveTriggers {
    /// Starts from `lifecycle`.
    pub(crate) fn new(lifecycle: Lifecycle) -> LiveTriggers {
        LiveTriggers {
            current: RwLock::new(Arc::new(lifecycle)),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// A registry-only set, no store behind it (tests, benches, and the dispatcher's
    /// own unit tests): every binding active as version 1.
    pub(crate) fn fixed(registry: &TriggerRegistry) -> LiveTriggers {
        let mut l = Lifecycle::new("local");
        l.reload(registry.to_vec_except(None), 0)
            .expect("a built registry is a valid set");
        LiveTriggers::new(l)
    }

    /// The lifecycle now.
    pub(crate) fn current(&self) -> Arc<Lifecycle> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The routing registry now.
    pub(crate) fn routing(&self) -> Arc<TriggerRegistry> {
        self.current().routing().clone()
    }

    /// Swaps in `next` and wakes whoever waits for a change.
    pub(crate) fn replace(&self, next: Lifecycle) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        self.changed.notify_waiters();
    }

    /// Resolves after the next swap.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}
