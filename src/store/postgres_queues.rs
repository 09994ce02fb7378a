//! Queues, run records and retention on PostgreSQL: the parts of
//! [`crate::outbox::OutboxStore`] that are not the outbox proper, kept apart so each
//! file holds one concern ([`super::postgres_outbox`] has the outbox and the schema).
//!
//! A receive is ONE statement, like a claim: the visible messages are picked
//! `FOR UPDATE SKIP LOCKED` (receivers in other processes skip them rather than wait),
//! those past their maximum receives move to the dead letters, the rest are handed
//! out under the receive's receipt. Retention deletes in chunks, each one statement
//! (its own short transaction), so no sweep holds locks that ingest waits on.

use super::outbox_rows::{self as rows, to_u32};
use super::postgres::{pg_err, PostgresBackend};
use crate::error::Result;
use crate::outbox::model::{Expired, QueueMessage, ReceiveRequest, Received, RunRecord};

/// `$1` queue, `$2` now, `$3` max, `$4` max receives, `$5` invisible until, `$6` the
/// receipt, `$7`/`$8` the dead letter's error kind and message. Always answers at least
/// one row, whose first column counts the dead-lettered messages; a row without an id
/// stands for "none handed out".
const RECEIVE: &str = "WITH picked AS (
        SELECT id, receives, visible_at FROM queue_messages
        WHERE queue = $1 AND visible_at <= $2
        ORDER BY visible_at, id LIMIT $3
        FOR UPDATE SKIP LOCKED
    ), dead AS (
        DELETE FROM queue_messages m USING picked p
        WHERE m.id = p.id AND p.receives >= $4
        RETURNING m.queue, m.binding_id, m.fingerprint, m.event_id, m.receives, m.enqueued_at,
            m.depth, m.payload
    ), buried AS (
        INSERT INTO dead_letters (binding_id, fingerprint, event_id, trace_id, attempts, errors,
            enqueued_at, dead_at, queue, depth, payload)
        SELECT d.binding_id, d.fingerprint, d.event_id, COALESCE(e.trace_id, ''), d.receives,
            jsonb_build_array(jsonb_build_object('attempt', d.receives, 'at_ms', $2::BIGINT,
                'kind', $7::TEXT, 'message', $8::TEXT)),
            d.enqueued_at, $2, d.queue, d.depth, d.payload
        FROM dead d LEFT JOIN events e ON e.id = d.event_id
        RETURNING 1
    ), handed AS (
        UPDATE queue_messages m SET receives = m.receives + 1, receipt = $6, visible_at = $5
        FROM picked p
        WHERE m.id = p.id AND p.receives < $4
        RETURNING m.id, m.receives, m.binding_id, m.event_id, m.depth, m.enqueued_at,
            m.payload, p.visible_at AS was_visible
    )
    SELECT (SELECT count(*) FROM buried), h.id, h.receives, h.binding_id, h.event_id,
        COALESCE(e.kind, ''), COALESCE(e.trace_id, ''), h.depth, h.enqueued_at,
        COALESCE(h.payload, e.body, ''::BYTEA)
    FROM (SELECT 1) AS one
    LEFT JOIN (handed h LEFT JOIN events e ON e.id = h.event_id) ON true
    ORDER BY h.was_visible, h.id";

const ACK: &str = "DELETE FROM queue_messages WHERE queue = $1 AND id = $2 AND receipt = $3";

/// Makes a message visible again (at `$4`) and wakes the receivers.
pub(super) const NACK: &str = "WITH back AS (
        UPDATE queue_messages SET visible_at = $4, receipt = NULL
        WHERE queue = $1 AND id = $2 AND receipt = $3
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '') FROM back
    )
    SELECT (SELECT count(*) FROM back), (SELECT count(*) FROM notified)";

const INSERT_RUN: &str = "INSERT INTO trigger_runs (binding_id, event_id, started_at, duration_ms,
    status, error, abandoned) VALUES ($1, $2, $3, $4, $5, $6, $7)";

const SELECT_RUNS: &str = "SELECT binding_id, event_id, started_at, duration_ms, status, error,
    abandoned FROM trigger_runs WHERE ($1::TEXT IS NULL OR binding_id = $1)
    ORDER BY id DESC LIMIT $2";

/// One chunk of event retention: the next `$4` events received before `$1`, after the
/// cursor `($2, $3)` in `(received_at, seq)` order, of which those nothing references
/// are deleted. Returns the count and the last candidate (the next cursor), so a chunk
/// of still-referenced events is looked at once, not again by every later chunk.
const EXPIRE_EVENTS: &str = "WITH candidates AS (
        SELECT seq, id, received_at FROM events
        WHERE received_at < $1 AND (received_at, seq) > ($2, $3)
        ORDER BY received_at, seq LIMIT $4
    ), gone AS (
        DELETE FROM events e USING candidates c
        WHERE e.seq = c.seq
            AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = c.id)
            AND NOT EXISTS (SELECT 1 FROM queue_messages q WHERE q.event_id = c.id)
            AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = c.id)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), last.received_at, last.seq
    FROM (SELECT 1) AS one
    LEFT JOIN (SELECT received_at, seq FROM candidates
               ORDER BY received_at DESC, seq DESC LIMIT 1) AS last ON true";

impl PostgresBackend {
    /// Hands out visible messages of a queue; see [`crate::outbox::OutboxStore::receive`].
    /// One receipt per receive (as one token per claim): it fences this receiver's
    /// acks against a later receiver's.
    pub(super) async fn receive_messages(&self, req: &ReceiveRequest) -> Result<Received> {
        if req.max == 0 {
            return Ok(Received::default());
        }
        let receipt: i64 = rand::random();
        let error = rows::max_receives_error(req.max_receives, req.max_receives, req.now_ms);
        let client = self.client().await?;
        let stmt = Self::prepared(&client, RECEIVE).await?;
        let found = client
            .query(
                &stmt,
                &[
                    &req.queue,
                    &req.now_ms,
                    &(req.max as i64),
                    &rows::to_i32(req.max_receives),
                    &req.now_ms.saturating_add(req.visibility_ms),
                    &receipt,
                    &error.kind,
                    &error.message,
                ],
            )
            .await
            .map_err(pg_err("receive queue messages"))?;
        let mut out = Received::default();
        for r in &found {
            out.dead_lettered = r.get::<_, i64>(0) as u64;
            let Some(id) = r.get::<_, Option<i64>>(1) else {
                continue;
            };
            out.messages.push(QueueMessage {
                id,
                queue: req.queue.clone(),
                receipt,
                receives: to_u32(r.get::<_, i32>(2).into()),
                binding_id: r.get(3),
                event_id: r.get(4),
                kind: r.get(5),
                trace_id: r.get(6),
                depth: to_u32(r.get::<_, i32>(7).into()),
                enqueued_at_ms: r.get(8),
                payload: r.get(9),
            });
        }
        Ok(out)
    }

    /// Deletes a received message if `receipt` still holds it.
    pub(super) async fn ack_message(&self, queue: &str, id: i64, receipt: i64) -> Result<bool> {
        let client = self.client().await?;
        let stmt = Self::prepared(&client, ACK).await?;
        let n = client
            .execute(&stmt, &[&queue, &id, &receipt])
            .await
            .map_err(pg_err("ack a queue message"))?;
        Ok(n == 1)
    }

    /// Makes a received message visible again at `visible_at_ms` if `receipt` still
    /// holds it.
    pub(super) async fn nack_message(
        &self,
        queue: &str,
        id: i64,
        receipt: i64,
        visible_at_ms: i64,
    ) -> Result<bool> {
        let client = self.client().await?;
        let stmt = Self::prepared(&client, NACK).await?;
        let row = client
            .query_one(&stmt, &[&queue, &id, &receipt, &visible_at_ms])
            .await
            .map_err(pg_err("nack a queue message"))?;
        Ok(row.get::<_, i64>(0) == 1)
    }

    /// Appends a sync invocation record.
    pub(super) async fn insert_run(&self, run: &RunRecord) -> Result<()> {
        let client = self.client().await?;
        let stmt = Self::prepared(&client, INSERT_RUN).await?;
        client
            .execute(
                &stmt,
                &[
                    &run.binding_id,
                    &run.event_id,
                    &run.started_at_ms,
                    &run.duration_ms,
                    &run.status,
                    &run.error,
                    &run.abandoned,
                ],
            )
            .await
            .map(drop)
            .map_err(pg_err("record a run"))
    }

    /// The newest sync invocation records.
    pub(super) async fn read_runs(
        &self,
        binding_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let client = self.client().await?;
        let found = client
            .query(SELECT_RUNS, &[&binding_id, &(limit as i64)])
            .await
            .map_err(pg_err("read runs"))?;
        Ok(found
            .iter()
            .map(|r| RunRecord {
                binding_id: r.get(0),
                event_id: r.get(1),
                started_at_ms: r.get(2),
                duration_ms: r.get(3),
                status: r.get(4),
                error: r.get(5),
                abandoned: r.get(6),
            })
            .collect())
    }

    /// Retention: dead letters and run records older than `before_ms` first (so the
    /// events only they referenced go in the same sweep), then the events nothing
    /// references, `chunk` rows per statement.
    pub(super) async fn expire_before(&self, before_ms: i64, chunk: usize) -> Result<Expired> {
        let chunk = chunk.max(1) as i64;
        let client = self.client().await?;
        let mut expired = Expired::default();
        for (table, column, count) in [
            ("dead_letters", "dead_at", &mut expired.dead_letters),
            ("trigger_runs", "started_at", &mut expired.runs),
        ] {
            let sql = format!(
                "DELETE FROM {table} WHERE id IN
                    (SELECT id FROM {table} WHERE {column} < $1 ORDER BY {column} LIMIT $2)"
            );
            loop {
                let n = client
                    .execute(&sql, &[&before_ms, &chunk])
                    .await
                    .map_err(pg_err("expire"))?;
                *count += n;
                if n < chunk as u64 {
                    break;
                }
            }
        }
        let stmt = Self::prepared(&client, EXPIRE_EVENTS).await?;
        let mut cursor = (i64::MIN, i64::MIN);
        loop {
            let row = client
                .query_one(&stmt, &[&before_ms, &cursor.0, &cursor.1, &chunk])
                .await
                .map_err(pg_err("expire events"))?;
            expired.events += row.get::<_, i64>(0) as u64;
            match (row.get::<_, Option<i64>>(1), row.get::<_, Option<i64>>(2)) {
                (Some(at), Some(seq)) => cursor = (at, seq),
                _ => return Ok(expired),
            }
        }
    }
}
