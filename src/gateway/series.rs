//! The live chart's data: a ring of one point per second over the last five minutes
//! (`GET /api/v1/stats/series`), and the per-second latency histogram its points are
//! read from.
//!
//! A pure core, so that its arithmetic is tested with plain `#[test]`s: the execute
//! path records each answered execute's round trip into [`LatencyBuckets`] (one
//! relaxed atomic add, no lock, since it runs on every execute); once a second the
//! sampler task (`views.rs`) takes the buckets (leaving them empty for the next
//! second), turns the gateway's cumulative counters into that second's figures with a
//! [`Baseline`], and [`Series::push`]es the point. Quantiles come from fixed buckets,
//! so a point's p50/p99 is the upper bound of the bucket holding that quantile: an
//! estimate that never understates, good enough for a chart and cheap to keep.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

/// How often the sampler takes a point.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Points kept: five minutes at one a second, what the console's chart shows.
pub(crate) const SERIES_POINTS: usize = 300;

/// Upper bounds of the latency buckets, in microseconds; a last, unbounded bucket
/// catches anything slower. Finer below a millisecond, where a local gateway's round
/// trips fall, and up to the longest deadlines.
const BOUNDS_US: [u64; 18] = [
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// Buckets, the unbounded one included.
const BUCKETS: usize = BOUNDS_US.len() + 1;

/// Execute round trips of the current second, by bucket; written by every execute,
/// emptied by the sampler once a second.
#[derive(Debug, Default)]
pub(crate) struct LatencyBuckets {
    counts: [AtomicU64; BUCKETS],
}

impl LatencyBuckets {
    /// Counts one round trip of `took`.
    pub(crate) fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = BOUNDS_US.partition_point(|&bound| bound < us);
        self.counts[i].fetch_add(1, Relaxed);
    }

    /// The counts so far, leaving every bucket at zero. A round trip recorded while
    /// this runs lands in this second or the next, never in neither.
    pub(crate) fn take(&self) -> Histogram {
        let mut counts = [0; BUCKETS];
        for (out, c) in counts.iter_mut().zip(&self.counts) {
            *out = c.swap(0, Relaxed);
        }
        Histogram { counts }
    }
}

/// A second's worth of round trips, by bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Histogram {
    counts: [u64; BUCKETS],
}

impl Histogram {
    /// How many round trips it holds.
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0 to 1) in milliseconds: the upper bound of the bucket that
    /// holds it (the unbounded bucket reports the largest bound). `None` when empty,
    /// so that a quiet second charts as a gap rather than as a zero latency.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: p50 of 4 is the 2nd, p99 of 4 the 4th.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let us = BOUNDS_US[i.min(BOUNDS_US.len() - 1)];
                return Some(us as f64 / 1000.0);
            }
        }
        None
    }
}

/// Cumulative totals of the gateway's counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Executes completed plus invokes completed, since start.
    pub(crate) round_trips: u64,
    /// Failed executes (failure answers, timeouts, closed links) plus invokes that did
    /// not end `ok`, since start.
    pub(crate) errors: u64,
}

/// The totals at the previous sample, so each point carries that second's figures.
#[derive(Debug, Default)]
pub(crate) struct Baseline {
    last: Totals,
}

impl Baseline {
    /// What happened since the previous call (or since start): `now` less the last
    /// totals, which become `now`.
    pub(crate) fn since(&mut self, now: Totals) -> Totals {
        let d = Totals {
            round_trips: now.round_trips.saturating_sub(self.last.round_trips),
            errors: now.errors.saturating_sub(self.last.errors),
        };
        self.last = now;
        d
    }
}

/// One second of the gateway, as the chart shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Point {
    /// When the second ended, in ms since the epoch.
    pub(crate) at_ms: u64,
    /// Executes completed plus invokes completed in that second. An invoke delivered
    /// to its target counts twice (its execute to the target, and the invoke).
    pub(crate) round_trips: u64,
    /// Execute failures and timeouts plus failed invokes in that second.
    pub(crate) errors: u64,
    /// Median execute round trip in that second (bucket upper bound, ms); `null` when
    /// no execute was answered.
    pub(crate) latency_p50_ms: Option<f64>,
    /// 99th percentile execute round trip (bucket upper bound, ms); `null` when no
    /// execute was answered.
    pub(crate) latency_p99_ms: Option<f64>,
}

/// The last [`SERIES_POINTS`] points, oldest first.
#[derive(Debug)]
pub(crate) struct Series {
    points: VecDeque<Point>,
    capacity: usize,
}

impl Default for Series {
    fn default() -> Self {
        Series::with_capacity(SERIES_POINTS)
    }
}

impl Series {
    /// An empty ring keeping at most `capacity` points.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Series {
            points: VecDeque::with_capacity(capacity),
            capacity: capacity.max(1),
        }
    }

    /// Appends the point of the second ending at `at_ms`, built from that second's
    /// figures and histogram; drops the oldest once full.
    pub(crate) fn push(&mut self, at_ms: u64, second: Totals, latency: &Histogram) {
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(Point {
            at_ms,
            round_trips: second.round_trips,
            errors: second.errors,
            latency_p50_ms: latency.quantile_ms(0.5),
            latency_p99_ms: latency.quantile_ms(0.99),
        });
    }

    /// Every point kept, oldest first.
    pub(crate) fn points(&self) -> Vec<Point> {
        self.points.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(took_us: &[u64]) -> Histogram {
        let b = LatencyBuckets::default();
        for us in took_us {
            b.record(Duration::from_micros(*us));
        }
        b.take()
    }

    #[test]
    fn quantiles_are_the_upper_bound_of_the_bucket_holding_them() {
        // 98 fast (under 1 ms), 2 slow (between 250 and 500 ms).
        let mut took = vec![800; 98];
        took.extend([300_000, 400_000]);
        let h = histogram(&took);
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile_ms(0.5), Some(1.0));
        assert_eq!(h.quantile_ms(0.99), Some(500.0));
        assert_eq!(h.quantile_ms(0.98), Some(1.0), "the 98th of 100 is fast");
    }

    #[test]
    fn a_bound_itself_falls_in_its_own_bucket_and_overflow_reports_the_last_bound() {
        assert_eq!(histogram(&[1_000]).quantile_ms(0.5), Some(1.0));
        assert_eq!(histogram(&[1_001]).quantile_ms(0.5), Some(2.0));
        assert_eq!(histogram(&[0]).quantile_ms(0.5), Some(0.1));
        assert_eq!(histogram(&[u64::MAX]).quantile_ms(0.99), Some(60_000.0));
    }

    #[test]
    fn an_empty_second_has_no_latency() {
        assert_eq!(Histogram::default().quantile_ms(0.5), None);
    }

    #[test]
    fn taking_the_buckets_empties_them() {
        let b = LatencyBuckets::default();
        b.record(Duration::from_millis(3));
        assert_eq!(b.take().count(), 1);
        assert_eq!(b.take().count(), 0);
    }

    #[test]
    fn the_baseline_turns_totals_into_per_second_figures() {
        let mut base = Baseline::default();
        let t = |round_trips, errors| Totals {
            round_trips,
            errors,
        };
        assert_eq!(base.since(t(5, 1)), t(5, 1));
        assert_eq!(base.since(t(12, 1)), t(7, 0));
        assert_eq!(base.since(t(12, 1)), t(0, 0));
    }

    #[test]
    fn the_ring_keeps_the_newest_points_oldest_first() {
        let mut s = Series::with_capacity(3);
        for at in 1..=5u64 {
            let second = Totals {
                round_trips: at * 10,
                errors: at,
            };
            s.push(at * 1000, second, &histogram(&[2_000]));
        }
        let points = s.points();
        let at: Vec<u64> = points.iter().map(|p| p.at_ms).collect();
        assert_eq!(at, [3000, 4000, 5000]);
        assert_eq!(points[2].round_trips, 50);
        assert_eq!(points[2].errors, 5);
        assert_eq!(points[2].latency_p50_ms, Some(2.0));
        assert_eq!(points[2].latency_p99_ms, Some(2.0));
    }

    #[test]
    fn the_default_ring_holds_five_minutes() {
        let mut s = Series::default();
        for at in 0..(SERIES_POINTS as u64 + 10) {
            s.push(at, Totals::default(), &Histogram::default());
        }
        assert_eq!(s.points().len(), SERIES_POINTS);
        assert_eq!(s.points()[0].at_ms, 10);
    }
}
