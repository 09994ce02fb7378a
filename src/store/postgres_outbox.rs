//! The outbox on PostgreSQL: [`OutboxStore`](crate::outbox::OutboxStore) for
//! [`PostgresBackend`], for several runtime processes claiming from one database.
//!
//! - A claim is ONE statement: a CTE picks the due rows `FOR UPDATE SKIP LOCKED` (so
//!   concurrent claimers in other processes skip each other's rows instead of waiting
//!   for them), and `UPDATE … FROM` stamps the lease and joins the events for the
//!   handler's context, returning everything the attempt needs in one round trip.
//! - Finishes come in batches of hundreds: each kind is one array statement
//!   (`DELETE … USING unnest(ids, tokens)` for the done ones), pipelined in one
//!   transaction; only dead letters, which are rare, are one statement each.
//! - Every write that makes rows due (ingest, release, replay, dead-letter fan-out)
//!   calls `pg_notify('switchboard_outbox', '')` in its own statement, so the
//!   wake-up ([`super::postgres_listen`]) is delivered at commit, to every process.
//!
//! The schema (migration 2, [`SCHEMA`]) has the shape of SQLite's (see
//! [`super::sqlite_outbox`] for why each table and index is there); the JSON columns are
//! `JSONB` here, so appending an error or an annotation is an SQL expression, not a
//! read-modify-write. Queues, run records and retention live in
//! [`super::postgres_queues`].

use std::sync::Arc;

use futures_util::future::{try_join, try_join4, try_join_all};
use tokio_postgres::Row;

use super::outbox_rows::{self as rows, queue_of, to_i32, to_u32};
use super::postgres::{pg_err, PostgresBackend};
use crate::error::Result;
use crate::outbox::model::{
    ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Enqueue, Expired, Finish, OutboxStats,
    ReceiveRequest, Received, RunRecord,
};

/// Migration 2: the outbox, dead letters, queues, run records and the index retention
/// needs (`events.id` is already unique, so indexed).
pub(super) const SCHEMA: &str = "CREATE INDEX events_by_received ON events (received_at, seq);
    CREATE TABLE outbox (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        ordering_key TEXT,
        depth INT NOT NULL,
        attempts INT NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        lease_token BIGINT,
        enqueued_at BIGINT NOT NULL,
        due_at BIGINT NOT NULL,
        payload BYTEA,
        dead_letter_id BIGINT,
        errors JSONB NOT NULL DEFAULT '[]'
    );
    CREATE INDEX outbox_by_due ON outbox (next_attempt_at, id);
    CREATE INDEX outbox_by_key ON outbox (binding_id, ordering_key, id)
        WHERE ordering_key IS NOT NULL;
    CREATE INDEX outbox_by_event ON outbox (event_id);
    CREATE TABLE dead_letters (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        attempts INT NOT NULL,
        errors JSONB NOT NULL,
        enqueued_at BIGINT NOT NULL,
        dead_at BIGINT NOT NULL,
        annotations JSONB NOT NULL DEFAULT '[]',
        replays INT NOT NULL DEFAULT 0,
        replayed_at BIGINT,
        queue TEXT,
        ordering_key TEXT,
        depth INT NOT NULL,
        payload BYTEA
    );
    CREATE INDEX dead_letters_by_binding ON dead_letters (binding_id, id);
    CREATE INDEX dead_letters_by_time ON dead_letters (dead_at);
    CREATE INDEX dead_letters_by_event ON dead_letters (event_id);
    CREATE TABLE queue_messages (
        id BIGSERIAL PRIMARY KEY,
        queue TEXT NOT NULL,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        depth INT NOT NULL,
        enqueued_at BIGINT NOT NULL,
        visible_at BIGINT NOT NULL,
        receives INT NOT NULL DEFAULT 0,
        receipt BIGINT,
        payload BYTEA
    );
    CREATE INDEX queue_messages_by_visibility ON queue_messages (queue, visible_at, id);
    CREATE INDEX queue_messages_by_event ON queue_messages (event_id);
    CREATE TABLE trigger_runs (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        abandoned BOOLEAN NOT NULL
    );
    CREATE INDEX trigger_runs_by_binding ON trigger_runs (binding_id, id);
    CREATE INDEX trigger_runs_by_time ON trigger_runs (started_at);";

/// Picks due head-of-line rows of the bindings, skipping rows another claimer holds
/// locked, and leases them. Returns the pre-claim due time last, for ordering.
const CLAIM: &str = "WITH picked AS (
        SELECT o.id, o.event_id, o.next_attempt_at AS was_due FROM outbox o
        WHERE o.next_attempt_at <= $1 AND o.binding_id = ANY($2::TEXT[])
            AND (o.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p
                WHERE p.binding_id = o.binding_id AND p.ordering_key = o.ordering_key
                    AND p.id < o.id))
        ORDER BY o.next_attempt_at, o.id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox o SET next_attempt_at = $4, lease_token = $5, attempts = o.attempts + 1
    FROM picked p LEFT JOIN events e ON e.id = p.event_id
    WHERE o.id = p.id
    RETURNING o.id, o.binding_id, o.fingerprint, o.event_id, COALESCE(e.source, ''),
        COALESCE(e.kind, ''), COALESCE(e.trace_id, ''), COALESCE(e.tenant, ''), o.attempts,
        o.depth, o.ordering_key, o.enqueued_at, o.due_at,
        COALESCE(o.payload, e.body, ''::BYTEA), o.dead_letter_id, o.errors::TEXT, p.was_due";

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

const EXTEND: &str = "UPDATE outbox o SET next_attempt_at = $3
    FROM unnest($1::BIGINT[], $2::BIGINT[]) AS r(id, token)
    WHERE o.id = r.id AND o.lease_token = r.token";

/// Deletes delivered rows. When one of them held an ordering key, the key's next row
/// has just become claimable, possibly by another process: notify, so it does not wait
/// for that process's poll.
const FINISH_DONE: &str = "WITH gone AS (
        DELETE FROM outbox o USING unnest($1::BIGINT[], $2::BIGINT[]) AS d(id, token)
        WHERE o.id = d.id AND o.lease_token = d.token
        RETURNING o.ordering_key
    ), woke AS (
        SELECT pg_notify('switchboard_outbox', '') FROM gone
        WHERE ordering_key IS NOT NULL LIMIT 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woke)";

const FINISH_RETRY: &str = "UPDATE outbox o SET next_attempt_at = r.at, due_at = r.at,
        lease_token = NULL, errors = o.errors || jsonb_build_array(r.error::JSONB)
    FROM unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[], $4::TEXT[]) AS r(id, token, at, error)
    WHERE o.id = r.id AND o.lease_token = r.token";

/// Deletes the dead-letter handlers' rows and appends their notes to the dead letters
/// they reported, several notes to one dead letter in order.
const FINISH_ANNOTATE: &str = "WITH gone AS (
        DELETE FROM outbox o
        USING unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[], $4::TEXT[])
            WITH ORDINALITY AS a(id, token, dead_letter_id, note, n)
        WHERE o.id = a.id AND o.lease_token = a.token
        RETURNING a.dead_letter_id, a.note, a.n
    ), noted AS (
        UPDATE dead_letters d SET annotations = d.annotations || g.notes
        FROM (SELECT dead_letter_id, jsonb_agg(to_jsonb(note) ORDER BY n) AS notes
              FROM gone GROUP BY dead_letter_id) AS g
        WHERE d.id = g.dead_letter_id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM noted)";

/// Moves one row to the dead letters; returns the dead letter and the payload its last
/// attempt delivered (for the fan-out rows).
const FINISH_DEAD: &str = "WITH gone AS (
        DELETE FROM outbox WHERE id = $1 AND lease_token = $2
        RETURNING binding_id, fingerprint, event_id, ordering_key, depth, attempts,
            enqueued_at, payload, errors
    ), dead AS (
        INSERT INTO dead_letters (binding_id, fingerprint, event_id, trace_id, attempts, errors,
            enqueued_at, dead_at, ordering_key, depth, payload)
        SELECT g.binding_id, g.fingerprint, g.event_id, COALESCE(e.trace_id, ''), g.attempts,
            g.errors || jsonb_build_array($3::TEXT::JSONB), g.enqueued_at, $4, g.ordering_key,
            g.depth, g.payload
        FROM gone g LEFT JOIN events e ON e.id = g.event_id
        RETURNING id, binding_id, fingerprint, event_id, trace_id, attempts, errors,
            enqueued_at, payload
    )
    SELECT d.id, d.binding_id, d.fingerprint, d.event_id, d.trace_id, d.attempts,
        d.errors::TEXT, d.enqueued_at, COALESCE(d.payload, e.body, ''::BYTEA)
    FROM dead d LEFT JOIN events e ON e.id = d.event_id";

/// Inserts rows given as arrays (dead-letter fan-out) into the outbox or their queues.
const INSERT_ROWS: &str = "WITH fan AS (
        SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::INT[],
            $6::TEXT[], $7::BIGINT[], $8::BYTEA[], $9::BIGINT[])
        WITH ORDINALITY AS f(event_id, binding_id, fingerprint, ordering_key, depth, queue,
            not_before, payload, dead_letter_id, n)
    ), dispatched AS (
        INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
            next_attempt_at, enqueued_at, due_at, payload, dead_letter_id)
        SELECT binding_id, fingerprint, event_id, ordering_key, depth,
            COALESCE(not_before, $10), $10, COALESCE(not_before, $10), payload, dead_letter_id
        FROM fan WHERE queue IS NULL ORDER BY n
        RETURNING 1
    ), queued AS (
        INSERT INTO queue_messages (queue, binding_id, fingerprint, event_id, depth,
            enqueued_at, visible_at, payload)
        SELECT queue, binding_id, fingerprint, event_id, depth, $10, COALESCE(not_before, $10),
            payload
        FROM fan WHERE queue IS NOT NULL ORDER BY n
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '')
        FROM (SELECT 1 FROM dispatched UNION ALL SELECT 1 FROM queued LIMIT 1) AS any_row
    )
    SELECT (SELECT count(*) FROM notified)";

/// The earliest `next_attempt_at` of the head-of-line rows (see
/// [`super::sqlite_outbox`] for why held rows are left out).
const NEXT_DUE: &str = "SELECT min(o.next_attempt_at) FROM outbox o
    WHERE o.binding_id = ANY($1::TEXT[])
        AND (o.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p
            WHERE p.binding_id = o.binding_id AND p.ordering_key = o.ordering_key
                AND p.id < o.id))";

const STATS_OUTBOX: &str = "SELECT binding_id, count(*) FILTER (WHERE next_attempt_at <= $1),
        count(*) FILTER (WHERE lease_token IS NOT NULL AND next_attempt_at > $1),
        count(*) FILTER (WHERE lease_token IS NULL AND next_attempt_at > $1),
        min(enqueued_at)
    FROM outbox GROUP BY binding_id";
const STATS_QUEUES: &str = "SELECT queue, count(*) FILTER (WHERE visible_at <= $1),
        count(*) FILTER (WHERE receipt IS NOT NULL AND visible_at > $1),
        count(*) FILTER (WHERE receipt IS NULL AND visible_at > $1),
        min(enqueued_at)
    FROM queue_messages GROUP BY queue";
const STATS_DEAD: &str =
    "SELECT binding_id, queue, count(*) FROM dead_letters GROUP BY binding_id, queue";

const DEAD_LETTER_COLUMNS: &str = "id, binding_id, fingerprint, event_id, trace_id, attempts,
    errors::TEXT, enqueued_at, dead_at, annotations::TEXT, replays, replayed_at, queue";

/// Counts the replay, and enqueues the dead letter's row (or queue message) again.
const REPLAY: &str = "WITH dl AS (
        UPDATE dead_letters SET replays = replays + 1, replayed_at = $2 WHERE id = $1
        RETURNING binding_id, fingerprint, event_id, ordering_key, depth, payload, queue
    ), dispatched AS (
        INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
            next_attempt_at, enqueued_at, due_at, payload)
        SELECT binding_id, fingerprint, event_id, ordering_key, depth, $2, $2, $2, payload
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

/// Rows to enqueue as parallel arrays, for [`INSERT_ROWS`] and the ingest batch
/// statement. Each row names its event by id (`event_ids`) or, in the ingest batch, by
/// its position in that statement's input arrays (`event_ords`).
#[derive(Default)]
pub(super) struct EnqueueColumns<'a> {
    pub(super) event_ords: Vec<i64>,
    pub(super) event_ids: Vec<&'a str>,
    pub(super) binding_ids: Vec<&'a str>,
    pub(super) fingerprints: Vec<&'a str>,
    pub(super) ordering_keys: Vec<Option<&'a str>>,
    pub(super) depths: Vec<i32>,
    pub(super) queues: Vec<Option<&'a str>>,
    pub(super) not_before: Vec<Option<i64>>,
    pub(super) payloads: Vec<Option<&'a [u8]>>,
    pub(super) dead_letter_ids: Vec<Option<i64>>,
}

impl<'a> EnqueueColumns<'a> {
    fn push(&mut self, row: &'a Enqueue) {
        self.binding_ids.push(&row.binding_id);
        self.fingerprints.push(&row.fingerprint);
        self.ordering_keys.push(row.ordering_key.as_deref());
        self.depths.push(to_i32(row.depth));
        self.queues.push(queue_of(row));
        self.not_before.push(row.not_before_ms);
        self.payloads.push(row.payload.as_deref());
        self.dead_letter_ids.push(row.dead_letter_id);
    }

    /// Adds the rows of the event at 1-based position `ordinal` of the ingest batch.
    pub(super) fn push_for_ordinal(&mut self, ordinal: i64, rows: &'a [Enqueue]) {
        for row in rows {
            self.event_ords.push(ordinal);
            self.push(row);
        }
    }

    fn push_for_event(&mut self, event_id: &'a str, row: &'a Enqueue) {
        self.event_ids.push(event_id);
        self.push(row);
    }
}

fn claimed_row(r: &Row, token: i64) -> (i64, ClaimedRow) {
    let row = ClaimedRow {
        id: r.get(0),
        token,
        binding_id: r.get(1),
        fingerprint: r.get(2),
        event_id: r.get(3),
        source: r.get(4),
        kind: r.get(5),
        trace_id: r.get(6),
        tenant: r.get(7),
        attempt: to_u32(r.get::<_, i32>(8).into()),
        depth: to_u32(r.get::<_, i32>(9).into()),
        ordering_key: r.get(10),
        enqueued_at_ms: r.get(11),
        due_at_ms: r.get(12),
        payload: r.get(13),
        dead_letter_id: r.get(14),
        errors: rows::parse_errors(r.get(15)),
    };
    (r.get(16), row)
}

fn row_to_dead_letter(r: &Row) -> DeadLetter {
    DeadLetter {
        id: r.get(0),
        binding_id: r.get(1),
        fingerprint: r.get(2),
        event_id: r.get(3),
        trace_id: r.get(4),
        attempts: to_u32(r.get::<_, i32>(5).into()),
        errors: rows::parse_errors(r.get(6)),
        enqueued_at_ms: r.get(7),
        dead_at_ms: r.get(8),
        annotations: rows::parse_annotations(r.get(9)),
        replays: to_u32(r.get::<_, i32>(10).into()),
        replayed_at_ms: r.get(11),
        queue: r.get(12),
    }
}

/// A batch of finishes, split by kind into the arrays of their statements.
#[derive(Default)]
struct FinishBatch {
    done: (Vec<i64>, Vec<i64>),
    retry: (Vec<i64>, Vec<i64>, Vec<i64>, Vec<String>),
    annotate: (Vec<i64>, Vec<i64>, Vec<i64>, Vec<String>),
    /// (id, token, error JSON, fan-out rows).
    dead: Vec<(i64, i64, String, Vec<Enqueue>)>,
}

impl FinishBatch {
    fn of(finishes: Vec<Finish>) -> FinishBatch {
        let mut b = FinishBatch::default();
        for f in finishes {
            match f {
                Finish::Done { id, token } => {
                    b.done.0.push(id);
                    b.done.1.push(token);
                }
                Finish::Retry {
                    id,
                    token,
                    at_ms,
                    error,
                } => {
                    b.retry.0.push(id);
                    b.retry.1.push(token);
                    b.retry.2.push(at_ms);
                    b.retry.3.push(rows::error_json(&error));
                }
                Finish::Annotate {
                    id,
                    token,
                    dead_letter_id,
                    binding_id,
                    error,
                } => {
                    b.annotate.0.push(id);
                    b.annotate.1.push(token);
                    b.annotate.2.push(dead_letter_id);
                    b.annotate.3.push(rows::annotation(&binding_id, &error));
                }
                Finish::DeadLetter {
                    id,
                    token,
                    error,
                    fanout,
                } => b.dead.push((id, token, rows::error_json(&error), fanout)),
            }
        }
        b
    }
}

impl PostgresBackend {
    async fn finish_batch(&self, finishes: Vec<Finish>, now_ms: i64) -> Result<u64> {
        let b = FinishBatch::of(finishes);
        let mut client = self.client().await?;
        let (done, retry, annotate, dead, insert) = futures_util::try_join!(
            client.prepare_cached(FINISH_DONE),
            client.prepare_cached(FINISH_RETRY),
            client.prepare_cached(FINISH_ANNOTATE),
            client.prepare_cached(FINISH_DEAD),
            client.prepare_cached(INSERT_ROWS),
        )
        .map_err(pg_err("prepare finish"))?;
        let owned_tx = client.transaction().await.map_err(pg_err("begin finish"))?;
        let tx = &owned_tx;
        // Every kind is sent at once (pipelined); each is skipped when empty.
        let dones = async {
            if b.done.0.is_empty() {
                return Ok(0);
            }
            let row = tx.query_one(&done, &[&b.done.0, &b.done.1]).await?;
            Ok(row.get::<_, i64>(0) as u64)
        };
        let retries = async {
            if b.retry.0.is_empty() {
                return Ok(0);
            }
            let r = &b.retry;
            tx.execute(&retry, &[&r.0, &r.1, &r.2, &r.3]).await
        };
        let annotated = async {
            if b.annotate.0.is_empty() {
                return Ok(0);
            }
            let a = &b.annotate;
            let row = tx.query_one(&annotate, &[&a.0, &a.1, &a.2, &a.3]).await?;
            Ok(row.get::<_, i64>(0) as u64)
        };
        let deads = try_join_all(b.dead.iter().map(|(id, token, error, _)| {
            let dead = &dead;
            async move {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [id, token, error, &now_ms];
                tx.query_opt(dead, &params).await
            }
        }));
        let (dones, retries, annotated, deads) = try_join4(dones, retries, annotated, deads)
            .await
            .map_err(pg_err("finish outbox rows"))?;
        let mut applied = dones + retries + annotated;
        let mut fanout = Vec::new();
        for ((_, _, _, rows_for), row) in b.dead.into_iter().zip(deads) {
            let Some(row) = row else { continue };
            applied += 1;
            let dl = DeadLetter {
                id: row.get(0),
                binding_id: row.get(1),
                fingerprint: row.get(2),
                event_id: row.get(3),
                trace_id: row.get(4),
                attempts: to_u32(row.get::<_, i32>(5).into()),
                errors: rows::parse_errors(row.get(6)),
                enqueued_at_ms: row.get(7),
                dead_at_ms: now_ms,
                annotations: Vec::new(),
                replays: 0,
                replayed_at_ms: None,
                queue: None,
            };
            let delivered: Vec<u8> = row.get(8);
            let ready = rows::fanout_rows(rows_for, &dl, &delivered);
            fanout.extend(ready.into_iter().map(|r| (dl.event_id.clone(), r)));
        }
        if !fanout.is_empty() {
            let mut c = EnqueueColumns::default();
            for (event_id, row) in &fanout {
                c.push_for_event(event_id, row);
            }
            tx.query_one(
                &insert,
                &[
                    &c.event_ids,
                    &c.binding_ids,
                    &c.fingerprints,
                    &c.ordering_keys,
                    &c.depths,
                    &c.queues,
                    &c.not_before,
                    &c.payloads,
                    &c.dead_letter_ids,
                    &now_ms,
                ],
            )
            .await
            .map_err(pg_err("enqueue dead-letter handlers"))?;
        }
        owned_tx.commit().await.map_err(pg_err("commit finish"))?;
        Ok(applied)
    }

    /// `sql` prepared on `client`, once per pooled connection: the dispatcher and the
    /// queue consumers repeat these statements many times a second, and an unprepared
    /// statement costs a second round trip (parse and describe) every time.
    pub(super) async fn prepared(
        client: &deadpool_postgres::Object,
        sql: &str,
    ) -> Result<tokio_postgres::Statement> {
        client
            .prepare_cached(sql)
            .await
            .map_err(pg_err("prepare an outbox statement"))
    }

    /// Splits (id, token) pairs into the two arrays the statements take.
    fn pairs(rows: &[(i64, i64)]) -> (Vec<i64>, Vec<i64>) {
        rows.iter().copied().unzip()
    }
}

#[async_trait::async_trait]
impl crate::outbox::OutboxStore for PostgresBackend {
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedRow>> {
        if req.bindings.is_empty() || req.limit == 0 {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let stmt = Self::prepared(&client, CLAIM).await?;
        let found = client
            .query(
                &stmt,
                &[
                    &req.now_ms,
                    &req.bindings,
                    &(req.limit as i64),
                    &req.lease_until_ms,
                    &req.token,
                ],
            )
            .await
            .map_err(pg_err("claim outbox rows"))?;
        let mut claimed: Vec<(i64, ClaimedRow)> =
            found.iter().map(|r| claimed_row(r, req.token)).collect();
        // RETURNING has no order; the contract's is (due, id).
        claimed.sort_by_key(|(was_due, row)| (*was_due, row.id));
        Ok(claimed.into_iter().map(|(_, row)| row).collect())
    }

    async fn release(&self, rows: &[(i64, i64)], now_ms: i64) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (ids, tokens) = Self::pairs(rows);
        let client = self.client().await?;
        let stmt = Self::prepared(&client, RELEASE).await?;
        let row = client
            .query_one(&stmt, &[&ids, &tokens, &now_ms])
            .await
            .map_err(pg_err("release outbox rows"))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    async fn extend(&self, rows: &[(i64, i64)], until_ms: i64) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (ids, tokens) = Self::pairs(rows);
        let client = self.client().await?;
        let stmt = Self::prepared(&client, EXTEND).await?;
        client
            .execute(&stmt, &[&ids, &tokens, &until_ms])
            .await
            .map_err(pg_err("extend outbox leases"))
    }

    async fn finish(&self, finishes: Vec<Finish>, now_ms: i64) -> Result<u64> {
        if finishes.is_empty() {
            return Ok(0);
        }
        self.finish_batch(finishes, now_ms).await
    }

    async fn next_due_ms(&self, bindings: &[String]) -> Result<Option<i64>> {
        if bindings.is_empty() {
            return Ok(None);
        }
        let client = self.client().await?;
        let stmt = Self::prepared(&client, NEXT_DUE).await?;
        let row = client
            .query_one(&stmt, &[&bindings])
            .await
            .map_err(pg_err("read the next due time"))?;
        Ok(row.get(0))
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
        Ok(rows::assemble_stats(
            now_ms,
            depth(outbox),
            depth(queues),
            dead,
        ))
    }

    async fn dead_letters(&self, query: &DeadLetterQuery) -> Result<Vec<DeadLetter>> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
             WHERE ($1::TEXT IS NULL OR binding_id = $1) AND ($2::BIGINT IS NULL OR id < $2)
             ORDER BY id DESC LIMIT $3"
        );
        let found = client
            .query(
                &sql,
                &[&query.binding_id, &query.before_id, &(query.limit as i64)],
            )
            .await
            .map_err(pg_err("read dead letters"))?;
        Ok(found.iter().map(row_to_dead_letter).collect())
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

    async fn replay(&self, id: i64, now_ms: i64) -> Result<Option<i64>> {
        let client = self.client().await?;
        let stmt = Self::prepared(&client, REPLAY).await?;
        let row = client
            .query_one(&stmt, &[&id, &now_ms])
            .await
            .map_err(pg_err("replay a dead letter"))?;
        Ok(row.get(0))
    }

    async fn receive(&self, req: &ReceiveRequest) -> Result<Received> {
        self.receive_messages(req).await
    }

    async fn ack(&self, queue: &str, id: i64, receipt: i64) -> Result<bool> {
        self.ack_message(queue, id, receipt).await
    }

    async fn nack(&self, queue: &str, id: i64, receipt: i64, visible_at_ms: i64) -> Result<bool> {
        self.nack_message(queue, id, receipt, visible_at_ms).await
    }

    async fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.insert_run(run).await
    }

    async fn runs(&self, binding_id: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        self.read_runs(binding_id, limit).await
    }

    async fn expire(&self, before_ms: i64, chunk: usize) -> Result<Expired> {
        self.expire_before(before_ms, chunk).await
    }

    fn wake(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_notifying_statement_uses_the_channel_the_listener_listens_on() {
        let notify = format!("pg_notify('{}', '')", rows::CHANNEL);
        for sql in [
            super::super::postgres::APPEND_BATCH,
            RELEASE,
            INSERT_ROWS,
            REPLAY,
            super::super::postgres_queues::NACK,
        ] {
            assert!(sql.contains(&notify), "{sql}");
        }
    }
}
