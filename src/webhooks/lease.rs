//! A poll source's lease: of the runtime processes sharing a store, one at a time
//! polls a given source, so polls of one source never overlap, in one process or
//! across several.
//!
//! The lease is a value in the source's state (`switchboard.poll_lease`,
//! `{holder} {until_ms}`) moved by compare-and-set ([`crate::SourceState::swap`]): a
//! process takes it when it is absent, expired or its own, for `poll_lease_secs`
//! (default 30) from now, before each poll; the others wait until it expires. A
//! process that stops gracefully gives it back at once; one that is killed holds it
//! until it expires, so another takes over within `poll_lease_secs`. A poll must
//! finish within the lease (the built-in sources' requests time out well before).
//! The decision is [`decide`], a plain function of the stored value, the holder and
//! the clock.

use std::time::Duration;

use crate::error::Result;
use crate::inbound::SourceState;

/// The state key of the lease.
pub(crate) const LEASE_KEY: &str = "switchboard.poll_lease";

/// Default lease length.
pub(crate) const DEFAULT_POLL_LEASE: Duration = Duration::from_secs(30);

/// What to do about the lease, given what is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Write `value` if the stored value is still `expected`; then poll.
    Take {
        /// The stored value it replaces (`None`: absent).
        expected: Option<String>,
        /// The new value.
        value: String,
    },
    /// Another holder has it until this time (unix ms): wait.
    Wait(i64),
}

/// The step for `holder` at `now_ms`, given the `stored` lease.
pub(crate) fn decide(stored: Option<&str>, holder: &str, now_ms: i64, lease_ms: i64) -> Step {
    let value = format!("{holder} {}", now_ms.saturating_add(lease_ms));
    let parsed = stored.and_then(|s| {
        let (who, until) = s.rsplit_once(' ')?;
        Some((who, until.parse::<i64>().ok()?))
    });
    match parsed {
        Some((who, until)) if who != holder && until > now_ms => Step::Wait(until),
        // Absent, expired, ours, or unreadable (a value no release writes): take it.
        _ => Step::Take {
            expected: stored.map(str::to_owned),
            value,
        },
    }
}

/// One process's hold on one source's lease.
pub(crate) struct Lease {
    holder: String,
    lease_ms: i64,
}

impl Lease {
    /// A lease of `lease` for this process (a random holder id: two processes on
    /// one host, or a restart, are different holders).
    pub(crate) fn new(lease: Duration) -> Lease {
        Lease {
            holder: format!("{}-{:016x}", std::process::id(), rand::random::<u64>()),
            lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// Takes or renews the lease: `Ok(None)` when this process holds it now,
    /// `Ok(Some(until))` when another holds it until then.
    pub(crate) async fn acquire(&self, state: &SourceState, now_ms: i64) -> Result<Option<i64>> {
        let stored = state.get(LEASE_KEY).await?;
        match decide(stored.as_deref(), &self.holder, now_ms, self.lease_ms) {
            Step::Wait(until) => Ok(Some(until)),
            Step::Take { expected, value } => {
                if state.swap(LEASE_KEY, expected.as_deref(), &value).await? {
                    Ok(None)
                } else {
                    // Another process moved it between the read and the write.
                    Ok(Some(now_ms.saturating_add(self.lease_ms.min(1_000))))
                }
            }
        }
    }

    /// Gives the lease back (at shutdown), if this process holds it.
    pub(crate) async fn release(&self, state: &SourceState) {
        let Ok(Some(stored)) = state.get(LEASE_KEY).await else {
            return;
        };
        if stored.rsplit_once(' ').map(|(who, _)| who) == Some(self.holder.as_str()) {
            let _ = state
                .swap(LEASE_KEY, Some(&stored), &format!("{} 0", self.holder))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_release_hands_over_at_once() {
        let ctx =
            crate::inbound::SourceContext::detached("s", "p", "t", Default::default(), vec![]);
        let (a, b) = (
            Lease::new(Duration::from_secs(30)),
            Lease::new(Duration::from_secs(30)),
        );
        assert_eq!(a.acquire(ctx.state(), 1_000).await.unwrap(), None);
        assert_eq!(
            a.acquire(ctx.state(), 2_000).await.unwrap(),
            None,
            "renewed"
        );
        assert_eq!(b.acquire(ctx.state(), 3_000).await.unwrap(), Some(32_000));
        a.release(ctx.state()).await;
        assert_eq!(b.acquire(ctx.state(), 3_000).await.unwrap(), None);
        assert!(a.acquire(ctx.state(), 4_000).await.unwrap().is_some());
        b.release(ctx.state()).await;
        // A lease left by a killed holder is taken once it has expired.
        assert_eq!(a.acquire(ctx.state(), 4_000).await.unwrap(), None);
        assert!(b.acquire(ctx.state(), 33_999).await.unwrap().is_some());
        assert_eq!(b.acquire(ctx.state(), 34_000).await.unwrap(), None);
    }

    #[test]
    fn an_absent_expired_or_own_lease_is_taken_and_anothers_live_one_waited_for() {
        assert_eq!(
            decide(None, "a", 1_000, 30_000),
            Step::Take {
                expected: None,
                value: "a 31000".into()
            }
        );
        assert_eq!(
            decide(Some("b 5000"), "a", 1_000, 30_000),
            Step::Wait(5_000)
        );
        assert_eq!(
            decide(Some("b 5000"), "a", 5_000, 30_000),
            Step::Take {
                expected: Some("b 5000".into()),
                value: "a 35000".into()
            },
            "expired at its end"
        );
        assert_eq!(
            decide(Some("a 9000"), "a", 1_000, 30_000),
            Step::Take {
                expected: Some("a 9000".into()),
                value: "a 31000".into()
            },
            "renewed by its holder"
        );
        assert!(
            matches!(decide(Some("garbage"), "a", 1, 10), Step::Take { .. }),
            "an unreadable value does not block the source forever"
        );
        assert!(
            matches!(decide(Some("b 0"), "a", 1, 10), Step::Take { .. }),
            "a released lease"
        );
    }
}
