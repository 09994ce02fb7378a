//! The bindings' run-time operations, shared by the admin API and the runtime's own
//! capabilities (`triggers.register`, `triggers.deregister`, …): reload, register,
//! deregister, pause, resume, drain, pin, history. Each answers with the lifecycle log
//! entries it wrote, so the caller sees exactly what changed (nothing, for a reload
//! that kept every binding).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::base::{OpError, Operations};
use crate::triggers::config::TriggerConfig;
use crate::triggers::lifecycle::label;
use crate::triggers::versions::{LifecycleCommit, LifecycleEntry};

/// Most lifecycle log entries one history page holds.
pub(crate) const MAX_HISTORY_PAGE: usize = 1000;

/// A run-time registration: the binding as a `[[triggers]]` table (JSON), and whether
/// it may replace a dynamic binding of the same id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegisterRequest {
    /// The binding.
    pub(crate) trigger: TriggerConfig,
    /// Replace a dynamic binding of the same id (a duplicate id is refused otherwise).
    #[serde(default)]
    pub(crate) replace: bool,
}

/// One page of a binding's lifecycle log (`GET /api/v1/triggers/{id}/history`).
#[derive(Debug, Clone, Serialize)]
pub struct HistoryPage {
    /// The binding id.
    pub(crate) binding: String,
    /// Its entries, oldest first.
    pub(crate) history: Vec<LifecycleEntry>,
    /// The `after` of the next page; `null` on the last.
    pub(crate) next: Option<i64>,
}

/// The answer to a change: the log entries it wrote.
fn changes(commit: LifecycleCommit) -> Value {
    json!({ "changes": commit.entries })
}

impl Operations {
    /// Re-reads the configuration file's `[[triggers]]`.
    pub async fn reload(&self) -> Result<Value, OpError> {
        Ok(changes(self.control.reload().await?))
    }

    /// Registers (or replaces) a dynamic binding from a `{"trigger": {…}, "replace"}`
    /// request body.
    pub async fn register(&self, body: &[u8]) -> Result<Value, OpError> {
        let req: RegisterRequest = serde_json::from_slice(body)
            .map_err(|e| OpError::Invalid(format!("a registration is {{\"trigger\": {{…[[triggers]] table…}}, \"replace\": bool}}: {e}")))?;
        Ok(changes(
            self.control.register(&req.trigger, req.replace).await?,
        ))
    }

    /// Deregisters a dynamic binding: it drains, then terminates.
    pub async fn deregister(&self, id: &str) -> Result<Value, OpError> {
        Ok(changes(self.control.deregister(id).await?))
    }

    /// Drains a binding on its own.
    pub async fn drain(&self, id: &str) -> Result<Value, OpError> {
        Ok(changes(self.control.drain(id).await?))
    }

    /// Pauses (`true`) or resumes a binding.
    pub async fn set_paused(&self, id: &str, paused: bool) -> Result<Value, OpError> {
        Ok(changes(self.control.set_paused(id, paused).await?))
    }

    /// Pins (`true`) or unpins a version, so replays can resolve it however old.
    /// Pinning a version that has left memory brings it back from its stored
    /// definition. A pin is kept on the version's record and logged (`pinned`,
    /// `unpinned`), which is how other processes learn of it.
    pub async fn set_pinned(&self, id: &str, version: u32, pinned: bool) -> Result<Value, OpError> {
        self.control.set_pinned(id, version, pinned).await?;
        Ok(json!({ "version": label(id, version), "pinned": pinned }))
    }

    /// A binding's lifecycle log, oldest first; `next` is the cursor of the next page.
    pub async fn history(
        &self,
        id: &str,
        after: Option<i64>,
        limit: Option<usize>,
    ) -> Result<HistoryPage, OpError> {
        let limit = limit.unwrap_or(100).clamp(1, MAX_HISTORY_PAGE);
        let entries = self.control.history(id, after, limit).await?;
        if entries.is_empty()
            && after.is_none()
            && self.triggers.current().view().iter().all(|b| b.id != id)
        {
            return Err(OpError::NotFound(format!(
                "no trigger {id:?} was ever recorded"
            )));
        }
        let next = (entries.len() == limit)
            .then(|| entries.last().map(|e| e.seq))
            .flatten();
        Ok(HistoryPage {
            binding: id.to_owned(),
            history: entries,
            next,
        })
    }
}
