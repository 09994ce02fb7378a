//! The claim on PostgreSQL: the statement that picks and leases due rows per binding,
//! the settings that hold its plan, the pipelined finish-and-claim transaction, and the
//! next-due query that sizes the dispatcher's sleep. The rest of the outbox's trait is
//! in [`super::outbox`].

use futures_util::future::try_join;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::outbox::DEPTH;
use super::{finish, pg_err, prepared, PostgresBackend};
use crate::error::Result;
use crate::outbox::model::{ClaimRequest, ClaimedRow, Finish};
use crate::store::outbox_rows::{self as rows, to_u32};

/// Picks due head-of-line rows of the bindings, skipping rows another claimer holds
/// locked and rows of paused bindings (the claim reads `trigger_pauses` itself, so a
/// pause on one process holds in every process from its commit, not from its
/// notification), and leases them. Returns the pre-claim due time and the priority
/// last, for ordering.
///
/// Each binding's rows are read on their own, per priority it has rows of (found by
/// walking `outbox_by_binding` up from the lowest, one probe each, from the end of the
/// binding's range where rows are written rather than from its front where claimed rows
/// leave dead index entries until vacuum; a binding's rows nearly always share one), as
/// a range of that index in claim order, and the candidates merged: a claim never
/// walks another binding's rows (one at its concurrency limit, throttled or paused),
/// nor rows not yet due, leased or parked behind their ordering key, so its cost is the rows it takes, whatever waits beside
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
        o.priority, COALESCE(e.traceparent, ''), COALESCE(e.tracestate, ''),
        COALESCE(e.provider, ''), o.backfill_id";

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
        provider: r.get(20),
        trace_id: r.get(6),
        traceparent: r.get(18),
        tracestate: r.get(19),
        tenant: r.get(7),
        attempt: to_u32(r.get::<_, i32>(8).into()),
        depth: to_u32(r.get::<_, i32>(9).into()),
        ordering_key: r.get(10),
        enqueued_at_ms: r.get(11),
        due_at_ms: r.get(12),
        payload: r.get(13),
        dead_letter_id: r.get(14),
        errors: rows::parse_errors(r.get(15)),
        backfill: r.get(21),
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

impl PostgresBackend {
    /// [`crate::outbox::OutboxStore::finish_and_claim`] on PostgreSQL: `finishes` and a
    /// claim in one transaction (a Done-only batch in one round trip).
    pub(super) async fn finish_then_claim(
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

    /// [`crate::outbox::OutboxStore::next_due_ms`] on PostgreSQL ([`NEXT_DUE`]).
    pub(super) async fn next_due(&self, bindings: &[String], after_ms: i64) -> Result<Option<i64>> {
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
