//! Reconnect backoff: exponential growth, a cap and jitter, with no clock and no RNG.
//!
//! [`Backoff`] is the state of one reconnect loop. The caller supplies the random
//! sample (a uniform `f64` in `[0, 1)`, or an injected [`rand::Rng`]), sleeps for the
//! returned delay itself, and calls [`Backoff::reset`] only once a connection has proven
//! healthy, so the decision is deterministic and tested without time.

// Without `websocket` no reconnect loop exists; `BackoffPolicy` stays for the config.
#![cfg_attr(not(feature = "websocket"), allow(dead_code))]

use std::time::Duration;

/// The smallest delay [`Backoff::next_delay`] ever returns, so that a degenerate
/// policy (zero initial delay, full jitter) can never turn a reconnect loop into a
/// busy loop.
pub(crate) const MIN_DELAY: Duration = Duration::from_millis(1);

/// How reconnect delays grow.
///
/// The defaults ([`BackoffPolicy::default`]) are 500 ms initial, 30 s max,
/// multiplier 2.0, jitter 0.5.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackoffPolicy {
    /// The base delay before the first retry. Default 500 ms: short enough that a
    /// blip (a gateway restart, a load balancer dropping idle connections) heals in
    /// well under a second, long enough not to hammer a gateway that is coming up.
    pub initial: Duration,
    /// The cap on the base delay. Default 30 s: bounds how long a connector stays away
    /// after a long outage ends, and matches the protocol's 30 s application
    /// heartbeat period, the time scale on which the gateway notices a departed
    /// connector anyway.
    pub max: Duration,
    /// Growth factor of the base delay per attempt, at least 1.0. Default 2.0: the
    /// usual doubling, which reaches the 30 s cap after 7 attempts (about a minute
    /// of trying).
    pub multiplier: f64,
    /// Fraction of the base delay that is randomised away, in `0.0..=1.0`: the delay is
    /// `base * (1 - jitter * sample)`. Default 0.5: after a gateway restart, the many
    /// sockets that dropped at the same instant spread their reconnects over half of
    /// each window instead of arriving together, while every delay stays at least half
    /// its base so the schedule still grows; jitter only shortens, so no delay exceeds
    /// `max`.
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
    /// A policy with the given initial delay and cap, and the default multiplier and
    /// jitter.
    pub fn new(initial: Duration, max: Duration) -> Self {
        BackoffPolicy {
            initial,
            max,
            ..BackoffPolicy::default()
        }
    }

    /// Sets the growth factor (values below 1.0 or not finite are treated as 1.0).
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Sets the jitter fraction (clamped to `0.0..=1.0`; NaN means none).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The policy with out-of-range values brought into range: `initial` at least
    /// [`MIN_DELAY`], `max` at least `initial`, `multiplier` finite and at least 1.0,
    /// `jitter` in `0.0..=1.0`. Configuration validation refuses such values with a
    /// message; this keeps the engine safe even so.
    fn normalised(mut self) -> Self {
        self.initial = self.initial.max(MIN_DELAY);
        self.max = self.max.max(self.initial);
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            self.multiplier = 1.0;
        }
        self.jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        self
    }
}

/// The state of one reconnect loop.
///
/// # Call order
///
/// Before each reconnect attempt, [`Backoff::next_delay`] (sleep that long, then try);
/// it grows the base for the attempt after. Once the connection is *healthy* (all
/// registrations on it succeeded, not merely the TCP or WebSocket connect),
/// [`Backoff::reset`]. A loop whose connects succeed but whose registrations keep
/// failing therefore keeps backing off up to the cap instead of hammering the gateway.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    policy: BackoffPolicy,
    base: Duration,
    attempts: u32,
}

impl Backoff {
    /// A fresh loop at the policy's initial delay.
    pub(crate) fn new(policy: BackoffPolicy) -> Self {
        let policy = policy.normalised();
        Backoff {
            base: policy.initial,
            policy,
            attempts: 0,
        }
    }

    /// The delay before the next attempt given a uniform sample in `[0, 1)`; grows the
    /// base.
    ///
    /// The delay is `base * (1 - jitter * sample)`, so it lies in
    /// `[base * (1 - jitter), base]`, never exceeds `max`, and is never below
    /// [`MIN_DELAY`]. Samples outside `[0, 1)` are clamped; NaN counts as 0.
    pub(crate) fn next_delay(&mut self, unit_sample: f64) -> Duration {
        let sample = if unit_sample.is_nan() {
            0.0
        } else {
            unit_sample.clamp(0.0, 1.0)
        };
        let factor = 1.0 - self.policy.jitter * sample;
        let delay = jittered(self.base, factor).max(MIN_DELAY);
        self.base = self.grown_base();
        self.attempts = self.attempts.saturating_add(1);
        delay
    }

    /// [`Backoff::next_delay`] with the sample drawn from an injected generator.
    #[cfg(test)]
    pub(crate) fn next_delay_with<R: rand::Rng + ?Sized>(&mut self, rng: &mut R) -> Duration {
        let sample: f64 = rng.random();
        self.next_delay(sample)
    }

    /// A connection became healthy (all registers succeeded): reset to initial.
    pub(crate) fn reset(&mut self) {
        self.base = self.policy.initial;
        self.attempts = 0;
    }

    /// Delays handed out since creation or the last [`Backoff::reset`].
    #[cfg(test)]
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The base the next [`Backoff::next_delay`] will jitter.
    #[cfg(test)]
    pub(crate) fn current_base(&self) -> Duration {
        self.base
    }

    /// The (normalised) policy in force.
    #[cfg(test)]
    pub(crate) fn policy(&self) -> &BackoffPolicy {
        &self.policy
    }

    fn grown_base(&self) -> Duration {
        let max = self.policy.max;
        let grown = self.base.as_secs_f64() * self.policy.multiplier;
        if grown >= max.as_secs_f64() {
            return max;
        }
        Duration::try_from_secs_f64(grown).map_or(max, |d| d.min(max))
    }
}

/// `base * factor` for a factor in `[0, 1]`, never above `base` and never panicking
/// (`Duration::mul_f64` panics when rounding pushes a huge base past `Duration::MAX`).
fn jittered(base: Duration, factor: f64) -> Duration {
    if factor >= 1.0 {
        return base;
    }
    Duration::try_from_secs_f64(base.as_secs_f64() * factor.max(0.0)).map_or(base, |d| d.min(base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn no_jitter(initial: u64, max: u64) -> Backoff {
        Backoff::new(BackoffPolicy::new(MS(initial), MS(max)).with_jitter(0.0))
    }

    #[test]
    fn defaults_are_documented_values() {
        let p = BackoffPolicy::default();
        assert_eq!((p.initial, p.max), (MS(500), Duration::from_secs(30)));
        assert_eq!((p.multiplier, p.jitter), (2.0, 0.5));
    }

    #[test]
    fn new_keeps_default_multiplier_and_jitter_and_builders_override_them() {
        let p = BackoffPolicy::new(MS(10), MS(100))
            .with_multiplier(3.0)
            .with_jitter(0.25);
        assert_eq!(
            (p.initial, p.max, p.multiplier, p.jitter),
            (MS(10), MS(100), 3.0, 0.25)
        );
        let q = BackoffPolicy::new(MS(10), MS(100));
        assert_eq!((q.multiplier, q.jitter), (2.0, 0.5));
    }

    #[test]
    fn base_grows_by_the_multiplier() {
        let mut b = no_jitter(100, 10_000);
        let delays: Vec<Duration> = (0..4).map(|_| b.next_delay(0.0)).collect();
        assert_eq!(delays, [MS(100), MS(200), MS(400), MS(800)]);
        assert_eq!(b.attempts(), 4);
        assert_eq!(b.current_base(), MS(1600));
    }

    #[test]
    fn base_is_capped_at_max() {
        let mut b = no_jitter(100, 500);
        let delays: Vec<Duration> = (0..6).map(|_| b.next_delay(0.0)).collect();
        assert_eq!(
            delays,
            [MS(100), MS(200), MS(400), MS(500), MS(500), MS(500)]
        );
        assert_eq!(b.current_base(), MS(500));
    }

    #[test]
    fn jitter_keeps_each_delay_between_its_floor_and_its_base() {
        let mut b = Backoff::new(BackoffPolicy::new(MS(1000), MS(1000)).with_jitter(0.5));
        assert_eq!(b.next_delay(0.0), MS(1000));
        assert_eq!(b.next_delay(0.5), MS(750));
        let near_one = b.next_delay(0.999_999);
        assert!(near_one >= MS(500) && near_one < MS(501), "{near_one:?}");
    }

    #[test]
    fn jittered_delays_never_exceed_the_cap() {
        let policy = BackoffPolicy::new(MS(7), MS(900)).with_multiplier(3.0);
        let mut b = Backoff::new(policy);
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let base = b.current_base();
            let d = b.next_delay_with(&mut rng);
            assert!(d <= base && d <= MS(900), "{d:?} > {base:?}");
            assert!(d >= base.mul_f64(0.5), "{d:?} below half of {base:?}");
        }
    }

    #[test]
    fn out_of_range_samples_are_clamped() {
        let mut b = Backoff::new(BackoffPolicy::new(MS(100), MS(100)).with_jitter(0.5));
        assert_eq!(b.next_delay(-3.0), MS(100));
        assert_eq!(b.next_delay(f64::NAN), MS(100));
        assert_eq!(b.next_delay(7.0), MS(50));
    }

    #[test]
    fn delay_is_never_zero_even_with_full_jitter_or_zero_initial() {
        let mut full = Backoff::new(BackoffPolicy::new(MS(1), MS(1)).with_jitter(1.0));
        assert!(full.next_delay(0.999_999_9) >= MIN_DELAY);
        let mut zero = Backoff::new(BackoffPolicy::new(Duration::ZERO, Duration::ZERO));
        for _ in 0..5 {
            assert!(zero.next_delay(0.0) >= MIN_DELAY);
        }
        assert!(zero.current_base() >= MIN_DELAY);
    }

    #[test]
    fn degenerate_policies_are_normalised() {
        let p = BackoffPolicy::new(MS(100), MS(10))
            .with_multiplier(0.1)
            .with_jitter(5.0);
        let b = Backoff::new(p);
        assert_eq!(b.policy().max, MS(100));
        assert_eq!(b.policy().multiplier, 1.0);
        assert_eq!(b.policy().jitter, 1.0);
        let nan = Backoff::new(
            BackoffPolicy::default()
                .with_multiplier(f64::NAN)
                .with_jitter(f64::NAN),
        );
        assert_eq!((nan.policy().multiplier, nan.policy().jitter), (1.0, 0.0));
    }

    #[test]
    fn huge_max_and_multiplier_do_not_overflow() {
        let mut b = Backoff::new(
            BackoffPolicy::new(Duration::from_secs(1), Duration::MAX)
                .with_multiplier(1e300)
                .with_jitter(0.0),
        );
        assert_eq!(b.next_delay(0.0), Duration::from_secs(1));
        assert_eq!(b.current_base(), Duration::MAX);
        assert_eq!(b.next_delay(0.0), Duration::MAX);
        let mut jittered = Backoff::new(BackoffPolicy::new(Duration::MAX, Duration::MAX));
        assert!(jittered.next_delay(0.5) <= Duration::MAX);
    }

    #[test]
    fn reset_returns_to_initial_and_clears_attempts() {
        let mut b = no_jitter(100, 10_000);
        for _ in 0..5 {
            b.next_delay(0.0);
        }
        b.reset();
        assert_eq!((b.attempts(), b.current_base()), (0, MS(100)));
        assert_eq!(b.next_delay(0.0), MS(100));
    }

    #[test]
    fn a_loop_that_never_resets_keeps_growing_to_the_cap() {
        // The runner resets only once registrations succeed; a gateway that accepts the
        // connect but fails every register must see the delay climb and stay at the cap.
        let mut b = Backoff::new(BackoffPolicy::default());
        let mut rng = StdRng::seed_from_u64(1);
        let mut last_base = Duration::ZERO;
        for _ in 0..50 {
            let base = b.current_base();
            assert!(base >= last_base, "base shrank without a reset");
            last_base = base;
            b.next_delay_with(&mut rng);
        }
        assert_eq!(b.current_base(), Duration::from_secs(30));
        assert_eq!(b.attempts(), 50);
        let d = b.next_delay(0.0);
        assert_eq!(d, Duration::from_secs(30));
    }

    #[test]
    fn the_same_samples_give_the_same_schedule() {
        let run = |seed| {
            let mut b = Backoff::new(BackoffPolicy::default());
            let mut rng = StdRng::seed_from_u64(seed);
            (0..10)
                .map(|_| b.next_delay_with(&mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
    }
}
