//! The event store's contract: [`Backend`], what a storage backend provides beside the
//! outbox and the binding versions ([`OutboxStore`] and [`VersionStore`] are its
//! supertraits: the runtime holds one backend for all three, on one database, so a
//! row, the version it names and the event it carries are always in the same store),
//! and the values that cross it: the writes
//! of a group-commit batch ([`Write`]), what an append did ([`Appended`]), audit rows
//! ([`Rejected`]), event pages ([`EventQuery`], [`StoredEvent`]) and sweeps
//! ([`Swept`]).
//!
//! Apart from the backends so that both (`sqlite`, `postgres`) and the group commit
//! depend on it, and it on neither.
//!
//! The invariants every backend keeps:
//! - a dedupe claim and its event are written in ONE transaction: either both exist
//!   or neither does, so an acknowledged delivery is never lost and a duplicate is
//!   never stored twice;
//! - a claim lives until its `expires_at`; after that the same key is new again, and
//!   [`Backend::sweep`] deletes expired claims;
//! - a failed batch stores nothing, and every writer in it gets the error.

use async_trait::async_trait;
use serde::Serialize;

use super::body_codec;
use crate::error::{Error, Result};
use crate::outbox::model::Enqueue;
use crate::outbox::OutboxStore;
use crate::triggers::backfill::BackfillStore;
use crate::triggers::versions::VersionStore;
use crate::triggers::TriggerEvent;

/// One write in a group-commit batch. Moved, never copied, into its transaction.
#[derive(Debug)]
pub enum Write {
    /// Claim `(event.source, event.dedupe_key)` until `claim_expires_at_ms` and, if the
    /// claim is new (or the old one expired), append the event.
    Append {
        /// The event.
        event: Box<TriggerEvent>,
        /// When the claim stops deduplicating (unix ms).
        claim_expires_at_ms: i64,
        /// Outbox rows and queue messages to create with the event, in the same
        /// transaction, only if the claim is new: a duplicate enqueues nothing.
        enqueue: Vec<Enqueue>,
        /// The event's headers and body as the backend writes them, prepared in the
        /// request's task (`body_codec::Prepared::take` has taken `event.body`).
        prepared: body_codec::Prepared,
    },
    /// Record a refused delivery in the audit table.
    Reject(Rejected),
    /// Write (`Some`) or delete (`None`) a per-source state value in the batch's
    /// transaction: a poll source's cursor commits with the events it read, so a crash
    /// between the two can neither skip a page nor store its events twice.
    PutState(StateWrite),
}

/// One per-source state value written with a batch ([`Write::PutState`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    /// The source it belongs to.
    pub source: String,
    /// The key, unique per source.
    pub key: String,
    /// The new value, or `None` to delete it.
    pub value: Option<String>,
}

/// What an append write did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Appended {
    /// The event is stored under this id.
    Stored(String),
    /// A live claim already holds the key; nothing new was stored. The id is the event
    /// that holds the claim.
    Duplicate(String),
}

/// A refused delivery, as kept in the audit table. Holds no secret and no body: only
/// its size, the redacted headers and the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// The source it was addressed to.
    pub source: String,
    /// A stable reason label (`bad_signature`, `stale_timestamp`, …).
    pub reason: String,
    /// A human-readable detail, free of secrets.
    pub detail: String,
    /// When it was received (unix ms).
    pub received_at_ms: i64,
    /// Redacted headers, as JSON text.
    pub headers_json: String,
    /// Size of the refused body in bytes.
    pub body_len: i64,
}

/// Which events to list: newest first, `limit` at most, older than the `before`
/// cursor (a sequence number from a previous page's `next`). Every filter narrows
/// the same keyset walk (`seq` descending), so a page's `next` stays correct whatever
/// filters are combined: the next page is the same query with a lower `before_seq`.
/// Equality filters are served by an index each (`events_by_source`,
/// `events_by_kind`, `events_by_delivery`, `events_by_id`), so a page costs about its
/// length even in a table of millions of events. The time bounds cannot ride the
/// keyset walk (received time and `seq` are close but not strictly in the same order,
/// so neither can stand in for the other exactly): alone, they filter the
/// newest-first walk of the primary key, which is cheap while the window holds a
/// page of events and reads down to the window's edge when it holds fewer, so a
/// backend reads a window that holds few events through `events_by_received` and
/// sorts it instead (SQLite counts the window on that index first; PostgreSQL's
/// planner decides from its statistics); combined with an equality filter, they
/// filter that filter's index walk.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    /// Only this source's events.
    pub source: Option<String>,
    /// At most this many (callers clamp it).
    pub limit: usize,
    /// Only events whose sequence number is below this one.
    pub before_seq: Option<i64>,
    /// Only the event with this id (replays look an event up by it).
    pub event_id: Option<String>,
    /// Only events of this kind.
    pub kind: Option<String>,
    /// Only events with this delivery id: the dedupe key as stored, or the part of it
    /// after its first `:` (a GitHub key is `{hook id}:{delivery GUID}`, and the GUID
    /// is what GitHub shows): the operator's "find the delivery GitHub says it sent".
    pub dedupe_key: Option<String>,
    /// Only events received at or after this instant (unix ms).
    pub since_ms: Option<i64>,
    /// Only events received before this instant (unix ms).
    pub until_ms: Option<i64>,
}

/// The part of a dedupe key after its first `:`, or the whole key when it has none:
/// the provider's own delivery id in a key that prefixes it with a qualifier (GitHub's
/// hook id). The stores index it (`events_by_delivery`) so that a search by either
/// form is one index lookup.
pub(crate) fn delivery_tail(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, tail)| tail)
}

/// A stored event with its sequence number (the paging cursor).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Insertion order, unique per store.
    pub seq: i64,
    /// The event.
    pub event: TriggerEvent,
}

/// What a sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Expired dedupe claims deleted.
    pub claims: u64,
    /// Audit rows older than the audit retention deleted.
    pub rejections: u64,
}

/// A storage backend. Implementations are internally synchronised; the group commit
/// calls [`Backend::write_batch`] from one task at a time, reads come from anywhere.
#[async_trait]
pub trait Backend: OutboxStore + VersionStore + BackfillStore + Send + Sync + 'static {
    /// A short name for logs and metrics (`sqlite`, `postgres`).
    fn name(&self) -> &'static str;

    /// How this backend wants event bodies prepared for [`Backend::write_batch`].
    /// Default: stored as received.
    fn body_compression(&self) -> body_codec::BodyCompression {
        body_codec::BodyCompression::None
    }

    /// Applies `writes` in ONE transaction, evaluating claims against `now_ms`, and
    /// returns one result per write in order (`None` for an audit row or a state
    /// write). Two appends of one batch with the same `(source, dedupe_key)`: the first
    /// claims, the second is its duplicate. An error
    /// means nothing of the batch was stored.
    async fn write_batch(&self, writes: Vec<Write>, now_ms: i64) -> Result<Vec<Option<Appended>>>;

    /// Lists events per `query`.
    async fn events(&self, query: &EventQuery) -> Result<Vec<StoredEvent>>;

    /// The newest audit rows, optionally for one source.
    async fn rejections(&self, source: Option<&str>, limit: usize) -> Result<Vec<Rejected>>;

    /// Reads a per-source state value.
    async fn get_state(&self, source: &str, key: &str) -> Result<Option<String>>;

    /// Writes (`Some`) or deletes (`None`) a per-source state value, durably.
    async fn put_state(&self, source: &str, key: &str, value: Option<&str>) -> Result<()>;

    /// Writes `value` unless a value is already stored, atomically (several processes
    /// may race); returns the value already stored, or `None` when this one was written.
    async fn put_state_if_absent(
        &self,
        source: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>>;

    /// Compare-and-set: writes `value` only if the stored value is `expected` (`None`:
    /// absent), atomically across processes; true when it wrote. What a per-source
    /// lease is built on (one poller at a time per source).
    async fn swap_state(
        &self,
        source: &str,
        key: &str,
        expected: Option<&str>,
        value: &str,
    ) -> Result<bool>;

    /// Deletes claims that expired at or before `now_ms` and audit rows received before
    /// `rejections_before_ms`.
    async fn sweep(&self, now_ms: i64, rejections_before_ms: i64) -> Result<Swept>;

    /// Whether the store can take work now: it answers, a write could begin, and its
    /// schema is still one this build knows (another process may have migrated it
    /// since this one started). The runtime's readiness probe (`GET /readyz`) asks;
    /// it writes nothing.
    async fn ping(&self) -> Result<()>;
}

/// The error [`Backend::ping`] returns when the schema moved past this build.
pub(crate) fn schema_too_new(found: i64, known: i64) -> Error {
    Error::Store(format!(
        "the store's schema is at version {found}, newer than this build knows ({known}): a newer switchboard migrated it; run that version"
    ))
}

/// A store error: `what` failed because of `e`.
pub(crate) fn store_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Store(format!("{what}: {e}"))
}

/// The refusal of a database whose schema is newer than this build's: `what` names
/// the database (a path, a redacted URL). Starting would run old SQL against tables it
/// does not know, and migrations only go up, so the process refuses, names both
/// versions and says what to do.
pub(crate) fn newer_schema(what: &str, found: i64, known: i64) -> Error {
    Error::Store(format!(
        "{what} has schema version {found}, newer than this build knows (up to {known}): a newer switchboard migrated it; run that version (or newer) against it, or point `store` at another database"
    ))
}
