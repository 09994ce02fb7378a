//! The connection core's deadlines, ordered by instant: register deadlines and retry
//! times, execute and invoke deadlines, metrics reports.
//!
//! Every entry is removed exactly (its owner keeps the [`TimerId`] it was given), so the
//! set holds only live deadlines and [`Timers::next`] is the earliest real one. One
//! ordered map for all kinds keeps `poll_timeout` O(log n) however many executes are in
//! flight.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::mux::routing::HandleId;

/// What a deadline is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A registration's register deadline or retry time (its phase says which).
    Register(HandleId),
    /// An execute's deadline, queued or running.
    Execute(u64),
    /// A pending invoke's deadline, by request id.
    Invoke(String),
    /// A registration's next metrics report.
    Metrics(HandleId),
}

/// Identifies one scheduled deadline: its instant and a sequence number that makes it
/// unique.
pub(crate) type TimerId = (Instant, u64);

#[derive(Debug, Default)]
pub(crate) struct Timers {
    map: BTreeMap<TimerId, Timer>,
    seq: u64,
}

impl Timers {
    /// Schedules `timer` at `at`.
    pub(crate) fn insert(&mut self, at: Instant, timer: Timer) -> TimerId {
        self.seq += 1;
        let id = (at, self.seq);
        self.map.insert(id, timer);
        id
    }

    /// Cancels a deadline; a no-op when it already fired.
    pub(crate) fn remove(&mut self, id: TimerId) {
        self.map.remove(&id);
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.map.keys().next().map(|(at, _)| *at)
    }

    /// Takes the earliest deadline that is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let (&(at, _), _) = self.map.iter().next()?;
        if at > now {
            return None;
        }
        self.map.pop_first().map(|(_, t)| t)
    }

    /// Number of scheduled deadlines.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn due_timers_pop_in_order_and_removed_ones_never_fire() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        let late = timers.insert(t0 + Duration::from_secs(3), Timer::Execute(3));
        timers.insert(t0 + Duration::from_secs(1), Timer::Execute(1));
        let gone = timers.insert(t0 + Duration::from_secs(2), Timer::Execute(2));
        timers.remove(gone);
        assert_eq!(timers.next(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(timers.pop_due(t0), None);
        let now = t0 + Duration::from_secs(5);
        assert_eq!(timers.pop_due(now), Some(Timer::Execute(1)));
        timers.remove(late);
        assert_eq!(timers.pop_due(now), None);
        assert_eq!(timers.len(), 0);
    }
}
