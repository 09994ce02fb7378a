//! Live figures of one registration and of one link, for the console's views
//! (`views.rs`).
//!
//! They are written on the hot path, so each is a relaxed atomic in an `Arc` that the
//! registry entry (or the link) owns: the execute and invoke paths get the `Arc` from
//! the same registry look-up that already finds the registration's link, and count
//! without taking any further lock. A registration that moves to another link starts
//! again from zero, as its metrics report does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use super::stats::InvokeOutcome;

/// Counts per invoke outcome, every outcome present in the snapshot (zero included),
/// as in `/api/v1/stats`.
#[derive(Debug, Default)]
pub(crate) struct OutcomeCounts {
    counts: [AtomicU64; InvokeOutcome::ALL.len()],
}

impl OutcomeCounts {
    /// Counts one invoke that ended with `outcome`.
    pub(crate) fn add(&self, outcome: InvokeOutcome) {
        self.counts[outcome as usize].fetch_add(1, Relaxed);
    }

    /// The counts now, by outcome label.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, u64> {
        InvokeOutcome::ALL
            .iter()
            .map(|o| (o.label().to_owned(), self.counts[*o as usize].load(Relaxed)))
            .collect()
    }
}

/// What the gateway counts of one registration while it is registered on its link.
#[derive(Debug, Default)]
pub(crate) struct RegistrationFigures {
    executes: AtomicU64,
    execute_errors: AtomicU64,
    execute_timeouts: AtomicU64,
    in_flight: AtomicU64,
    invokes_received: OutcomeCounts,
}

/// Marks one execute in flight on a registration until dropped, whichever way the
/// execute ends (answer, timeout, or a caller that stopped waiting).
pub(crate) struct InFlight<'a>(&'a RegistrationFigures);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// How an execute routed to a registration ended, as its figures count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExecuteEnd {
    /// The connector answered with success.
    Ok,
    /// The connector answered with a failure, or its link closed first.
    Failed,
    /// No answer within the deadline.
    TimedOut,
}

impl ExecuteEnd {
    /// How spans and metrics spell it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ExecuteEnd::Ok => "ok",
            ExecuteEnd::Failed => "failed",
            ExecuteEnd::TimedOut => "timeout",
        }
    }
}

impl RegistrationFigures {
    /// Counts an execute as routed to this registration and in flight until the
    /// returned guard drops.
    pub(crate) fn start_execute(&self) -> InFlight<'_> {
        self.executes.fetch_add(1, Relaxed);
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self)
    }

    /// Counts how a routed execute ended (success needs no count of its own).
    pub(crate) fn end_execute(&self, end: ExecuteEnd) {
        match end {
            ExecuteEnd::Ok => {}
            ExecuteEnd::Failed => {
                self.execute_errors.fetch_add(1, Relaxed);
            }
            ExecuteEnd::TimedOut => {
                self.execute_errors.fetch_add(1, Relaxed);
                self.execute_timeouts.fetch_add(1, Relaxed);
            }
        }
    }

    /// Counts an invoke addressed to this registration that ended with `outcome`.
    pub(crate) fn invoked(&self, outcome: InvokeOutcome) {
        self.invokes_received.add(outcome);
    }

    /// The figures now.
    pub(crate) fn snapshot(&self) -> RegistrationFiguresView {
        RegistrationFiguresView {
            executes: self.executes.load(Relaxed),
            execute_errors: self.execute_errors.load(Relaxed),
            execute_timeouts: self.execute_timeouts.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            invokes_received: self.invokes_received.snapshot(),
        }
    }
}

/// A registration's live figures, as each item of `GET /api/v1/registrations` shows
/// them (flattened into the item).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct RegistrationFiguresView {
    /// Executes sent to it (HTTP API, test kit and invokes) since it registered on
    /// its link.
    pub(crate) executes: u64,
    /// Of those, the ones that failed: a failure answer, a timeout, or its link
    /// closing before the answer.
    pub(crate) execute_errors: u64,
    /// Of the errors, the timeouts.
    pub(crate) execute_timeouts: u64,
    /// Executes sent to it and not yet ended.
    pub(crate) in_flight: u64,
    /// Invokes addressed to it that got past the gateway's checks, by outcome. (Which
    /// registration *sent* an invoke is not on the wire; a link's sent invokes are on
    /// `GET /api/v1/connections`, and a gRPC link carries one registration.)
    pub(crate) invokes_received: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execute_is_in_flight_until_its_guard_drops_and_errors_include_timeouts() {
        let f = RegistrationFigures::default();
        let a = f.start_execute();
        let b = f.start_execute();
        assert_eq!(f.snapshot().in_flight, 2);
        f.end_execute(ExecuteEnd::TimedOut);
        drop(a);
        f.end_execute(ExecuteEnd::Failed);
        drop(b);
        let _c = f.start_execute();
        f.end_execute(ExecuteEnd::Ok);
        let s = f.snapshot();
        assert_eq!(
            (
                s.executes,
                s.execute_errors,
                s.execute_timeouts,
                s.in_flight
            ),
            (3, 2, 1, 1)
        );
    }

    #[test]
    fn invokes_are_counted_by_outcome_every_outcome_listed() {
        let f = RegistrationFigures::default();
        f.invoked(InvokeOutcome::Ok);
        f.invoked(InvokeOutcome::Ok);
        f.invoked(InvokeOutcome::Timeout);
        let s = f.snapshot().invokes_received;
        assert_eq!(s["ok"], 2);
        assert_eq!(s["timeout"], 1);
        assert_eq!(s["forbidden"], 0);
        assert_eq!(s.len(), InvokeOutcome::ALL.len());
    }
}
