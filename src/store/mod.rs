//! The durable event store: trigger events, their dedupe claims, the rejection audit
//! log and small per-source state (a captured Notion token, a cron source's last fire).
//!
//! Two backends implement [`Backend`]: [`sqlite::SqliteBackend`] (embedded, the
//! default) and, with the `postgres` feature, `postgres::PostgresBackend` for several
//! runtime processes sharing one database. Callers do not use a backend directly: they
//! hold a [`Store`], whose group commit ([`group_commit`]) gathers the writes of
//! concurrent requests into one transaction, so a burst of webhooks shares one fsync
//! instead of paying one each.
//!
//! The invariants every backend keeps:
//! - a dedupe claim and its event are written in ONE transaction: either both exist
//!   or neither does, so an acknowledged delivery is never lost and a duplicate is
//!   never stored twice;
//! - a claim lives until its `expires_at`; after that the same key is new again, and
//!   [`Backend::sweep`] deletes expired claims;
//! - a failed batch stores nothing, and every writer in it gets the error.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::triggers::TriggerEvent;

pub(crate) mod body_codec;
pub(crate) mod group_commit;
mod outbox_rows;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "postgres")]
mod postgres_listen;
#[cfg(feature = "postgres")]
mod postgres_outbox;
#[cfg(feature = "postgres")]
mod postgres_queues;
pub(crate) mod sqlite;
mod sqlite_outbox;
mod sqlite_queues;

pub(crate) use group_commit::GroupCommitStats;
pub use group_commit::Store;

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
        enqueue: Vec<crate::outbox::model::Enqueue>,
        /// The event's headers and body as the backend writes them, prepared in the
        /// request's task ([`body_codec::Prepared::take`] has taken `event.body`).
        prepared: body_codec::Prepared,
    },
    /// Record a refused delivery in the audit table.
    Reject(Rejected),
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
/// cursor (a sequence number from a previous page's `next`).
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    /// Only this source's events.
    pub source: Option<String>,
    /// At most this many (callers clamp it).
    pub limit: usize,
    /// Only events whose sequence number is below this one.
    pub before_seq: Option<i64>,
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
pub trait Backend: crate::outbox::OutboxStore + Send + Sync + 'static {
    /// A short name for logs and metrics (`sqlite`, `postgres`).
    fn name(&self) -> &'static str;

    /// How this backend wants event bodies prepared for [`Backend::write_batch`].
    /// Default: stored as received.
    fn body_compression(&self) -> body_codec::BodyCompression {
        body_codec::BodyCompression::None
    }

    /// Applies `writes` in ONE transaction, evaluating claims against `now_ms`, and
    /// returns one result per write in order (`None` for a rejected write). An error
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

    /// Deletes claims that expired at or before `now_ms` and audit rows received before
    /// `rejections_before_ms`.
    async fn sweep(&self, now_ms: i64, rejections_before_ms: i64) -> Result<Swept>;
}

/// Opens the backend a store URL names: `sqlite:PATH` (or a bare path) or, with the
/// `postgres` feature, `postgres://…` / `postgresql://…`. Runs the embedded
/// migrations before returning.
pub async fn open_backend(url: &str, options: &StoreOptions) -> Result<Arc<dyn Backend>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            return Ok(Arc::new(
                postgres::PostgresBackend::connect(url, options).await?,
            ));
        }
        #[cfg(not(feature = "postgres"))]
        {
            return Err(Error::Config(format!(
                "store {:?} needs the `postgres` feature; rebuild with --features postgres",
                redact_url(url)
            )));
        }
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() {
        return Err(Error::Config("store \"sqlite:\" names no file".into()));
    }
    Ok(Arc::new(sqlite::SqliteBackend::open(path, options).await?))
}

/// Tuning shared by the backends. Defaults suit one runtime process.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// PostgreSQL pool size. Default 8: the group commit writes from one connection at
    /// a time, the rest serve the admin API and state reads.
    pub pool_size: usize,
    /// SQLite only: refuse to grow the database file past this many bytes (writes then
    /// fail as "full" and ingress answers 503), so a flood cannot fill the disk.
    /// Default: no cap.
    pub max_db_bytes: Option<u64>,
    /// SQLite only: how commits are synced. Default `FULL`.
    pub synchronous: sqlite::Synchronous,
    /// Bytes of writes the group commit may hold (queued or committing); beyond, a
    /// write is refused with [`crate::Error::Overloaded`]. Default 64 MiB.
    pub write_queue_max_bytes: usize,
    /// SQLite only: how event bodies are stored. Default: as received
    /// (`sqlite_body_compression`; `store::body_codec` says why).
    pub body_compression: body_codec::BodyCompression,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            pool_size: 8,
            max_db_bytes: None,
            synchronous: sqlite::Synchronous::Full,
            write_queue_max_bytes: group_commit::DEFAULT_QUEUE_MAX_BYTES,
            body_compression: body_codec::BodyCompression::default(),
        }
    }
}

/// A store URL with any password replaced, for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let creds = &url[scheme_end + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => {
                    format!("{}{user}:[redacted]{}", &url[..scheme_end + 3], &url[at..])
                }
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

pub use crate::clock::now_ms;

pub(crate) fn store_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Store(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/x"),
            "postgres://app:[redacted]@db:5432/x"
        );
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact_url("sqlite:/tmp/a.db"), "sqlite:/tmp/a.db");
    }
}
