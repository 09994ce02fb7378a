//! Per-second rates for the console, computed between two looks at a counter rather
//! than sampled for every registration: the execute and invoke paths keep plain
//! running totals (`figures.rs`), and only the registrations someone is looking at
//! get a rate. A pure core: the caller passes `now`.
//!
//! A rate is the change of a total over at least [`MIN_WINDOW_MS`] between two looks;
//! looks closer than that repeat the last rate (a live page renders twice a second),
//! and a look more than [`MAX_WINDOW_MS`] after the previous one starts a new window
//! (an average over an hour nobody watched is not "per second"). Bounded: at most
//! [`MAX_TRACKED`] counters, the stalest dropped first.

use std::collections::HashMap;

/// Shortest window a rate is computed over.
pub(crate) const MIN_WINDOW_MS: i64 = 1_000;
/// Longest gap between two looks that still makes a window.
pub(crate) const MAX_WINDOW_MS: i64 = 10_000;
/// Most counters remembered.
pub(crate) const MAX_TRACKED: usize = 4_096;

#[derive(Debug, Clone, Copy)]
struct Look {
    at_ms: i64,
    total: u64,
    rate: Option<f64>,
}

/// The last look at each counter, by key.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    looks: HashMap<String, Look>,
}

impl Rates {
    /// Records that `key`'s total is `total` at `now_ms`; returns its rate per second,
    /// or `None` until two looks make a window.
    pub(crate) fn observe(&mut self, key: &str, now_ms: i64, total: u64) -> Option<f64> {
        if let Some(last) = self.looks.get_mut(key) {
            let dt = now_ms - last.at_ms;
            if (0..MIN_WINDOW_MS).contains(&dt) {
                return last.rate;
            }
            let rate = (dt <= MAX_WINDOW_MS && total >= last.total)
                .then(|| (total - last.total) as f64 * 1000.0 / dt as f64);
            *last = Look {
                at_ms: now_ms,
                total,
                rate,
            };
            return rate;
        }
        if self.looks.len() >= MAX_TRACKED {
            self.looks.retain(|_, l| now_ms - l.at_ms <= MAX_WINDOW_MS);
            if self.looks.len() >= MAX_TRACKED {
                let stalest = self
                    .looks
                    .iter()
                    .min_by_key(|(_, l)| l.at_ms)
                    .map(|(k, _)| k.clone());
                if let Some(k) = stalest {
                    self.looks.remove(&k);
                }
            }
        }
        self.looks.insert(
            key.to_owned(),
            Look {
                at_ms: now_ms,
                total,
                rate: None,
            },
        );
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_needs_two_looks_a_second_apart() {
        let mut r = Rates::default();
        assert_eq!(r.observe("a", 0, 10), None, "one look: no window yet");
        assert_eq!(
            r.observe("a", 500, 15),
            None,
            "too close: the last rate (none)"
        );
        assert_eq!(r.observe("a", 2_000, 30), Some(10.0), "20 in 2 s");
        assert_eq!(
            r.observe("a", 2_500, 99),
            Some(10.0),
            "within a second: repeated"
        );
        assert_eq!(r.observe("a", 3_000, 40), Some(10.0), "10 in 1 s");
    }

    #[test]
    fn a_long_gap_or_a_reset_total_starts_a_new_window() {
        let mut r = Rates::default();
        r.observe("a", 0, 10);
        assert_eq!(r.observe("a", 60_000, 1_000), None, "a minute unwatched");
        assert_eq!(r.observe("a", 61_000, 1_005), Some(5.0));
        assert_eq!(
            r.observe("a", 62_000, 3),
            None,
            "the total went down: re-registered"
        );
        assert_eq!(r.observe("a", 63_000, 5), Some(2.0));
    }

    #[test]
    fn the_table_is_bounded_and_drops_the_stalest() {
        let mut r = Rates::default();
        for i in 0..MAX_TRACKED {
            r.observe(&i.to_string(), i as i64, 0);
        }
        // All within the window of the next look: the stalest ("0") goes.
        r.observe("new", MAX_TRACKED as i64, 0);
        assert_eq!(r.looks.len(), MAX_TRACKED);
        assert!(!r.looks.contains_key("0") && r.looks.contains_key("new"));
    }
}
