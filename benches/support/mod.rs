//! Shared by the bench binaries: percentiles, table printing, loopback echo servers.
#![allow(dead_code)]

use std::time::Duration;

/// Latency percentile of a sorted sample.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Formats microseconds.
pub fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

/// One measured configuration.
pub struct Sample {
    pub ops: u64,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl Sample {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
    pub fn p(&mut self, q: f64) -> Duration {
        self.latencies.sort_unstable();
        percentile(&self.latencies, q)
    }
}

/// How long each configuration runs, from `SWITCHBOARD_BENCH_SECS` (default 2).
pub fn run_for() -> Duration {
    run_for_or(2.0)
}

/// How long each configuration runs, from `SWITCHBOARD_BENCH_SECS`, else `default_secs`.
pub fn run_for_or(default_secs: f64) -> Duration {
    let secs = std::env::var("SWITCHBOARD_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(default_secs);
    Duration::from_secs_f64(secs)
}
