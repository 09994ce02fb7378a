//! The drivers of poll and stream sources: one task per source, so a source never
//! has two polls (or two connections) at once.
//!
//! **Poll**: read the stored cursor (before every poll, so another process's commits
//! and an operator's deletion count at once); call `poll(cursor, now)`; commit the
//! events and the new cursor in one transaction (retrying the commit, with backoff, until the
//! store takes it: the page is not fetched again); sleep until the time the source
//! asked for ([`Polled::next_poll_at_ms`]), at once when it has more, or after
//! [`DEFAULT_POLL_INTERVAL`]. A failed poll is retried from the same cursor after a
//! jittered backoff. A crash between a poll and its commit leaves the old cursor, so
//! the page is read again and its events dedupe; none is skipped. Of several processes
//! on one store, one at a time polls a source: it holds the source's lease
//! (`super::lease`), taken before each poll; a process waiting for another's lease
//! says so once, naming the holder and the lease's end. At start, before any driver
//! runs, [`release_previous_leases`] gives back what an earlier start of the same
//! process (killed, so it could not) still holds.
//!
//! **Stream**: read the stored cursor; call `stream(cursor, sink)`; each
//! [`crate::EventSink::emit`] commits events and cursor together. When the stream
//! ends or fails, reconnect after a jittered backoff from the last committed cursor
//! (re-read from the store, so another process's progress counts too). A stream that
//! delivered events before it ended starts its backoff again from the first step.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::hosted::{Committer, HostedSource, SourceCommit, CURSOR_KEY};
use super::lease::{Held, Lease};
use crate::backoff::{Backoff, BackoffPolicy};
use crate::clock::now_ms;
use crate::inbound::{EventSink, Polled, SourceKind};
use crate::triggers::live::LiveTriggers;

/// How long a poll source waits between polls when it names no time itself.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(60);

/// How long a source's `activate` may take before the next source's turn.
const ACTIVATE_DEADLINE: Duration = Duration::from_secs(10);

/// Longest single sleep: the schedule is re-read against the wall clock at least this
/// often, so a clock step (NTP, suspend) delays a poll by at most this much.
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// Pacing of retries after a failed poll, a refused commit or a dropped stream:
/// 250 ms doubling to 30 s, jittered (the crate's one backoff), so the sources of
/// several processes sharing a recovering store or provider do not retry in step.
fn retry_policy() -> BackoffPolicy {
    BackoffPolicy::new(Duration::from_millis(250), Duration::from_secs(30))
}

/// Tells each source which bindings take its events ([`InboundSource::activate`]):
/// at start and after every change of the bindings in force (a reload, a run-time
/// registration, another process's change), only when a source's set changed. A
/// failed activation is logged and tried again at the next change.
///
/// [`InboundSource::activate`]: crate::InboundSource::activate
pub(crate) async fn activation_loop(
    sources: Vec<Arc<HostedSource>>,
    live: Arc<LiveTriggers>,
    cancel: CancellationToken,
) {
    let mut last: Vec<Option<Vec<String>>> = vec![None; sources.len()];
    loop {
        let changed = live.changed();
        let routing = live.routing();
        for (source, seen) in sources.iter().zip(last.iter_mut()) {
            let ids: Vec<String> = routing
                .bindings()
                .iter()
                .filter(|b| b.sources.is_empty() || b.sources.iter().any(|s| s == source.id()))
                .map(|b| b.id.clone())
                .collect();
            if seen.as_ref() == Some(&ids) {
                continue;
            }
            // Bounded, so one source that hangs here cannot keep the others waiting.
            match tokio::time::timeout(ACTIVATE_DEADLINE, source.source.activate(&ids)).await {
                Ok(Ok(())) => *seen = Some(ids),
                Ok(Err(e)) => {
                    tracing::warn!(source = source.id(), error = %e, "the source's activation failed")
                }
                Err(_) => tracing::warn!(
                    source = source.id(),
                    "the source's activation did not finish within {ACTIVATE_DEADLINE:?}"
                ),
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = changed => {}
        }
    }
}

/// At start, before [`spawn_all`]: gives back every poll lease an earlier start of
/// the process `identity` holds, so its sources are polled at once rather than when
/// those leases end. Returns the sources whose lease was given back; a source whose
/// state cannot be read is logged and left to wait its lease out.
pub(crate) async fn release_previous_leases(
    sources: &[Arc<HostedSource>],
    identity: &str,
    now_ms: i64,
) -> Vec<(String, Held)> {
    let mut released = Vec::new();
    for s in sources.iter().filter(|s| s.kind == SourceKind::Poll) {
        let lease = Lease::new(s.spec.poll_lease, identity);
        match lease.release_previous(s.ctx.state(), now_ms).await {
            Ok(Some(held)) => released.push((s.id().to_owned(), held)),
            Ok(None) => {}
            Err(e) => tracing::warn!(
                source = s.id(),
                error = %e,
                "cannot read the source's poll lease at start; a lease this process held before waits out its end"
            ),
        }
    }
    released
}

/// Starts the driver of every poll and stream source; poll leases are held as the
/// process `identity` (`process_id`).
pub(crate) fn spawn_all(
    sources: &[Arc<HostedSource>],
    committer: &Committer,
    identity: &str,
    cancel: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    sources
        .iter()
        .filter_map(|s| {
            let commit = SourceCommit {
                source: s.clone(),
                committer: committer.clone(),
            };
            match s.kind {
                SourceKind::Poll => Some(tokio::spawn(poll_loop(
                    commit,
                    identity.to_owned(),
                    cancel.clone(),
                ))),
                SourceKind::Stream => Some(tokio::spawn(stream_loop(commit, cancel.clone()))),
                _ => None,
            }
        })
        .collect()
}

/// Sleeps until `at_ms` (wall clock) or `cancel`; false when cancelled.
async fn sleep_until(at_ms: i64, cancel: &CancellationToken) -> bool {
    loop {
        let wait = Duration::from_millis(at_ms.saturating_sub(now_ms()).max(0) as u64);
        if wait.is_zero() {
            return true;
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(wait.min(MAX_SLEEP)) => {}
        }
    }
}

/// Sleeps `d` or until `cancel`; false when cancelled.
async fn pause(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Reads the stored cursor, retrying until the store answers.
async fn stored_cursor(
    source: &HostedSource,
    cancel: &CancellationToken,
) -> Option<Option<String>> {
    let mut backoff = Backoff::new(retry_policy());
    loop {
        match source.ctx.state().get(CURSOR_KEY).await {
            Ok(c) => return Some(c),
            Err(e) => {
                let delay = backoff.next_delay(rand::random());
                tracing::warn!(source = source.id(), error = %e, retry_in = ?delay, "cannot read the source's cursor");
                if !pause(delay, cancel).await {
                    return None;
                }
            }
        }
    }
}

async fn poll_loop(commit: SourceCommit, identity: String, cancel: CancellationToken) {
    let lease = Lease::new(commit.source.spec.poll_lease, &identity);
    poll_until_cancelled(&commit, &lease, &cancel).await;
    lease.release(commit.source.ctx.state()).await;
}

async fn poll_until_cancelled(commit: &SourceCommit, lease: &Lease, cancel: &CancellationToken) {
    let cancel = cancel.clone();
    let source = commit.source.clone();
    let id = source.id().to_owned();
    let mut backoff = Backoff::new(retry_policy());
    // The holder last waited for, so a wait is logged once, not at every check.
    let mut waited_for: Option<String> = None;
    loop {
        // One process at a time polls a source (see `super::lease`).
        let now = now_ms();
        match lease.acquire(source.ctx.state(), now).await {
            Ok(None) => waited_for = None,
            Ok(Some(held)) => {
                // A warning, once per holder: the default log level shows it, so a
                // source that does not poll is never silent about why.
                if waited_for.as_deref() != Some(held.holder.as_str()) {
                    tracing::warn!(
                        source = %id,
                        holder = %held.holder,
                        until_ms = held.until_ms,
                        remaining = ?Duration::from_millis(held.until_ms.saturating_sub(now).max(0) as u64),
                        "waiting for the source's poll lease, which another process holds; polling once it is released or ends"
                    );
                    waited_for = Some(held.holder);
                }
                if !sleep_until(held.until_ms, &cancel).await {
                    return;
                }
                continue;
            }
            Err(e) => {
                let delay = backoff.next_delay(rand::random());
                tracing::warn!(source = %id, error = %e, retry_in = ?delay, "cannot take the source's poll lease");
                if !pause(delay, &cancel).await {
                    return;
                }
                continue;
            }
        }
        // The cursor is read from the store before every poll (one read per poll):
        // what another process sharing the store committed, or the operator deleted
        // (`DELETE /api/v1/sources/{id}/state/switchboard.cursor`, from any process),
        // counts at once, and the stored cursor never steps back.
        let Some(mut cursor) = stored_cursor(&source, &cancel).await else {
            return;
        };
        let now = now_ms();
        let polled = tokio::select! {
            _ = cancel.cancelled() => return,
            p = source.source.poll(cursor.as_deref(), now) => p,
        };
        let next_at = match polled {
            Ok(page) => {
                backoff.reset();
                let Some(next) = commit_page(commit, page, &mut cursor, &cancel).await else {
                    return;
                };
                next
            }
            Err(e) => {
                let delay = backoff.next_delay(rand::random());
                source.ctx.metrics().inc("poll_failures", &[]);
                tracing::warn!(source = %id, error = %e, retry_in = ?delay, "poll failed; retrying from the same cursor");
                now_ms().saturating_add(delay.as_millis() as i64)
            }
        };
        if !sleep_until(next_at, &cancel).await {
            return;
        }
    }
}

/// Commits one page and moves `cursor`; returns when to poll next, or `None` when
/// cancelled. The commit is retried (the page is not fetched again) until the store
/// takes it.
async fn commit_page(
    commit: &SourceCommit,
    page: Polled,
    cursor: &mut Option<String>,
    cancel: &CancellationToken,
) -> Option<i64> {
    let source = &commit.source;
    let new_cursor = page.cursor.clone().or_else(|| cursor.clone());
    let moved = new_cursor != *cursor;
    let mut backoff = Backoff::new(retry_policy());
    if !page.events.is_empty() || moved {
        let events = match commit.materialise_all(page.events) {
            Ok(events) => events,
            Err(e) => {
                // A source that makes an unstorable event is broken: nothing of the
                // page is stored and the cursor stays, loudly, and the page is read
                // again after the default interval (not in a tight loop).
                tracing::error!(source = source.id(), error = %e, "a polled event cannot be stored; the page is skipped");
                source.ctx.metrics().inc("poll_failures", &[]);
                return Some(now_ms().saturating_add(DEFAULT_POLL_INTERVAL.as_millis() as i64));
            }
        };
        loop {
            let attempt = commit
                .committer
                .commit(
                    source,
                    events.clone(),
                    moved.then(|| new_cursor.clone()).flatten(),
                )
                .await;
            match attempt {
                Ok(appended) => {
                    let new = appended
                        .iter()
                        .filter(|a| matches!(a, crate::store::Appended::Stored(_)))
                        .count();
                    source.ctx.metrics().add("polled_events", &[], new as u64);
                    break;
                }
                Err(e) => {
                    let delay = backoff.next_delay(rand::random());
                    tracing::warn!(source = source.id(), error = %e, retry_in = ?delay, "cannot store a polled page; retrying");
                    if !pause(delay, cancel).await {
                        return None;
                    }
                }
            }
        }
    }
    *cursor = new_cursor;
    let now = now_ms();
    Some(if page.more {
        now
    } else {
        page.next_poll_at_ms
            .unwrap_or_else(|| now.saturating_add(DEFAULT_POLL_INTERVAL.as_millis() as i64))
    })
}

async fn stream_loop(commit: SourceCommit, cancel: CancellationToken) {
    let source = commit.source.clone();
    let id = source.id().to_owned();
    let sink_commit = Arc::new(commit);
    let mut backoff = Backoff::new(retry_policy());
    loop {
        let Some(cursor) = stored_cursor(&source, &cancel).await else {
            return;
        };
        let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sink = EventSink::new(Arc::new(Counting {
            inner: sink_commit.clone(),
            emitted: counted.clone(),
        }));
        let ended = tokio::select! {
            _ = cancel.cancelled() => return,
            r = source.source.stream(cursor, sink) => r,
        };
        if counted.load(std::sync::atomic::Ordering::Acquire) > 0 {
            backoff.reset();
        }
        let delay = backoff.next_delay(rand::random());
        source.ctx.metrics().inc("stream_reconnects", &[]);
        match ended {
            Ok(()) => tracing::info!(source = %id, retry_in = ?delay, "stream ended; reconnecting"),
            Err(e) => {
                tracing::warn!(source = %id, error = %e, retry_in = ?delay, "stream failed; reconnecting")
            }
        }
        if !pause(delay, &cancel).await {
            return;
        }
    }
}

/// A stream's commit that counts the commits that went through, so a stream that
/// made progress reconnects without a long backoff.
struct Counting {
    inner: Arc<SourceCommit>,
    emitted: Arc<std::sync::atomic::AtomicU64>,
}

#[async_trait::async_trait]
impl crate::inbound::Commit for Counting {
    async fn commit(
        &self,
        events: Vec<crate::inbound::InboundEvent>,
        cursor: Option<String>,
    ) -> crate::Result<crate::inbound::Committed> {
        let done = self.inner.commit(events, cursor).await?;
        self.emitted
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(done)
    }
}
