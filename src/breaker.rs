//! [`Breaker`]: the one circuit-breaker decision core, shared by the two places that
//! stop hammering something that keeps failing: a binding's filter at ingest
//! (`triggers::filter_breaker`: a filter erroring on every event) and an HTTP endpoint that
//! outbound deliveries keep failing against (`outbound::http`).
//!
//! Why one core: both count failures in a row, open for a cool-off, and must behave
//! identically under test (paused time, no sleeps). They differ in one decision only,
//! what happens when the cool-off ends ([`AfterCoolOff`]):
//!
//! - a filter breaker **closes** outright: evaluating a filter costs nothing to
//!   anyone else, so every event may try again, and it takes another `threshold`
//!   errors to reopen;
//! - an endpoint breaker goes **half-open**: exactly one attempt (the probe) may go to
//!   the endpoint; its success closes the breaker, its failure re-opens it for another
//!   cool-off, and every other attempt meanwhile is refused, so a recovering endpoint
//!   gets one request, not the whole backlog at once.
//!
//! A decision core in the crate's sense: no clock, no I/O. Call order: [`Breaker::admit`]
//! at `now` before each attempt (or evaluation); if admitted, [`Breaker::record`] its
//! result at the time it ended. Times are milliseconds on any monotonic clock the
//! caller keeps (both callers use tokio's, so paused-time tests drive cool-offs).

/// What the breaker does when its cool-off ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterCoolOff {
    /// Close, with the failure count reset: everything passes again.
    Close,
    /// Half-open: one probe passes; its result closes or re-opens the breaker.
    Probe,
}

/// The answer of [`Breaker::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Go ahead. `just_closed` is true on the first admission after a cool-off closed
    /// the breaker (for a log line).
    Pass {
        /// The cool-off ended with this admission.
        just_closed: bool,
    },
    /// Go ahead as the half-open breaker's one probe: report its result.
    Probe,
    /// Refused: the breaker is open (or half-open with its probe out) until
    /// `until_ms`, when the next admission may pass or probe.
    Refuse {
        /// When to ask again.
        until_ms: i64,
    },
}

/// What a recorded result did to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing to report.
    None,
    /// The breaker opened until the given instant (ms).
    Opened(i64),
    /// A successful probe closed the half-open breaker.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open {
        until_ms: i64,
    },
    /// Half-open with a probe out since `since_ms`. A probe that never reports (its
    /// future dropped by an outer timeout) would wedge the breaker; so a probe out
    /// longer than a cool-off counts as lost and the next admission probes again.
    Probing {
        since_ms: i64,
    },
}

/// One breaker: opens after `threshold` failures in a row, for `cool_off_ms`.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_off_ms: i64,
    after: AfterCoolOff,
    in_a_row: u32,
    state: State,
}

impl Breaker {
    /// A closed breaker opening after `threshold` failures in a row (at least 1), for
    /// `cool_off_ms` (at least 1).
    pub(crate) fn new(threshold: u32, cool_off_ms: i64, after: AfterCoolOff) -> Breaker {
        Breaker {
            threshold: threshold.max(1),
            cool_off_ms: cool_off_ms.max(1),
            after,
            in_a_row: 0,
            state: State::Closed,
        }
    }

    /// Whether this breaker was made with these settings (a reload may change them).
    pub(crate) fn is(&self, threshold: u32, cool_off_ms: i64) -> bool {
        self.threshold == threshold.max(1) && self.cool_off_ms == cool_off_ms.max(1)
    }

    /// Whether an attempt may go ahead at `now_ms`; moves an expired open breaker on
    /// (closed, or half-open with this admission as its probe).
    pub(crate) fn admit(&mut self, now_ms: i64) -> Admit {
        match self.state {
            State::Closed => Admit::Pass { just_closed: false },
            State::Open { until_ms } if now_ms < until_ms => Admit::Refuse { until_ms },
            State::Open { .. } => match self.after {
                AfterCoolOff::Close => {
                    self.state = State::Closed;
                    self.in_a_row = 0;
                    Admit::Pass { just_closed: true }
                }
                AfterCoolOff::Probe => {
                    self.state = State::Probing { since_ms: now_ms };
                    Admit::Probe
                }
            },
            State::Probing { since_ms } if now_ms < since_ms + self.cool_off_ms => Admit::Refuse {
                until_ms: since_ms + self.cool_off_ms,
            },
            State::Probing { .. } => {
                self.state = State::Probing { since_ms: now_ms };
                Admit::Probe
            }
        }
    }

    /// Records the result of an admitted attempt that ended at `now_ms`.
    pub(crate) fn record(&mut self, failed: bool, now_ms: i64) -> Change {
        match (self.state, failed) {
            (State::Probing { .. }, false) => {
                self.state = State::Closed;
                self.in_a_row = 0;
                Change::Closed
            }
            (State::Probing { .. }, true) => self.open(now_ms),
            (_, false) => {
                self.in_a_row = 0;
                Change::None
            }
            // A result of an attempt admitted before the breaker opened changes
            // nothing: the cool-off already runs.
            (State::Open { .. }, true) => Change::None,
            (State::Closed, true) => {
                self.in_a_row = self.in_a_row.saturating_add(1);
                if self.in_a_row >= self.threshold {
                    self.open(now_ms)
                } else {
                    Change::None
                }
            }
        }
    }

    fn open(&mut self, now_ms: i64) -> Change {
        let until_ms = now_ms.saturating_add(self.cool_off_ms);
        self.state = State::Open { until_ms };
        Change::Opened(until_ms)
    }

    /// Whether the breaker refuses at `now_ms` without changing it (for reports).
    pub(crate) fn is_open(&self, now_ms: i64) -> bool {
        match self.state {
            State::Closed => false,
            State::Open { until_ms } => now_ms < until_ms,
            State::Probing { since_ms } => now_ms < since_ms + self.cool_off_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASS: Admit = Admit::Pass { just_closed: false };

    #[test]
    fn a_closing_breaker_opens_after_n_failures_in_a_row_and_closes_after_the_cool_off() {
        let mut b = Breaker::new(3, 1_000, AfterCoolOff::Close);
        assert_eq!(b.record(true, 0), Change::None);
        assert_eq!(b.record(true, 1), Change::None);
        assert_eq!(b.admit(2), PASS);
        assert_eq!(b.record(true, 2), Change::Opened(1_002));
        assert_eq!(b.admit(1_001), Admit::Refuse { until_ms: 1_002 });
        assert_eq!(b.admit(1_002), Admit::Pass { just_closed: true });
        assert_eq!(b.admit(1_003), PASS);
        // The count was reset: it takes three more failures to reopen.
        assert_eq!(b.record(true, 1_004), Change::None);
        assert_eq!(b.record(true, 1_005), Change::None);
        assert_eq!(b.record(true, 1_006), Change::Opened(2_006));
    }

    #[test]
    fn a_success_resets_the_count() {
        let mut b = Breaker::new(2, 10, AfterCoolOff::Probe);
        b.record(true, 0);
        b.record(false, 1);
        assert_eq!(b.record(true, 2), Change::None);
        assert_eq!(b.record(true, 3), Change::Opened(13));
        assert!(b.is(2, 10) && !b.is(3, 10));
    }

    #[test]
    fn a_probing_breaker_lets_one_probe_through_and_its_success_closes_it() {
        let mut b = Breaker::new(1, 100, AfterCoolOff::Probe);
        assert_eq!(b.record(true, 0), Change::Opened(100));
        assert!(b.is_open(50));
        assert_eq!(b.admit(100), Admit::Probe);
        assert_eq!(
            b.admit(101),
            Admit::Refuse { until_ms: 200 },
            "one probe at a time"
        );
        assert_eq!(b.record(false, 120), Change::Closed);
        assert_eq!(b.admit(121), PASS);
        assert!(!b.is_open(121));
    }

    #[test]
    fn a_failed_probe_reopens_for_a_whole_cool_off() {
        let mut b = Breaker::new(2, 100, AfterCoolOff::Probe);
        b.record(true, 0);
        assert_eq!(b.record(true, 5), Change::Opened(105));
        assert_eq!(b.admit(105), Admit::Probe);
        assert_eq!(b.record(true, 130), Change::Opened(230));
        assert_eq!(b.admit(229), Admit::Refuse { until_ms: 230 });
        assert_eq!(b.admit(230), Admit::Probe);
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced_after_a_cool_off() {
        let mut b = Breaker::new(1, 100, AfterCoolOff::Probe);
        b.record(true, 0);
        assert_eq!(b.admit(100), Admit::Probe);
        assert_eq!(b.admit(199), Admit::Refuse { until_ms: 200 });
        assert_eq!(b.admit(200), Admit::Probe);
    }

    #[test]
    fn late_failures_of_attempts_admitted_before_it_opened_do_not_extend_the_cool_off() {
        let mut b = Breaker::new(1, 100, AfterCoolOff::Probe);
        assert_eq!(b.record(true, 0), Change::Opened(100));
        assert_eq!(b.record(true, 50), Change::None);
        assert_eq!(b.admit(100), Admit::Probe);
    }
}
