//! What both backends share of the backfill jobs' rows: the columns read, and how a
//! row becomes a [`BackfillJob`] (the request is stored as JSON; a row whose JSON or
//! state no longer parses is reported, not skipped).

use crate::error::{Error, Result};
use crate::triggers::backfill::{BackfillJob, BackfillSpec, BackfillState};

/// The columns every job read selects, in [`JobColumns`]'s order.
pub(crate) const JOB_COLUMNS: &str = "id, spec, state, cursor, end_seq, total, walked, matched,
    filtered, skipped, enqueued, error, lease_holder, lease_until, created_at, updated_at";

/// A job row's columns, as read.
pub(crate) struct JobColumns {
    pub(crate) id: i64,
    pub(crate) spec: String,
    pub(crate) state: String,
    pub(crate) counts: [i64; 8],
    pub(crate) error: Option<String>,
    pub(crate) lease_holder: Option<String>,
    pub(crate) lease_until_ms: i64,
    pub(crate) created_at_ms: i64,
    pub(crate) updated_at_ms: i64,
}

impl JobColumns {
    /// The job; an error naming the job when its stored request or state does not
    /// parse (written by a newer build).
    pub(crate) fn into_job(self) -> Result<BackfillJob> {
        let spec: BackfillSpec = serde_json::from_str(&self.spec).map_err(|e| {
            Error::Store(format!(
                "backfill {}: its stored request does not parse: {e}",
                self.id
            ))
        })?;
        let state = BackfillState::parse(&self.state).ok_or_else(|| {
            Error::Store(format!(
                "backfill {}: unknown state {:?}",
                self.id, self.state
            ))
        })?;
        let [cursor, end_seq, total, walked, matched, filtered, skipped, enqueued] = self.counts;
        Ok(BackfillJob {
            id: self.id,
            spec,
            state,
            cursor,
            end_seq,
            total,
            walked,
            matched,
            filtered,
            skipped,
            enqueued,
            error: self.error,
            lease_holder: self.lease_holder,
            lease_until_ms: self.lease_until_ms,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

/// The stored form of a request.
pub(crate) fn spec_json(spec: &BackfillSpec) -> String {
    serde_json::to_string(spec).expect("plain data serialises")
}

/// The states a job may be paused, resumed or cancelled from, and failed from.
pub(crate) fn states_sql(states: &[BackfillState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}
