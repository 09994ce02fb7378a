//! Claiming outbox rows on SQLite: the head-of-line rule, the claim (a select and an
//! update in one `IMMEDIATE` transaction on the writer connection, which the group
//! commit also writes through, so no second claimer can run between the two; it
//! commits without an fsync, see [`claim`]), the per-row statements of a release or
//! a lease extension, and the release of what a process held before its restart
//! ([`release_holder`]).

use rusqlite::{params, Connection, TransactionBehavior};

use super::finish::{self, Finished};
use crate::outbox::model::{ClaimRequest, ClaimedRow, Finish, HeldRows, HolderRelease};
use crate::store::options::Synchronous;
use crate::store::outbox_rows::{self as rows, to_u32};

/// "No earlier row of the same binding and ordering key": the head-of-line rule.
pub(super) const IS_HEAD: &str = "(o.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p
    WHERE p.binding_id = o.binding_id AND p.ordering_key = o.ordering_key AND p.id < o.id))";

/// One binding's due head-of-line rows of one priority in claim order, a range of
/// `outbox_by_binding`: a claim reads its bindings' due rows only, never another
/// binding's backlog (one at its concurrency limit, throttled or paused) nor rows not
/// yet due, leased or parked behind their ordering key, so its cost is the rows it
/// takes.
fn claim_select() -> String {
    format!(
        "SELECT o.id, o.binding_id, o.fingerprint, o.event_id, COALESCE(e.source, ''),
            COALESCE(e.kind, ''), COALESCE(e.trace_id, ''), COALESCE(e.tenant, ''),
            o.attempts, o.depth, o.ordering_key, o.enqueued_at, o.due_at,
            COALESCE(o.payload, switchboard_body(e.body_codec, e.body), X''), o.dead_letter_id,
            o.errors, o.priority, o.next_attempt_at, COALESCE(e.traceparent, ''),
            COALESCE(e.tracestate, ''), COALESCE(e.provider, ''), o.backfill_id
        FROM outbox o INDEXED BY outbox_by_binding LEFT JOIN events e ON e.id = o.event_id
        WHERE o.binding_id = ?2 AND o.priority = ?4 AND o.next_attempt_at <= ?1 AND {IS_HEAD}
            AND NOT EXISTS (SELECT 1 FROM trigger_pauses tp WHERE tp.binding_id = ?2)
        ORDER BY o.next_attempt_at, o.id LIMIT ?3"
    )
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
pub(super) fn claim(
    c: &mut Connection,
    req: &ClaimRequest,
    sync: Synchronous,
) -> rusqlite::Result<Vec<ClaimedRow>> {
    let unsynced = match sync {
        Synchronous::Full => Some(UnsyncedCommits::start(c)?),
        Synchronous::Normal => None,
    };
    let claimed = (|| {
        let tx = rusqlite::Transaction::new_unchecked(c, TransactionBehavior::Immediate)?;
        let rows = claim_rows(&tx, req)?;
        tx.commit()?;
        Ok(rows)
    })();
    drop(unsynced);
    claimed
}

/// Applies `finishes`, then claims per `req`, in one `IMMEDIATE` transaction. With
/// finishes it commits at the writer's own level (`FULL` by default: a finish is
/// synced, as on its own), and the claim rides on that one commit; without, it is a
/// plain [`claim`]. Returns what the finishes did and the rows claimed.
pub(super) fn finish_and_claim(
    c: &mut Connection,
    finishes: Vec<Finish>,
    now_ms: i64,
    req: &ClaimRequest,
    sync: Synchronous,
) -> rusqlite::Result<(Finished, Vec<ClaimedRow>)> {
    if finishes.is_empty() {
        let rows = claim(c, req, sync)?;
        return Ok((
            Finished {
                applied: 0,
                created: 0,
            },
            rows,
        ));
    }
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let done = finish::apply(&tx, finishes, now_ms)?;
    let rows = claim_rows(&tx, req)?;
    tx.commit()?;
    Ok((done, rows))
}

/// Selects and leases the rows of a claim inside the caller's transaction.
fn claim_rows(tx: &Connection, req: &ClaimRequest) -> rusqlite::Result<Vec<ClaimedRow>> {
    if req.bindings.is_empty() || req.limit == 0 {
        return Ok(Vec::new());
    }
    let claimed = {
        let mut select = tx.prepare_cached(&claim_select())?;
        let mut update = tx.prepare_cached(
            "UPDATE outbox SET next_attempt_at = ?1, lease_token = ?2, lease_holder = ?4,
                attempts = attempts + 1
             WHERE id = ?3",
        )?;
        let mut below = tx.prepare_cached(
            "SELECT min(priority) FROM outbox INDEXED BY outbox_by_binding
             WHERE binding_id = ?1 AND priority > ?2",
        )?;
        // Each binding's first `limit` rows per priority it has rows of (walked up
        // from the lowest), merged in claim order (priority first).
        let mut candidates = Vec::new();
        for binding in &req.bindings {
            let mut priority = i64::MIN;
            while let Some(p) =
                below.query_row(params![binding, priority], |r| r.get::<_, Option<i64>>(0))?
            {
                let limit = req.limit as i64;
                let rows = select.query_map(params![req.now_ms, binding, limit, p], |r| {
                    let order = (
                        std::cmp::Reverse(r.get::<_, i32>(16)?),
                        r.get::<_, i64>(17)?,
                    );
                    Ok((order, claimed_row(r, req.token)?))
                })?;
                for row in rows {
                    candidates.push(row?);
                }
                priority = p;
            }
        }
        candidates.sort_by_key(|(order, row)| (*order, row.id));
        candidates.truncate(req.limit);
        let found: Vec<ClaimedRow> = candidates.into_iter().map(|(_, row)| row).collect();
        for row in &found {
            update.execute(params![
                req.lease_until_ms,
                req.token,
                row.id,
                req.holder.as_deref()
            ])?;
        }
        found
    };
    Ok(claimed)
}

/// A row of [`claim_select`] as the claim hands it out (leased under `token`).
fn claimed_row(r: &rusqlite::Row<'_>, token: i64) -> rusqlite::Result<ClaimedRow> {
    Ok(ClaimedRow {
        id: r.get(0)?,
        token,
        binding_id: r.get(1)?,
        fingerprint: r.get(2)?,
        event_id: r.get(3)?,
        source: r.get(4)?,
        kind: r.get(5)?,
        provider: r.get(20)?,
        trace_id: r.get(6)?,
        traceparent: r.get(18)?,
        tracestate: r.get(19)?,
        tenant: r.get(7)?,
        attempt: to_u32(r.get::<_, i64>(8)? + 1),
        depth: to_u32(r.get(9)?),
        ordering_key: r.get(10)?,
        enqueued_at_ms: r.get(11)?,
        due_at_ms: r.get(12)?,
        payload: r.get(13)?,
        dead_letter_id: r.get(14)?,
        errors: rows::parse_errors(&r.get::<_, String>(15)?),
        backfill: r.get(21)?,
    })
}

/// Runs `sql` once per (id, token) pair in one transaction; returns rows changed.
pub(super) fn per_pair(
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

/// Makes the rows `holder` holds under a live lease due at `now_ms` (token cleared,
/// attempts kept) and counts the rows other holders hold, in one `IMMEDIATE`
/// transaction. Both statements range over `next_attempt_at > now` (`outbox_by_due`):
/// the leased and scheduled rows, not the due backlog.
pub(super) fn release_holder(
    c: &mut Connection,
    holder: &str,
    now_ms: i64,
) -> rusqlite::Result<HolderRelease> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let released = tx.execute(
        "UPDATE outbox SET next_attempt_at = ?2, lease_token = NULL
         WHERE next_attempt_at > ?2 AND lease_token IS NOT NULL AND lease_holder = ?1",
        params![holder, now_ms],
    )? as u64;
    let held_by_others = {
        let mut others = tx.prepare(
            "SELECT lease_holder, count(*), max(next_attempt_at) FROM outbox
             WHERE next_attempt_at > ?1 AND lease_token IS NOT NULL
             GROUP BY lease_holder ORDER BY lease_holder NULLS FIRST",
        )?;
        let rows = others.query_map(params![now_ms], |r| {
            Ok(HeldRows {
                holder: r.get(0)?,
                rows: r.get::<_, i64>(1)? as u64,
                until_ms: r.get(2)?,
            })
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()?
    };
    tx.commit()?;
    Ok(HolderRelease {
        released,
        held_by_others,
    })
}
