//! Backfill operations: start one (or answer a dry run), list them, read one with
//! its progress, pause, resume and cancel. The walk itself is the runner's
//! (`runtime::backfill_runner`); a job lives in the store, so any process on the
//! database may run it and every process answers for it.

use serde::Serialize;

use super::base::{OpError, Operations};
use crate::clock::now_ms;
use crate::triggers::backfill::{judge_page, BackfillJob, BackfillSpec, BackfillState, Window};

/// Most jobs one listing answers with.
pub(crate) const MAX_BACKFILL_LIST: usize = 100;

/// Events a dry run reads at most; beyond, its answer says it stopped (`complete`
/// false) and its counts are those of the events read.
pub(crate) const DRY_RUN_LIMIT: i64 = 1_000_000;

/// A job with its progress, as the API, the CLI and the console show it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BackfillView {
    #[serde(flatten)]
    pub(crate) job: BackfillJob,
    /// Walked events over the events in its window at creation (0 to 1).
    pub(crate) progress: f64,
    /// Events walked per second since it was created (pauses included).
    pub(crate) walk_rate: f64,
    /// Seconds left at that rate, while it runs.
    pub(crate) eta_seconds: Option<u64>,
}

impl BackfillView {
    fn of(job: BackfillJob) -> BackfillView {
        let progress = if job.total > 0 {
            (job.walked as f64 / job.total as f64).min(1.0)
        } else {
            1.0
        };
        let secs = (job.updated_at_ms - job.created_at_ms).max(1) as f64 / 1000.0;
        let walk_rate = job.walked as f64 / secs;
        let eta_seconds = (job.state == BackfillState::Running && walk_rate > 0.0)
            .then(|| ((job.total - job.walked).max(0) as f64 / walk_rate).ceil() as u64);
        BackfillView {
            job,
            progress,
            walk_rate,
            eta_seconds,
        }
    }
}

/// What a dry run answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DryRun {
    /// Events read (inside the sources and time window).
    pub(crate) walked: i64,
    /// Of those, the ones the selection's kinds and filter take.
    pub(crate) matched: i64,
    /// Matched events the binding's sources, events or filter refuse.
    pub(crate) filtered: i64,
    /// Matched events skipped as already handled (with `skip_delivered`).
    pub(crate) skipped: i64,
    /// Rows the backfill would enqueue (before the binding's dedupe).
    pub(crate) would_enqueue: i64,
    /// Whether every event in the window was read (see [`DRY_RUN_LIMIT`]).
    pub(crate) complete: bool,
}

impl Operations {
    /// Checks a request against the bindings: the binding exists and is no
    /// dead-letter handler, and a pinned version was recorded.
    fn check_backfill(&self, spec: &BackfillSpec) -> Result<(), OpError> {
        spec.check().map_err(OpError::Invalid)?;
        let current = self.triggers.current();
        let Some(view) = current.view().into_iter().find(|v| v.id == spec.binding) else {
            return Err(OpError::NotFound(format!(
                "no trigger binding {:?}",
                spec.binding
            )));
        };
        if current
            .active(&spec.binding)
            .is_some_and(|b| b.is_dead_letter_handler())
        {
            return Err(OpError::Invalid(format!(
                "binding {:?} is a dead-letter handler; it takes dead letters only",
                spec.binding
            )));
        }
        if spec.version.is_none() && view.active.is_none() {
            return Err(OpError::Invalid(format!(
                "binding {:?} has no active version; pin one with \"version\"",
                spec.binding
            )));
        }
        Ok(())
    }

    /// Starts a backfill (answering the job), or with `dry_run` counts what it would
    /// do without enqueuing anything.
    pub(crate) async fn start_backfill(&self, spec: BackfillSpec) -> Result<BackfillView, OpError> {
        self.check_backfill(&spec)?;
        if let Some(n) = spec.version {
            self.control
                .recall(&spec.binding, n, "pinned for a backfill")
                .await?;
        }
        let job = self
            .store
            .backend()
            .create_backfill(&spec, now_ms())
            .await?;
        self.backfill_wake.notify_one();
        Ok(BackfillView::of(job))
    }

    /// Counts what a backfill of `spec` would do, reading the events as it would.
    pub(crate) async fn dry_run_backfill(&self, spec: &BackfillSpec) -> Result<DryRun, OpError> {
        self.check_backfill(spec)?;
        let filter = spec.check().map_err(OpError::Invalid)?;
        let current = self.triggers.current();
        // A dry run changes nothing: a pinned version not in memory is built from the
        // store, not brought back (the backfill itself pins it).
        let binding = match spec.version {
            Some(n) => match current.version(&spec.binding, n) {
                Some(b) => b.clone(),
                None => self.control.stored(&spec.binding, n).await?.1,
            },
            None => current.active(&spec.binding).cloned().ok_or_else(|| {
                OpError::NotFound(format!("binding {:?} has no active version", spec.binding))
            })?,
        };
        let backend = self.store.backend();
        let end_seq = i64::MAX;
        let mut out = DryRun::default();
        let mut cursor = 0;
        loop {
            let window = Window {
                after_seq: cursor,
                end_seq,
                sources: &spec.sources,
                since_ms: spec.since_ms,
                until_ms: spec.until_ms,
            };
            let page = backend.backfill_events(window, 1000).await?;
            let handled: std::collections::HashSet<String> = if spec.skip_delivered {
                let ids: Vec<String> = page.iter().map(|(_, e)| e.id.clone()).collect();
                backend
                    .backfill_handled(&binding.id, &binding.fingerprint, &ids)
                    .await?
                    .into_iter()
                    .collect()
            } else {
                Default::default()
            };
            let judged = judge_page(spec, filter.as_ref(), &binding, &current, &page, &handled);
            out.matched += judged.matched;
            out.filtered += judged.filtered;
            out.skipped += judged.skipped;
            out.would_enqueue += judged.taken.len() as i64;
            out.walked += page.len() as i64;
            match page.last() {
                Some((seq, _)) if page.len() == 1000 && out.walked < DRY_RUN_LIMIT => {
                    cursor = *seq;
                }
                Some(_) if page.len() == 1000 => return Ok(out),
                _ => break,
            }
        }
        out.complete = true;
        Ok(out)
    }

    /// Every backfill, newest first (at most [`MAX_BACKFILL_LIST`]).
    pub(crate) async fn backfills(&self) -> Result<Vec<BackfillView>, OpError> {
        let jobs = self
            .store
            .backend()
            .backfills(None, MAX_BACKFILL_LIST)
            .await?;
        Ok(jobs.into_iter().map(BackfillView::of).collect())
    }

    /// One backfill.
    pub(crate) async fn backfill(&self, id: i64) -> Result<BackfillView, OpError> {
        self.store
            .backend()
            .backfills(Some(id), 1)
            .await?
            .into_iter()
            .next()
            .map(BackfillView::of)
            .ok_or_else(|| OpError::NotFound(format!("no backfill {id}")))
    }

    /// Pauses, resumes (a paused or failed job) or cancels a backfill: `to` from the
    /// states it may be reached from; a job in another state is a conflict.
    pub(crate) async fn set_backfill(
        &self,
        id: i64,
        to: BackfillState,
    ) -> Result<BackfillView, OpError> {
        let from: &[BackfillState] = match to {
            BackfillState::Paused => &[BackfillState::Running],
            // A failed job resumes too, once what failed it is mended (its binding
            // back, say): from its cursor, like a paused one.
            BackfillState::Running => &[BackfillState::Paused, BackfillState::Failed],
            BackfillState::Cancelled => &[BackfillState::Running, BackfillState::Paused],
            BackfillState::Done | BackfillState::Failed => {
                return Err(OpError::Invalid(
                    "a backfill is done or failed by its runner only".into(),
                ))
            }
        };
        let before = self.backfill(id).await?;
        let changed = self
            .store
            .backend()
            .set_backfill_state(id, from, to, None, None, now_ms())
            .await?;
        if !changed {
            return Err(OpError::Conflict(format!(
                "backfill {id} is {}; it cannot become {}",
                before.job.state.as_str(),
                to.as_str()
            )));
        }
        if to == BackfillState::Running {
            self.backfill_wake.notify_one();
        }
        self.backfill(id).await
    }
}
