//! Queues and retention on SQLite: the SQL of the parts of
//! [`crate::outbox::OutboxStore`] that are not the outbox proper, kept apart so each
//! file holds one concern ([`super::outbox`] has the trait's implementation).
//!
//! A receive is a select and an update in one `IMMEDIATE` transaction on the writer
//! connection, like a claim: SQLite's single writer is the lock. Retention deletes in
//! chunks, each its own transaction on the writer, so the group commit gets the
//! writer between chunks and ingest is never held up for a whole sweep.

use rusqlite::{params, Connection, TransactionBehavior};

use super::{sql_err, SqliteBackend};
use crate::error::Result;
use crate::outbox::model::{QueueMessage, ReceiveOutcome, ReceiveRequest};
use crate::store::outbox_rows::{self as rows, to_u32};

pub(super) fn receive(
    c: &mut Connection,
    req: &ReceiveRequest,
    receipt: i64,
) -> rusqlite::Result<ReceiveOutcome> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut out = ReceiveOutcome::default();
    {
        let mut select = tx.prepare_cached(
            "SELECT m.id, m.receives, m.binding_id, m.fingerprint, m.event_id, m.depth,
                m.enqueued_at, COALESCE(e.kind, ''), COALESCE(e.trace_id, ''),
                COALESCE(m.payload, switchboard_body(e.body_codec, e.body), X''), m.payload
             FROM queue_messages m LEFT JOIN events e ON e.id = m.event_id
             WHERE m.queue = ?1 AND m.visible_at <= ?2 ORDER BY m.visible_at, m.id LIMIT ?3",
        )?;
        let mut hand_out = tx.prepare_cached(
            "UPDATE queue_messages SET receives = receives + 1, receipt = ?2, visible_at = ?3
             WHERE id = ?1",
        )?;
        let mut delete = tx.prepare_cached("DELETE FROM queue_messages WHERE id = ?1")?;
        let mut dead = tx.prepare_cached(
            "INSERT INTO dead_letters (binding_id, fingerprint, event_id, trace_id, attempts,
                errors, enqueued_at, dead_at, queue, depth, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?;
        let found = select
            .query_map(params![req.queue, req.now_ms, req.max as i64], |r| {
                Ok((
                    QueueMessage {
                        id: r.get(0)?,
                        queue: req.queue.clone(),
                        receipt,
                        receives: to_u32(r.get(1)?),
                        binding_id: r.get(2)?,
                        event_id: r.get(4)?,
                        kind: r.get(7)?,
                        trace_id: r.get(8)?,
                        depth: to_u32(r.get(5)?),
                        enqueued_at_ms: r.get(6)?,
                        payload: r.get(9)?,
                    },
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<Vec<u8>>>(10)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (mut m, fingerprint, own_payload) in found {
            if m.receives >= req.max_receives {
                let error = rows::max_receives_error(m.receives, req.max_receives, req.now_ms);
                dead.execute(params![
                    m.binding_id,
                    fingerprint,
                    m.event_id,
                    m.trace_id,
                    m.receives,
                    rows::errors_json(&[error]),
                    m.enqueued_at_ms,
                    req.now_ms,
                    req.queue,
                    m.depth,
                    own_payload
                ])?;
                delete.execute(params![m.id])?;
                out.dead_lettered += 1;
            } else {
                let visible_at = req.now_ms.saturating_add(req.visibility_ms);
                hand_out.execute(params![m.id, receipt, visible_at])?;
                m.receives += 1;
                out.messages.push(m);
            }
        }
    }
    tx.commit()?;
    Ok(out)
}

/// Deletes, a chunk per transaction, events received before `before_ms` that nothing
/// references, walking `(received_at, seq)` so a chunk of still-referenced events is
/// examined once, not again by every later chunk.
pub(super) async fn expire_events(
    backend: &SqliteBackend,
    before_ms: i64,
    chunk: usize,
) -> Result<u64> {
    let mut cursor = (i64::MIN, i64::MIN);
    let mut deleted = 0;
    loop {
        let (n, last) = SqliteBackend::with(&backend.writer, move |c| {
            expire_event_chunk(c, before_ms, cursor, chunk).map_err(sql_err("expire events"))
        })
        .await?;
        deleted += n;
        match last {
            Some(last) => cursor = last,
            None => return Ok(deleted),
        }
    }
}

fn expire_event_chunk(
    c: &mut Connection,
    before_ms: i64,
    after: (i64, i64),
    chunk: usize,
) -> rusqlite::Result<(u64, Option<(i64, i64)>)> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut deleted = 0;
    let last;
    {
        let candidates = tx
            .prepare_cached(
                "SELECT received_at, seq FROM events
                 WHERE received_at < ?1 AND (received_at, seq) > (?2, ?3)
                 ORDER BY received_at, seq LIMIT ?4",
            )?
            .query_map(params![before_ms, after.0, after.1, chunk as i64], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut delete = tx.prepare_cached(
            "DELETE FROM events WHERE seq = ?1
                AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = events.id)
                AND NOT EXISTS (SELECT 1 FROM queue_messages q WHERE q.event_id = events.id)
                AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = events.id)",
        )?;
        for (_, seq) in &candidates {
            deleted += delete.execute(params![seq])? as u64;
        }
        last = candidates.last().copied();
    }
    tx.commit()?;
    Ok((deleted, last))
}

/// Deletes rows of `table` whose `column` is before `before_ms`, `chunk` per statement.
pub(super) async fn expire_older(
    backend: &SqliteBackend,
    table: &'static str,
    column: &'static str,
    before_ms: i64,
    chunk: usize,
) -> Result<u64> {
    let sql = format!(
        "DELETE FROM {table} WHERE id IN
            (SELECT id FROM {table} WHERE {column} < ?1 ORDER BY {column} LIMIT ?2)"
    );
    let mut deleted = 0;
    loop {
        let sql = sql.clone();
        let n = SqliteBackend::with(&backend.writer, move |c| {
            c.prepare_cached(&sql)
                .and_then(|mut s| s.execute(params![before_ms, chunk as i64]))
                .map_err(sql_err("expire"))
        })
        .await? as u64;
        deleted += n;
        if n < chunk as u64 {
            return Ok(deleted);
        }
    }
}
