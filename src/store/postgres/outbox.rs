//! [`OutboxStore`] for [`PostgresBackend`]: the one implementation of the outbox's
//! trait on PostgreSQL, for several runtime processes claiming from one database.
//!
//! - A claim is ONE statement: a CTE picks the due rows `FOR UPDATE SKIP LOCKED` (so
//!   concurrent claimers in other processes skip each other's rows instead of waiting
//!   for them), and `UPDATE … FROM` stamps the lease and joins the events for the
//!   handler's context, returning everything the attempt needs in one round trip.
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
use super::finish::{self, row_to_dead_letter, DEAD_LETTER_COLUMNS};
use super::{pg_err, prepared, queues, PostgresBackend};
use crate::error::Result;
use crate::outbox::model::{
    ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Enqueue, EventDeliveries, Expired,
    Finish, HeldRows, HolderRelease, OutboxDepth, OutboxStats, PendingRow, QueueMessage,
    QueuedMessage, ReceiveRequest, Received, RunRecord,
};
use crate::outbox::OutboxStore;
use crate::store::outbox_rows::{self as rows, next_attempt_sql, to_u32};

/// A boxed query parameter (the filtered statements' lists are built at run time).
type Arg = Box<dyn ToSql + Sync + Send>;

/// The dead-letter page's SQL with only the filters `q` sets, so each filter is a
/// plain condition the planner can match to `dead_letters_by_binding` or the primary
/// key's newest-first walk; the error kind is the last attempt's (`errors->-1`).
fn dead_letters_sql(q: &DeadLetterQuery) -> (String, Vec<Arg>) {
    let mut sql = format!("SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters");
    let mut args: Vec<Arg> = Vec::new();
    let mut term = |sql: &mut String, cond: &str, v: Arg| {
        args.push(v);
        sql.push_str(if args.len() == 1 { " WHERE " } else { " AND " });
        sql.push_str(&cond.replace('$', &format!("${}", args.len())));
    };
    if let Some(b) = &q.binding_id {
        term(&mut sql, "binding_id = $", Box::new(b.clone()));
    }
    if let Some(b) = q.before_id {
        term(&mut sql, "id < $", Box::new(b));
    }
    if let Some(t) = q.since_ms {
        term(&mut sql, "dead_at >= $", Box::new(t));
    }
    if let Some(t) = q.until_ms {
        term(&mut sql, "dead_at < $", Box::new(t));
    }
    if let Some(k) = &q.error_kind {
        term(&mut sql, "errors -> -1 ->> 'kind' = $", Box::new(k.clone()));
    }
    if q.unreplayed {
        term(&mut sql, "replays = $", Box::new(0_i32));
    }
    args.push(Box::new(q.limit as i64));
    sql.push_str(&format!(" ORDER BY id DESC LIMIT ${}", args.len()));
    (sql, args)
}

/// Picks due head-of-line rows of the bindings, skipping rows another claimer holds
/// locked and rows of paused bindings (the claim reads `trigger_pauses` itself, so a
/// pause on one process holds in every process from its commit, not from its
/// notification), and leases them. Returns the pre-claim due time and the priority
/// last, for ordering.
///
/// Each binding's rows are read on their own, per priority it has rows of (found by
/// walking `outbox_by_binding` up from the lowest, one probe each, from the end of the
/// binding's range where rows are written rather than from its front where claimed rows
/// leave dead index entries until vacuum; a binding's rows nearly always share one), as a range of that index in claim order, and the
/// candidates merged: a claim never walks another binding's rows (one at its
/// concurrency limit, throttled or paused), nor rows not yet due, leased or parked
/// behind their ordering key, so its cost is the rows it takes, whatever waits beside
/// them. Each (binding, priority) locks at most `$3` candidates, of which the merge
/// keeps `$3` in all; the others are unlocked at commit, untouched.
const CLAIM: &str = "WITH RECURSIVE priorities(binding_id, p) AS (
        SELECT b.id, (SELECT min(priority) FROM outbox WHERE binding_id = b.id)
        FROM unnest($2::TEXT[]) AS b(id)
        WHERE NOT EXISTS (SELECT 1 FROM trigger_pauses tp WHERE tp.binding_id = b.id)
        UNION ALL
        SELECT r.binding_id, (SELECT min(priority) FROM outbox
            WHERE binding_id = r.binding_id AND priority > r.p)
        FROM priorities r WHERE r.p IS NOT NULL
    ), picked AS (
        SELECT c.id, c.event_id, c.was_due FROM priorities r
        CROSS JOIN LATERAL (
            SELECT o.id, o.event_id, o.next_attempt_at AS was_due, o.priority FROM outbox o
            WHERE o.binding_id = r.binding_id AND o.priority = r.p AND o.next_attempt_at <= $1
                AND (o.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p
                    WHERE p.binding_id = o.binding_id AND p.ordering_key = o.ordering_key
                        AND p.id < o.id))
            ORDER BY o.next_attempt_at, o.id
            LIMIT $3
            FOR UPDATE SKIP LOCKED
        ) AS c
        WHERE r.p IS NOT NULL
        ORDER BY c.priority DESC, c.was_due, c.id
        LIMIT $3
    )
    UPDATE outbox o SET next_attempt_at = $4, lease_token = $5, lease_holder = $6,
        attempts = o.attempts + 1
    FROM picked p LEFT JOIN events e ON e.id = p.event_id
    WHERE o.id = p.id
    RETURNING o.id, o.binding_id, o.fingerprint, o.event_id, COALESCE(e.source, ''),
        COALESCE(e.kind, ''), COALESCE(e.trace_id, ''), COALESCE(e.tenant, ''), o.attempts,
        o.depth, o.ordering_key, o.enqueued_at, o.due_at,
        COALESCE(o.payload, e.body, ''::BYTEA), o.dead_letter_id, o.errors::TEXT, p.was_due,
        o.priority";

/// Sent before [`CLAIM`] in its transaction: the claim's plan is index walks and
/// nested loops whatever the statistics say. The statement is prepared, and the plan
/// PostgreSQL caches for it is made from the statistics of the moment: without them (a
/// table grown by a burst since autovacuum last analysed it) the planner guesses a
/// binding has a hundred due rows and sorts them all after a bitmap scan (40 ms at
/// 100k rows waiting, 750 ms at 1M), and a plan cached while the table was small joins
/// the claimed rows back to the outbox by hashing the whole table (17 ms a claim at
/// 100k, `benches/backlog.rs`). The walk takes the `LIMIT` rows it needs at any size,
/// and forbidding the other shapes costs nothing when they would not have been chosen.
/// With them forbidden, the planner priced every plan of the claim's final sort as
/// disabled and so never settled on a generic plan: it planned the recursive claim
/// afresh at every call, a quarter of the server's time for a serial binding. The plan
/// is therefore made once per connection (`force_generic_plan`), which the pinned
/// shape makes safe whatever the parameters. `LOCAL`: it ends with the transaction, so
/// no other statement on the pooled connection sees it.
const CLAIM_PLAN: &str = "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off;
    SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off;
    SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan";

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

/// The earliest `next_attempt_at` after `$2` of the bindings' rows: per binding, a
/// walk over its distinct priorities as in [`CLAIM`] (each one index probe of `outbox_by_binding`,
/// and a binding's rows nearly always share one), then per priority the first row
/// after `$2` in that index's order. Index probes only, whatever the backlog.
const NEXT_DUE: &str = "SELECT min(n.at) FROM unnest($1::TEXT[]) AS b(id)
    CROSS JOIN LATERAL (
        WITH RECURSIVE pr(p) AS (
            (SELECT priority FROM outbox WHERE binding_id = b.id ORDER BY priority LIMIT 1)
            UNION ALL
            SELECT (SELECT priority FROM outbox WHERE binding_id = b.id AND priority > pr.p
                ORDER BY priority LIMIT 1)
            FROM pr WHERE pr.p IS NOT NULL
        )
        SELECT p FROM pr WHERE p IS NOT NULL
    ) AS ps
    CROSS JOIN LATERAL (
        SELECT next_attempt_at AS at FROM outbox
        WHERE binding_id = b.id AND priority = ps.p AND next_attempt_at > $2
            AND next_attempt_at < 9223372036854775807
        ORDER BY priority DESC, next_attempt_at LIMIT 1
    ) AS n";

/// The depth totals: due counts parked rows by their own due time (as before they were
/// parked), leased the rows under a live lease.
const DEPTH: &str = "SELECT
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
/// The claim, the next-due query and the depth read with literal arguments (one
/// binding, due at `now_ms`), for `EXPLAIN` in `benches/backlog.rs`.
pub(crate) fn explained(binding: &str, now_ms: i64) -> Vec<(&'static str, String)> {
    let binding = binding.replace('\'', "''");
    let bindings = format!("ARRAY['{binding}']::TEXT[]");
    let with = |sql: &str, args: &[String]| {
        // From the last so that `$1` does not match inside `$10`.
        (1..=args.len()).rev().fold(sql.to_owned(), |s, i| {
            s.replace(&format!("${i}"), &args[i - 1])
        })
    };
    let (now, lease) = (now_ms.to_string(), (now_ms + 60_000).to_string());
    vec![
        (
            "claim 100",
            with(
                CLAIM,
                &[
                    now.clone(),
                    bindings.clone(),
                    "100".into(),
                    lease,
                    "1".into(),
                    "NULL".into(),
                ],
            ),
        ),
        ("next due", with(NEXT_DUE, &[bindings, now.clone()])),
        ("depth", with(DEPTH, &[now])),
    ]
}

fn claimed_row(r: &Row, token: i64) -> ((std::cmp::Reverse<i32>, i64), ClaimedRow) {
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
    ((std::cmp::Reverse(r.get(17)), r.get(16)), row)
}

/// The rows a claim returned, in the contract's order (priority descending, due, id):
/// `RETURNING` has none.
fn claimed_rows(found: &[Row], token: i64) -> Vec<ClaimedRow> {
    let mut claimed: Vec<_> = found.iter().map(|r| claimed_row(r, token)).collect();
    claimed.sort_by_key(|((priority, was_due), row)| (*priority, *was_due, row.id));
    claimed.into_iter().map(|(_, row)| row).collect()
}

/// The claim statement's parameters.
fn claim_params<'a>(req: &'a ClaimRequest, limit: &'a i64) -> [&'a (dyn ToSql + Sync); 6] {
    [
        &req.now_ms,
        &req.bindings,
        limit,
        &req.lease_until_ms,
        &req.token,
        &req.holder,
    ]
}

/// Splits (id, token) pairs into the two arrays the statements take.
fn pairs(rows: &[(i64, i64)]) -> (Vec<i64>, Vec<i64>) {
    rows.iter().copied().unzip()
}

impl PostgresBackend {
    /// [`OutboxStore::finish_and_claim`] when every finish is `Done` (a busy
    /// dispatcher's usual batch, and every row of a serial binding): the transaction's
    /// statements, `BEGIN` and `COMMIT` included, all sent at the first poll, so the
    /// finish and the claim cost one round trip instead of three. A finish that dead-
    /// letters has a second step (its fan-out rows) and takes the general path.
    ///
    /// Safe to drop: once polled, every statement is with the connection, which sends
    /// them all and reads their answers whether or not anyone waits, so the pooled
    /// connection always ends outside the transaction (a failed statement turns the
    /// `COMMIT` into a rollback).
    async fn done_and_claim(
        &self,
        finishes: Vec<Finish>,
        req: &ClaimRequest,
        claims: bool,
    ) -> Result<(u64, Vec<ClaimedRow>)> {
        let client = self.client().await?;
        let done = prepared(&client, finish::FINISH_DONE).await?;
        let claim = prepared(&client, CLAIM).await?;
        let (ids, tokens): (Vec<i64>, Vec<i64>) = finishes
            .iter()
            .filter_map(|f| match f {
                Finish::Done { id, token } => Some((*id, *token)),
                _ => None,
            })
            .unzip();
        let limit = req.limit as i64;
        let params = claim_params(req, &limit);
        let begin = client.batch_execute("BEGIN");
        let dones = async {
            if ids.is_empty() {
                return Ok(0);
            }
            let row = client
                .query_one(&done, &[&ids, &tokens, &&*self.notify_tag])
                .await?;
            Ok(row.get::<_, i64>(0) as u64)
        };
        let plan = async {
            match claims {
                true => client.batch_execute(CLAIM_PLAN).await,
                false => Ok(()),
            }
        };
        let found = async {
            match claims {
                true => client.query(&claim, &params).await,
                false => Ok(Vec::new()),
            }
        };
        let commit = client.batch_execute("COMMIT");
        let ((), applied, (), found, ()) =
            futures_util::future::try_join5(begin, dones, plan, found, commit)
                .await
                .map_err(pg_err("finish and claim"))?;
        Ok((applied, claimed_rows(&found, req.token)))
    }
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
        let claims = !req.bindings.is_empty() && req.limit > 0;
        if finishes.is_empty() && !claims {
            return Ok((0, Vec::new()));
        }
        if finishes.iter().all(|f| matches!(f, Finish::Done { .. })) {
            return self.done_and_claim(finishes, req, claims).await;
        }
        let mut client = self.client().await?;
        let stmts = finish::FinishStatements::prepare(&client).await?;
        let claim = prepared(&client, CLAIM).await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_err("begin finish and claim"))?;
        let claiming = async {
            if !claims {
                return Ok(Vec::new());
            }
            let limit = req.limit as i64;
            let params = claim_params(req, &limit);
            let plan = tx.batch_execute(CLAIM_PLAN);
            let found = tx.query(&claim, &params);
            let ((), found) = try_join(plan, found)
                .await
                .map_err(pg_err("claim outbox rows"))?;
            Ok(found)
        };
        // Pipelined: the finishes' statements go first (sent at the first poll), then
        // the claim, which therefore sees them (a delivered row's ordering key's next
        // row is its head already); one commit for both.
        let (applied, found) = try_join(
            finish::apply(&tx, &stmts, finishes, now_ms, &self.notify_tag),
            claiming,
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_err("commit finish and claim"))?;
        Ok((applied, claimed_rows(&found, req.token)))
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
        if bindings.is_empty() {
            return Ok(None);
        }
        let client = self.client().await?;
        let stmt = prepared(&client, NEXT_DUE).await?;
        let row = client
            .query_one(&stmt, &[&bindings, &after_ms])
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
    async fn receive(&self, req: &ReceiveRequest) -> Result<Received> {
        if req.max == 0 {
            return Ok(Received::default());
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
