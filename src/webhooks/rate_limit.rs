//! A token bucket per source. Pure: the caller passes the time, so the refill
//! arithmetic is tested without a clock.

use super::source::RateLimit;

/// A token bucket holding at most `burst` tokens, refilled at `per_second`.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    per_ms: f64,
    burst: f64,
    tokens: f64,
    last_ms: i64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`.
    pub(crate) fn new(per_second: f64, burst: f64, now_ms: i64) -> TokenBucket {
        TokenBucket {
            per_ms: per_second / 1000.0,
            burst,
            tokens: burst,
            last_ms: now_ms,
        }
    }

    /// A full bucket for a configured limit; a limit without `burst` holds one
    /// second's worth (at least one token).
    pub(crate) fn for_limit(limit: RateLimit, now_ms: i64) -> TokenBucket {
        let burst = limit.burst.unwrap_or(limit.per_second.max(1.0));
        TokenBucket::new(limit.per_second, burst, now_ms)
    }

    /// Takes one token, or says how many whole seconds until one is available (at
    /// least 1, for a `Retry-After` header).
    pub(crate) fn try_take(&mut self, now_ms: i64) -> Result<(), u64> {
        let elapsed = (now_ms - self.last_ms).max(0) as f64;
        self.tokens = (self.tokens + elapsed * self.per_ms).min(self.burst);
        self.last_ms = self.last_ms.max(now_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait_ms = (1.0 - self.tokens) / self.per_ms;
            Err(((wait_ms / 1000.0).ceil() as u64).max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_drains_and_refills_at_the_rate() {
        let mut b = TokenBucket::new(2.0, 3.0, 0);
        for _ in 0..3 {
            assert_eq!(b.try_take(0), Ok(()));
        }
        assert_eq!(b.try_take(0), Err(1));
        assert_eq!(b.try_take(499), Err(1));
        assert_eq!(b.try_take(500), Ok(()));
        // Idle for an hour: capped at the burst, not 7200 tokens.
        let hour = 3_600_000;
        for _ in 0..3 {
            assert_eq!(b.try_take(hour), Ok(()));
        }
        assert!(b.try_take(hour).is_err());
    }

    #[test]
    fn slow_rates_give_whole_second_retry_hints_and_time_never_runs_backwards() {
        let mut b = TokenBucket::new(0.1, 1.0, 1_000);
        assert_eq!(b.try_take(1_000), Ok(()));
        assert_eq!(b.try_take(1_000), Err(10));
        assert_eq!(b.try_take(0), Err(10), "a clock step back refills nothing");
        assert_eq!(b.try_take(11_000), Ok(()));
    }

    #[test]
    fn a_partly_refilled_bucket_hints_only_the_time_its_missing_fraction_takes() {
        // One token per 10 s: 5.5 s after the bucket emptied it holds 0.55 tokens, so the
        // next one is 4.5 s away and Retry-After says 5, not the 10 of an empty bucket.
        let mut b = TokenBucket::new(0.1, 1.0, 0);
        assert_eq!(b.try_take(0), Ok(()));
        assert_eq!(b.try_take(5_500), Err(5));
        assert_eq!(b.try_take(10_100), Ok(()));
    }
}
