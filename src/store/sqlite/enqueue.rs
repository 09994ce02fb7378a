//! The outbox rows and queue messages created beside something else: an ingested
//! event's (in the group commit's transaction, [`super::events`]), a dead letter's
//! fan-out and a replay's ([`super::finish`], [`super::outbox`]). One writer of those
//! two inserts, with statements prepared once per connection.

use rusqlite::{params, CachedStatement, Connection};

use crate::outbox::model::Enqueue;
use crate::store::outbox_rows::{due_at, queue_of, to_i32};

const INSERT_ROW: &str = "INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key,
    depth, next_attempt_at, enqueued_at, due_at, payload, dead_letter_id)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?8, ?9)";
const INSERT_MESSAGE: &str = "INSERT INTO queue_messages (queue, binding_id, fingerprint,
    event_id, depth, enqueued_at, visible_at, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Creates outbox rows and queue messages inside the caller's transaction on the
/// writer (the group commit's, a finish's, a replay's), with statements prepared once
/// per connection.
pub(super) struct Enqueuer<'c> {
    row: CachedStatement<'c>,
    message: CachedStatement<'c>,
    /// Rows and messages created so far in this transaction (a wake-up is due if any).
    pub(super) created: usize,
}

impl<'c> Enqueuer<'c> {
    /// Prepares (or takes from the cache) the two insert statements.
    pub(super) fn new(conn: &'c Connection) -> rusqlite::Result<Enqueuer<'c>> {
        Ok(Enqueuer {
            row: conn.prepare_cached(INSERT_ROW)?,
            message: conn.prepare_cached(INSERT_MESSAGE)?,
            created: 0,
        })
    }

    /// Writes `rows` for the stored event `event_id`.
    pub(super) fn insert(
        &mut self,
        event_id: &str,
        rows: &[Enqueue],
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        for r in rows {
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
                    r.dead_letter_id
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
}
