//! The retry schedule: how long a failed row waits before its next attempt, and when
//! attempts run out. A pure function of the policy, the attempt number, the clock and
//! a random draw, all passed in, so every schedule is a plain `#[test]`.

use std::time::Duration;

use serde::Serialize;

/// How the delay grows with each failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryCurve {
    /// `base` every time.
    Constant,
    /// `base × n` after the n-th failure.
    Linear,
    /// `base × 2^(n-1)` after the n-th failure.
    Exponential,
}

impl RetryCurve {
    /// The name `retry.backoff` takes in `[[triggers]]`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryCurve::Constant => "constant",
            RetryCurve::Linear => "linear",
            RetryCurve::Exponential => "exponential",
        }
    }
}

/// A binding's retry policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; `1` means never retried.
    pub max_attempts: u32,
    /// How the delay grows.
    pub backoff: RetryCurve,
    /// The first delay.
    #[serde(serialize_with = "crate::duration::serialize_ms")]
    pub base: Duration,
    /// No delay exceeds it (before jitter).
    #[serde(serialize_with = "crate::duration::serialize_ms")]
    pub cap: Duration,
    /// Spread as a fraction of the delay, in `[0, 1]`: the delay is drawn uniformly from
    /// `delay × (1 ± jitter)`, so rows that failed together (a handler that was down)
    /// do not all come back in the same millisecond.
    pub jitter: f64,
}

/// Default attempts: 5 (the first and four retries).
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default first delay: 1 s, long enough for a restarting handler to come back.
pub(crate) const DEFAULT_BASE: Duration = Duration::from_secs(1);
/// Default cap: 5 minutes, so the fifth attempt of a default policy is still well
/// within an operator's attention span.
pub(crate) const DEFAULT_CAP: Duration = Duration::from_secs(300);
/// Default jitter: ±20 %.
pub(crate) const DEFAULT_JITTER: f64 = 0.2;

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff: RetryCurve::Exponential,
            base: DEFAULT_BASE,
            cap: DEFAULT_CAP,
            jitter: DEFAULT_JITTER,
        }
    }
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again at this time (unix ms).
    RetryAt(i64),
    /// Attempts are used up: dead-letter the row.
    Exhausted,
}

impl RetryPolicy {
    /// The delay after the `failed`-th attempt (1-based) failed, before jitter.
    pub fn base_delay(&self, failed: u32) -> Duration {
        let n = failed.max(1);
        let delay = match self.backoff {
            RetryCurve::Constant => self.base,
            RetryCurve::Linear => self.base.saturating_mul(n),
            RetryCurve::Exponential => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                self.base.saturating_mul(factor)
            }
        };
        delay.min(self.cap)
    }

    /// The delay after the `failed`-th attempt, with jitter from `unit`, a uniform draw
    /// from `[0, 1)`.
    pub fn delay(&self, failed: u32, unit: f64) -> Duration {
        let d = self.base_delay(failed).as_secs_f64();
        let j = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + j * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        Duration::from_secs_f64((d * factor).max(0.0))
    }

    /// What follows the `failed`-th attempt failing at `now_ms`.
    pub fn after_failure(&self, failed: u32, now_ms: i64, unit: f64) -> Next {
        if failed >= self.max_attempts {
            return Next::Exhausted;
        }
        Next::RetryAt(now_ms.saturating_add(self.delay(failed, unit).as_millis() as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(backoff: RetryCurve) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 6,
            backoff,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
            jitter: 0.0,
        }
    }

    fn delays(p: &RetryPolicy) -> Vec<u128> {
        (1..=6).map(|n| p.base_delay(n).as_millis()).collect()
    }

    #[test]
    fn constant_linear_and_exponential_grow_as_named_and_stop_at_the_cap() {
        assert_eq!(
            delays(&policy(RetryCurve::Constant)),
            [100, 100, 100, 100, 100, 100]
        );
        assert_eq!(
            delays(&policy(RetryCurve::Linear)),
            [100, 200, 300, 400, 500, 600]
        );
        assert_eq!(
            delays(&policy(RetryCurve::Exponential)),
            [100, 200, 400, 800, 1000, 1000]
        );
    }

    #[test]
    fn a_huge_attempt_number_saturates_at_the_cap_instead_of_overflowing() {
        let p = policy(RetryCurve::Exponential);
        assert_eq!(p.base_delay(200), Duration::from_millis(1000));
        assert_eq!(
            policy(RetryCurve::Linear).base_delay(u32::MAX).as_millis(),
            1000
        );
    }

    #[test]
    fn jitter_spreads_the_delay_symmetrically_within_the_fraction() {
        let p = RetryPolicy {
            jitter: 0.5,
            ..policy(RetryCurve::Constant)
        };
        assert_eq!(p.delay(1, 0.0), Duration::from_millis(50));
        assert_eq!(p.delay(1, 0.5), Duration::from_millis(100));
        assert!(p.delay(1, 0.999_999) > Duration::from_millis(149));
        assert!(p.delay(1, 0.999_999) <= Duration::from_millis(150));
    }

    #[test]
    fn attempts_run_out_at_max_attempts_counting_the_first() {
        let p = RetryPolicy {
            max_attempts: 3,
            ..policy(RetryCurve::Constant)
        };
        assert_eq!(p.after_failure(1, 1_000, 0.5), Next::RetryAt(1_100));
        assert_eq!(p.after_failure(2, 5_000, 0.5), Next::RetryAt(5_100));
        assert_eq!(p.after_failure(3, 9_000, 0.5), Next::Exhausted);
        let once = RetryPolicy {
            max_attempts: 1,
            ..p
        };
        assert_eq!(once.after_failure(1, 0, 0.5), Next::Exhausted);
    }
}
