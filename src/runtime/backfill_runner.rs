//! The backfill runner: a task per process that leases running backfill jobs from the
//! store one at a time and walks each ([`crate::triggers::backfill`] holds the data
//! and the decisions; this is the loop and its I/O).
//!
//! A step reads a page of events after the job's cursor, judges each against the
//! selection, the binding (its live version, or the pinned one) and, with
//! `skip_delivered`, what that version already handled, then writes the rows, the new
//! cursor and the counts in one transaction that also renews the lease. Then it waits
//! as long as the job's rate asks ([`Pace`]). A step the store refuses (the job was
//! paused or cancelled, or its lease passed to another process) ends the walk; a
//! store error is retried after a second, from the committed cursor, so nothing is
//! enqueued twice. At shutdown the lease is handed back at once, so another process
//! (or the next start) goes on where this one stopped.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::dispatch::metrics::DispatchMetrics;
use crate::runtime::trigger_control::TriggerControl;
use crate::store::Store;
use crate::triggers::backfill::{
    judge_page, BackfillJob, BackfillState, BackfillStep, Pace, Window, LEASE_MS,
};
use crate::triggers::binding::Binding;
use crate::triggers::lifecycle::label;

/// How often an idle runner looks for a job (it is also woken when one is created or
/// resumed here).
const POLL: Duration = Duration::from_secs(1);

/// What the runner needs.
pub(crate) struct Runner {
    pub(crate) store: Store,
    pub(crate) control: Arc<TriggerControl>,
    /// This process's name in leases.
    pub(crate) holder: String,
    /// Notified when a job is created or resumed.
    pub(crate) wake: Arc<Notify>,
    /// Where each step's counts go (`switchboard_dispatch_backfill_events_total`).
    pub(crate) metrics: Arc<DispatchMetrics>,
}

/// Leases and walks jobs until `cancel`.
pub(crate) async fn run(runner: Runner, cancel: CancellationToken) {
    let backend = runner.store.backend();
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let now = now_ms();
        match backend
            .lease_backfill(&runner.holder, now, now + LEASE_MS)
            .await
        {
            Ok(Some(job)) => {
                walk(&runner, job, &cancel).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not look for backfill jobs"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = runner.wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Why a step cannot find its binding version.
enum Missing {
    /// For good (the binding or its version is gone, or the definition no longer
    /// builds): the job fails with this reason.
    Gone(String),
    /// For now (the store could not be read): the step is tried again.
    Later(String),
}

/// The binding version `job` runs under now: its pinned version (brought back from
/// the store if it left memory) or the live one. A binding this process does not
/// know is looked for in the store first (another process may have registered it a
/// moment ago).
async fn binding_of(runner: &Runner, job: &BackfillJob) -> Result<Arc<Binding>, Missing> {
    let id = &job.spec.binding;
    let found = |runner: &Runner| {
        let live = runner.control.live().current();
        match job.spec.version {
            Some(n) => live.version(id, n).cloned(),
            None => live.active(id).cloned(),
        }
    };
    if let Some(b) = found(runner) {
        return Ok(b);
    }
    runner
        .control
        .sync()
        .await
        .map_err(|e| Missing::Later(e.to_string()))?;
    if let Some(b) = found(runner) {
        return Ok(b);
    }
    match job.spec.version {
        Some(n) => {
            let reason = "rebuilt from its stored definition for a backfill";
            match runner.control.recall(id, n, reason).await {
                Ok(_) => {}
                Err(e @ (crate::Error::NotFound(_) | crate::Error::Config(_))) => {
                    return Err(Missing::Gone(e.to_string()))
                }
                Err(e) => return Err(Missing::Later(e.to_string())),
            }
            found(runner).ok_or_else(|| Missing::Gone(format!("{} is not in memory", label(id, n))))
        }
        None => Err(Missing::Gone(format!(
            "binding {id:?} has no active version (removed, or drained)"
        ))),
    }
}

/// Walks `job` until it ends, stops being ours, or `cancel`.
async fn walk(runner: &Runner, job: BackfillJob, cancel: &CancellationToken) {
    let backend = runner.store.backend();
    let fail = |why: String| async move {
        tracing::warn!(backfill = job.id, error = %why, "backfill failed");
        if let Err(e) = backend
            .set_backfill_state(
                job.id,
                &[BackfillState::Running],
                BackfillState::Failed,
                Some(&runner.holder),
                Some(&why),
                now_ms(),
            )
            .await
        {
            tracing::warn!(backfill = job.id, error = %e, "could not record the backfill's failure");
        }
    };
    let filter = match job.spec.check() {
        Ok(f) => f,
        Err(why) => return fail(why).await,
    };
    tracing::info!(backfill = job.id, binding = %job.spec.binding, cursor = job.cursor, "walking a backfill");
    let mut pace = Pace::new(job.spec.rate, now_ms());
    let mut cursor = job.cursor;
    loop {
        if cancel.is_cancelled() {
            // Hand the lease back: another process (or the next start) goes on at once.
            let _ = backend
                .set_backfill_state(
                    job.id,
                    &[BackfillState::Running],
                    BackfillState::Running,
                    Some(&runner.holder),
                    None,
                    now_ms(),
                )
                .await;
            return;
        }
        let binding = match binding_of(runner, &job).await {
            Ok(b) => b,
            Err(Missing::Gone(why)) => return fail(why).await,
            Err(Missing::Later(why)) => {
                tracing::warn!(backfill = job.id, error = %why, "could not read the binding's version; trying again");
                pause(cancel, Duration::from_secs(1)).await;
                continue;
            }
        };
        let limit = pace.page();
        let window = Window {
            after_seq: cursor,
            end_seq: job.end_seq,
            sources: &job.spec.sources,
            since_ms: job.spec.since_ms,
            until_ms: job.spec.until_ms,
        };
        let page = match backend.backfill_events(window, limit).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(backfill = job.id, error = %e, "could not read events; trying again");
                pause(cancel, Duration::from_secs(1)).await;
                continue;
            }
        };
        let handled = if job.spec.skip_delivered && !page.is_empty() {
            let ids: Vec<String> = page.iter().map(|(_, e)| e.id.clone()).collect();
            match backend
                .backfill_handled(&binding.id, &binding.fingerprint, &ids)
                .await
            {
                Ok(h) => h.into_iter().collect(),
                Err(e) => {
                    tracing::warn!(backfill = job.id, error = %e, "could not read what was handled; trying again");
                    pause(cancel, Duration::from_secs(1)).await;
                    continue;
                }
            }
        } else {
            std::collections::HashSet::new()
        };
        let current = runner.control.live().current();
        let mut step = BackfillStep {
            id: job.id,
            holder: runner.holder.clone(),
            from_cursor: cursor,
            cursor: page.last().map_or(cursor, |(seq, _)| *seq),
            rows: Vec::new(),
            exclusive: job.spec.skip_delivered,
            walked: page.len() as i64,
            matched: 0,
            filtered: 0,
            skipped: 0,
            done: page.len() < limit,
            lease_until_ms: 0,
            now_ms: 0,
        };
        let judged = judge_page(
            &job.spec,
            filter.as_ref(),
            &binding,
            &current,
            &page,
            &handled,
        );
        (step.matched, step.filtered, step.skipped) =
            (judged.matched, judged.filtered, judged.skipped);
        for event in judged.taken {
            match current.routing().enqueue_for(&binding, event, 0) {
                Ok(mut row) => {
                    row.priority = job.spec.priority;
                    row.backfill = Some(job.id);
                    // History is not part of a live burst: it must not supersede
                    // (or wait behind) the binding's pending live rows.
                    row.debounce_key = None;
                    row.debounce_window_ms = None;
                    step.rows.push((event.id.clone(), row));
                }
                Err(e) => {
                    tracing::warn!(backfill = job.id, event_id = %event.id, error = %e, "the binding's keys do not evaluate for this event; left out");
                    step.filtered += 1;
                }
            }
        }
        let now = now_ms();
        step.now_ms = now;
        step.lease_until_ms = now + LEASE_MS;
        match backend.backfill_step(&step).await {
            Ok(Some(written)) => {
                runner.metrics.backfill_step(
                    &binding.id,
                    [
                        ("walked", step.walked as u64),
                        ("enqueued", written),
                        ("skipped", step.skipped as u64),
                        ("filtered", step.filtered as u64),
                    ],
                );
                cursor = step.cursor;
                if step.done {
                    tracing::info!(backfill = job.id, "backfill done");
                    return;
                }
                let wait = pace.spent(written, now_ms());
                pause(cancel, Duration::from_millis(wait)).await;
            }
            // Paused, cancelled, taken over, or moved on by this very step (a retry of
            // one whose commit did land): the next lease reads where it stands.
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(backfill = job.id, error = %e, "could not write a backfill step; trying again from the committed cursor");
                pause(cancel, Duration::from_secs(1)).await;
            }
        }
    }
}

/// Waits `d` or until `cancel`; whether the wait ran its course.
async fn pause(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}
