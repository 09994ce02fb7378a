//! [`OutboxStore`]: what the dispatcher, the queues and the admin API need from a
//! backend. Both backends (`store::sqlite`, `store::postgres`) implement it beside the
//! event store's trait, `store::Backend`, which has it as a supertrait: on the same
//! database and, for the writes that must be atomic with ingest, in the same
//! group-commit transaction (an append write carries the rows to enqueue).
//!
//! Invariants every implementation keeps:
//! - a row is claimable when `next_attempt_at <= now`, no earlier row (lower id) of
//!   the same binding and ordering key exists, and its binding is not paused
//!   (`trigger_pauses`, read by the claim itself, so a pause holds in every process
//!   from its commit); claims are ordered by (`priority` descending,
//!   `next_attempt_at`, id) and served by an index on exactly that;
//! - a claim moves `next_attempt_at` to the lease's end and stamps the claim token, so
//!   the same column is both the schedule and the lease: a crashed claimer's rows are
//!   simply due again when its lease ends, and no row is handed to two claimers within
//!   one lease (PostgreSQL: `FOR UPDATE SKIP LOCKED`; SQLite: one writer);
//! - a claim stamps the claimer's identity too (`lease_holder`); a process started
//!   again under that identity makes the rows it held due at once
//!   ([`OutboxStore::release_holder`]) instead of waiting out its own leases;
//! - every finish, release and extension names the claim token and changes nothing
//!   when the row has since been claimed again;
//! - a dead letter, its fan-out rows and the deletion of its row are one transaction.

use std::sync::Arc;

use async_trait::async_trait;

use super::model::{
    ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Enqueue, EventDeliveries, Expired,
    Finish, HolderRelease, OutboxDepth, OutboxStats, ReceiveOutcome, ReceiveRequest, RunRecord,
};
use crate::error::Result;

/// The outbox half of a storage backend.
#[async_trait]
pub trait OutboxStore: Send + Sync + 'static {
    /// Claims up to `req.limit` due rows of `req.bindings` under a lease, oldest due
    /// first, and increments their attempt counters.
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedRow>>;

    /// Gives back claimed rows that were not started (no permit was free): due again
    /// at `now_ms`, their attempt counters restored. Returns how many were released.
    async fn release(&self, rows: &[(i64, i64)], now_ms: i64) -> Result<u64>;

    /// At a process's start: makes every row `holder` holds under a live lease (leased,
    /// lease not yet ended at `now_ms`) due at `now_ms`, its token cleared so a finish
    /// of the claim before the restart changes nothing; attempts stay counted (the
    /// attempt may have run). Reports the rows other holders hold, for the log.
    ///
    /// Two processes misconfigured with one identity: the one starting releases the
    /// other's rows, which may then run twice (the live one's finish is skipped for
    /// its stale token): a duplicate delivery, never a lost one.
    async fn release_holder(&self, holder: &str, now_ms: i64) -> Result<HolderRelease>;

    /// Extends the lease of rows (id, token) still held to `until_ms`. Returns how many
    /// are still held.
    async fn extend(&self, rows: &[(i64, i64)], until_ms: i64) -> Result<u64>;

    /// Applies finishes in ONE transaction. Returns how many applied (a finish whose
    /// token no longer matches is skipped).
    async fn finish(&self, finishes: Vec<Finish>, now_ms: i64) -> Result<u64>;

    /// Applies `finishes`, then claims per `req`, in ONE transaction: the dispatcher
    /// folds the finishes of its last rows into its next claim, so a busy dispatcher
    /// pays one commit per batch instead of two, and a row that a finish makes the
    /// head of its ordering key is claimable by the same statement. Returns how many
    /// finishes applied and the rows claimed. On an error nothing of either applied.
    /// With no finishes this is [`OutboxStore::claim`].
    async fn finish_and_claim(
        &self,
        finishes: Vec<Finish>,
        now_ms: i64,
        req: &ClaimRequest,
    ) -> Result<(u64, Vec<ClaimedRow>)>;

    /// The earliest `next_attempt_at` later than `after_ms` among rows of `bindings`
    /// (a retry, a delayed row, a lease that will expire), so the dispatcher sleeps
    /// exactly until then. Rows due at or before `after_ms` are left out: the claim at
    /// `after_ms` saw them, and what it left is waiting for something that wakes the
    /// dispatcher anyway (a permit, its ordering key's head finishing, a full claim).
    /// Only later rows need a timer, and looking only there keeps this an index probe
    /// per binding however many rows are due.
    async fn next_due_ms(&self, bindings: &[String], after_ms: i64) -> Result<Option<i64>>;

    /// Totals, per binding and per queue, at `now_ms`.
    async fn stats(&self, now_ms: i64) -> Result<OutboxStats>;

    /// Dead letters per `query`, newest first.
    async fn dead_letters(&self, query: &DeadLetterQuery) -> Result<Vec<DeadLetter>>;

    /// One dead letter.
    async fn dead_letter(&self, id: i64) -> Result<Option<DeadLetter>>;

    /// The outbox depth totals at `now_ms` (the console's chart samples them once a
    /// second, so each backend answers from `outbox_by_due` without grouping).
    async fn depth(&self, now_ms: i64) -> Result<OutboxDepth>;

    /// Everything kept about one event's deliveries (pending rows, queue messages,
    /// dead letters, run records), each read through an index on `event_id`: the
    /// console's event detail.
    async fn event_deliveries(&self, event_id: &str) -> Result<EventDeliveries>;

    /// Enqueues the dead letter's row again (attempts from zero, due at `now_ms`; a
    /// queue message goes back to its queue) and counts the replay. `fingerprint`
    /// replaces the row's (a replay under another version of its binding). Returns the
    /// new row or message id, or `None` for an unknown dead letter.
    async fn replay(&self, id: i64, now_ms: i64, fingerprint: Option<&str>) -> Result<Option<i64>>;

    /// Enqueues `rows` for the stored event `event_id` (an event replay), in one
    /// transaction, due at `now_ms` (or their `not_before_ms`). Returns how many went
    /// in; 0 and nothing written when no such event is stored.
    async fn enqueue_rows(&self, event_id: &str, rows: Vec<Enqueue>, now_ms: i64) -> Result<u64>;

    /// Hands out up to `req.max` visible messages of a queue, each invisible for the
    /// visibility timeout under a new receipt; messages already received
    /// `req.max_receives` times are dead-lettered instead.
    async fn receive(&self, req: &ReceiveRequest) -> Result<ReceiveOutcome>;

    /// Deletes a received message. `false` when the receipt no longer holds it.
    async fn ack(&self, queue: &str, id: i64, receipt: i64) -> Result<bool>;

    /// Makes a received message visible again at `visible_at_ms`. `false` when the
    /// receipt no longer holds it.
    async fn nack(&self, queue: &str, id: i64, receipt: i64, visible_at_ms: i64) -> Result<bool>;

    /// Records a synchronous invocation.
    async fn record_run(&self, run: &RunRecord) -> Result<()>;

    /// The newest sync invocation records, optionally for one binding.
    async fn runs(&self, binding_id: Option<&str>, limit: usize) -> Result<Vec<RunRecord>>;

    /// Deletes, at most `chunk` rows per statement (so the writer is never held for
    /// long), events received before `before_ms` that nothing references any more,
    /// dead letters and run records older than `before_ms`.
    async fn expire(&self, before_ms: i64, chunk: usize) -> Result<Expired>;

    /// Woken (at least) whenever rows or messages this store holds may have become due:
    /// after a commit that enqueued some, in this process (SQLite) or in any process on
    /// the database (PostgreSQL `LISTEN/NOTIFY`). Spurious wake-ups are allowed.
    fn wake(&self) -> Arc<tokio::sync::Notify>;
}
