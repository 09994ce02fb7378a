//! Binding versions as the store keeps them: one record per (binding id, definition
//! fingerprint) with its number and state, an append-only lifecycle log of every
//! transition, and the pauses. Plain data and the trait a backend implements
//! ([`VersionStore`]); the decisions that produce them are [`super::lifecycle`]'s.
//!
//! Why the store keeps the definition of every version it has seen (as the JSON of the
//! `[[triggers]]` table it came from): a row records the fingerprint it was enqueued
//! under, so whichever process claims it, after whatever reload or restart, can build
//! exactly that definition again and run the row under it. A row whose fingerprint has
//! no record is the only kind that cannot run; the runtime dead-letters those
//! ([`VersionStore::strand`]), it never leaves them in the outbox.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Where a version stands. `Registering` → `Active` → `Draining` → `Terminated`; a
/// version never goes back, but the same fingerprint can become active again (a
/// reload back to an earlier definition reuses its record and number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionState {
    /// Recorded, not yet taking events.
    Registering,
    /// New events of its binding go to it.
    Active,
    /// Takes no new events; its rows (claimed or due) finish under it.
    Draining,
    /// Nothing of it is left in the outbox.
    Terminated,
}

impl VersionState {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VersionState::Registering => "registering",
            VersionState::Active => "active",
            VersionState::Draining => "draining",
            VersionState::Terminated => "terminated",
        }
    }

    /// The stored spelling back; `None` for anything else.
    pub fn parse(s: &str) -> Option<VersionState> {
        Some(match s {
            "registering" => VersionState::Registering,
            "active" => VersionState::Active,
            "draining" => VersionState::Draining,
            "terminated" => VersionState::Terminated,
            _ => return None,
        })
    }
}

/// Where a binding's definition comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `[[triggers]]` of the configuration file: changed by editing it and reloading.
    Manifest,
    /// Registered at run time (admin API, `triggers.register`): kept in the store and
    /// loaded again at start.
    Dynamic,
}

impl Origin {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Manifest => "manifest",
            Origin::Dynamic => "dynamic",
        }
    }

    /// The stored spelling back.
    pub fn parse(s: &str) -> Option<Origin> {
        match s {
            "manifest" => Some(Origin::Manifest),
            "dynamic" => Some(Origin::Dynamic),
            _ => None,
        }
    }
}

/// What a lifecycle log entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleEvent {
    /// A version was recorded.
    Registering,
    /// It started taking new events.
    Active,
    /// It stopped taking new events; its rows finish under it.
    Draining,
    /// Nothing of it is left.
    Terminated,
    /// The binding was paused: its rows wait, none starts.
    Paused,
    /// The binding was resumed.
    Resumed,
    /// The version was pinned: kept in memory (and brought back into it from its
    /// stored definition, if it had left) so replays can run under it.
    Pinned,
    /// The version was unpinned: it may leave memory again once terminated and old.
    Unpinned,
}

impl LifecycleEvent {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleEvent::Registering => "registering",
            LifecycleEvent::Active => "active",
            LifecycleEvent::Draining => "draining",
            LifecycleEvent::Terminated => "terminated",
            LifecycleEvent::Paused => "paused",
            LifecycleEvent::Resumed => "resumed",
            LifecycleEvent::Pinned => "pinned",
            LifecycleEvent::Unpinned => "unpinned",
        }
    }

    /// The stored spelling back.
    pub fn parse(s: &str) -> Option<LifecycleEvent> {
        Some(match s {
            "registering" => LifecycleEvent::Registering,
            "active" => LifecycleEvent::Active,
            "draining" => LifecycleEvent::Draining,
            "terminated" => LifecycleEvent::Terminated,
            "paused" => LifecycleEvent::Paused,
            "resumed" => LifecycleEvent::Resumed,
            "pinned" => LifecycleEvent::Pinned,
            "unpinned" => LifecycleEvent::Unpinned,
            _ => return None,
        })
    }
}

/// One version of one binding, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// The binding id.
    pub binding_id: String,
    /// Its number, from 1 per binding id; shown as `id@vN`.
    pub version: u32,
    /// The definition fingerprint: the version's identity.
    pub fingerprint: String,
    /// The `[[triggers]]` table it was built from, as JSON.
    pub definition: String,
    /// Manifest or dynamic.
    pub origin: Origin,
    /// Its state now.
    pub state: VersionState,
    /// Kept resolvable (for replays) even when terminated and old.
    pub pinned: bool,
    /// When it was first recorded (unix ms).
    pub created_at_ms: i64,
    /// When its state last changed (unix ms).
    pub updated_at_ms: i64,
}

/// One line of the lifecycle log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleEntry {
    /// Position in the log, increasing; assigned by the store (ignored on append).
    pub seq: i64,
    /// The binding id.
    pub binding_id: String,
    /// The version number.
    pub version: u32,
    /// The version's fingerprint.
    pub fingerprint: String,
    /// What happened.
    pub event: LifecycleEvent,
    /// Why, for a person ("configuration reloaded: filter changed", "removed from the
    /// configuration", "nothing left to drain", "paused by the admin API").
    pub reason: String,
    /// Which process did it (`host:pid`).
    pub process: String,
    /// When (unix ms).
    pub at_ms: i64,
}

/// What one lifecycle step writes, in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleCommit {
    /// Version records to insert (a new (binding id, version)) or update (state,
    /// pinned, updated_at of an existing one).
    pub versions: Vec<VersionRecord>,
    /// Log entries to append, in order.
    pub entries: Vec<LifecycleEntry>,
    /// Bindings to pause (`true`) or resume (`false`).
    pub pauses: Vec<(String, bool)>,
}

impl LifecycleCommit {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty() && self.entries.is_empty() && self.pauses.is_empty()
    }
}

/// The versions half of a storage backend.
#[async_trait]
pub trait VersionStore: Send + Sync + 'static {
    /// Every version record, by binding id then version.
    async fn versions(&self) -> Result<Vec<VersionRecord>>;

    /// The paused binding ids.
    async fn pauses(&self) -> Result<Vec<String>>;

    /// Writes `commit` in one transaction and returns the log's newest `seq` after it.
    /// Refuses (with [`crate::Error::Conflict`], writing nothing) a new record whose
    /// number or fingerprint another record of the same binding already has: another
    /// process recorded a version at the same time; reload the versions and decide
    /// again.
    async fn commit_lifecycle(&self, commit: &LifecycleCommit) -> Result<i64>;

    /// The log's newest `seq` (0 when empty): a process that sees it move reloads the
    /// versions and pauses another process wrote.
    async fn lifecycle_seq(&self) -> Result<i64>;

    /// A binding's log entries, oldest first, at most `limit`, with `seq` above
    /// `after_seq`.
    async fn history(
        &self,
        binding_id: &str,
        after_seq: Option<i64>,
        limit: usize,
    ) -> Result<Vec<LifecycleEntry>>;

    /// Every log entry, oldest first (what a start replays to rebuild each binding's
    /// active intervals).
    async fn lifecycle(&self) -> Result<Vec<LifecycleEntry>>;

    /// Which of `versions` (binding id, fingerprint) still have an outbox row, leased
    /// or not: a draining version with none is done. An existence check per version,
    /// not a count over the outbox, because it runs every second while anything drains
    /// and the rows of a draining version are the oldest (found at once).
    async fn with_rows(&self, versions: &[(String, String)]) -> Result<Vec<(String, String)>>;

    /// Moves every outbox row whose (binding id, fingerprint) has no version record to
    /// the dead letters, with an error of kind `stranded` saying so, and returns how
    /// many. Rows leased to a live claim are left alone until their lease ends.
    async fn strand(&self, now_ms: i64) -> Result<u64>;

    /// Woken when another process may have committed a lifecycle step, so this one
    /// reloads at once instead of at its next poll of [`VersionStore::lifecycle_seq`].
    /// `None` (the default) when the backend cannot tell: the poll alone then notices.
    fn lifecycle_wake(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }
}
