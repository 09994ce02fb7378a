//! Backfills as data and decisions, without I/O: what an operator asks for (a
//! [`BackfillSpec`]: which stored events, into which binding, how fast), the job the
//! store keeps of it ([`BackfillJob`]), one step of its walk ([`BackfillStep`], which a
//! backend writes in one transaction), the trait a backend implements
//! ([`BackfillStore`]), and the two decisions a step makes: whether an event is
//! taken ([`Verdict`], [`judge`]) and how long to wait before the next step
//! ([`Pace`]).
//!
//! Why a backfill walks by the event store's sequence number and not by time: the
//! sequence is the primary key, so a page is one index range however many events share
//! a millisecond, and the cursor (the last sequence walked) is one integer committed
//! with the rows the page enqueued. A crash between two steps loses nothing and
//! repeats nothing: the next lease starts at the committed cursor. The walk stops at the
//! newest sequence the store held when the job was created (`end_seq`): events that
//! arrive later are routed live and are not the backfill's business.
//!
//! Why "already delivered" is partly judged rather than looked up: a live delivery
//! leaves the outbox without a record (a record per delivery would cost a write per
//! delivery). An event counts as handled by a binding version when that version was
//! active when the event arrived and takes it (it was routed to it at ingest, whatever
//! became of the row then), when a backfill enqueued it for that version before (the
//! store records those, `backfilled`), when a dead letter of that version holds it,
//! or when a row of the binding for it is still in the outbox.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use std::collections::HashSet;

use super::binding::Binding;
use super::filter::{EventContext, Expression};
use super::lifecycle::{AsOf, Lifecycle};
use super::TriggerEvent;
use crate::error::Result;
use crate::outbox::model::Enqueue;

/// Events one step reads from the store at most.
pub(crate) const PAGE: usize = 100;

/// How long a process holds a job between steps before another may take it over.
pub(crate) const LEASE_MS: i64 = 30_000;

/// The priority backfilled rows get unless the request names one: below live rows of
/// the default priority (0), so a binding's live traffic is claimed first.
pub(crate) const DEFAULT_PRIORITY: i32 = -1;

/// Events per second a backfill enqueues unless the request names a rate.
pub(crate) const DEFAULT_RATE: f64 = 100.0;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillState {
    /// Walking (or waiting for a process to lease it).
    Running,
    /// Stopped by an operator; resumes at its cursor.
    Paused,
    /// Stopped for good by an operator; what it enqueued stays enqueued.
    Cancelled,
    /// Walked to its end.
    Done,
    /// Stopped because it cannot go on (its binding is gone, say); `error` says why.
    Failed,
}

impl BackfillState {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BackfillState::Running => "running",
            BackfillState::Paused => "paused",
            BackfillState::Cancelled => "cancelled",
            BackfillState::Done => "done",
            BackfillState::Failed => "failed",
        }
    }

    /// The stored spelling back; `None` for anything else.
    pub fn parse(s: &str) -> Option<BackfillState> {
        Some(match s {
            "running" => BackfillState::Running,
            "paused" => BackfillState::Paused,
            "cancelled" => BackfillState::Cancelled,
            "done" => BackfillState::Done,
            "failed" => BackfillState::Failed,
            _ => return None,
        })
    }
}

/// What a backfill selects and how it runs, as asked for and as stored (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillSpec {
    /// The binding the events go to.
    pub binding: String,
    /// Its version to run under (`None`: the live one, looked up at each step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Only events of these sources (none: every source).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Only events whose kind matches one of these patterns, as a binding's `events`
    /// (`issues.*`); none: every kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Only events received at or after this instant (unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
    /// Only events received before this instant (unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
    /// A CEL expression over the event, as a binding's `filter`, that must also hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Events enqueued per second at most.
    #[serde(default = "default_rate")]
    pub rate: f64,
    /// Skip events this binding version already handled (see the module doc).
    #[serde(default = "yes")]
    pub skip_delivered: bool,
    /// The rows' priority (live rows have their binding's, 0 by default).
    #[serde(default = "default_priority")]
    pub priority: i32,
}

fn default_rate() -> f64 {
    DEFAULT_RATE
}

fn yes() -> bool {
    true
}

fn default_priority() -> i32 {
    DEFAULT_PRIORITY
}

impl BackfillSpec {
    /// Checks the request and compiles its filter; the error says what to fix.
    pub(crate) fn check(&self) -> std::result::Result<Option<Expression>, String> {
        // At least 0.1 a second: a step then waits at most 10 s, well inside the
        // job's lease, so a slow walk keeps its lease between steps.
        if !(self.rate.is_finite() && (0.1..=100_000.0).contains(&self.rate)) {
            return Err(format!(
                "rate must be events per second, from 0.1 to 100000 (got {})",
                self.rate
            ));
        }
        if let (Some(since), Some(until)) = (self.since_ms, self.until_ms) {
            if since >= until {
                return Err("since must be before until".into());
            }
        }
        self.filter
            .as_deref()
            .map(|f| {
                Expression::compile(&self.binding, "backfill filter", f).map_err(|e| e.to_string())
            })
            .transpose()
    }

    /// Whether `kind` is one this selection takes.
    pub(crate) fn takes_kind(&self, kind: &str) -> bool {
        self.kinds.is_empty()
            || self
                .kinds
                .iter()
                .any(|p| super::binding::kind_matches(p, kind))
    }
}

/// A backfill job as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackfillJob {
    /// Its id.
    pub id: i64,
    /// What it selects and how it runs.
    pub spec: BackfillSpec,
    /// Where it stands.
    pub state: BackfillState,
    /// The last event sequence number walked (0 before the first step).
    pub cursor: i64,
    /// The newest sequence number when it was created: the walk ends there.
    pub end_seq: i64,
    /// Events in its window when it was created (sources and time only: an upper
    /// bound of what it will walk), for progress.
    pub total: i64,
    /// Events walked so far.
    pub walked: i64,
    /// Walked events the selection (kinds, filter) took.
    pub matched: i64,
    /// Matched events the binding's sources, events or filter refused.
    pub filtered: i64,
    /// Matched events skipped as already handled (`skip_delivered`).
    pub skipped: i64,
    /// Rows enqueued (the binding's dedupe may have dropped some of the rows asked).
    pub enqueued: i64,
    /// Why it failed, or the last step's error.
    pub error: Option<String>,
    /// The process leasing it, if any.
    pub lease_holder: Option<String>,
    /// When the lease ends (unix ms).
    pub lease_until_ms: i64,
    /// When it was created (unix ms).
    pub created_at_ms: i64,
    /// When it last changed (unix ms).
    pub updated_at_ms: i64,
}

/// One step of a walk, written in ONE transaction: the rows, the cursor and the
/// counts, and the lease renewed. A backend refuses it (writing nothing) unless the
/// job is still running under `holder`'s lease.
#[derive(Debug, Clone)]
pub struct BackfillStep {
    /// The job.
    pub id: i64,
    /// The leasing process.
    pub holder: String,
    /// The cursor the step started from: a step whose job has moved on since (a
    /// retry of a step that did commit) writes nothing.
    pub from_cursor: i64,
    /// The new cursor: the last sequence number this step walked.
    pub cursor: i64,
    /// The rows, each with its event id.
    pub rows: Vec<(String, Enqueue)>,
    /// Enqueue a row only if its (binding version, event) was not recorded as
    /// backfilled before, checked in the step's transaction (`skip_delivered`), so
    /// two jobs into one binding never both enqueue an event; a row refused so counts
    /// as skipped.
    pub exclusive: bool,
    /// Counts to add.
    pub walked: i64,
    /// Counts to add.
    pub matched: i64,
    /// Counts to add.
    pub filtered: i64,
    /// Counts to add.
    pub skipped: i64,
    /// Whether the walk reached its end (the job becomes `done`).
    pub done: bool,
    /// The lease's new end.
    pub lease_until_ms: i64,
    /// The commit's clock.
    pub now_ms: i64,
}

/// The selection's bounds a page of events is read within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window<'a> {
    /// Sequence numbers above this one.
    pub after_seq: i64,
    /// Sequence numbers up to this one.
    pub end_seq: i64,
    /// Only these sources (none: all).
    pub sources: &'a [String],
    /// Received at or after (unix ms).
    pub since_ms: Option<i64>,
    /// Received before (unix ms).
    pub until_ms: Option<i64>,
}

/// The backfill half of a storage backend.
#[async_trait]
pub trait BackfillStore: Send + Sync + 'static {
    /// Records a new running job for `spec` (stored as `spec_json`), ending at the
    /// store's newest event, and returns it.
    async fn create_backfill(&self, spec: &BackfillSpec, now_ms: i64) -> Result<BackfillJob>;

    /// One job, or every job newest first (at most `limit`).
    async fn backfills(&self, id: Option<i64>, limit: usize) -> Result<Vec<BackfillJob>>;

    /// Moves job `id` to `to` if it is in one of `from` (and, with `holder`, leased
    /// to that process); clears its lease (so a resumed job is taken at once). `false`
    /// when it was in none of them.
    async fn set_backfill_state(
        &self,
        id: i64,
        from: &[BackfillState],
        to: BackfillState,
        holder: Option<&str>,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool>;

    /// Leases the oldest running job whose lease has ended (or is `holder`'s) until
    /// `until_ms`; `None` when there is none. Of several processes asking at once, one
    /// gets each job. A job whose stored request this build cannot read (a newer
    /// build's) is set aside for a lease period, unleased, so later jobs go on and a
    /// process that can read it takes it then; `None` is answered for that call.
    async fn lease_backfill(
        &self,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<BackfillJob>>;

    /// Stored events inside `window`, by sequence number ascending, at most `limit`.
    async fn backfill_events(
        &self,
        window: Window<'_>,
        limit: usize,
    ) -> Result<Vec<(i64, TriggerEvent)>>;

    /// How many stored events `window` holds (sources and time only).
    async fn backfill_count(&self, window: Window<'_>) -> Result<i64>;

    /// Of `event_ids`, those with a dead letter of (`binding_id`, `fingerprint`) or an
    /// outbox row of `binding_id`.
    async fn backfill_handled(
        &self,
        binding_id: &str,
        fingerprint: &str,
        event_ids: &[String],
    ) -> Result<Vec<String>>;

    /// Writes `step` in one transaction (see [`BackfillStep`]); the rows written, or
    /// `None` when the job is no longer running under this lease (nothing written).
    async fn backfill_step(&self, step: &BackfillStep) -> Result<Option<u64>>;
}

/// What a step decides about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Outside the selection (a kind or the request's filter refused it).
    Unselected,
    /// The binding's sources, events or filter refused it.
    Filtered,
    /// The binding version handled it already.
    Skipped,
    /// It is enqueued.
    Take,
}

/// Decides about `event` for a backfill into `binding` with `spec` and its compiled
/// `filter`: `routed_then` says whether `binding`'s version was active when the event
/// arrived (and so took it at ingest, if it takes it now), `handled` whether a dead
/// letter or a pending row of it exists.
pub(crate) fn judge(
    spec: &BackfillSpec,
    filter: Option<&Expression>,
    binding: &Binding,
    event: &TriggerEvent,
    routed_then: bool,
    handled: bool,
) -> Verdict {
    let ctx = EventContext::new(event);
    if !spec.takes_kind(&event.kind)
        || filter.is_some_and(|f| !f.eval_bool_in(&ctx).unwrap_or(false))
    {
        return Verdict::Unselected;
    }
    let takes = binding.takes(&event.source, &event.kind)
        && binding
            .filter
            .as_ref()
            .is_none_or(|f| f.eval_bool_in(&ctx).unwrap_or(false));
    if !takes {
        return Verdict::Filtered;
    }
    if spec.skip_delivered && (routed_then || handled) {
        return Verdict::Skipped;
    }
    Verdict::Take
}

/// What judging a page found: counts, and the events taken (in page order).
#[derive(Debug, Default)]
pub(crate) struct Judged<'e> {
    /// Events the selection (kinds, filter) took.
    pub(crate) matched: i64,
    /// Of those, the ones the binding's sources, events or filter refused.
    pub(crate) filtered: i64,
    /// Of those, the ones the binding version handled already.
    pub(crate) skipped: i64,
    /// The events to enqueue.
    pub(crate) taken: Vec<&'e TriggerEvent>,
}

/// Judges every event of `page` ([`judge`]) for a backfill into `binding` as the
/// lifecycle `current` knows it (whether its version was active when each event
/// arrived); `handled` holds the ids a dead letter, a pending row or an earlier
/// backfill of that version holds. What the runner's steps and a dry run share.
pub(crate) fn judge_page<'e>(
    spec: &BackfillSpec,
    filter: Option<&Expression>,
    binding: &Binding,
    current: &Lifecycle,
    page: &'e [(i64, TriggerEvent)],
    handled: &HashSet<String>,
) -> Judged<'e> {
    let mut out = Judged::default();
    for (_, event) in page {
        let routed_then = match current.as_of(&binding.id, event.received_at_ms) {
            AsOf::Version(n) | AsOf::Collected { number: n } => n == binding.version,
            AsOf::NoneThen => false,
        };
        let verdict = judge(
            spec,
            filter,
            binding,
            event,
            routed_then,
            handled.contains(&event.id),
        );
        out.matched += i64::from(verdict != Verdict::Unselected);
        match verdict {
            Verdict::Unselected => {}
            Verdict::Filtered => out.filtered += 1,
            Verdict::Skipped => out.skipped += 1,
            Verdict::Take => out.taken.push(event),
        }
    }
    out
}

/// The pace of a walk: `rate` rows per second on average, as a debt of time each
/// step's rows add and the clock pays off. Steps that enqueue nothing (a page of
/// skipped events) cost nothing, so a backfill over mostly handled history walks at
/// the store's speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pace {
    rate: f64,
    /// When the rows so far will have been paid off (unix ms, fractional).
    free_at_ms: f64,
}

impl Pace {
    /// A pace of `rate` rows per second, starting free at `now_ms`.
    pub(crate) fn new(rate: f64, now_ms: i64) -> Pace {
        Pace {
            rate,
            free_at_ms: now_ms as f64,
        }
    }

    /// Events the next step reads at most: a page, or fewer at a slow rate (about a
    /// second's worth, at least one), so a slow backfill does not enqueue a burst.
    pub(crate) fn page(&self) -> usize {
        (self.rate.ceil() as usize).clamp(1, PAGE)
    }

    /// Records `rows` enqueued at `now_ms`; how long (ms) to wait before the next step.
    pub(crate) fn spent(&mut self, rows: u64, now_ms: i64) -> u64 {
        let now = now_ms as f64;
        self.free_at_ms = self.free_at_ms.max(now) + rows as f64 * 1000.0 / self.rate;
        (self.free_at_ms - now).max(0.0).ceil() as u64
    }
}

#[cfg(test)]
mod tests;
