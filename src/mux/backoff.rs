//! Reconnect backoff: exponential growth, a cap and jitter, with no clock and no RNG
//! inside (the caller passes a uniform sample), so every property is a plain test.

use std::time::Duration;

/// How reconnect delays grow.
///
/// Defaults: 500 ms initial (a gateway restart is usually back within a second, so the
/// first retry should be quick), doubling (reaches the cap in six steps), 30 s cap (a
/// gateway that is down for long is not hammered, yet recovery is noticed within half a
/// minute), jitter 0.5 (each delay is drawn from [base/2, base], so thousands of
/// sockets dropped at the same instant do not reconnect at the same instant).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackoffPolicy {
    /// First delay.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Growth factor per attempt (at least 1).
    pub multiplier: f64,
    /// Fraction of the delay that is random, 0 (none) to 1 (anywhere in `[0, base]`).
    pub jitter: f64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            multiplier: 2.0,
            jitter: 0.5,
        }
    }
}

impl BackoffPolicy {
    /// A policy with the given initial and maximum delay and default growth and jitter.
    pub fn new(initial: Duration, max: Duration) -> Self {
        BackoffPolicy {
            initial,
            max: max.max(initial),
            ..Default::default()
        }
    }

    /// Sets the growth factor (values below 1 are treated as 1).
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier.max(1.0);
        self
    }

    /// Sets the jitter fraction (clamped to 0..=1).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }
}

/// The state of one retry loop.
///
/// Call [`Backoff::next_delay`] before each retry and [`Backoff::reset`] when the thing
/// retried has really succeeded (for a socket: a register succeeded, not merely the TCP
/// connect), so a peer that accepts connections but refuses the work sees ever longer
/// pauses.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: BackoffPolicy,
    base: Duration,
    attempts: u32,
}

/// The smallest delay ever returned: a zero delay would turn a refusal into a busy loop.
const MIN_DELAY: Duration = Duration::from_millis(1);

impl Backoff {
    /// A fresh loop at the policy's initial delay.
    pub fn new(policy: BackoffPolicy) -> Self {
        let base = policy.initial;
        Backoff {
            policy,
            base,
            attempts: 0,
        }
    }

    /// The delay before the next attempt, given a uniform sample in `[0, 1)`; then grows
    /// the base towards the cap.
    pub fn next_delay(&mut self, unit_sample: f64) -> Duration {
        let sample = unit_sample.clamp(0.0, 1.0);
        let jitter = self.policy.jitter.clamp(0.0, 1.0);
        let delay = self.base.mul_f64(1.0 - jitter * sample).max(MIN_DELAY);
        self.attempts = self.attempts.saturating_add(1);
        self.base = self
            .base
            .mul_f64(self.policy.multiplier.max(1.0))
            .min(self.policy.max);
        delay
    }

    /// Back to the initial delay after a real success.
    pub fn reset(&mut self) {
        self.base = self.policy.initial;
        self.attempts = 0;
    }

    /// Attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The base the next delay is drawn from.
    pub fn current_base(&self) -> Duration {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn without_jitter_delays_double_up_to_the_cap() {
        let mut b = Backoff::new(BackoffPolicy::new(ms(100), ms(1000)).with_jitter(0.0));
        let got: Vec<_> = (0..6).map(|_| b.next_delay(0.7)).collect();
        assert_eq!(
            got,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(b.attempts(), 6);
    }

    #[test]
    fn jitter_keeps_delays_within_base_times_one_minus_jitter_and_base() {
        let mut lo = Backoff::new(BackoffPolicy::new(ms(1000), ms(1000)).with_jitter(0.5));
        let mut hi = lo.clone();
        assert_eq!(lo.next_delay(0.0), ms(1000));
        assert_eq!(hi.next_delay(0.999_999).as_millis(), 500);
    }

    #[test]
    fn different_samples_spread_the_delays() {
        let policy = BackoffPolicy::default();
        let a = Backoff::new(policy.clone()).next_delay(0.1);
        let b = Backoff::new(policy).next_delay(0.9);
        assert_ne!(a, b);
    }

    #[test]
    fn reset_returns_to_the_initial_delay() {
        let mut b = Backoff::new(BackoffPolicy::new(ms(10), ms(10_000)).with_jitter(0.0));
        for _ in 0..5 {
            b.next_delay(0.0);
        }
        assert_eq!(b.current_base(), ms(320));
        b.reset();
        assert_eq!((b.next_delay(0.0), b.attempts()), (ms(10), 1));
    }

    #[test]
    fn a_loop_that_never_succeeds_keeps_growing_to_the_cap_and_stays_there() {
        let mut b = Backoff::new(BackoffPolicy::default());
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            b.next_delay(0.5);
            assert!(b.current_base() >= last);
            last = b.current_base();
        }
        assert_eq!(last, Duration::from_secs(30));
    }

    #[test]
    fn delays_are_never_zero_even_with_full_jitter() {
        let mut b = Backoff::new(BackoffPolicy::new(ms(1), ms(1)).with_jitter(1.0));
        assert!(b.next_delay(1.0) >= MIN_DELAY);
    }

    #[test]
    fn out_of_range_settings_are_clamped() {
        let p = BackoffPolicy::new(ms(100), ms(50))
            .with_multiplier(0.1)
            .with_jitter(7.0);
        assert_eq!((p.max, p.multiplier, p.jitter), (ms(100), 1.0, 1.0));
    }
}
