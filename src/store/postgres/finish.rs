//! Finishing claimed rows on PostgreSQL. Finishes come in batches of hundreds: each
//! kind is one array statement (`DELETE … USING unnest(ids, tokens)` for the done
//! ones), pipelined in one transaction; only dead letters, which are rare, are one
//! statement each, and their fan-out rows one more ([`INSERT_ROWS`]).

use futures_util::future::{try_join4, try_join_all};
use tokio_postgres::{Row, Statement, Transaction};

use super::enqueue::{insert_rows, INSERT_ROWS};
use super::pg_err;
use crate::error::Result;
use crate::outbox::model::{DeadLetter, Enqueue, Finish};
use crate::store::outbox_rows::{self as rows, to_u32};

/// Deletes delivered rows. When one of them held an ordering key, the key's next row
/// has just become claimable, possibly by another process: notify, so it does not wait
/// for that process's poll. The payload (`$3`) is the finishing backend's tag, which
/// its own listener ignores ([`super::listen::Wakes::own`]).
pub(super) const FINISH_DONE: &str = "WITH gone AS (
        DELETE FROM outbox o USING unnest($1::BIGINT[], $2::BIGINT[]) AS d(id, token)
        WHERE o.id = d.id AND o.lease_token = d.token
        RETURNING o.ordering_key
    ), woke AS (
        SELECT pg_notify('switchboard_outbox', $3) FROM gone
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

/// Moves one row to the dead letters; returns the dead letter (as
/// [`DEAD_LETTER_COLUMNS`]) and the payload its last attempt delivered (for the fan-out
/// rows). `$2` is the lease token that must still hold the row, or NULL for a row
/// under no lease: a stranded row (`super::versions`) is moved by this statement too,
/// so every dead letter is made the same way.
pub(super) const FINISH_DEAD: &str = "WITH gone AS (
        DELETE FROM outbox WHERE id = $1 AND lease_token IS NOT DISTINCT FROM $2
        RETURNING binding_id, fingerprint, event_id, ordering_key, depth, attempts,
            enqueued_at, payload, errors
    ), dead AS (
        INSERT INTO dead_letters (binding_id, fingerprint, event_id, trace_id, attempts, errors,
            enqueued_at, dead_at, ordering_key, depth, payload)
        SELECT g.binding_id, g.fingerprint, g.event_id, COALESCE(e.trace_id, ''), g.attempts,
            g.errors || jsonb_build_array($3::TEXT::JSONB), g.enqueued_at, $4, g.ordering_key,
            g.depth, g.payload
        FROM gone g LEFT JOIN events e ON e.id = g.event_id
        RETURNING *
    )
    SELECT d.id, d.binding_id, d.fingerprint, d.event_id, d.trace_id, d.attempts,
        d.errors::TEXT, d.enqueued_at, d.dead_at, d.annotations::TEXT, d.replays,
        d.replayed_at, d.queue, COALESCE(d.payload, e.body, ''::BYTEA)
    FROM dead d LEFT JOIN events e ON e.id = d.event_id";

/// A dead letter's columns in the order [`row_to_dead_letter`] reads them.
pub(super) const DEAD_LETTER_COLUMNS: &str = "id, binding_id, fingerprint, event_id, trace_id,
    attempts, errors::TEXT, enqueued_at, dead_at, annotations::TEXT, replays, replayed_at, queue";

/// A dead letter from a row of [`DEAD_LETTER_COLUMNS`].
pub(super) fn row_to_dead_letter(r: &Row) -> DeadLetter {
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

/// The finish statements, prepared (cached) on one connection.
pub(super) struct FinishStatements {
    done: Statement,
    retry: Statement,
    annotate: Statement,
    dead: Statement,
    insert: Statement,
}

impl FinishStatements {
    pub(super) async fn prepare(client: &deadpool_postgres::Object) -> Result<FinishStatements> {
        let (done, retry, annotate, dead, insert) = futures_util::try_join!(
            client.prepare_cached(FINISH_DONE),
            client.prepare_cached(FINISH_RETRY),
            client.prepare_cached(FINISH_ANNOTATE),
            client.prepare_cached(FINISH_DEAD),
            client.prepare_cached(INSERT_ROWS),
        )
        .map_err(pg_err("prepare finish"))?;
        Ok(FinishStatements {
            done,
            retry,
            annotate,
            dead,
            insert,
        })
    }
}

/// Applies `finishes` in one transaction on `client`; returns how many applied. `tag`
/// is the backend's own notification payload ([`FINISH_DONE`]).
pub(super) async fn finish(
    client: &mut deadpool_postgres::Object,
    finishes: Vec<Finish>,
    now_ms: i64,
    tag: &str,
) -> Result<u64> {
    let stmts = FinishStatements::prepare(client).await?;
    let tx = client.transaction().await.map_err(pg_err("begin finish"))?;
    let applied = apply(&tx, &stmts, finishes, now_ms, tag).await?;
    tx.commit().await.map_err(pg_err("commit finish"))?;
    Ok(applied)
}

/// Applies `finishes` inside the caller's transaction `tx` (a finish batch's own, or
/// the claim's they are folded into); returns how many applied. Every kind's statement
/// is sent at the first poll, so a claim sent after this future was first polled runs
/// after them on the server.
pub(super) async fn apply(
    tx: &Transaction<'_>,
    stmts: &FinishStatements,
    finishes: Vec<Finish>,
    now_ms: i64,
    tag: &str,
) -> Result<u64> {
    let b = FinishBatch::of(finishes);
    let FinishStatements {
        done,
        retry,
        annotate,
        dead,
        insert,
    } = stmts;
    // Every kind is sent at once (pipelined); each is skipped when empty.
    let dones = async {
        if b.done.0.is_empty() {
            return Ok(0);
        }
        let row = tx.query_one(done, &[&b.done.0, &b.done.1, &tag]).await?;
        Ok(row.get::<_, i64>(0) as u64)
    };
    let retries = async {
        if b.retry.0.is_empty() {
            return Ok(0);
        }
        let r = &b.retry;
        tx.execute(retry, &[&r.0, &r.1, &r.2, &r.3]).await
    };
    let annotated = async {
        if b.annotate.0.is_empty() {
            return Ok(0);
        }
        let a = &b.annotate;
        let row = tx.query_one(annotate, &[&a.0, &a.1, &a.2, &a.3]).await?;
        Ok(row.get::<_, i64>(0) as u64)
    };
    let deads = try_join_all(b.dead.iter().map(|(id, token, error, _)| async move {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [id, token, error, &now_ms];
        tx.query_opt(dead, &params).await
    }));
    let (dones, retries, annotated, deads) = try_join4(dones, retries, annotated, deads)
        .await
        .map_err(pg_err("finish outbox rows"))?;
    let mut applied = dones + retries + annotated;
    let mut fanout = Vec::new();
    for ((_, _, _, rows_for), row) in b.dead.into_iter().zip(deads) {
        let Some(row) = row else { continue };
        applied += 1;
        let dl = row_to_dead_letter(&row);
        let delivered: Vec<u8> = row.get(13);
        let ready = rows::fanout_rows(rows_for, &dl, &delivered);
        fanout.extend(ready.into_iter().map(|r| (dl.event_id.clone(), r)));
    }
    if !fanout.is_empty() {
        insert_rows(tx, insert, &fanout, now_ms)
            .await
            .map_err(pg_err("enqueue dead-letter handlers"))?;
    }
    Ok(applied)
}
