//! Finishing claimed rows on SQLite: one `IMMEDIATE` transaction per batch of finishes
//! (done, retry, annotate, dead letter), a dead letter's move, its fan-out rows and
//! the deletion of its row together.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::enqueue::Enqueuer;
use crate::outbox::model::{AttemptError, DeadLetter, Finish};
use crate::store::outbox_rows::{self as rows, to_u32};

/// What a finish batch did: how many applied, and whether fan-out rows were created.
pub(super) struct Finished {
    pub(super) applied: u64,
    pub(super) created: usize,
}

/// Applies `finishes` in one `IMMEDIATE` transaction of its own.
pub(super) fn finish(
    c: &mut Connection,
    finishes: Vec<Finish>,
    now_ms: i64,
) -> rusqlite::Result<Finished> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let done = apply(&tx, finishes, now_ms)?;
    tx.commit()?;
    Ok(done)
}

/// Applies `finishes` inside the caller's transaction `tx` (a finish batch's own, or
/// the claim's that the finishes are folded into: `super::claim::finish_and_claim`).
pub(super) fn apply(
    tx: &Connection,
    finishes: Vec<Finish>,
    now_ms: i64,
) -> rusqlite::Result<Finished> {
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
        let mut enqueuer = Enqueuer::new(tx)?;
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
                    let moved = dead_letter(tx, id, Some(token), error, now_ms)?;
                    if let Some((dead, delivered)) = moved {
                        applied += 1;
                        let fanout = rows::fanout_rows(fanout, &dead, &delivered);
                        enqueuer.insert(&dead.event_id, &fanout, now_ms)?;
                    }
                }
            }
        }
        created = enqueuer.created;
    }
    Ok(Finished { applied, created })
}

/// Moves row `id` (if `token` still holds it; `None` for a row under no lease) to the
/// dead letters; returns the dead letter and the payload its last attempt delivered.
/// Also how a stranded row is moved (`super::versions`), so every dead letter is made
/// the same way.
pub(super) fn dead_letter(
    tx: &Connection,
    id: i64,
    token: Option<i64>,
    error: AttemptError,
    now_ms: i64,
) -> rusqlite::Result<Option<(DeadLetter, Vec<u8>)>> {
    let gone = tx
        .prepare_cached(
            "DELETE FROM outbox WHERE id = ?1 AND lease_token IS ?2 RETURNING binding_id,
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
