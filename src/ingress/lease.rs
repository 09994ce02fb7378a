//! A poll source's lease: of the runtime processes sharing a store, one at a time
//! polls a given source, so polls of one source never overlap, in one process or
//! across several.
//!
//! The lease is a value in the source's state (`switchboard.poll_lease`,
//! `{holder} {until_ms}`) moved by compare-and-set ([`crate::SourceState::swap`]): a
//! process takes it when it is absent, expired or its own, for `poll_lease_secs`
//! (default 30) from now, before each poll; the others wait until it expires, and
//! say so in the log once per wait ([`Held`]). A process that stops gracefully gives
//! it back at once. A killed one cannot, so the holder names the process:
//! `{process_id}@{pid}-{random}`, the process's stable identity and what tells this
//! start from earlier ones. The same process started again (same identity, another
//! start) gives back at start what it held before ([`Lease::release_previous`]) and
//! polls at once; another process takes over when the lease expires. Two processes
//! misconfigured with one identity still exclude each other while both run (their
//! starts differ); the one starting takes the other's lease, so one poll may overlap:
//! its items are stored once (dedupe keys), never lost. A poll must finish within
//! the lease (the built-in sources' requests time out well before). The decisions
//! are [`decide`] and [`previous`], plain functions of the stored value, the holder
//! and the clock.

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
    /// Another holder has it: wait.
    Wait(Held),
}

/// A lease another holder has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// Who: `{process_id}@{start}`.
    pub(crate) holder: String,
    /// Until when (unix ms).
    pub(crate) until_ms: i64,
}

/// The stored value's holder and end, when it is readable.
fn parse(stored: &str) -> Option<(&str, i64)> {
    let (who, until) = stored.rsplit_once(' ')?;
    Some((who, until.parse::<i64>().ok()?))
}

/// The process identity in a holder (`{process_id}@{start}`); `None` for a holder
/// written before identities (a pid and a random number).
fn identity_of(holder: &str) -> Option<&str> {
    holder.rsplit_once('@').map(|(id, _)| id)
}

/// The step for `holder` at `now_ms`, given the `stored` lease.
pub(crate) fn decide(stored: Option<&str>, holder: &str, now_ms: i64, lease_ms: i64) -> Step {
    let value = format!("{holder} {}", now_ms.saturating_add(lease_ms));
    match stored.and_then(parse) {
        Some((who, until)) if who != holder && until > now_ms => Step::Wait(Held {
            holder: who.to_owned(),
            until_ms: until,
        }),
        // Absent, expired, ours, or unreadable (a value no release writes): take it.
        _ => Step::Take {
            expected: stored.map(str::to_owned),
            value,
        },
    }
}

/// Whether the `stored` lease is one an earlier start of this process (same
/// `identity`, another `holder`) holds at `now_ms`: what [`Lease::release_previous`]
/// gives back.
pub(crate) fn previous(stored: &str, identity: &str, holder: &str, now_ms: i64) -> Option<Held> {
    let (who, until) = parse(stored)?;
    (who != holder && until > now_ms && identity_of(who) == Some(identity)).then(|| Held {
        holder: who.to_owned(),
        until_ms: until,
    })
}

/// One process's hold on one source's lease.
pub(crate) struct Lease {
    identity: String,
    holder: String,
    lease_ms: i64,
}

impl Lease {
    /// A lease of `lease` for the process `identity` (its `process_id`), this start
    /// of it told apart by the pid and a random number.
    pub(crate) fn new(lease: Duration, identity: &str) -> Lease {
        let start = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
        Lease {
            identity: identity.to_owned(),
            holder: format!("{identity}@{start}"),
            lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// Takes or renews the lease: `Ok(None)` when this process holds it now,
    /// `Ok(Some(held))` when another holds it.
    pub(crate) async fn acquire(&self, state: &SourceState, now_ms: i64) -> Result<Option<Held>> {
        let stored = state.get(LEASE_KEY).await?;
        match decide(stored.as_deref(), &self.holder, now_ms, self.lease_ms) {
            Step::Wait(held) => Ok(Some(held)),
            Step::Take { expected, value } => {
                if state.swap(LEASE_KEY, expected.as_deref(), &value).await? {
                    Ok(None)
                } else {
                    // Another process moved it between the read and the write.
                    Ok(Some(Held {
                        holder: "another process".into(),
                        until_ms: now_ms.saturating_add(self.lease_ms.min(1_000)),
                    }))
                }
            }
        }
    }

    /// At start: gives back the lease an earlier start of this process left (killed,
    /// it could not), so this start polls at once instead of waiting it out. Returns
    /// what was given back.
    pub(crate) async fn release_previous(
        &self,
        state: &SourceState,
        now_ms: i64,
    ) -> Result<Option<Held>> {
        let Some(stored) = state.get(LEASE_KEY).await? else {
            return Ok(None);
        };
        let Some(held) = previous(&stored, &self.identity, &self.holder, now_ms) else {
            return Ok(None);
        };
        let released = format!("{} 0", held.holder);
        Ok(state
            .swap(LEASE_KEY, Some(&stored), &released)
            .await?
            .then_some(held))
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

    fn until(held: Option<Held>) -> Option<i64> {
        held.map(|h| h.until_ms)
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_release_hands_over_at_once() {
        let ctx =
            crate::inbound::SourceContext::detached("s", "p", "t", Default::default(), vec![]);
        let (a, b) = (
            Lease::new(Duration::from_secs(30), "a"),
            Lease::new(Duration::from_secs(30), "b"),
        );
        assert_eq!(a.acquire(ctx.state(), 1_000).await.unwrap(), None);
        assert_eq!(
            a.acquire(ctx.state(), 2_000).await.unwrap(),
            None,
            "renewed"
        );
        let held = b.acquire(ctx.state(), 3_000).await.unwrap().unwrap();
        assert_eq!(held.until_ms, 32_000);
        assert!(held.holder.starts_with("a@"), "{held:?}");
        a.release(ctx.state()).await;
        assert_eq!(b.acquire(ctx.state(), 3_000).await.unwrap(), None);
        assert!(a.acquire(ctx.state(), 4_000).await.unwrap().is_some());
        b.release(ctx.state()).await;
        // A lease left by a killed holder is taken once it has expired.
        assert_eq!(a.acquire(ctx.state(), 4_000).await.unwrap(), None);
        assert!(b.acquire(ctx.state(), 33_999).await.unwrap().is_some());
        assert_eq!(b.acquire(ctx.state(), 34_000).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_restart_under_the_same_identity_takes_back_its_lease_at_once_and_no_one_elses() {
        let ctx =
            crate::inbound::SourceContext::detached("s", "p", "t", Default::default(), vec![]);
        let lease = Duration::from_secs(600);
        let killed = Lease::new(lease, "host-1");
        assert_eq!(killed.acquire(ctx.state(), 1_000).await.unwrap(), None);
        drop(killed); // no release: SIGKILL

        // Another process finds nothing of its own to release, and waits.
        let other = Lease::new(lease, "host-2");
        assert_eq!(
            other.release_previous(ctx.state(), 2_000).await.unwrap(),
            None
        );
        assert_eq!(
            until(other.acquire(ctx.state(), 2_000).await.unwrap()),
            Some(601_000)
        );

        // The same identity, started again, gives the old start's lease back and polls.
        let again = Lease::new(lease, "host-1");
        let released = again.release_previous(ctx.state(), 2_000).await.unwrap();
        let released = released.expect("the earlier start's lease");
        assert_eq!(released.until_ms, 601_000);
        assert!(released.holder.starts_with("host-1@"), "{released:?}");
        assert_eq!(again.acquire(ctx.state(), 2_000).await.unwrap(), None);
        // Its own live lease is not "previous": nothing more to release.
        assert_eq!(
            again.release_previous(ctx.state(), 3_000).await.unwrap(),
            None
        );
        assert!(other.acquire(ctx.state(), 3_000).await.unwrap().is_some());
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
            Step::Wait(Held {
                holder: "b".into(),
                until_ms: 5_000
            })
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

    #[test]
    fn previous_is_a_live_lease_of_the_same_identity_from_another_start() {
        let me = "web@1-aa";
        let held = |h: &str, until| {
            Some(Held {
                holder: h.into(),
                until_ms: until,
            })
        };
        assert_eq!(
            previous("web@2-bb 9000", "web", me, 1_000),
            held("web@2-bb", 9_000)
        );
        assert_eq!(
            previous("a@b@2-bb 9000", "a@b", "a@b@1-aa", 1_000),
            held("a@b@2-bb", 9_000),
            "an identity may hold an @"
        );
        assert_eq!(
            previous("web@1-aa 9000", "web", me, 1_000),
            None,
            "this start's own"
        );
        assert_eq!(previous("web@2-bb 1000", "web", me, 1_000), None, "expired");
        assert_eq!(
            previous("api@2-bb 9000", "web", me, 1_000),
            None,
            "another identity"
        );
        assert_eq!(
            previous("webby@2-bb 9000", "web", me, 1_000),
            None,
            "a longer name"
        );
        assert_eq!(
            previous("4242-0123abcd 9000", "web", me, 1_000),
            None,
            "no identity"
        );
        assert_eq!(previous("garbage", "web", me, 1_000), None);
    }
}
