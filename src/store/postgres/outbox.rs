//! [`OutboxStore`] for [`PostgresBackend`]: the one implementation of the outbox's
//! trait on PostgreSQL, for several runtime processes claiming from one database.
//!
//! - Claims, the finish-and-claim transaction and the next-due query are in
//!   [`super::claim`]: one statement picks the due rows `FOR UPDATE SKIP LOCKED` (so
//!   concurrent claimers in other processes skip each other's rows instead of waiting
//!   for them), stamps the lease and joins the events for the handler's context.
//! - Finishes are batched per kind ([`super::finish`]); queues and retention have
//!   their statements in [`super::queues`].
//! - Every write that makes rows due (ingest, release, replay, dead-letter fan-out)
//!   calls `pg_notify('switchboard_outbox', '')` in its own statement, so the
//!   wake-up ([`super::listen`]) is delivered at commit, to every process.

use std::sync::Arc;

use futures_util::future::try_join;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::enqueue::{insert_rows, INSERT_ROWS};
use super::events::{pg_arg, PgArg, DIALECT};
use super::finish::{self, row_to_dead_letter, DEAD_LETTER_COLUMNS};
use super::{pg_err, prepared, queues, PostgresBackend};
use crate::error::Result;
use crate::outbox::model::{
    ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Enqueue, EventDeliveries, Expired,
    Finish, HeldRows, HolderRelease, OutboxDepth, OutboxStats, PendingRow, QueueMessage,
    QueuedMessage, ReceiveOutcome, ReceiveRequest, RunRecord,
};
use crate::outbox::OutboxStore;
use crate::store::listing;
use crate::store::outbox_rows::{self as rows, next_attempt_sql, to_u32};

/// The dead-letter page's SQL ([`crate::store::listing::dead_letters`]: only the
/// filters `q` sets, so each is a plain condition the planner can match to
/// `dead_letters_by_binding` or the primary key's newest-first walk).
fn dead_letters_sql(q: &DeadLetterQuery) -> (String, Vec<PgArg>) {
    let select = format!("SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters");
    let (sql, args) = listing::dead_letters(q, &select, &DIALECT);
    (sql, args.into_iter().map(pg_arg).collect())
}

const RELEASE: &str = "WITH released AS (
        UPDATE outbox o SET next_attempt_at = $3, lease_token = NULL,
            attempts = GREATEST(o.attempts - 1, 0)
        FROM unnest($1::BIGINT[], $2::BIGINT[]) AS r(id, token)
        WHERE o.id = r.id AND o.lease_token = r.token
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '') FROM (SELECT 1 FROM released LIMIT 1) AS any_row
    )
    SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM notified)";

/// Makes the rows a holder holds under a live lease due now, waking every process.
const RELEASE_HOLDER: &str = "WITH released AS (
        UPDATE outbox SET next_attempt_at = $2, lease_token = NULL
        WHERE next_attempt_at > $2 AND lease_token IS NOT NULL AND lease_holder = $1
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '') FROM (SELECT 1 FROM released LIMIT 1) AS any_row
    )
    SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM notified)";

/// The rows other holders hold under a live lease, per holder.
const HELD_BY_OTHERS: &str = "SELECT lease_holder, count(*), max(next_attempt_at) FROM outbox
    WHERE next_attempt_at > $1 AND lease_token IS NOT NULL
    GROUP BY lease_holder ORDER BY lease_holder NULLS FIRST";

const EXTEND: &str = "UPDATE outbox o SET next_attempt_at = $3
    FROM unnest($1::BIGINT[], $2::BIGINT[]) AS r(id, token)
    WHERE o.id = r.id AND o.lease_token = r.token";

/// The depth totals: due counts parked rows by their own due time (as before they were
/// parked), leased the rows under a live lease.
pub(super) const DEPTH: &str = "SELECT
        (SELECT count(*) FROM outbox WHERE next_attempt_at <= $1)
            + (SELECT count(*) FROM outbox WHERE next_attempt_at = 9223372036854775807
                AND due_at <= $1),
        (SELECT count(*) FROM outbox WHERE next_attempt_at > $1 AND lease_token IS NOT NULL),
        (SELECT count(*) FROM dead_letters)";

const STATS_OUTBOX: &str = concat!(
    "SELECT binding_id, count(*) FILTER (WHERE ",
    next_attempt_sql!(),
    " <= $1),
        count(*) FILTER (WHERE lease_token IS NOT NULL AND next_attempt_at > $1),
        count(*) FILTER (WHERE lease_token IS NULL AND ",
    next_attempt_sql!(),
    " > $1),
        min(enqueued_at)
    FROM outbox GROUP BY binding_id"
);
const STATS_QUEUES: &str = "SELECT queue, count(*) FILTER (WHERE visible_at <= $1),
        count(*) FILTER (WHERE receipt IS NOT NULL AND visible_at > $1),
        count(*) FILTER (WHERE receipt IS NULL AND visible_at > $1),
        min(enqueued_at)
    FROM queue_messages GROUP BY queue";
const STATS_DEAD: &str =
    "SELECT binding_id, queue, count(*) FROM dead_letters GROUP BY binding_id, queue";
const STATS_SUPERSEDED: &str = "SELECT binding_id, count(*) FROM superseded GROUP BY binding_id";

/// Counts the replay, and enqueues the dead letter's row (or queue message) again.
const REPLAY: &str = "WITH dl AS (
        UPDATE dead_letters SET replays = replays + 1, replayed_at = $2 WHERE id = $1
        RETURNING binding_id, fingerprint, event_id, ordering_key, depth, payload, queue
    ), dispatched AS (
        INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
            next_attempt_at, enqueued_at, due_at, payload)
        SELECT binding_id, COALESCE($3::TEXT, fingerprint), event_id, ordering_key, depth,
            $2, $2, $2, payload
        FROM dl WHERE queue IS NULL
        RETURNING id
    ), queued AS (
        INSERT INTO queue_messages (queue, binding_id, fingerprint, event_id, depth,
            enqueued_at, visible_at, payload)
        SELECT queue, binding_id, fingerprint, event_id, depth, $2, $2, payload
        FROM dl WHERE queue IS NOT NULL
        RETURNING id
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '') FROM dl
    )
    SELECT COALESCE((SELECT id FROM dispatched), (SELECT id FROM queued)),
        (SELECT count(*) FROM notified)";
/// Splits (id, token) pairs into the two arrays the statements take.
fn pairs(rows: &[(i64, i64)]) -> (Vec<i64>, Vec<i64>) {
    rows.iter().copied().unzip()
}

#[async_trait::async_trait]
impl OutboxStore for PostgresBackend {
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedRow>> {
        Ok(self.finish_and_claim(Vec::new(), req.now_ms, req).await?.1)
    }

    async fn finish_and_claim(
        &self,
        finishes: Vec<Finish>,
        now_ms: i64,
        req: &ClaimRequest,
    ) -> Result<(u64, Vec<ClaimedRow>)> {
        self.finish_then_claim(finishes, now_ms, req).await
    }

    async fn release(&self, rows: &[(i64, i64)], now_ms: i64) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (ids, tokens) = pairs(rows);
        let client = self.client().await?;
        let stmt = prepared(&client, RELEASE).await?;
        let row = client
            .query_one(&stmt, &[&ids, &tokens, &now_ms])
            .await
            .map_err(pg_err("release outbox rows"))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    async fn release_holder(&self, holder: &str, now_ms: i64) -> Result<HolderRelease> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_err("begin a holder's release"))?;
        let released: i64 = tx
            .query_one(RELEASE_HOLDER, &[&holder, &now_ms])
            .await
            .map_err(pg_err("release a holder's rows"))?
            .get(0);
        let held_by_others = tx
            .query(HELD_BY_OTHERS, &[&now_ms])
            .await
            .map_err(pg_err("read the rows other holders hold"))?
            .iter()
            .map(|r| HeldRows {
                holder: r.get(0),
                rows: r.get::<_, i64>(1) as u64,
                until_ms: r.get(2),
            })
            .collect();
        tx.commit()
            .await
            .map_err(pg_err("commit a holder's release"))?;
        Ok(HolderRelease {
            released: released as u64,
            held_by_others,
        })
    }

    async fn extend(&self, rows: &[(i64, i64)], until_ms: i64) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (ids, tokens) = pairs(rows);
        let client = self.client().await?;
        let stmt = prepared(&client, EXTEND).await?;
        client
            .execute(&stmt, &[&ids, &tokens, &until_ms])
            .await
            .map_err(pg_err("extend outbox leases"))
    }

    async fn finish(&self, finishes: Vec<Finish>, now_ms: i64) -> Result<u64> {
        if finishes.is_empty() {
            return Ok(0);
        }
        finish::finish(
            &mut self.client().await?,
            finishes,
            now_ms,
            &self.notify_tag,
        )
        .await
    }

    async fn next_due_ms(&self, bindings: &[String], after_ms: i64) -> Result<Option<i64>> {
        self.next_due(bindings, after_ms).await
    }

    async fn stats(&self, now_ms: i64) -> Result<OutboxStats> {
        let client = self.client().await?;
        let depth = |rows: Vec<Row>| -> Vec<rows::DepthRow> {
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect()
        };
        let (outbox, queues) = try_join(
            client.query(STATS_OUTBOX, &[&now_ms]),
            client.query(STATS_QUEUES, &[&now_ms]),
        )
        .await
        .map_err(pg_err("read outbox stats"))?;
        let dead = client
            .query(STATS_DEAD, &[])
            .await
            .map_err(pg_err("read outbox stats"))?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let superseded = client
            .query(STATS_SUPERSEDED, &[])
            .await
            .map_err(pg_err("read outbox stats"))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        Ok(rows::assemble_stats(
            now_ms,
            depth(outbox),
            depth(queues),
            dead,
            superseded,
        ))
    }

    async fn dead_letters(&self, query: &DeadLetterQuery) -> Result<Vec<DeadLetter>> {
        let client = self.client().await?;
        let (sql, args) = dead_letters_sql(query);
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| &**a as _).collect();
        let found = client
            .query(&sql, &refs)
            .await
            .map_err(pg_err("read dead letters"))?;
        Ok(found.iter().map(row_to_dead_letter).collect())
    }

    async fn depth(&self, now_ms: i64) -> Result<OutboxDepth> {
        let client = self.client().await?;
        let r = client
            .query_one(DEPTH, &[&now_ms])
            .await
            .map_err(pg_err("read the outbox depth"))?;
        Ok(OutboxDepth {
            due: r.get::<_, i64>(0) as u64,
            leased: r.get::<_, i64>(1) as u64,
            dead_letters: r.get::<_, i64>(2) as u64,
        })
    }

    async fn event_deliveries(&self, event_id: &str) -> Result<EventDeliveries> {
        let client = self.client().await?;
        let err = || pg_err("read an event's deliveries");
        let pending = client
            .query(
                concat!(
                    "SELECT id, binding_id, fingerprint, attempts, ",
                    next_attempt_sql!(),
                    ", lease_token, errors::TEXT FROM outbox WHERE event_id = $1 ORDER BY id"
                ),
                &[&event_id],
            )
            .await
            .map_err(err())?
            .iter()
            .map(|r| PendingRow {
                id: r.get(0),
                binding_id: r.get(1),
                fingerprint: r.get(2),
                attempts: to_u32(r.get::<_, i32>(3).into()),
                next_attempt_at_ms: r.get(4),
                leased: r.get::<_, Option<i64>>(5).is_some(),
                errors: rows::parse_errors(r.get(6)),
            })
            .collect();
        let queued = client
            .query(
                "SELECT id, queue, binding_id, fingerprint, receives, visible_at, receipt
                 FROM queue_messages WHERE event_id = $1 ORDER BY id",
                &[&event_id],
            )
            .await
            .map_err(err())?
            .iter()
            .map(|r| QueuedMessage {
                id: r.get(0),
                queue: r.get(1),
                binding_id: r.get(2),
                fingerprint: r.get(3),
                receives: to_u32(r.get::<_, i32>(4).into()),
                visible_at_ms: r.get(5),
                received: r.get::<_, Option<i64>>(6).is_some(),
            })
            .collect();
        let dead = client
            .query(
                &format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE event_id = $1 ORDER BY id"
                ),
                &[&event_id],
            )
            .await
            .map_err(err())?
            .iter()
            .map(row_to_dead_letter)
            .collect();
        let runs = client
            .query(
                "SELECT binding_id, event_id, started_at, duration_ms, status, error, abandoned,
                    fingerprint FROM trigger_runs WHERE event_id = $1 ORDER BY id",
                &[&event_id],
            )
            .await
            .map_err(err())?
            .iter()
            .map(|r| RunRecord {
                binding_id: r.get(0),
                event_id: r.get(1),
                started_at_ms: r.get(2),
                duration_ms: r.get(3),
                status: r.get(4),
                error: r.get(5),
                abandoned: r.get(6),
                fingerprint: r.get(7),
            })
            .collect();
        Ok(EventDeliveries {
            pending,
            queued,
            dead,
            runs,
        })
    }

    async fn dead_letter(&self, id: i64) -> Result<Option<DeadLetter>> {
        let client = self.client().await?;
        let sql = format!("SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE id = $1");
        let found = client
            .query_opt(&sql, &[&id])
            .await
            .map_err(pg_err("read a dead letter"))?;
        Ok(found.as_ref().map(row_to_dead_letter))
    }

    async fn replay(&self, id: i64, now_ms: i64, fingerprint: Option<&str>) -> Result<Option<i64>> {
        let client = self.client().await?;
        let stmt = prepared(&client, REPLAY).await?;
        let row = client
            .query_one(&stmt, &[&id, &now_ms, &fingerprint])
            .await
            .map_err(pg_err("replay a dead letter"))?;
        Ok(row.get(0))
    }

    async fn enqueue_rows(&self, event_id: &str, rows: Vec<Enqueue>, now_ms: i64) -> Result<u64> {
        let mut client = self.client().await?;
        let insert = prepared(&client, INSERT_ROWS).await?;
        let bad = pg_err("enqueue rows for an event");
        let tx = client.transaction().await.map_err(&bad)?;
        let stored: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM events WHERE id = $1)",
                &[&event_id],
            )
            .await
            .map_err(&bad)?
            .get(0);
        if !stored {
            return Ok(0);
        }
        let rows: Vec<(String, Enqueue)> =
            rows.into_iter().map(|r| (event_id.to_owned(), r)).collect();
        insert_rows(&tx, &insert, &rows, now_ms)
            .await
            .map_err(&bad)?;
        tx.commit().await.map_err(&bad)?;
        Ok(rows.len() as u64)
    }

    /// One receipt per receive (as one token per claim): it fences this receiver's
    /// acks against a later receiver's.
    async fn receive(&self, req: &ReceiveRequest) -> Result<ReceiveOutcome> {
        if req.max == 0 {
            return Ok(ReceiveOutcome::default());
        }
        let receipt: i64 = rand::random();
        let error = rows::max_receives_error(req.max_receives, req.max_receives, req.now_ms);
        let client = self.client().await?;
        let stmt = prepared(&client, queues::RECEIVE).await?;
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
        let mut out = ReceiveOutcome::default();
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

    async fn ack(&self, queue: &str, id: i64, receipt: i64) -> Result<bool> {
        let client = self.client().await?;
        let stmt = prepared(&client, queues::ACK).await?;
        let n = client
            .execute(&stmt, &[&queue, &id, &receipt])
            .await
            .map_err(pg_err("ack a queue message"))?;
        Ok(n == 1)
    }

    async fn nack(&self, queue: &str, id: i64, receipt: i64, visible_at_ms: i64) -> Result<bool> {
        let client = self.client().await?;
        let stmt = prepared(&client, queues::NACK).await?;
        let row = client
            .query_one(&stmt, &[&queue, &id, &receipt, &visible_at_ms])
            .await
            .map_err(pg_err("nack a queue message"))?;
        Ok(row.get::<_, i64>(0) == 1)
    }

    async fn record_run(&self, run: &RunRecord) -> Result<()> {
        let client = self.client().await?;
        let stmt = prepared(&client, queues::INSERT_RUN).await?;
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
                    &run.fingerprint,
                ],
            )
            .await
            .map(drop)
            .map_err(pg_err("record a run"))
    }

    async fn runs(&self, binding_id: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let client = self.client().await?;
        let found = client
            .query(queues::SELECT_RUNS, &[&binding_id, &(limit as i64)])
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
                fingerprint: r.get(7),
            })
            .collect())
    }

    /// Dead letters and run records first (so the events only they referenced go in
    /// the same sweep), then the events nothing references, `chunk` rows per statement.
    async fn expire(&self, before_ms: i64, chunk: usize) -> Result<Expired> {
        let chunk = chunk.max(1) as i64;
        let client = self.client().await?;
        let mut expired = Expired::default();
        for (table, column, count) in [
            ("dead_letters", "dead_at", &mut expired.dead_letters),
            ("trigger_runs", "started_at", &mut expired.runs),
            ("superseded", "at", &mut expired.superseded),
            ("backfilled", "at", &mut expired.backfilled),
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
        let stmt = prepared(&client, queues::EXPIRE_EVENTS).await?;
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

    fn wake(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::{enqueue, events, listen};

    #[test]
    fn every_notifying_statement_uses_the_channel_the_listener_listens_on() {
        let notify = format!("pg_notify('{}', '')", listen::CHANNEL);
        for sql in [
            events::APPEND_BATCH,
            RELEASE,
            enqueue::INSERT_ROWS,
            enqueue::FLOW_ROW,
            REPLAY,
            queues::NACK,
        ] {
            assert!(sql.contains(&notify), "{sql}");
        }
    }
}
