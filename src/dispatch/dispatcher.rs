//! The dispatcher: claims due outbox rows under a lease, admits each through a permit
//! gate, runs its attempt, and writes how it ended.
//!
//! Tasks (all ended by [`Dispatcher::shutdown`]):
//! - the **claim loop** claims up to `batch` rows of the binding versions that may
//!   start rows (active or draining, not paused: [`LiveTriggers`], read at every pass,
//!   so a reload or a pause is honoured at the next claim) and have a free permit and
//!   room in their `throttle` window, when at least half a batch of process permits is free (so a busy
//!   dispatcher claims in batches, not one row per completion). A row that cannot be
//!   admitted (its binding's `max_concurrent` or the process's `max_in_flight` is
//!   taken) is released at once, not held. It sleeps until the store's wake-up
//!   (SQLite: in-process after a commit; PostgreSQL: `LISTEN/NOTIFY`), a freed permit,
//!   the next row's due time, or `poll_interval`, whichever comes first;
//! - one **attempt task** per admitted row, run under the version the row's
//!   fingerprint names (a row of a version this process has not loaded is given back
//!   and its owner told, so it loads the versions another process recorded), bounded
//!   by that version's timeout; it
//!   decides the row's [`Finish`] ([`crate::outbox::outcome::decide`]) and queues it;
//! - the claim loop also **commits the queued finishes**: folded into its next claim's
//!   transaction ([`OutboxStore::finish_and_claim`]), so a busy dispatcher pays one
//!   commit per batch of rows, not two (one claim, one finish), or on their own when it
//!   will not claim now (too few permits free, every binding throttled or paused);
//!   hundreds of successes are one `DELETE` either way. A commit that fails puts its
//!   finishes back and backs off; the rows keep their leases meanwhile;
//! - the **lease keeper** extends the lease of every row in flight every third of a
//!   lease, so a long handler keeps its row and a crashed process's rows come back
//!   when its lease ends.
//!
//! Store failures back off with jitter and are logged and counted; nothing is lost
//! while the database is away: unfinished rows keep their leases or get them back
//! when the leases end.
//!
//! Time: the dispatcher's clock is tokio's (`Clock`), mapped to unix milliseconds at
//! start, so a test with paused time drives retries and leases in virtual time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::attempt_span::{attempt_span, record_outcome};
use super::deliver::{AttemptInput, Deliver};
use super::metrics::DispatchMetrics;
use super::options::{DispatcherOptions, MAX_FINISH_BATCH};
use super::permits::{claim_now, commit_finishes_now, Claiming, Permits, LINGER};
use super::throttle::StartWindow;
use crate::backoff::{Backoff, BackoffPolicy};
use crate::outbox::model::{ClaimRequest, ClaimedRow, Destination, Finish};
use crate::outbox::outcome::{decide, AttemptFailure, DeadLetterTarget, FailureKind};
use crate::outbox::OutboxStore;
use crate::triggers::binding::{Binding, Handler};
use crate::triggers::live::LiveTriggers;

/// Claim loops per dispatcher: two, so that while a backlog lasts one loop's claim is
/// in the database while the other starts the rows it claimed, and neither the store's
/// round trip nor the starting of a batch waits for the other. Each counts the rows its
/// claim asks for ([`Claiming`]), so the two together never claim more rows than there
/// are permits. A third measured no better (two cores: the database's work and the
/// rows' are what is overlapped).
const CLAIM_LOOPS: usize = 2;

/// The dispatcher's clock: tokio's monotonic time mapped onto unix milliseconds at
/// start. Under paused time it follows virtual time, so the rows' due times and the
/// dispatcher's sleeps agree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    base_ms: i64,
    base: tokio::time::Instant,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            base_ms: crate::clock::now_ms(),
            base: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.base_ms + self.base.elapsed().as_millis() as i64
    }

    fn instant_at(&self, unix_ms: i64) -> tokio::time::Instant {
        self.base + Duration::from_millis((unix_ms - self.base_ms).max(0) as u64)
    }
}

struct Inner {
    store: Arc<dyn OutboxStore>,
    triggers: Arc<LiveTriggers>,
    deliver: Arc<dyn Deliver>,
    metrics: Arc<DispatchMetrics>,
    options: DispatcherOptions,
    clock: Clock,
    /// The permit gates: one per version this process delivers, and the process's.
    permits: Permits,
    global: Arc<Semaphore>,
    /// Asked to bring the versions up to date when a claimed row names a version this
    /// process does not know (another process recorded it); the row is released.
    unknown_version: Arc<Notify>,
    /// Rows in flight (id → claim token) whose finish is not yet committed: what the
    /// lease keeper extends and what shutdown releases.
    held: Mutex<HashMap<i64, i64>>,
    /// Rows asked for by claims in flight, not yet admitted: not free for another claim.
    claiming: AtomicUsize,
    /// Finishes of ended attempts, not yet committed (at most one per held row).
    finished: Mutex<Vec<Finish>>,
    /// Signalled when an attempt ends (a permit is free) or a finish commits (an
    /// ordering key's next row may be claimable).
    capacity: Notify,
    /// Ends attempts that outlive the shutdown grace.
    abandon: CancellationToken,
    /// The start windows of throttled bindings, by binding id (across its versions).
    throttles: Mutex<HashMap<String, StartWindow>>,
}

/// A running dispatcher.
pub struct Dispatcher {
    inner: Arc<Inner>,
    stop: CancellationToken,
    attempts: TaskTracker,
    claim_loops: Vec<tokio::task::JoinHandle<()>>,
    keeper: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("served", &self.served())
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// Starts the dispatcher for the bindings `registry` holds and `permits` serves
    /// (the others' rows are left for a process that can deliver them): every version
    /// active, none ever changing. The runtime, whose bindings change, uses
    /// [`Dispatcher::start_live`].
    pub fn start(
        store: Arc<dyn OutboxStore>,
        registry: Arc<crate::triggers::registry::TriggerRegistry>,
        deliver: Arc<dyn Deliver>,
        permits: Permits,
        metrics: Arc<DispatchMetrics>,
        options: DispatcherOptions,
    ) -> Dispatcher {
        let live = Arc::new(LiveTriggers::fixed(&registry));
        Self::start_live(
            store,
            live,
            deliver,
            permits,
            metrics,
            options,
            Arc::default(),
        )
    }

    /// Starts the dispatcher over bindings that change while it runs: each pass claims
    /// rows of the versions that are active or draining and not paused, and each row
    /// runs under the version its fingerprint names. A row naming a version
    /// `triggers` does not know is released and `unknown_version` notified, so the
    /// owner can load the versions another process recorded.
    pub(crate) fn start_live(
        store: Arc<dyn OutboxStore>,
        triggers: Arc<LiveTriggers>,
        deliver: Arc<dyn Deliver>,
        permits: Permits,
        metrics: Arc<DispatchMetrics>,
        mut options: DispatcherOptions,
        unknown_version: Arc<Notify>,
    ) -> Dispatcher {
        // The process limit is the permits' own.
        options.max_in_flight = permits.size;
        let inner = Arc::new(Inner {
            store,
            triggers,
            deliver,
            metrics,
            global: permits.global.clone(),
            options,
            clock: Clock::start(),
            permits,
            unknown_version,
            throttles: Mutex::default(),
            held: Mutex::default(),
            finished: Mutex::default(),
            claiming: AtomicUsize::new(0),
            capacity: Notify::new(),
            abandon: CancellationToken::new(),
        });
        let stop = CancellationToken::new();
        let attempts = TaskTracker::new();
        let claim_loops = (0..CLAIM_LOOPS)
            .map(|_| tokio::spawn(claim_loop(inner.clone(), stop.clone(), attempts.clone())))
            .collect();
        let keeper = tokio::spawn(keeper(inner.clone(), stop.clone()));
        Dispatcher {
            inner,
            stop,
            attempts,
            claim_loops,
            keeper,
        }
    }

    /// The bindings this dispatcher delivers now (the ids of the claimable versions
    /// it can deliver).
    pub fn served(&self) -> Vec<String> {
        self.inner.served()
    }

    /// Stops claiming, waits up to the shutdown grace for attempts in flight, commits
    /// their finishes, and releases the rows of attempts that did not end in time, so
    /// another process (or the next start) takes them at once rather than after their
    /// lease. Says what it did, for the runtime's one stop line.
    pub async fn shutdown(self) -> Stopped {
        self.stop.cancel();
        for claim_loop in self.claim_loops {
            let _ = claim_loop.await;
        }
        self.attempts.close();
        let in_flight = self.attempts.len();
        let mut abandoned = 0;
        let grace = self.inner.options.shutdown_grace;
        if tokio::time::timeout(grace, self.attempts.wait())
            .await
            .is_err()
        {
            abandoned = self.attempts.len();
            tracing::warn!(
                ?grace,
                abandoned,
                "attempts still running at the end of the shutdown grace; abandoning them"
            );
            self.inner.abandon.cancel();
            self.attempts.wait().await;
        }
        // The claim loop has ended: what the attempts finished is committed here,
        // retried while the store is away (a row released unfinished would run again).
        let mut backoff = store_backoff();
        while !self.inner.finished().is_empty() {
            if !commit_finishes(&self.inner).await {
                tokio::time::sleep(backoff.next_delay(rand::random())).await;
            }
        }
        let _ = self.keeper.await;
        let held: Vec<(i64, i64)> = self.inner.held().drain().collect();
        let mut released = 0;
        if !held.is_empty() {
            let now = self.inner.clock.now_ms();
            match self.inner.store.release(&held, now).await {
                Ok(n) => {
                    released = n;
                    tracing::info!(released = n, "released rows still held at shutdown");
                }
                Err(e) => {
                    tracing::warn!(error = %e, rows = held.len(), "could not release rows at shutdown; they come back when their leases end")
                }
            }
        }
        Stopped {
            finished: in_flight.saturating_sub(abandoned),
            abandoned,
            released,
        }
    }
}

/// What [`Dispatcher::shutdown`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Attempts in flight when claiming stopped that ended within the grace.
    pub finished: usize,
    /// Attempts still running at the end of the grace, abandoned.
    pub abandoned: usize,
    /// Rows held at the end (abandoned attempts' and claimed rows never started),
    /// released for another process to claim at once.
    pub released: u64,
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<i64, i64>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn finished(&self) -> std::sync::MutexGuard<'_, Vec<Finish>> {
        self.finished.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an ended attempt's finish for the claim loop's next commit, and wakes it.
    fn queue_finish(&self, finish: Finish) {
        self.finished().push(finish);
        self.capacity.notify_one();
    }

    /// Takes up to [`MAX_FINISH_BATCH`] queued finishes, oldest first.
    fn take_finishes(&self) -> Vec<Finish> {
        let mut queued = self.finished();
        let n = queued.len().min(MAX_FINISH_BATCH);
        queued.drain(..n).collect()
    }

    /// Puts back finishes whose commit failed, ahead of those queued since.
    fn requeue_finishes(&self, finishes: Vec<Finish>) {
        let mut queued = self.finished();
        queued.splice(0..0, finishes);
    }

    /// After `finishes` committed (`applied` of them still held their rows): their rows
    /// are no longer held, and the rest were stale.
    fn finishes_committed(&self, finishes: &[Finish], applied: u64) {
        self.metrics
            .stale((finishes.len() as u64).saturating_sub(applied));
        let mut held = self.held();
        for f in finishes {
            held.remove(&finish_id(f));
        }
    }

    /// Free process permits at which the loop claims again: half a batch (or half the
    /// process limit, if smaller), so claims stay batched under load.
    fn claim_at(&self) -> usize {
        (self.options.batch.min(self.options.max_in_flight) / 2).max(1)
    }

    /// Runs `f` on `binding`'s start window, made (or remade, after a reload changed
    /// its settings) on first use; `None` for a binding without a throttle.
    fn with_window<T>(
        &self,
        binding: &Binding,
        f: impl FnOnce(&mut StartWindow) -> T,
    ) -> Option<T> {
        let t = binding.throttle.as_ref()?;
        let per_ms = t.per.as_millis() as i64;
        let mut windows = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
        let w = windows
            .entry(binding.id.clone())
            .or_insert_with(|| StartWindow::new(t.starts, per_ms));
        if !w.is(t.starts, per_ms) {
            *w = StartWindow::new(t.starts, per_ms);
        }
        Some(f(w))
    }

    /// How many of `binding`'s rows may start at `now_ms` (unbounded without a throttle).
    fn throttle_room(&self, binding: &Binding, now_ms: i64) -> usize {
        self.with_window(binding, |w| w.room(now_ms))
            .unwrap_or(usize::MAX)
    }

    /// The earliest instant a full start window among `bindings` has room again.
    fn next_throttle_room<'a>(
        &self,
        bindings: impl Iterator<Item = &'a Arc<Binding>>,
        now_ms: i64,
    ) -> Option<i64> {
        bindings
            .filter_map(|b| self.with_window(b, |w| w.next_room_at(now_ms)))
            .filter(|&at| at > now_ms)
            .min()
    }

    /// The ids of the claimable versions this process can deliver now.
    fn served(&self) -> Vec<String> {
        let current = self.triggers.current();
        let mut ids: Vec<String> = current
            .claimable()
            .filter(|b| self.permits.serves(b))
            .map(|b| b.id.clone())
            .collect();
        ids.dedup();
        ids
    }

    fn dead_letter_targets(&self, binding_id: &str) -> Vec<DeadLetterTarget> {
        self.triggers
            .routing()
            .dead_letter_handlers(binding_id)
            .map(|h| DeadLetterTarget {
                binding_id: h.id.clone(),
                fingerprint: h.fingerprint.clone(),
                destination: match &h.handler {
                    Handler::Queue { queue } => Destination::Queue(queue.clone()),
                    _ => Destination::Dispatch,
                },
            })
            .collect()
    }
}

/// Backoff while the store is away: from 100 ms to 5 s, jittered, so a database that
/// comes back is used again within seconds and a down one is not hammered.
fn store_backoff() -> Backoff {
    Backoff::new(BackoffPolicy::new(
        Duration::from_millis(100),
        Duration::from_secs(5),
    ))
}

async fn claim_loop(inner: Arc<Inner>, stop: CancellationToken, attempts: TaskTracker) {
    let wake = inner.store.wake();
    let mut backoff = store_backoff();
    let mut seen: Option<Arc<crate::triggers::lifecycle::Lifecycle>> = None;
    // Until when a busy binding's claim waits for more of its permits ([`claim_now`]).
    let mut linger_until: Option<tokio::time::Instant> = None;
    // Until when finishes wait for company before a commit of their own
    // ([`commit_finishes_now`]).
    let mut finish_linger: Option<tokio::time::Instant> = None;
    loop {
        if stop.is_cancelled() {
            return;
        }
        let current = inner.triggers.current();
        if !seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &current)) {
            // The versions changed: forget the gates of versions that went.
            let keep = current
                .versions()
                .map(|v| v.binding.fingerprint.as_str())
                .collect();
            inner.permits.prune(&keep);
            seen = Some(current.clone());
        }
        // Permits the other loop's claim in flight will take are not free.
        let free = inner
            .global
            .available_permits()
            .saturating_sub(inner.claiming.load(Relaxed));
        let in_flight = inner.options.max_in_flight.saturating_sub(free);
        let mut full_claim = false;
        // The `now` of this pass's claim, if one ran, and the bindings it claimed for:
        // their rows due after it were not seen.
        let mut claimed_at = None;
        let mut claimed_for: Vec<String> = Vec::new();
        let finishes = inner.take_finishes();
        let mut folded = false;
        if free >= inner.claim_at() || (in_flight == 0 && free > 0) {
            let now = inner.clock.now_ms();
            let lingered = linger_until.is_some_and(|t| t <= tokio::time::Instant::now());
            let mut room = 0usize;
            let mut waiting = false;
            let mut bindings: Vec<String> = current
                .claimable()
                .filter(|b| inner.deliver.ready(b))
                .filter(|b| {
                    // Rows beyond a binding's free permits or its start window's room
                    // would only be given back: claim no more than can start.
                    let permits = inner.permits.room(b);
                    let r = permits.min(inner.throttle_room(b, now));
                    if r > 0 && !claim_now(permits, b.max_concurrent, lingered) {
                        waiting = true;
                        return false;
                    }
                    room = room.saturating_add(r);
                    r > 0
                })
                .map(|b| b.id.clone())
                .collect();
            bindings.dedup();
            if bindings.is_empty() && waiting {
                // Let a busy binding's finishes gather into one claim (and one commit)
                // instead of a transaction per freed permit.
                let until =
                    *linger_until.get_or_insert_with(|| tokio::time::Instant::now() + LINGER);
                inner.requeue_finishes(finishes);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = inner.capacity.notified() => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            if !bindings.is_empty() {
                linger_until = None;
                claimed_at = Some(now);
                let limit = inner.options.batch.min(free).min(room);
                let _claiming = Claiming::new(&inner.claiming, limit);
                let req = ClaimRequest {
                    now_ms: now,
                    lease_until_ms: now + inner.options.lease.as_millis() as i64,
                    token: rand::random::<i64>() & i64::MAX,
                    limit,
                    bindings,
                    holder: inner.options.process_id.clone(),
                };
                claimed_for.clone_from(&req.bindings);
                folded = true;
                match inner
                    .store
                    .finish_and_claim(finishes.clone(), now, &req)
                    .await
                {
                    Ok((applied, rows)) => {
                        backoff.reset();
                        inner.finishes_committed(&finishes, applied);
                        full_claim = rows.len() == limit;
                        // A binding that got rows needs no timer: their finishes wake
                        // this loop, whose next claim asks again. So a hot ordering key
                        // or a binding whose claim takes what is due pays no next-due
                        // round trip per claim.
                        claimed_for.retain(|b| !rows.iter().any(|r| &r.binding_id == b));
                        admit(&inner, rows, &attempts).await;
                    }
                    Err(e) => {
                        inner.requeue_finishes(finishes);
                        inner.metrics.store_error();
                        let delay = backoff.next_delay(rand::random());
                        tracing::warn!(error = %e, retry_in = ?delay, "dispatcher: claim failed; backing off");
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(delay) => continue,
                        }
                    }
                }
            }
        }
        if folded {
            finish_linger = None;
        } else if !finishes.is_empty() {
            // No claim now: commit the finishes on their own (a delivered row may have
            // been its ordering key's head, so look again after), once there are
            // enough of them or the first has waited out the linger.
            let until = *finish_linger.get_or_insert_with(|| tokio::time::Instant::now() + LINGER);
            let lingered = until <= tokio::time::Instant::now();
            let queued = finishes.len();
            inner.requeue_finishes(finishes);
            if !commit_finishes_now(queued, inner.claim_at(), in_flight, lingered) {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = inner.capacity.notified() => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            finish_linger = None;
            if commit_finishes(&inner).await {
                backoff.reset();
            } else {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay(rand::random())) => {}
                }
            }
            continue;
        }
        if full_claim {
            tokio::task::yield_now().await;
            continue;
        }
        let poll = inner.options.poll_interval;
        let now = inner.clock.now_ms();
        let room_at = inner.next_throttle_room(current.claimable(), now);
        // Only the bindings just claimed for need a timer: the others had no room (a
        // freed permit wakes us) or a full start window (`room_at`). Of those, only
        // rows due after the claim's clock: what it saw and left waits for a finish or
        // a permit, which wake us.
        let next_due = match claimed_at {
            Some(at) if !claimed_for.is_empty() => inner.store.next_due_ms(&claimed_for, at).await,
            _ => Ok(None),
        };
        let until = match next_due {
            Ok(Some(due)) if due > now => inner
                .clock
                .instant_at(due)
                .min(tokio::time::Instant::now() + poll),
            // It came due while the claim and `admit` ran, after the claim looked:
            // nothing else wakes us for it, so claim again rather than poll.
            Ok(Some(_)) => continue,
            _ => tokio::time::Instant::now() + poll,
        };
        // A full start window wakes the loop when it has room again.
        let until = room_at.map_or(until, |at| until.min(inner.clock.instant_at(at)));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = wake.notified() => {}
            _ = inner.capacity.notified() => {}
            _ = inner.triggers.changed() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

/// Starts the rows that get both permits; releases the rest in one statement.
async fn admit(inner: &Arc<Inner>, rows: Vec<ClaimedRow>, attempts: &TaskTracker) {
    let mut release = Vec::new();
    let current = inner.triggers.current();
    for row in rows {
        let Some(binding) = current.resolve(&row.binding_id, &row.fingerprint).cloned() else {
            if let Some(number) = current.number(&row.binding_id, &row.fingerprint) {
                strand(inner, row, number);
            } else {
                // Recorded by another process since this one last looked.
                inner.unknown_version.notify_one();
                release.push((row.id, row.token));
            }
            continue;
        };
        if current.is_paused(&binding.id) {
            release.push((row.id, row.token));
            continue;
        }
        let Ok(permits) = inner.permits.try_acquire(&binding) else {
            release.push((row.id, row.token));
            continue;
        };
        let now = inner.clock.now_ms();
        if inner.with_window(&binding, |w| w.try_start(now)) == Some(false) {
            // Its start window is full: the row waits, due, for the window's room.
            drop(permits);
            inner.metrics.throttled(&binding.id);
            release.push((row.id, row.token));
            continue;
        }
        inner.held().insert(row.id, row.token);
        attempts.spawn(attempt(inner.clone(), binding, row, permits));
    }
    if !release.is_empty() {
        let now = inner.clock.now_ms();
        match inner.store.release(&release, now).await {
            Ok(n) => inner.metrics.released(n),
            Err(e) => {
                inner.metrics.store_error();
                tracing::warn!(error = %e, rows = release.len(), "could not release unadmitted rows; they come back when their lease ends");
            }
        }
    }
}

/// Dead-letters a row whose version is recorded but cannot run here (its definition
/// no longer builds, or it left memory): it would otherwise be claimed for ever.
fn strand(inner: &Arc<Inner>, row: ClaimedRow, number: u32) {
    let label = crate::triggers::lifecycle::label(&row.binding_id, number);
    tracing::warn!(row = row.id, version = %label, "a row's binding version cannot be built here; dead-lettered");
    inner.metrics.dead_lettered(&row.binding_id);
    inner.held().insert(row.id, row.token);
    let finish = Finish::DeadLetter {
        id: row.id,
        token: row.token,
        error: crate::outbox::model::AttemptError {
            attempt: row.attempt,
            at_ms: inner.clock.now_ms(),
            kind: "stranded".into(),
            message: format!("{label} is recorded but its definition cannot be built by this runtime, so the row cannot run under the definition it was enqueued for"),
            took_ms: None,
        },
        fanout: Vec::new(),
    };
    inner.queue_finish(finish);
}

async fn attempt(
    inner: Arc<Inner>,
    binding: Arc<Binding>,
    row: ClaimedRow,
    permits: [OwnedSemaphorePermit; 2],
) {
    let started = inner.clock.now_ms();
    inner.metrics.attempt_began(row.id, &binding, started);
    let became_due = row.due_at_ms.max(row.enqueued_at_ms);
    inner
        .metrics
        .started(&binding.id, (started - became_due) as f64 / 1000.0);
    let t0 = tokio::time::Instant::now();
    // A dead-letter handler's row: its dead letter's facts go into the context. A
    // failed read only leaves them out (the id is there, and the payload holds them).
    let dead_letter = match row.dead_letter_id {
        Some(id) => inner.store.dead_letter(id).await.unwrap_or_else(|e| {
            tracing::warn!(dead_letter = id, error = %e, "could not read the dead letter for its handler's context");
            None
        }),
        None => None,
    };
    let mut span = attempt_span(&binding, &row, inner.options.span_relationship);
    let input = AttemptInput {
        binding: &binding,
        event_id: &row.event_id,
        trace_id: &row.trace_id,
        traceparent: Some(span.context()),
        tracestate: &row.tracestate,
        attempt: row.attempt,
        depth: row.depth,
        dead_letter_id: row.dead_letter_id,
        backfill: row.backfill,
        payload: &row.payload,
        dead_letter: dead_letter.as_ref(),
    };
    let result = tokio::select! {
        r = tokio::time::timeout(binding.timeout, inner.deliver.deliver(input)) => match r {
            Ok(r) => r.map(drop),
            Err(_) => Err(AttemptFailure::new(
                FailureKind::Timeout,
                format!("the handler did not answer within {:?}", binding.timeout),
            )),
        },
        _ = inner.abandon.cancelled() => {
            // Shutdown ran out of grace: no finish; shutdown releases the row.
            span.fail(|| "abandoned at shutdown".into());
            inner.metrics.ended(&binding.id, t0.elapsed().as_secs_f64(), Some("platform"));
            inner.metrics.attempt_over(row.id);
            return;
        }
    };
    inner.metrics.ended(
        &binding.id,
        t0.elapsed().as_secs_f64(),
        result.as_ref().err().map(|f| f.kind.as_str()),
    );
    if let Err(f) = &result {
        tracing::info!(binding = %binding.id, event = %row.event_id, attempt = row.attempt, kind = f.kind.as_str(), error = %f.message, "attempt failed");
    }
    let targets = match &result {
        Err(f)
            if f.exhausts(row.attempt, binding.retry.max_attempts)
                && row.dead_letter_id.is_none() =>
        {
            inner.dead_letter_targets(&binding.id)
        }
        _ => Vec::new(),
    };
    let mut finish = decide(
        &row,
        &binding.retry,
        result.as_ref().map(|_| ()),
        inner.clock.now_ms(),
        rand::random(),
        &targets,
    );
    // The attempt's duration rides with its error, for the console's timeline.
    if let Some(error) = finish.error_mut() {
        error.took_ms = Some(t0.elapsed().as_millis() as i64);
    }
    let now = inner.clock.now_ms();
    record_outcome(&mut span, &result, &finish, now);
    inner.metrics.finished(&binding, &row, &finish, now);
    if let Finish::DeadLetter { .. } = &finish {
        tracing::warn!(binding = %binding.id, event = %row.event_id, attempts = row.attempt, "attempts exhausted; dead-lettered");
    }
    drop(permits);
    // Committed by the claim loop's next pass (which this wakes), or by shutdown once
    // every attempt has ended.
    inner.queue_finish(finish);
}

fn finish_id(f: &Finish) -> i64 {
    match f {
        Finish::Done { id, .. }
        | Finish::Retry { id, .. }
        | Finish::DeadLetter { id, .. }
        | Finish::Annotate { id, .. } => *id,
    }
}

/// Commits up to [`MAX_FINISH_BATCH`] queued finishes on their own; false when there
/// were none or the commit failed (they are queued again, the rows keep their leases).
async fn commit_finishes(inner: &Inner) -> bool {
    let finishes = inner.take_finishes();
    if finishes.is_empty() {
        return false;
    }
    match inner
        .store
        .finish(finishes.clone(), inner.clock.now_ms())
        .await
    {
        Ok(applied) => {
            inner.finishes_committed(&finishes, applied);
            true
        }
        Err(e) => {
            inner.metrics.store_error();
            tracing::warn!(error = %e, finishes = finishes.len(), "dispatcher: finishing failed; retrying (the rows keep their leases)");
            inner.requeue_finishes(finishes);
            false
        }
    }
}

async fn keeper(inner: Arc<Inner>, stop: CancellationToken) {
    let every = inner.options.lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let rows: Vec<(i64, i64)> = inner.held().iter().map(|(i, t)| (*i, *t)).collect();
        if rows.is_empty() {
            continue;
        }
        let until = inner.clock.now_ms() + inner.options.lease.as_millis() as i64;
        if let Err(e) = inner.store.extend(&rows, until).await {
            inner.metrics.store_error();
            tracing::warn!(error = %e, rows = rows.len(), "could not extend leases; will retry");
        }
    }
}
