//! Rate limits: [`RateLimit`] (a configured token bucket), [`TokenBucket`] (its pure
//! arithmetic: the caller passes the time, so refills and reservations are tested
//! without a clock) and [`RateLimiter`], what a source's outbound calls wait on,
//! keyed by (provider, key).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::metrics::SourceMetrics;
use crate::error::{Error, Result};

/// A token bucket: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: f64,
    /// Bucket size. Default: one second's worth (at least 1).
    pub burst: Option<f64>,
}

impl RateLimit {
    /// `Err(why)` unless the rate is positive and the burst at least 1.
    pub(crate) fn check(&self, name: &str) -> std::result::Result<(), String> {
        let valid = self.per_second.is_finite()
            && self.per_second > 0.0
            && self.burst.is_none_or(|b| b.is_finite() && b >= 1.0);
        if valid {
            Ok(())
        } else {
            Err(format!("{name} needs per_second > 0 and burst >= 1"))
        }
    }
}

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

    /// The tokens there would be at `now_ms`, without taking one: the console's view
    /// of how close a source is to its limit (below 1, requests are refused).
    pub(crate) fn available(&self, now_ms: i64) -> f64 {
        let elapsed = (now_ms - self.last_ms).max(0) as f64;
        (self.tokens + elapsed * self.per_ms).min(self.burst)
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

    /// Reserves the next token for a caller that may wait at most `max_wait_ms`:
    /// `Ok(wait)` (0 when a token is there) takes it now, possibly on credit, so
    /// callers that wait are served in the order they reserved and none is
    /// overtaken; `Err(wait)` says how long this caller would have had to wait, and
    /// takes nothing.
    pub(crate) fn reserve(
        &mut self,
        now_ms: i64,
        max_wait_ms: i64,
    ) -> std::result::Result<i64, i64> {
        let elapsed = (now_ms - self.last_ms).max(0) as f64;
        self.tokens = (self.tokens + elapsed * self.per_ms).min(self.burst);
        self.last_ms = self.last_ms.max(now_ms);
        let wait = if self.tokens >= 1.0 {
            0
        } else {
            ((1.0 - self.tokens) / self.per_ms).ceil() as i64
        };
        if wait > max_wait_ms {
            return Err(wait);
        }
        self.tokens -= 1.0;
        Ok(wait)
    }
}

/// Outbound calls' rate limits, keyed by (provider, key): sources of one provider
/// that call with the same key (one API token, one account) share its bucket, which
/// is made with the limit of the first source that uses it. A call waits for its
/// token up to the source's `outbound_max_wait`, then is refused with
/// [`Error::Overloaded`]. Counted per source in
/// `switchboard_ingress_outbound_calls_total{source,outcome}` (`immediate`, `waited`,
/// `refused`) and `switchboard_ingress_outbound_wait_ms_total{source}`.
#[derive(Clone)]
pub struct RateLimiter {
    provider: Arc<str>,
    limit: Option<RateLimit>,
    max_wait: Duration,
    buckets: Buckets,
    metrics: Option<SourceMetrics>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("provider", &self.provider)
            .field("limit", &self.limit)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

/// The buckets every source's [`RateLimiter`] shares: one per runtime.
pub(crate) type Buckets = Arc<Mutex<HashMap<(Arc<str>, String), TokenBucket>>>;

impl RateLimiter {
    pub(crate) fn new(
        provider: &str,
        limit: Option<RateLimit>,
        max_wait: Duration,
        buckets: Buckets,
        metrics: Option<SourceMetrics>,
    ) -> RateLimiter {
        RateLimiter {
            provider: provider.into(),
            limit,
            max_wait,
            buckets,
            metrics,
        }
    }

    /// Waits for a token of `key` (at most the source's `outbound_max_wait`), or
    /// refuses with [`Error::Overloaded`] when the wait would be longer. Without a
    /// configured limit it returns at once.
    pub async fn acquire(&self, key: &str) -> Result<()> {
        let Some(limit) = self.limit else {
            self.count("immediate", 0);
            return Ok(());
        };
        let now = crate::clock::now_ms();
        let max_wait = i64::try_from(self.max_wait.as_millis()).unwrap_or(i64::MAX);
        let reserved = {
            let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
            buckets
                .entry((self.provider.clone(), key.to_owned()))
                .or_insert_with(|| TokenBucket::for_limit(limit, now))
                .reserve(now, max_wait)
        };
        match reserved {
            Ok(0) => {
                self.count("immediate", 0);
                Ok(())
            }
            Ok(wait) => {
                self.count("waited", wait as u64);
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
                Ok(())
            }
            Err(wait) => {
                self.count("refused", 0);
                Err(Error::Overloaded(format!(
                    "rate limited: {} {key:?} has no token for {wait} ms, past the {} ms this call may wait (outbound_max_wait)",
                    self.provider, max_wait
                )))
            }
        }
    }

    fn count(&self, outcome: &str, waited_ms: u64) {
        if let Some(m) = &self.metrics {
            m.inc("outbound_calls", &[("outcome", outcome)]);
            if waited_ms > 0 {
                m.add("outbound_wait_ms", &[], waited_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_queue_callers_in_order_and_refuse_past_the_deadline() {
        // One token a second, a burst of one.
        let mut b = TokenBucket::new(1.0, 1.0, 0);
        assert_eq!(b.reserve(0, 5_000), Ok(0), "the token that is there");
        assert_eq!(b.reserve(0, 5_000), Ok(1_000), "the next one, in a second");
        assert_eq!(
            b.reserve(0, 5_000),
            Ok(2_000),
            "queued behind the first waiter"
        );
        assert_eq!(
            b.reserve(0, 2_500),
            Err(3_000),
            "a caller that may wait 2.5 s is refused"
        );
        // The refusal took nothing: the next caller is still third in line.
        assert_eq!(b.reserve(0, 5_000), Ok(3_000));
        // Much later the debt is paid and the burst is back, capped.
        assert_eq!(b.reserve(60_000, 0), Ok(0));
        assert_eq!(b.reserve(60_000, 0), Err(1_000));
    }

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
