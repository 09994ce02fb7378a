//! The outbox rows and queue messages created beside something else: an ingested
//! event's (in the group commit's transaction, [`super::events`]), a dead letter's
//! fan-out and a replay's ([`super::finish`], [`super::outbox`]). One writer of those
//! two inserts, with statements prepared once per connection.
//!
//! A row's flow control is applied here, in the same transaction, before its insert:
//! a binding dedupe key already claimed and not expired skips the row; a debounce key
//! supersedes the binding's not-yet-started rows of that key (a record of each in
//! `superseded`, then the delete), and the row is due at the commit time plus the
//! window ([`due_at`]). Rows of one transaction are applied in order, so of two rows
//! with the same key in one group-commit batch the later supersedes (or is deduplicated
//! against) the earlier, as if they had been committed one after the other.

use rusqlite::{params, CachedStatement, Connection};

use crate::outbox::model::Enqueue;
use crate::store::outbox_rows::{binding_dedupe_source, due_at, queue_of, to_i32};

const INSERT_ROW: &str = "INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key,
    depth, next_attempt_at, enqueued_at, due_at, payload, dead_letter_id, priority, debounce_key,
    backfill_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?8, ?9, ?10, ?11, ?12)";
const INSERT_MESSAGE: &str = "INSERT INTO queue_messages (queue, binding_id, fingerprint,
    event_id, depth, enqueued_at, visible_at, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
/// Takes a binding's dedupe key unless a live claim holds it (one row changed = taken).
const CLAIM_KEY: &str = "INSERT INTO dedupe_claims (source, dedupe_key, event_id, expires_at)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (source, dedupe_key) DO UPDATE
    SET event_id = excluded.event_id, expires_at = excluded.expires_at
    WHERE dedupe_claims.expires_at <= ?5";
/// "Not yet started": no live lease. A row whose lease ran out is due again and has
/// not run to completion, so it may be superseded too.
const SUPERSEDABLE: &str = "binding_id = ?1 AND debounce_key = ?2
    AND (lease_token IS NULL OR next_attempt_at <= ?3)";

/// Creates outbox rows and queue messages inside the caller's transaction on the
/// writer (the group commit's, a finish's, a replay's), with statements prepared once
/// per connection.
pub(super) struct Enqueuer<'c> {
    conn: &'c Connection,
    row: CachedStatement<'c>,
    message: CachedStatement<'c>,
    /// Rows and messages created so far in this transaction (a wake-up is due if any).
    pub(super) created: usize,
}

impl<'c> Enqueuer<'c> {
    /// Prepares (or takes from the cache) the two insert statements.
    pub(super) fn new(conn: &'c Connection) -> rusqlite::Result<Enqueuer<'c>> {
        Ok(Enqueuer {
            conn,
            row: conn.prepare_cached(INSERT_ROW)?,
            message: conn.prepare_cached(INSERT_MESSAGE)?,
            created: 0,
        })
    }

    /// Writes `rows` for the stored event `event_id`, applying their flow control.
    pub(super) fn insert(
        &mut self,
        event_id: &str,
        rows: &[Enqueue],
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        for r in rows {
            if !self.flow_control(event_id, r, now_ms)? {
                continue;
            }
            let due = due_at(r, now_ms);
            match queue_of(r) {
                None => self.row.execute(params![
                    r.binding_id,
                    r.fingerprint,
                    event_id,
                    r.ordering_key,
                    to_i32(r.depth),
                    due,
                    now_ms,
                    r.payload,
                    r.dead_letter_id,
                    r.priority,
                    r.debounce_key,
                    r.backfill
                ])?,
                Some(queue) => self.message.execute(params![
                    queue,
                    r.binding_id,
                    r.fingerprint,
                    event_id,
                    to_i32(r.depth),
                    now_ms,
                    due,
                    r.payload
                ])?,
            };
            self.created += 1;
        }
        Ok(())
    }

    /// Applies `row`'s dedupe and debounce; `false` when the row must not be written.
    fn flow_control(
        &mut self,
        event_id: &str,
        row: &Enqueue,
        now_ms: i64,
    ) -> rusqlite::Result<bool> {
        if let Some((key, retention_ms)) = &row.dedupe {
            let taken = self.conn.prepare_cached(CLAIM_KEY)?.execute(params![
                binding_dedupe_source(&row.binding_id),
                key,
                event_id,
                now_ms.saturating_add(*retention_ms),
                now_ms
            ])? == 1;
            if !taken {
                tracing::debug!(
                    binding = %row.binding_id,
                    event_id,
                    dedupe_key = %key,
                    "a row of this dedupe key was enqueued within the retention; none enqueued"
                );
                return Ok(false);
            }
        }
        if let (Some(key), None) = (&row.debounce_key, queue_of(row)) {
            let args = params![row.binding_id, key, now_ms, event_id];
            self.conn
                .prepare_cached(&format!(
                    "INSERT INTO superseded (binding_id, fingerprint, event_id,
                        superseded_by_event_id, debounce_key, at)
                     SELECT binding_id, fingerprint, event_id, ?4, debounce_key, ?3
                     FROM outbox WHERE {SUPERSEDABLE} ORDER BY id"
                ))?
                .execute(args)?;
            let superseded = self
                .conn
                .prepare_cached(&format!("DELETE FROM outbox WHERE {SUPERSEDABLE}"))?
                .execute(params![row.binding_id, key, now_ms])?;
            if superseded > 0 {
                tracing::debug!(binding = %row.binding_id, event_id, superseded, "debounced");
            }
        }
        Ok(true)
    }
}
