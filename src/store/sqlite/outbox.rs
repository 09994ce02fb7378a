//! [`OutboxStore`] for [`SqliteBackend`]: the one implementation of the outbox's
//! trait on SQLite, over the SQL of [`super::claim`], [`super::finish`] and
//! [`super::queues`].
//!
//! SQLite has one writer, so a claim needs no row locks (see [`super::claim`]). A claim
//! commits without an fsync even under `synchronous = FULL`; every other write keeps the
//! configured level. Reads (stats, dead letters, run records, the next due time) use the
//! reader connection and never wait for the writer (WAL). Every write that makes rows
//! or messages due wakes the dispatcher in this process.
//!
//! [`crate::outbox::OutboxStore::next_due_ms`] looks only past the claim's clock: a
//! row due already but not claimed waits for something that wakes the dispatcher (its
//! ordering key's head finishing, a permit), and counting it would wake the dispatcher
//! in a loop for a row no claim can take.

use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::enqueue::Enqueuer;
use super::events::{sqlite_arg, DIALECT};
use super::{claim, finish, queues, sql_err, SqliteBackend};
use crate::error::Result;
use crate::outbox::model::{
    ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Destination, Enqueue, EventDeliveries,
    Expired, Finish, HolderRelease, OutboxDepth, OutboxStats, PendingRow, QueuedMessage,
    ReceiveOutcome, ReceiveRequest, RunRecord,
};
use crate::outbox::OutboxStore;
use crate::store::listing;
use crate::store::outbox_rows::{self as rows, next_attempt_sql, to_u32};

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

/// The dead-letter page's SQL with only the filters `q` sets (as the events page's:
/// SQLite plans before it sees parameters, so optional terms would cost the index).
/// The binding filter walks `dead_letters_by_binding`, the others the primary key
/// newest first; the error kind is the last attempt's, read from the JSON history.
fn dead_letters_sql(q: &DeadLetterQuery) -> (String, Vec<rusqlite::types::Value>) {
    let select = format!("SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters");
    let (sql, args) = listing::dead_letters(q, &select, &DIALECT);
    (sql, args.into_iter().map(sqlite_arg).collect())
}

/// Everything the outbox holds for one event, each table read through its
/// `event_id` index.
fn event_deliveries(c: &Connection, event_id: &str) -> rusqlite::Result<EventDeliveries> {
    let pending = c
        .prepare_cached(concat!(
            "SELECT id, binding_id, fingerprint, attempts, ",
            next_attempt_sql!(),
            ", lease_token, errors FROM outbox WHERE event_id = ?1 ORDER BY id"
        ))?
        .query_map(params![event_id], |r| {
            Ok(PendingRow {
                id: r.get(0)?,
                binding_id: r.get(1)?,
                fingerprint: r.get(2)?,
                attempts: to_u32(r.get(3)?),
                next_attempt_at_ms: r.get(4)?,
                leased: r.get::<_, Option<i64>>(5)?.is_some(),
                errors: rows::parse_errors(&r.get::<_, String>(6)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let queued = c
        .prepare_cached(
            "SELECT id, queue, binding_id, fingerprint, receives, visible_at, receipt
             FROM queue_messages WHERE event_id = ?1 ORDER BY id",
        )?
        .query_map(params![event_id], |r| {
            Ok(QueuedMessage {
                id: r.get(0)?,
                queue: r.get(1)?,
                binding_id: r.get(2)?,
                fingerprint: r.get(3)?,
                receives: to_u32(r.get(4)?),
                visible_at_ms: r.get(5)?,
                received: r.get::<_, Option<i64>>(6)?.is_some(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let dead = c
        .prepare_cached(&format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE event_id = ?1 ORDER BY id"
        ))?
        .query_map(params![event_id], row_to_dead_letter)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let runs = c
        .prepare_cached(
            "SELECT binding_id, event_id, started_at, duration_ms, status, error, abandoned,
                fingerprint FROM trigger_runs WHERE event_id = ?1 ORDER BY id",
        )?
        .query_map(params![event_id], |r| {
            Ok(RunRecord {
                binding_id: r.get(0)?,
                event_id: r.get(1)?,
                started_at_ms: r.get(2)?,
                duration_ms: r.get(3)?,
                status: r.get(4)?,
                error: r.get(5)?,
                abandoned: r.get(6)?,
                fingerprint: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(EventDeliveries {
        pending,
        queued,
        dead,
        runs,
    })
}

/// Enqueues `rows` for the stored event `event_id`; 0 when it is not stored.
fn enqueue_rows(
    c: &mut Connection,
    event_id: &str,
    rows: &[Enqueue],
    now_ms: i64,
) -> rusqlite::Result<u64> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let stored: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM events WHERE id = ?1)",
        params![event_id],
        |r| r.get(0),
    )?;
    if !stored {
        return Ok(0);
    }
    let created = {
        let mut enqueuer = Enqueuer::new(&tx)?;
        enqueuer.insert(event_id, rows, now_ms)?;
        enqueuer.created
    };
    tx.commit()?;
    Ok(created as u64)
}

fn replay(
    c: &mut Connection,
    id: i64,
    now_ms: i64,
    fingerprint: Option<&str>,
) -> rusqlite::Result<Option<i64>> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = tx
        .query_row(
            "SELECT binding_id, fingerprint, event_id, ordering_key, depth, payload, queue
             FROM dead_letters WHERE id = ?1",
            params![id],
            |r| {
                Ok((
                    Enqueue {
                        ordering_key: r.get(3)?,
                        depth: to_u32(r.get(4)?),
                        destination: match r.get::<_, Option<String>>(6)? {
                            Some(q) => Destination::Queue(q),
                            None => Destination::Dispatch,
                        },
                        payload: r.get(5)?,
                        ..Enqueue::dispatch(r.get::<_, String>(0)?, r.get::<_, String>(1)?)
                    },
                    r.get::<_, String>(2)?,
                ))
            },
        )
        .optional()?;
    let Some((mut row, event_id)) = found else {
        return Ok(None);
    };
    if let Some(fp) = fingerprint {
        row.fingerprint = fp.to_owned();
    }
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
    let outbox = depth_rows(concat!(
        "SELECT binding_id, count(*) FILTER (WHERE ",
        next_attempt_sql!(),
        " <= ?1),
            count(*) FILTER (WHERE lease_token IS NOT NULL AND next_attempt_at > ?1),
            count(*) FILTER (WHERE lease_token IS NULL AND ",
        next_attempt_sql!(),
        " > ?1),
            min(enqueued_at)
         FROM outbox GROUP BY binding_id"
    ))?;
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
    let superseded = c
        .prepare_cached("SELECT binding_id, count(*) FROM superseded GROUP BY binding_id")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows::assemble_stats(
        now_ms, outbox, queues, dead, superseded,
    ))
}

#[async_trait::async_trait]
impl OutboxStore for SqliteBackend {
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedRow>> {
        if req.bindings.is_empty() || req.limit == 0 {
            return Ok(Vec::new());
        }
        let req = req.clone();
        let sync = self.synchronous;
        Self::with(&self.writer, move |c| {
            claim::claim(c, &req, sync).map_err(sql_err("claim outbox rows"))
        })
        .await
    }

    async fn release(&self, rows: &[(i64, i64)], now_ms: i64) -> Result<u64> {
        let rows = rows.to_vec();
        let n = Self::with(&self.writer, move |c| {
            claim::per_pair(
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

    async fn release_holder(&self, holder: &str, now_ms: i64) -> Result<HolderRelease> {
        let holder = holder.to_owned();
        let done = Self::with(&self.writer, move |c| {
            claim::release_holder(c, &holder, now_ms).map_err(sql_err("release a holder's rows"))
        })
        .await?;
        if done.released > 0 {
            self.wake.notify_one();
        }
        Ok(done)
    }

    async fn extend(&self, rows: &[(i64, i64)], until_ms: i64) -> Result<u64> {
        let rows = rows.to_vec();
        Self::with(&self.writer, move |c| {
            claim::per_pair(
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
            finish::finish(c, finishes, now_ms).map_err(sql_err("finish outbox rows"))
        })
        .await?;
        if done.created > 0 {
            self.wake.notify_one();
        }
        Ok(done.applied)
    }

    async fn finish_and_claim(
        &self,
        finishes: Vec<Finish>,
        now_ms: i64,
        req: &ClaimRequest,
    ) -> Result<(u64, Vec<ClaimedRow>)> {
        let req = req.clone();
        let sync = self.synchronous;
        let (done, rows) = Self::with(&self.writer, move |c| {
            claim::finish_and_claim(c, finishes, now_ms, &req, sync)
                .map_err(sql_err("finish and claim outbox rows"))
        })
        .await?;
        if done.created > 0 {
            self.wake.notify_one();
        }
        Ok((done.applied, rows))
    }

    async fn next_due_ms(&self, bindings: &[String], after_ms: i64) -> Result<Option<i64>> {
        let bindings = bindings.to_vec();
        Self::with(&self.reader, move |c| {
            next_due(c, &bindings, after_ms).map_err(sql_err("read the next due time"))
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
        let (sql, args) = dead_letters_sql(query);
        Self::with(&self.reader, move |c| {
            c.prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_map(rusqlite::params_from_iter(args), row_to_dead_letter)?
                        .collect()
                })
                .map_err(sql_err("read dead letters"))
        })
        .await
    }

    async fn depth(&self, now_ms: i64) -> Result<OutboxDepth> {
        Self::with(&self.reader, move |c| {
            c.prepare_cached(
                "SELECT
                    (SELECT count(*) FROM outbox INDEXED BY outbox_by_due
                        WHERE next_attempt_at <= ?1)
                    + (SELECT count(*) FROM outbox INDEXED BY outbox_by_due
                        WHERE next_attempt_at = 9223372036854775807 AND due_at <= ?1),
                    (SELECT count(*) FROM outbox INDEXED BY outbox_by_due
                        WHERE next_attempt_at > ?1 AND lease_token IS NOT NULL),
                    (SELECT count(*) FROM dead_letters)",
            )
            .and_then(|mut s| {
                s.query_row(params![now_ms], |r| {
                    Ok(OutboxDepth {
                        due: r.get::<_, i64>(0)? as u64,
                        leased: r.get::<_, i64>(1)? as u64,
                        dead_letters: r.get::<_, i64>(2)? as u64,
                    })
                })
            })
            .map_err(sql_err("read the outbox depth"))
        })
        .await
    }

    async fn event_deliveries(&self, event_id: &str) -> Result<EventDeliveries> {
        let event_id = event_id.to_owned();
        Self::with(&self.reader, move |c| {
            event_deliveries(c, &event_id).map_err(sql_err("read an event's deliveries"))
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

    async fn replay(&self, id: i64, now_ms: i64, fingerprint: Option<&str>) -> Result<Option<i64>> {
        let fingerprint = fingerprint.map(str::to_owned);
        let new_id = Self::with(&self.writer, move |c| {
            replay(c, id, now_ms, fingerprint.as_deref()).map_err(sql_err("replay a dead letter"))
        })
        .await?;
        if new_id.is_some() {
            self.wake.notify_one();
        }
        Ok(new_id)
    }

    async fn enqueue_rows(&self, event_id: &str, rows: Vec<Enqueue>, now_ms: i64) -> Result<u64> {
        let event_id = event_id.to_owned();
        let created = Self::with(&self.writer, move |c| {
            enqueue_rows(c, &event_id, &rows, now_ms).map_err(sql_err("enqueue rows for an event"))
        })
        .await?;
        if created > 0 {
            self.wake.notify_one();
        }
        Ok(created)
    }

    async fn receive(&self, req: &ReceiveRequest) -> Result<ReceiveOutcome> {
        if req.max == 0 {
            return Ok(ReceiveOutcome::default());
        }
        let req = req.clone();
        let receipt: i64 = rand::random();
        Self::with(&self.writer, move |c| {
            queues::receive(c, &req, receipt).map_err(sql_err("receive queue messages"))
        })
        .await
    }

    async fn ack(&self, queue: &str, id: i64, receipt: i64) -> Result<bool> {
        let queue = queue.to_owned();
        Self::with(&self.writer, move |c| {
            c.prepare_cached(
                "DELETE FROM queue_messages WHERE queue = ?1 AND id = ?2 AND receipt = ?3",
            )
            .and_then(|mut s| s.execute(params![queue, id, receipt]))
            .map(|n| n == 1)
            .map_err(sql_err("ack a queue message"))
        })
        .await
    }

    async fn nack(&self, queue: &str, id: i64, receipt: i64, visible_at_ms: i64) -> Result<bool> {
        let queue = queue.to_owned();
        let held = Self::with(&self.writer, move |c| {
            c.prepare_cached(
                "UPDATE queue_messages SET visible_at = ?4, receipt = NULL
                 WHERE queue = ?1 AND id = ?2 AND receipt = ?3",
            )
            .and_then(|mut s| s.execute(params![queue, id, receipt, visible_at_ms]))
            .map(|n| n == 1)
            .map_err(sql_err("nack a queue message"))
        })
        .await?;
        if held {
            self.wake.notify_one();
        }
        Ok(held)
    }

    async fn record_run(&self, run: &RunRecord) -> Result<()> {
        let run = run.clone();
        Self::with(&self.writer, move |c| {
            c.prepare_cached(
                "INSERT INTO trigger_runs (binding_id, event_id, started_at, duration_ms, status,
                    error, abandoned, fingerprint) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run.binding_id,
                    run.event_id,
                    run.started_at_ms,
                    run.duration_ms,
                    run.status,
                    run.error,
                    run.abandoned,
                    run.fingerprint
                ])
            })
            .map(drop)
            .map_err(sql_err("record a run"))
        })
        .await
    }

    async fn runs(&self, binding_id: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let binding_id = binding_id.map(str::to_owned);
        Self::with(&self.reader, move |c| {
            c.prepare_cached(
                "SELECT binding_id, event_id, started_at, duration_ms, status, error, abandoned,
                    fingerprint FROM trigger_runs WHERE (?1 IS NULL OR binding_id = ?1)
                 ORDER BY id DESC LIMIT ?2",
            )
            .and_then(|mut s| {
                s.query_map(params![binding_id, limit as i64], |r| {
                    Ok(RunRecord {
                        binding_id: r.get(0)?,
                        event_id: r.get(1)?,
                        started_at_ms: r.get(2)?,
                        duration_ms: r.get(3)?,
                        status: r.get(4)?,
                        error: r.get(5)?,
                        abandoned: r.get(6)?,
                        fingerprint: r.get(7)?,
                    })
                })?
                .collect()
            })
            .map_err(sql_err("read runs"))
        })
        .await
    }

    /// Dead letters and run records first, then the events nothing references any
    /// more, `chunk` rows per transaction.
    async fn expire(&self, before_ms: i64, chunk: usize) -> Result<Expired> {
        let chunk = chunk.max(1);
        // Dead letters first: the events only they referenced go in the same sweep.
        let dead_letters =
            queues::expire_older(self, "dead_letters", "dead_at", before_ms, chunk).await?;
        let runs =
            queues::expire_older(self, "trigger_runs", "started_at", before_ms, chunk).await?;
        let superseded = queues::expire_older(self, "superseded", "at", before_ms, chunk).await?;
        let backfilled = queues::expire_older(self, "backfilled", "at", before_ms, chunk).await?;
        let events = queues::expire_events(self, before_ms, chunk).await?;
        Ok(Expired {
            events,
            dead_letters,
            runs,
            superseded,
            backfilled,
        })
    }

    fn wake(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }
}

/// The earliest `next_attempt_at` after `after_ms` of `bindings`' rows, by index probes
/// of `outbox_by_binding` only: per binding, its distinct priorities from the lowest
/// up (a binding's rows nearly always share one), and per priority the first row
/// after `after_ms`.
fn next_due(c: &Connection, bindings: &[String], after_ms: i64) -> rusqlite::Result<Option<i64>> {
    let mut below = c.prepare_cached(
        "SELECT min(priority) FROM outbox INDEXED BY outbox_by_binding
         WHERE binding_id = ?1 AND priority > ?2",
    )?;
    let mut first = c.prepare_cached(
        "SELECT min(next_attempt_at) FROM outbox INDEXED BY outbox_by_binding
         WHERE binding_id = ?1 AND priority = ?2 AND next_attempt_at > ?3
             AND next_attempt_at < ?4",
    )?;
    let mut earliest: Option<i64> = None;
    for binding in bindings {
        let mut priority = i64::MIN;
        while let Some(p) =
            below.query_row(params![binding, priority], |r| r.get::<_, Option<i64>>(0))?
        {
            if let Some(at) = first.query_row(params![binding, p, after_ms, rows::PARKED], |r| {
                r.get::<_, Option<i64>>(0)
            })? {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
            priority = p;
        }
    }
    Ok(earliest)
}
