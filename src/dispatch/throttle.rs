//! A binding's `throttle = { starts = N, per = "1s" }` as a decision core: at most N
//! attempts start in any window of `per`, in this process, across the binding's
//! versions. A row the window has no room for is not dropped: it is given back due, and
//! the dispatcher wakes when the window next has room ([`StartWindow::next_room_at`]).
//!
//! A sliding log of start times rather than a token bucket: "at most N per period"
//! then holds for every window, not only on average, which is what a rate-limited
//! downstream API asks for. The log holds at most N instants.

use std::collections::VecDeque;

/// The starts of the last `per_ms`, oldest first.
#[derive(Debug, Clone)]
pub(crate) struct StartWindow {
    starts: u32,
    per_ms: i64,
    log: VecDeque<i64>,
}

impl StartWindow {
    /// At most `starts` per `per_ms` (both at least 1).
    pub(crate) fn new(starts: u32, per_ms: i64) -> StartWindow {
        StartWindow {
            starts: starts.max(1),
            per_ms: per_ms.max(1),
            log: VecDeque::with_capacity(starts.max(1) as usize),
        }
    }

    fn forget(&mut self, now_ms: i64) {
        while self.log.front().is_some_and(|&t| t <= now_ms - self.per_ms) {
            self.log.pop_front();
        }
    }

    /// Whether a start at `now_ms` fits; if it does, it is counted.
    pub(crate) fn try_start(&mut self, now_ms: i64) -> bool {
        self.forget(now_ms);
        if self.log.len() < self.starts as usize {
            self.log.push_back(now_ms);
            true
        } else {
            false
        }
    }

    /// How many starts fit at `now_ms`.
    pub(crate) fn room(&mut self, now_ms: i64) -> usize {
        self.forget(now_ms);
        (self.starts as usize).saturating_sub(self.log.len())
    }

    /// When the window next has room: `now_ms` if it has room now, else when its
    /// oldest start leaves it.
    pub(crate) fn next_room_at(&mut self, now_ms: i64) -> i64 {
        self.forget(now_ms);
        if self.log.len() < self.starts as usize {
            now_ms
        } else {
            self.log.front().map_or(now_ms, |&t| t + self.per_ms)
        }
    }

    /// Whether the window was made for these settings (a reload that changes them
    /// starts a new window).
    pub(crate) fn is(&self, starts: u32, per_ms: i64) -> bool {
        self.starts == starts.max(1) && self.per_ms == per_ms.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_n_starts_in_any_window() {
        let mut w = StartWindow::new(3, 1_000);
        assert!(w.try_start(0) && w.try_start(10) && w.try_start(20));
        assert!(!w.try_start(30));
        assert_eq!(w.room(999), 0);
        assert_eq!(w.next_room_at(500), 1_000);
        // At 1 000 the start at 0 has left the window (it covers (0, 1 000]).
        assert!(w.try_start(1_000));
        assert_eq!(w.room(1_005), 0);
        assert!(!w.try_start(1_005));
        assert_eq!(w.next_room_at(1_005), 1_010);
        assert!(w.try_start(1_010) && w.try_start(1_020));
        assert!(!w.try_start(1_999));
    }

    #[test]
    fn a_sliding_window_never_allows_a_burst_across_a_boundary() {
        let mut w = StartWindow::new(2, 100);
        let mut starts = Vec::new();
        for t in 0..1_000 {
            if w.try_start(t) {
                starts.push(t);
            }
        }
        for (i, &t) in starts.iter().enumerate() {
            let in_window = starts[i..].iter().take_while(|&&u| u < t + 100).count();
            assert!(in_window <= 2, "{in_window} starts in [{t}, {})", t + 100);
        }
        assert_eq!(starts.len(), 20, "2 per 100 ms over a second: {starts:?}");
    }

    #[test]
    fn a_refused_start_is_not_counted_and_settings_are_recognised() {
        let mut w = StartWindow::new(1, 50);
        assert!(w.try_start(0));
        for t in 1..50 {
            assert!(!w.try_start(t));
        }
        assert!(w.try_start(50));
        assert!(w.is(1, 50) && !w.is(2, 50) && !w.is(1, 60));
        assert!(
            StartWindow::new(0, 0).is(1, 1),
            "at least one start per millisecond"
        );
    }
}
