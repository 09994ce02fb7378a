//! The demo's latency figures: a quantile of sorted samples, and how the tables print
//! one. Shared by both sections.

use std::time::Duration;

/// The value at quantile `q` of `sorted` (nearest rank), zero when empty.
pub(super) fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// A latency for the tables: microseconds below 10 ms, milliseconds above.
pub(super) fn fmt_latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}
