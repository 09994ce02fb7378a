//! The dispatcher's permit gates: one per binding version (its `max_concurrent`) and one
//! per process (`max_in_flight`). A draining version and its successor each keep their
//! own gate, so the old rows finish under the old limit; gates of versions that left
//! are forgotten once nothing holds them.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

    /// How many more attempts of `binding` its own gate admits now (0 when it is not
    /// served): what a claim may take for it, so that a serial binding's claim takes
    /// one row instead of a batch it would give back.
    pub(super) fn room(&self, binding: &Binding) -> usize {
        self.gate(binding).map_or(0, |g| g.available_permits())
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

/// Rows a claim asks for, counted in the dispatcher's claiming count from before the
/// claim until its rows are admitted or released (or it failed): the permits a claim
/// in flight will take are not free to the other claim loop.
pub(super) struct Claiming<'a> {
    count: &'a AtomicUsize,
    n: usize,
}

impl<'a> Claiming<'a> {
    pub(super) fn new(count: &'a AtomicUsize, n: usize) -> Self {
        count.fetch_add(n, Relaxed);
        Claiming { count, n }
    }
}

impl Drop for Claiming<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(self.n, Relaxed);
    }
}

/// How long a binding with attempts in flight may wait for half its permits to be
/// free before it claims with fewer: long enough for a batch of quick attempts to
/// finish together, short against any handler's own latency.
pub(super) const LINGER: Duration = Duration::from_millis(1);

/// Whether a binding with `room` of its `max_concurrent` permits free is claimed for
/// now: at half its permits free (or once the linger has passed), so a busy binding's
/// rows are claimed, and its finishes committed, in batches rather than one
/// transaction per freed permit. A serial binding (`max_concurrent = 1`) and an idle
/// one always qualify.
pub(super) fn claim_now(room: usize, max_concurrent: usize, lingered: bool) -> bool {
    lingered || room.saturating_mul(2) >= max_concurrent.max(1)
}

/// Whether `queued` finishes are committed on their own now, while the process has
/// too few free permits to claim (the claim would fold them into its transaction):
/// once they are as many as a claim would take (`claim_at`), once nothing else is in
/// flight (no more are coming), or once the linger since the first of them has passed.
/// Before, every ended attempt woke the loop into its own commit, so a busy process
/// paid a transaction (and on a durable store a sync) per one or two rows.
pub(super) fn commit_finishes_now(
    queued: usize,
    claim_at: usize,
    in_flight: usize,
    lingered: bool,
) -> bool {
    lingered || in_flight == 0 || queued >= claim_at.max(1)
}

#[cfg(test)]
mod tests {
    use super::{claim_now, commit_finishes_now};

    #[test]
    fn finishes_wait_for_company_but_never_past_the_linger() {
        assert!(!commit_finishes_now(3, 50, 200, false), "gather more");
        assert!(commit_finishes_now(50, 50, 200, false), "a claim's worth");
        assert!(
            commit_finishes_now(1, 50, 0, false),
            "nothing else is coming"
        );
        assert!(commit_finishes_now(1, 50, 200, true), "the linger is over");
        assert!(
            commit_finishes_now(1, 0, 5, false),
            "a zero threshold counts as one"
        );
    }

    #[test]
    fn a_busy_binding_is_claimed_for_at_half_its_permits_or_after_the_linger() {
        assert!(claim_now(16, 16, false), "idle");
        assert!(claim_now(8, 16, false), "half free");
        assert!(!claim_now(7, 16, false), "fewer than half: gather more");
        assert!(claim_now(1, 16, true), "the linger is over");
        assert!(claim_now(1, 1, false), "a serial binding never waits");
        assert!(claim_now(2, 3, false) && !claim_now(1, 3, false));
        assert!(claim_now(1, 0, false), "a zero limit counts as one");
    }
}
