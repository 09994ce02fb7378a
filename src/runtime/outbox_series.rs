//! The outbox depth over time, for the console's chart and `GET
//! /api/v1/outbox/series`: a fixed ring of samples ([`SeriesRing`], [`CAPACITY`] of
//! them, one per [`INTERVAL`]: the last five minutes) kept in memory, filled by one
//! light task ([`sample_loop`]) that reads the outbox depth totals once per interval
//! (`OutboxStore::depth`: three counts, not the per-binding stats).
//!
//! In memory rather than in the store because it is a view of the recent past for
//! whoever is watching: losing it at a restart costs a few minutes of chart, and a
//! table would cost a write per second forever. The ring is a plain struct with no
//! clock of its own (`push(now, sample)`), so its behaviour is tested without time;
//! the loop only adds the timer.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// Samples kept: five minutes at one per second.
pub(crate) const CAPACITY: usize = 300;
/// Time between samples.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// What one sample measures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Rows due now and not leased.
    pub(crate) due: u64,
    /// Rows under a live lease.
    pub(crate) leased: u64,
    /// Dead letters kept.
    pub(crate) dead_letters: u64,
}

/// One point of the series, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Point {
    /// When it was taken (unix ms).
    pub(crate) at_ms: i64,
    /// Rows due now and not leased.
    pub(crate) due: u64,
    /// Rows under a live lease.
    pub(crate) leased: u64,
    /// Dead letters kept.
    pub(crate) dead_letters: u64,
}

/// The series as `GET /api/v1/outbox/series` answers it and the overview charts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SeriesView {
    /// The time between samples (ms).
    pub(crate) interval_ms: u64,
    /// The samples, oldest first.
    pub(crate) points: Vec<Point>,
}

/// The newest `capacity` samples, oldest first.
#[derive(Debug, Clone)]
pub(crate) struct SeriesRing {
    interval_ms: u64,
    capacity: usize,
    points: VecDeque<Point>,
}

impl SeriesRing {
    /// An empty ring of `capacity` samples taken every `interval`.
    pub(crate) fn new(interval: Duration, capacity: usize) -> SeriesRing {
        SeriesRing {
            interval_ms: interval.as_millis() as u64,
            capacity: capacity.max(1),
            points: VecDeque::with_capacity(capacity.max(1)),
        }
    }

    /// Adds a sample taken at `now_ms`, dropping the oldest when full. A sample not
    /// later than the newest one (the wall clock stepped back) replaces it, so the
    /// points stay in time order for the chart.
    pub(crate) fn push(&mut self, now_ms: i64, s: Sample) {
        let p = Point {
            at_ms: now_ms,
            due: s.due,
            leased: s.leased,
            dead_letters: s.dead_letters,
        };
        if let Some(last) = self.points.back_mut() {
            if last.at_ms >= now_ms {
                *last = Point {
                    at_ms: last.at_ms,
                    ..p
                };
                return;
            }
        }
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(p);
    }

    /// The points, oldest first.
    pub(crate) fn points(&self) -> Vec<Point> {
        self.points.iter().copied().collect()
    }

    /// The time between samples (ms).
    pub(crate) fn interval_ms(&self) -> u64 {
        self.interval_ms
    }
}

/// A sample may take at most this share of the time between samples: the depth is
/// three counts, whose cost grows with the backlog (110 ms on PostgreSQL and 21 ms on
/// SQLite at 1M rows waiting, `benches/backlog.rs`), and the chart is not worth more
/// than a fiftieth of one database connection.
const COST_SHARE: u32 = 50;

/// How long to wait after a sample that took `took`: the interval, or fifty times the
/// sample's own time when that is longer, so a deep backlog is sampled less often
/// instead of being counted every second (at 1M rows on PostgreSQL, every 5.5 s).
pub(crate) fn next_wait(interval: Duration, took: Duration) -> Duration {
    interval.max(took.saturating_mul(COST_SHARE))
}

/// Takes a sample every `interval` (or less often, [`next_wait`]) until `cancel`,
/// pushing it with the wall-clock time `now`. `sample` returning `None` (the store is
/// down) skips that tick: a gap in the chart says more than a made-up zero.
pub(crate) async fn sample_loop<F, Fut>(
    ring: Arc<Mutex<SeriesRing>>,
    interval: Duration,
    mut sample: F,
    now: impl Fn() -> i64,
    cancel: CancellationToken,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<Sample>>,
{
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let started = tokio::time::Instant::now();
        if let Some(s) = sample().await {
            ring.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(now(), s);
        }
        wait = next_wait(interval, started.elapsed()).saturating_sub(started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(due: u64) -> Sample {
        Sample {
            due,
            leased: 1,
            dead_letters: 2,
        }
    }

    #[test]
    fn a_slow_sample_spaces_the_next_ones_out() {
        let second = Duration::from_secs(1);
        assert_eq!(next_wait(second, Duration::from_millis(3)), second);
        assert_eq!(next_wait(second, Duration::from_millis(20)), second);
        assert_eq!(
            next_wait(second, Duration::from_millis(110)),
            Duration::from_millis(5_500)
        );
    }

    #[test]
    fn the_ring_keeps_the_newest_samples_oldest_first() {
        let mut r = SeriesRing::new(Duration::from_secs(1), 3);
        for i in 0..5 {
            r.push(1_000 * i, s(i as u64));
        }
        let dues: Vec<u64> = r.points().iter().map(|p| p.due).collect();
        assert_eq!(dues, vec![2, 3, 4]);
        assert_eq!(r.points()[0].at_ms, 2_000);
        assert_eq!(r.interval_ms(), 1_000);
    }

    #[test]
    fn a_sample_from_a_clock_that_stepped_back_replaces_the_newest() {
        let mut r = SeriesRing::new(Duration::from_secs(1), 3);
        r.push(5_000, s(1));
        r.push(4_000, s(9));
        assert_eq!(r.points().len(), 1);
        assert_eq!((r.points()[0].at_ms, r.points()[0].due), (5_000, 9));
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_samples_once_per_interval_in_virtual_time() {
        let ring = Arc::new(Mutex::new(SeriesRing::new(INTERVAL, CAPACITY)));
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = count.clone();
        let task = tokio::spawn(sample_loop(
            ring.clone(),
            INTERVAL,
            move || {
                let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move { (n != 2).then_some(s(n)) }
            },
            move || start.elapsed().as_millis() as i64,
            cancel.clone(),
        ));
        // Ticks at 0, 1, 2, 3, 4 s; the third sample (n = 2) failed and is skipped.
        tokio::time::sleep(Duration::from_millis(4_500)).await;
        cancel.cancel();
        task.await.unwrap();
        let points = ring.lock().unwrap().points();
        let at: Vec<(i64, u64)> = points.iter().map(|p| (p.at_ms, p.due)).collect();
        assert_eq!(at, vec![(0, 0), (1_000, 1), (3_000, 3), (4_000, 4)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_whose_samples_take_100_ms_samples_every_5_s() {
        let ring = Arc::new(Mutex::new(SeriesRing::new(INTERVAL, CAPACITY)));
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let task = tokio::spawn(sample_loop(
            ring.clone(),
            INTERVAL,
            || async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some(s(1))
            },
            move || start.elapsed().as_millis() as i64,
            cancel.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(11_000)).await;
        cancel.cancel();
        task.await.unwrap();
        let at: Vec<i64> = ring
            .lock()
            .unwrap()
            .points()
            .iter()
            .map(|p| p.at_ms)
            .collect();
        assert_eq!(at, vec![100, 5_100, 10_100]);
    }
}
