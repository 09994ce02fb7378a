//! A binding's `breaker = { errors = N, cool_off = "1m" }` as a decision core: when its
//! filter (or ordering key) fails to evaluate on N events in a row (errors, not `false`
//! results), the breaker opens for the cool-off: the binding is skipped for every event
//! meanwhile (counted as skipped, not evaluated), and it closes when the cool-off ends,
//! its error count reset. One good evaluation resets the count too.
//!
//! Why: a filter that errors on every event (a field renamed upstream) would otherwise
//! log and count an error per event at full ingest rate; the breaker turns that into
//! one log line per cool-off and a metric an alert can watch, while the events are
//! still stored (a replay after the fix reaches the binding).
//!
//! The counting and the cool-off are the shared core in [`crate::breaker`] (the same
//! one the outbound HTTP deliveries use per endpoint); this module keeps what is
//! particular to filters: one breaker per binding, its settings from the binding.

pub(crate) use crate::breaker::Change;
use crate::breaker::{AfterCoolOff, Breaker};

/// One binding's breaker: the shared core ([`crate::breaker`]) in its closing mode,
/// since a filter's cool-off ending costs nobody anything (no probe needed).
#[derive(Debug, Clone)]
pub(crate) struct FilterBreaker(Breaker);

impl FilterBreaker {
    /// Opens after `errors` failures in a row (at least 1), for `cool_off_ms`.
    pub(crate) fn new(errors: u32, cool_off_ms: i64) -> FilterBreaker {
        FilterBreaker(Breaker::new(errors, cool_off_ms, AfterCoolOff::Close))
    }

    /// Whether the breaker is open at `now_ms` (the binding is skipped). Closes it,
    /// with its count reset, once the cool-off has ended; `true` in the second value
    /// when that just happened.
    pub(crate) fn is_open(&mut self, now_ms: i64) -> (bool, bool) {
        match self.0.admit(now_ms) {
            crate::breaker::Admit::Pass { just_closed } => (false, just_closed),
            // A closing breaker never probes; a probe would pass.
            crate::breaker::Admit::Probe => (false, true),
            crate::breaker::Admit::Refuse { .. } => (true, false),
        }
    }

    /// Records one evaluation at `now_ms`: `failed` when it errored.
    pub(crate) fn record(&mut self, failed: bool, now_ms: i64) -> Change {
        self.0.record(failed, now_ms)
    }

    /// Whether the breaker was made for these settings.
    pub(crate) fn is(&self, errors: u32, cool_off_ms: i64) -> bool {
        self.0.is(errors, cool_off_ms)
    }
}

/// Every binding's breaker, keyed by binding id, on a monotonic clock that tokio's
/// paused time drives (so cool-offs are testable in virtual time). Shared by ingest,
/// the cron sources and whoever reports the state.
#[derive(Debug)]
pub(crate) struct Breakers {
    map: std::sync::Mutex<std::collections::HashMap<String, FilterBreaker>>,
    base: tokio::time::Instant,
}

impl Default for Breakers {
    fn default() -> Self {
        Breakers {
            map: std::sync::Mutex::default(),
            base: tokio::time::Instant::now(),
        }
    }
}

impl Breakers {
    /// Milliseconds on the breakers' clock.
    pub(crate) fn now_ms(&self) -> i64 {
        self.base.elapsed().as_millis() as i64
    }

    fn map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, FilterBreaker>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `binding`'s breaker (with these settings) is open now; `Some(true)` in
    /// the second value when it just closed.
    pub(crate) fn check(
        &self,
        binding: &str,
        errors: u32,
        cool_off_ms: i64,
        now_ms: i64,
    ) -> (bool, bool) {
        let mut map = self.map();
        let b = map
            .entry(binding.to_owned())
            .or_insert_with(|| FilterBreaker::new(errors, cool_off_ms));
        if !b.is(errors, cool_off_ms) {
            *b = FilterBreaker::new(errors, cool_off_ms);
        }
        b.is_open(now_ms)
    }

    /// Records an evaluation of `binding`'s filter.
    pub(crate) fn record(&self, binding: &str, failed: bool, now_ms: i64) -> Change {
        self.map()
            .get_mut(binding)
            .map_or(Change::None, |b| b.record(failed, now_ms))
    }

    /// Whether `binding`'s breaker is open (for the admin API and `/metrics`).
    pub(crate) fn is_open(&self, binding: &str) -> bool {
        let now = self.now_ms();
        self.map().get(binding).is_some_and(|b| b.0.is_open(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_opens_after_n_errors_in_a_row_and_closes_after_the_cool_off() {
        let mut b = FilterBreaker::new(3, 1_000);
        assert_eq!(b.record(true, 0), Change::None);
        assert_eq!(b.record(true, 1), Change::None);
        assert_eq!(b.is_open(2), (false, false));
        assert_eq!(b.record(true, 2), Change::Opened(1_002));
        assert_eq!(b.is_open(3), (true, false));
        assert_eq!(b.is_open(1_001), (true, false));
        assert_eq!(
            b.is_open(1_002),
            (false, true),
            "closes as the cool-off ends"
        );
        assert_eq!(b.is_open(1_003), (false, false));
        // Its count was reset: two more errors do not reopen it.
        assert_eq!(b.record(true, 1_004), Change::None);
        assert_eq!(b.record(true, 1_005), Change::None);
        assert_eq!(b.record(true, 1_006), Change::Opened(2_006));
    }

    #[test]
    fn a_good_evaluation_resets_the_count() {
        let mut b = FilterBreaker::new(2, 10);
        b.record(true, 0);
        b.record(false, 1);
        assert_eq!(b.record(true, 2), Change::None);
        assert_eq!(b.record(true, 3), Change::Opened(13));
        assert!(b.is(2, 10) && !b.is(3, 10));
    }
}
