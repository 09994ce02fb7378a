//! The outbox on SQLite: [`OutboxStore`] for [`SqliteBackend`], and the rows the
//! ingest write creates beside an event ([`Enqueuer`], used by the group commit).
//!
//! SQLite has one writer, so a claim needs no row locks: it is a select and an update
//! in one `IMMEDIATE` transaction on the writer connection, which the group commit
//! also writes through; no second claimer can run between the two. A claim commits
//! without an fsync even under `synchronous = FULL` (see `claim` for why that loses
//! nothing); every other write keeps the configured level. Reads (stats, dead
//! letters, run records, the next due time) use the reader connection and never wait
//! for the writer (WAL). Queues, run records and retention live in
//! [`super::sqlite_queues`].
//!
//! Schema (migration 2, [`SCHEMA`]), the same shape as PostgreSQL's:
//! - `outbox`: one row per pending delivery. `next_attempt_at` is both the schedule and
//!   the lease (a claim moves it to the lease's end), so one index,
//!   `(next_attempt_at, id)`, serves the claim, and a crashed claimer's rows are due
//!   again when its lease ends. `due_at` keeps when the current attempt became due, for
//!   latency; `payload` overrides the event body (dead-letter fan-out rows); `errors`
//!   is a JSON array of [`crate::outbox::model::AttemptError`]. A partial index on
//!   `(binding_id, ordering_key, id)` answers "is there an earlier row of this key".
//! - `dead_letters`: the exhausted rows with their history, and what a replay needs
//!   (ordering key, depth, payload, the queue of a queue message).
//! - `queue_messages`: pulled by consumers; `visible_at` is their lease as
//!   `next_attempt_at` is the outbox's. Beyond the suggested shape they keep the
//!   binding's `fingerprint` and an optional `payload`, so a queue message's dead
//!   letter is as complete as an outbox row's and a dead-letter handler can have a
//!   queue as its destination.
//! - `trigger_runs`: the audit of synchronous invocations.
//! - indexes on `events (id)` (the claim joins outbox rows to their events; event ids
//!   start with the receive time, so the index grows at its right edge) and
//!   `events (received_at)` (retention), and on `event_id` of the three tables that
//!   reference events (retention keeps what they reference).
//!
//! [`crate::outbox::OutboxStore::next_due_ms`] leaves out rows held behind an earlier
//! row of their ordering key: such a row may be due already, and counting it would
//! wake the dispatcher in a loop for a row no claim can take; it becomes claimable
//! when its head is finished, by the dispatcher that then claims again.
//!
//! Ids are `AUTOINCREMENT`, never reused: a stale finish naming the id of a deleted
//! row can then never hit a newer row, and "a lower id was enqueued earlier" holds.

use std::sync::Arc;

use rusqlite::{params, CachedStatement, Connection, OptionalExtension, TransactionBehavior};

use super::outbox_rows::{self as rows, due_at, queue_of, to_i32, to_u32};
use super::sqlite::{sql_err, SqliteBackend, Synchronous};
use crate::error::Result;
use crate::outbox::model::{
    AttemptError, ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Enqueue, Expired, Finish,
    OutboxStats, ReceiveRequest, Received, RunRecord,
};

/// Migration 2: the outbox, dead letters, queues, run records and the indexes
/// retention needs. See the module doc for why each piece is there.
pub(super) const SCHEMA: &str = "CREATE INDEX events_by_id ON events (id);
    CREATE INDEX events_by_received ON events (received_at);
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        ordering_key TEXT,
        depth INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        lease_token INTEGER,
        enqueued_at INTEGER NOT NULL,
        due_at INTEGER NOT NULL,
        payload BLOB,
        dead_letter_id INTEGER,
        errors TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX outbox_by_due ON outbox (next_attempt_at, id);
    CREATE INDEX outbox_by_key ON outbox (binding_id, ordering_key, id)
        WHERE ordering_key IS NOT NULL;
    CREATE INDEX outbox_by_event ON outbox (event_id);
    CREATE TABLE dead_letters (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        errors TEXT NOT NULL,
        enqueued_at INTEGER NOT NULL,
        dead_at INTEGER NOT NULL,
        annotations TEXT NOT NULL DEFAULT '[]',
        replays INTEGER NOT NULL DEFAULT 0,
        replayed_at INTEGER,
        queue TEXT,
        ordering_key TEXT,
        depth INTEGER NOT NULL,
        payload BLOB
    );
    CREATE INDEX dead_letters_by_binding ON dead_letters (binding_id, id);
    CREATE INDEX dead_letters_by_time ON dead_letters (dead_at);
    CREATE INDEX dead_letters_by_event ON dead_letters (event_id);
    CREATE TABLE queue_messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        depth INTEGER NOT NULL,
        enqueued_at INTEGER NOT NULL,
        visible_at INTEGER NOT NULL,
        receives INTEGER NOT NULL DEFAULT 0,
        receipt INTEGER,
        payload BLOB
    );
    CREATE INDEX queue_messages_by_visibility ON queue_messages (queue, visible_at, id);
    CREATE INDEX queue_messages_by_event ON queue_messages (event_id);
    CREATE TABLE trigger_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        abandoned INTEGER NOT NULL
    );
    CREATE INDEX trigger_runs_by_binding ON trigger_runs (binding_id, id);
    CREATE INDEX trigger_runs_by_time ON trigger_runs (started_at);";

const INSERT_ROW: &str = "INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key,
    depth, next_attempt_at, enqueued_at, due_at, payload, dead_letter_id)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?8, ?9)";
const INSERT_MESSAGE: &str = "INSERT INTO queue_messages (queue, binding_id, fingerprint,
    event_id, depth, enqueued_at, visible_at, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// "No earlier row of the same binding and ordering key": the head-of-line rule.
const IS_HEAD: &str = "(o.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p
    WHERE p.binding_id = o.binding_id AND p.ordering_key = o.ordering_key AND p.id < o.id))";

fn claim_select() -> String {
    format!(
        "SELECT o.id, o.binding_id, o.fingerprint, o.event_id, COALESCE(e.source, ''),
            COALESCE(e.kind, ''), COALESCE(e.trace_id, ''), COALESCE(e.tenant, ''),
            o.attempts, o.depth, o.ordering_key, o.enqueued_at, o.due_at,
            COALESCE(o.payload, switchboard_body(e.body_codec, e.body), X''), o.dead_letter_id, o.errors
        FROM outbox o LEFT JOIN events e ON e.id = o.event_id
        WHERE o.next_attempt_at <= ?1 AND o.binding_id IN (SELECT value FROM json_each(?2))
            AND {IS_HEAD}
        ORDER BY o.next_attempt_at, o.id LIMIT ?3"
    )
}

/// Creates the outbox rows and queue messages of appended events, inside the group
/// commit's transaction, with statements prepared once per connection.
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

/// While alive, the connection commits without syncing (`synchronous = NORMAL`);
/// dropping it puts `FULL` back. Created before a transaction and dropped after it
/// ends (committed or rolled back), as SQLite only changes the level between
/// transactions.
struct UnsyncedCommits<'c>(&'c Connection);

impl<'c> UnsyncedCommits<'c> {
    fn start(c: &'c Connection) -> rusqlite::Result<UnsyncedCommits<'c>> {
        c.execute_batch("PRAGMA synchronous = NORMAL")?;
        Ok(UnsyncedCommits(c))
    }
}

impl Drop for UnsyncedCommits<'_> {
    fn drop(&mut self) {
        // Outside a transaction this cannot fail but on a broken connection, on which
        // every later write fails too.
        if let Err(e) = self.0.execute_batch("PRAGMA synchronous = FULL") {
            tracing::error!(error = %e, "cannot restore synchronous = FULL on the SQLite writer");
        }
    }
}

/// Claims under `synchronous = NORMAL` when the writer runs `FULL`, so a claim's commit
/// skips its fsync. A claim need not survive power loss: a lost claim leaves its rows
/// unclaimed (due, their attempt not counted), and the handlers that ran meanwhile
/// make it a redelivery, which at-least-once delivery allows and which a crashed
/// dispatcher's expired lease causes anyway. A process crash loses nothing (the commit
/// is in the WAL, in the OS's cache), so an attempt that crashes the process still
/// counts. The WAL is written in order, so the next synced commit (a finish, an
/// ingest batch) or checkpoint makes the claim durable too. Finishes, ingest and
/// everything else keep `FULL`.
///
/// Measured (`benches/dispatch.rs`, no-op handler, 100k rows, six alternating runs on
/// 2 cores): 40–47k rows/s (median 44k) with the claim synced, 49–56k (median 54k)
/// without; the writer's fsyncs per claimed batch go from two (claim, finish) to one.
fn claim(
    c: &mut Connection,
    req: &ClaimRequest,
    sync: Synchronous,
) -> rusqlite::Result<Vec<ClaimedRow>> {
    let unsynced = match sync {
        Synchronous::Full => Some(UnsyncedCommits::start(c)?),
        Synchronous::Normal => None,
    };
    let claimed = claim_rows(c, req);
    drop(unsynced);
    claimed
}

fn claim_rows(c: &Connection, req: &ClaimRequest) -> rusqlite::Result<Vec<ClaimedRow>> {
    let tx = rusqlite::Transaction::new_unchecked(c, TransactionBehavior::Immediate)?;
    let bindings = serde_json::to_string(&req.bindings).unwrap_or_else(|_| "[]".into());
    let claimed = {
        let mut select = tx.prepare_cached(&claim_select())?;
        let mut update = tx.prepare_cached(
            "UPDATE outbox SET next_attempt_at = ?1, lease_token = ?2, attempts = attempts + 1
             WHERE id = ?3",
        )?;
        let found = select
            .query_map(params![req.now_ms, bindings, req.limit as i64], |r| {
                Ok(ClaimedRow {
                    id: r.get(0)?,
                    token: req.token,
                    binding_id: r.get(1)?,
                    fingerprint: r.get(2)?,
                    event_id: r.get(3)?,
                    source: r.get(4)?,
                    kind: r.get(5)?,
                    trace_id: r.get(6)?,
                    tenant: r.get(7)?,
                    attempt: to_u32(r.get::<_, i64>(8)? + 1),
                    depth: to_u32(r.get(9)?),
                    ordering_key: r.get(10)?,
                    enqueued_at_ms: r.get(11)?,
                    due_at_ms: r.get(12)?,
                    payload: r.get(13)?,
                    dead_letter_id: r.get(14)?,
                    errors: rows::parse_errors(&r.get::<_, String>(15)?),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for row in &found {
            update.execute(params![req.lease_until_ms, req.token, row.id])?;
        }
        found
    };
    tx.commit()?;
    Ok(claimed)
}

/// Runs `sql` once per (id, token) pair in one transaction; returns rows changed.
fn per_pair(
    c: &mut Connection,
    sql: &str,
    pairs: &[(i64, i64)],
    at_ms: i64,
) -> rusqlite::Result<u64> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut n = 0;
    {
        let mut stmt = tx.prepare_cached(sql)?;
        for (id, token) in pairs {
            n += stmt.execute(params![id, token, at_ms])? as u64;
        }
    }
    tx.commit()?;
    Ok(n)
}

/// What a finish batch did: how many applied, and whether fan-out rows were created.
struct Finished {
    applied: u64,
    created: usize,
}

fn finish(c: &mut Connection, finishes: Vec<Finish>, now_ms: i64) -> rusqlite::Result<Finished> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut applied = 0;
    let created;
    {
        let mut done =
            tx.prepare_cached("DELETE FROM outbox WHERE id = ?1 AND lease_token = ?2")?;
        let mut retry = tx.prepare_cached(
            "UPDATE outbox SET next_attempt_at = ?3, due_at = ?3, lease_token = NULL,
                errors = json_insert(errors, '$[#]', json(?4))
             WHERE id = ?1 AND lease_token = ?2",
        )?;
        let mut annotate = tx.prepare_cached(
            "UPDATE dead_letters SET annotations = json_insert(annotations, '$[#]', ?2)
             WHERE id = ?1",
        )?;
        let mut enqueuer = Enqueuer::new(&tx)?;
        for f in finishes {
            match f {
                Finish::Done { id, token } => applied += done.execute(params![id, token])? as u64,
                Finish::Retry {
                    id,
                    token,
                    at_ms,
                    error,
                } => {
                    let e = rows::error_json(&error);
                    applied += retry.execute(params![id, token, at_ms, e])? as u64;
                }
                Finish::Annotate {
                    id,
                    token,
                    dead_letter_id,
                    binding_id,
                    error,
                } => {
                    if done.execute(params![id, token])? == 1 {
                        applied += 1;
                        let note = rows::annotation(&binding_id, &error);
                        annotate.execute(params![dead_letter_id, note])?;
                    }
                }
                Finish::DeadLetter {
                    id,
                    token,
                    error,
                    fanout,
                } => {
                    if let Some((dead, delivered)) = dead_letter(&tx, id, token, error, now_ms)? {
                        applied += 1;
                        let fanout = rows::fanout_rows(fanout, &dead, &delivered);
                        enqueuer.insert(&dead.event_id, &fanout, now_ms)?;
                    }
                }
            }
        }
        created = enqueuer.created;
    }
    tx.commit()?;
    Ok(Finished { applied, created })
}

/// Moves row `id` (if `token` still holds it) to the dead letters; returns the dead
/// letter and the payload its last attempt delivered.
fn dead_letter(
    tx: &Connection,
    id: i64,
    token: i64,
    error: AttemptError,
    now_ms: i64,
) -> rusqlite::Result<Option<(DeadLetter, Vec<u8>)>> {
    let gone = tx
        .prepare_cached(
            "DELETE FROM outbox WHERE id = ?1 AND lease_token = ?2 RETURNING binding_id,
                fingerprint, event_id, ordering_key, depth, attempts, enqueued_at, payload, errors",
        )?
        .query_row(params![id, token], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, Option<Vec<u8>>>(7)?,
                r.get::<_, String>(8)?,
            ))
        })
        .optional()?;
    let Some((binding_id, fingerprint, event_id, key, depth, attempts, enqueued, payload, errs)) =
        gone
    else {
        return Ok(None);
    };
    let (trace_id, body) = tx
        .prepare_cached(
            "SELECT trace_id, switchboard_body(body_codec, body) FROM events WHERE id = ?1",
        )?
        .query_row(params![event_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get(1)?))
        })
        .optional()?
        .unwrap_or_default();
    let mut errors = rows::parse_errors(&errs);
    errors.push(error);
    tx.prepare_cached(
        "INSERT INTO dead_letters (binding_id, fingerprint, event_id, trace_id, attempts, errors,
            enqueued_at, dead_at, ordering_key, depth, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        binding_id,
        fingerprint,
        event_id,
        trace_id,
        attempts,
        rows::errors_json(&errors),
        enqueued,
        now_ms,
        key,
        depth,
        payload
    ])?;
    let dead = DeadLetter {
        id: tx.last_insert_rowid(),
        binding_id,
        fingerprint,
        event_id,
        trace_id,
        attempts: to_u32(attempts),
        errors,
        enqueued_at_ms: enqueued,
        dead_at_ms: now_ms,
        annotations: Vec::new(),
        replays: 0,
        replayed_at_ms: None,
        queue: None,
    };
    Ok(Some((dead, payload.unwrap_or(body))))
}

const DEAD_LETTER_COLUMNS: &str = "id, binding_id, fingerprint, event_id, trace_id, attempts,
    errors, enqueued_at, dead_at, annotations, replays, replayed_at, queue";

fn row_to_dead_letter(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeadLetter> {
    Ok(DeadLetter {
        id: r.get(0)?,
        binding_id: r.get(1)?,
        fingerprint: r.get(2)?,
        event_id: r.get(3)?,
        trace_id: r.get(4)?,
        attempts: to_u32(r.get(5)?),
        errors: rows::parse_errors(&r.get::<_, String>(6)?),
        enqueued_at_ms: r.get(7)?,
        dead_at_ms: r.get(8)?,
        annotations: rows::parse_annotations(&r.get::<_, String>(9)?),
        replays: to_u32(r.get(10)?),
        replayed_at_ms: r.get(11)?,
        queue: r.get(12)?,
    })
}

fn replay(c: &mut Connection, id: i64, now_ms: i64) -> rusqlite::Result<Option<i64>> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = tx
        .query_row(
            "SELECT binding_id, fingerprint, event_id, ordering_key, depth, payload, queue
             FROM dead_letters WHERE id = ?1",
            params![id],
            |r| {
                Ok((
                    Enqueue {
                        binding_id: r.get(0)?,
                        fingerprint: r.get(1)?,
                        ordering_key: r.get(3)?,
                        depth: to_u32(r.get(4)?),
                        destination: match r.get::<_, Option<String>>(6)? {
                            Some(q) => crate::outbox::model::Destination::Queue(q),
                            None => crate::outbox::model::Destination::Dispatch,
                        },
                        not_before_ms: None,
                        payload: r.get(5)?,
                        dead_letter_id: None,
                    },
                    r.get::<_, String>(2)?,
                ))
            },
        )
        .optional()?;
    let Some((row, event_id)) = found else {
        return Ok(None);
    };
    Enqueuer::new(&tx)?.insert(&event_id, std::slice::from_ref(&row), now_ms)?;
    let new_id = tx.last_insert_rowid();
    tx.execute(
        "UPDATE dead_letters SET replays = replays + 1, replayed_at = ?2 WHERE id = ?1",
        params![id, now_ms],
    )?;
    tx.commit()?;
    Ok(Some(new_id))
}

fn stats(c: &mut Connection, now_ms: i64) -> rusqlite::Result<OutboxStats> {
    let depth_rows = |sql: &str| -> rusqlite::Result<Vec<rows::DepthRow>> {
        c.prepare_cached(sql)?
            .query_map(params![now_ms], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect()
    };
    let outbox = depth_rows(
        "SELECT binding_id, count(*) FILTER (WHERE next_attempt_at <= ?1),
            count(*) FILTER (WHERE lease_token IS NOT NULL AND next_attempt_at > ?1),
            count(*) FILTER (WHERE lease_token IS NULL AND next_attempt_at > ?1),
            min(enqueued_at)
         FROM outbox GROUP BY binding_id",
    )?;
    let queues = depth_rows(
        "SELECT queue, count(*) FILTER (WHERE visible_at <= ?1),
            count(*) FILTER (WHERE receipt IS NOT NULL AND visible_at > ?1),
            count(*) FILTER (WHERE receipt IS NULL AND visible_at > ?1),
            min(enqueued_at)
         FROM queue_messages GROUP BY queue",
    )?;
    let dead = c
        .prepare_cached(
            "SELECT binding_id, queue, count(*) FROM dead_letters GROUP BY binding_id, queue",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows::assemble_stats(now_ms, outbox, queues, dead))
}

#[async_trait::async_trait]
impl crate::outbox::OutboxStore for SqliteBackend {
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedRow>> {
        if req.bindings.is_empty() || req.limit == 0 {
            return Ok(Vec::new());
        }
        let req = req.clone();
        let sync = self.synchronous;
        Self::with(&self.writer, move |c| {
            claim(c, &req, sync).map_err(sql_err("claim outbox rows"))
        })
        .await
    }

    async fn release(&self, rows: &[(i64, i64)], now_ms: i64) -> Result<u64> {
        let rows = rows.to_vec();
        let n = Self::with(&self.writer, move |c| {
            per_pair(
                c,
                "UPDATE outbox SET next_attempt_at = ?3, lease_token = NULL,
                    attempts = max(attempts - 1, 0)
                 WHERE id = ?1 AND lease_token = ?2",
                &rows,
                now_ms,
            )
            .map_err(sql_err("release outbox rows"))
        })
        .await?;
        if n > 0 {
            self.wake.notify_one();
        }
        Ok(n)
    }

    async fn extend(&self, rows: &[(i64, i64)], until_ms: i64) -> Result<u64> {
        let rows = rows.to_vec();
        Self::with(&self.writer, move |c| {
            per_pair(
                c,
                "UPDATE outbox SET next_attempt_at = ?3 WHERE id = ?1 AND lease_token = ?2",
                &rows,
                until_ms,
            )
            .map_err(sql_err("extend outbox leases"))
        })
        .await
    }

    async fn finish(&self, finishes: Vec<Finish>, now_ms: i64) -> Result<u64> {
        if finishes.is_empty() {
            return Ok(0);
        }
        let done = Self::with(&self.writer, move |c| {
            finish(c, finishes, now_ms).map_err(sql_err("finish outbox rows"))
        })
        .await?;
        if done.created > 0 {
            self.wake.notify_one();
        }
        Ok(done.applied)
    }

    async fn next_due_ms(&self, bindings: &[String]) -> Result<Option<i64>> {
        let bindings = serde_json::to_string(bindings).unwrap_or_else(|_| "[]".into());
        Self::with(&self.reader, move |c| {
            c.prepare_cached(&format!(
                "SELECT min(o.next_attempt_at) FROM outbox o
                 WHERE o.binding_id IN (SELECT value FROM json_each(?1)) AND {IS_HEAD}"
            ))
            .and_then(|mut s| s.query_row(params![bindings], |r| r.get(0)))
            .map_err(sql_err("read the next due time"))
        })
        .await
    }

    async fn stats(&self, now_ms: i64) -> Result<OutboxStats> {
        Self::with(&self.reader, move |c| {
            stats(c, now_ms).map_err(sql_err("read outbox stats"))
        })
        .await
    }

    async fn dead_letters(&self, query: &DeadLetterQuery) -> Result<Vec<DeadLetter>> {
        let q = query.clone();
        Self::with(&self.reader, move |c| {
            c.prepare_cached(&format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
                 WHERE (?1 IS NULL OR binding_id = ?1) AND (?2 IS NULL OR id < ?2)
                 ORDER BY id DESC LIMIT ?3"
            ))
            .and_then(|mut s| {
                s.query_map(
                    params![q.binding_id, q.before_id, q.limit as i64],
                    row_to_dead_letter,
                )?
                .collect()
            })
            .map_err(sql_err("read dead letters"))
        })
        .await
    }

    async fn dead_letter(&self, id: i64) -> Result<Option<DeadLetter>> {
        Self::with(&self.reader, move |c| {
            c.prepare_cached(&format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE id = ?1"
            ))
            .and_then(|mut s| s.query_row(params![id], row_to_dead_letter).optional())
            .map_err(sql_err("read a dead letter"))
        })
        .await
    }

    async fn replay(&self, id: i64, now_ms: i64) -> Result<Option<i64>> {
        let new_id = Self::with(&self.writer, move |c| {
            replay(c, id, now_ms).map_err(sql_err("replay a dead letter"))
        })
        .await?;
        if new_id.is_some() {
            self.wake.notify_one();
        }
        Ok(new_id)
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
    use crate::outbox::model::ClaimRequest;
    use crate::outbox::OutboxStore;
    use crate::store::sqlite::{SqliteBackend, Synchronous};
    use crate::store::StoreOptions;

    #[tokio::test]
    async fn a_claim_leaves_the_writer_at_its_configured_sync_level() {
        let dir = tempfile::tempdir().unwrap();
        for (sync, level) in [(Synchronous::Full, 2), (Synchronous::Normal, 1)] {
            let options = StoreOptions {
                synchronous: sync,
                ..Default::default()
            };
            let path = dir.path().join(format!("{level}.db"));
            let b = SqliteBackend::open(path.to_str().unwrap(), &options)
                .await
                .unwrap();
            let req = ClaimRequest {
                now_ms: 0,
                lease_until_ms: 1,
                token: 1,
                limit: 10,
                bindings: vec!["b".into()],
            };
            assert!(b.claim(&req).await.unwrap().is_empty());
            let now: i64 = b
                .writer
                .lock()
                .unwrap()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(now, level, "{sync:?}");
        }
    }
}
