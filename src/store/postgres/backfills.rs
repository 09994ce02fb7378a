//! [`BackfillStore`] for [`PostgresBackend`]: the jobs (migration 11, `super::schema`)
//! shared by every process on the database, the event pages they walk, and a step's
//! one transaction.
//!
//! - A lease is one conditional `UPDATE` of the oldest running job whose lease has
//!   ended, picked `FOR UPDATE SKIP LOCKED`: of several processes asking at once, each
//!   job goes to one, and the others skip it rather than wait.
//! - A step updates the job's row first, on the condition that it is still running
//!   and leased to the stepping process (the row lock then holds off a pause or a
//!   takeover until the commit), and writes the rows only if it was: rows without flow
//!   control in one array statement ([`INSERT_ROWS`]), the others one [`FLOW_ROW`]
//!   each, in order, as ingest writes them.

use tokio_postgres::Row;

use super::enqueue::{insert_rows, write_flow_row, FLOW_ROW, INSERT_ROWS};
use super::events::{row_to_event, SELECT_EVENTS};
use super::{pg_err, prepared, PostgresBackend};
use crate::error::Result;
use crate::outbox::model::Enqueue;
use crate::store::backfill_rows::{spec_json, states_sql, JobColumns, JOB_COLUMNS};
use crate::triggers::backfill::{
    BackfillJob, BackfillSpec, BackfillState, BackfillStep, BackfillStore, Window,
};
use crate::triggers::TriggerEvent;

/// A window's condition: `$1` after, `$2` end, `$3` sources (empty: all), `$4` since,
/// `$5` until (both nullable).
const WINDOW: &str = "seq > $1 AND seq <= $2
    AND (cardinality($3::TEXT[]) = 0 OR source = ANY($3::TEXT[]))
    AND ($4::BIGINT IS NULL OR received_at >= $4)
    AND ($5::BIGINT IS NULL OR received_at < $5)";

fn job(r: &Row) -> JobColumns {
    JobColumns {
        id: r.get(0),
        spec: r.get(1),
        state: r.get(2),
        counts: [
            r.get(3),
            r.get(4),
            r.get(5),
            r.get(6),
            r.get(7),
            r.get(8),
            r.get(9),
            r.get(10),
        ],
        error: r.get(11),
        lease_holder: r.get(12),
        lease_until_ms: r.get(13),
        created_at_ms: r.get(14),
        updated_at_ms: r.get(15),
    }
}

#[async_trait::async_trait]
impl BackfillStore for PostgresBackend {
    async fn create_backfill(&self, spec: &BackfillSpec, now_ms: i64) -> Result<BackfillJob> {
        let client = self.client().await?;
        let bad = pg_err("create a backfill");
        let end_seq: i64 = client
            .query_one("SELECT COALESCE(max(seq), 0)::BIGINT FROM events", &[])
            .await
            .map_err(&bad)?
            .get(0);
        let window = Window {
            after_seq: 0,
            end_seq,
            sources: &spec.sources,
            since_ms: spec.since_ms,
            until_ms: spec.until_ms,
        };
        let total = self.backfill_count(window).await?;
        let row = client
            .query_one(
                &format!(
                    "INSERT INTO backfills (binding_id, spec, state, cursor, end_seq, total,
                         created_at, updated_at) VALUES ($1, $2, 'running', 0, $3, $4, $5, $5)
                     RETURNING {JOB_COLUMNS}"
                ),
                &[&spec.binding, &spec_json(spec), &end_seq, &total, &now_ms],
            )
            .await
            .map_err(&bad)?;
        job(&row).into_job()
    }

    async fn backfills(&self, id: Option<i64>, limit: usize) -> Result<Vec<BackfillJob>> {
        let found = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {JOB_COLUMNS} FROM backfills WHERE ($1::BIGINT IS NULL OR id = $1)
                     ORDER BY id DESC LIMIT $2"
                ),
                &[&id, &(limit as i64)],
            )
            .await
            .map_err(pg_err("read backfills"))?;
        found.iter().map(|r| job(r).into_job()).collect()
    }

    async fn set_backfill_state(
        &self,
        id: i64,
        from: &[BackfillState],
        to: BackfillState,
        holder: Option<&str>,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool> {
        let changed = self
            .client()
            .await?
            .execute(
                "UPDATE backfills SET state = $2, error = COALESCE($3, error), updated_at = $4,
                    lease_holder = NULL, lease_until = 0
                 WHERE id = $1 AND state = ANY($5::TEXT[])
                     AND ($6::TEXT IS NULL OR lease_holder = $6)",
                &[
                    &id,
                    &to.as_str(),
                    &error,
                    &now_ms,
                    &states_sql(from),
                    &holder,
                ],
            )
            .await
            .map_err(pg_err("change a backfill"))?;
        Ok(changed == 1)
    }

    async fn lease_backfill(
        &self,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<BackfillJob>> {
        let found = self
            .client()
            .await?
            .query_opt(
                &format!(
                    "UPDATE backfills SET lease_holder = $1, lease_until = $3
                     WHERE id = (SELECT id FROM backfills WHERE state = 'running'
                         AND (lease_until <= $2 OR lease_holder = $1)
                         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                     RETURNING {JOB_COLUMNS}"
                ),
                &[&holder, &now_ms, &until_ms],
            )
            .await
            .map_err(pg_err("lease a backfill"))?;
        let Some(found) = found else {
            return Ok(None);
        };
        let found = job(&found);
        let id = found.id;
        match found.into_job() {
            Ok(job) => Ok(Some(job)),
            Err(e) => {
                tracing::warn!(backfill = id, error = %e, "a backfill this build cannot read is set aside for a lease period");
                self.client()
                    .await?
                    .execute(
                        "UPDATE backfills SET lease_holder = NULL, lease_until = $2 WHERE id = $1",
                        &[&id, &until_ms],
                    )
                    .await
                    .map_err(pg_err("set a backfill aside"))?;
                Ok(None)
            }
        }
    }

    async fn backfill_events(
        &self,
        w: Window<'_>,
        limit: usize,
    ) -> Result<Vec<(i64, TriggerEvent)>> {
        let found = self
            .client()
            .await?
            .query(
                &format!("{SELECT_EVENTS} WHERE {WINDOW} ORDER BY seq LIMIT $6"),
                &[
                    &w.after_seq,
                    &w.end_seq,
                    &w.sources,
                    &w.since_ms,
                    &w.until_ms,
                    &(limit as i64),
                ],
            )
            .await
            .map_err(pg_err("read events"))?;
        found
            .iter()
            .map(|r| row_to_event(r).map(|e| (e.seq, e.event)))
            .collect()
    }

    async fn backfill_count(&self, w: Window<'_>) -> Result<i64> {
        let row = self
            .client()
            .await?
            .query_one(
                &format!("SELECT count(*) FROM events WHERE {WINDOW}"),
                &[
                    &w.after_seq,
                    &w.end_seq,
                    &w.sources,
                    &w.since_ms,
                    &w.until_ms,
                ],
            )
            .await
            .map_err(pg_err("count events"))?;
        Ok(row.get(0))
    }

    async fn backfill_handled(
        &self,
        binding_id: &str,
        fingerprint: &str,
        event_ids: &[String],
    ) -> Result<Vec<String>> {
        let found = self
            .client()
            .await?
            .query(
                "SELECT e.id FROM unnest($1::TEXT[]) AS e(id)
                 WHERE EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id
                         AND d.binding_id = $2 AND d.fingerprint = $3)
                     OR EXISTS (SELECT 1 FROM backfilled b WHERE b.binding_id = $2
                         AND b.fingerprint = $3 AND b.event_id = e.id)
                     OR EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.id
                         AND o.binding_id = $2)",
                &[&event_ids, &binding_id, &fingerprint],
            )
            .await
            .map_err(pg_err("read what a binding handled"))?;
        Ok(found.iter().map(|r| r.get(0)).collect())
    }

    async fn backfill_step(&self, s: &BackfillStep) -> Result<Option<u64>> {
        let mut client = self.client().await?;
        let insert = prepared(&client, INSERT_ROWS).await?;
        let flow = prepared(&client, FLOW_ROW).await?;
        let bad = pg_err("write a backfill step");
        let tx = client.transaction().await.map_err(&bad)?;
        let state = if s.done { "done" } else { "running" };
        let lease_until = if s.done { 0 } else { s.lease_until_ms };
        let updated = tx
            .execute(
                "UPDATE backfills SET cursor = $3, walked = walked + $4, matched = matched + $5,
                    filtered = filtered + $6, skipped = skipped + $7, state = $8,
                    lease_until = $9, updated_at = $10, error = NULL
                 WHERE id = $1 AND lease_holder = $2 AND state = 'running' AND cursor = $11",
                &[
                    &s.id,
                    &s.holder,
                    &s.cursor,
                    &s.walked,
                    &s.matched,
                    &s.filtered,
                    &s.skipped,
                    &state,
                    &lease_until,
                    &s.now_ms,
                    &s.from_cursor,
                ],
            )
            .await
            .map_err(&bad)?;
        if updated == 0 {
            return Ok(None);
        }
        // The record of each (binding version, event) first: with `exclusive`, only
        // the rows whose record this step made are enqueued.
        let (bindings, fingerprints, events): (Vec<&str>, Vec<&str>, Vec<&str>) = s
            .rows
            .iter()
            .map(|(e, r)| (r.binding_id.as_str(), r.fingerprint.as_str(), e.as_str()))
            .fold(
                (vec![], vec![], vec![]),
                |(mut b, mut f, mut e), (x, y, z)| {
                    b.push(x);
                    f.push(y);
                    e.push(z);
                    (b, f, e)
                },
            );
        let recorded: std::collections::HashSet<String> = tx
            .query(
                "INSERT INTO backfilled (binding_id, fingerprint, event_id, backfill_id, at)
                 SELECT b, f, e, $4, $5 FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS r(b, f, e)
                 ON CONFLICT (binding_id, fingerprint, event_id) DO NOTHING
                 RETURNING event_id",
                &[&bindings, &fingerprints, &events, &s.id, &s.now_ms],
            )
            .await
            .map_err(&bad)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let (take, refused): (Vec<&(String, Enqueue)>, Vec<&(String, Enqueue)>) = s
            .rows
            .iter()
            .partition(|(e, _)| !s.exclusive || recorded.contains(e));
        let (flowing, plain): (Vec<&(String, Enqueue)>, Vec<&(String, Enqueue)>) =
            take.into_iter().partition(|(_, r)| r.has_flow_control());
        let mut written = plain.len() as u64;
        if !plain.is_empty() {
            let plain: Vec<(String, Enqueue)> = plain.into_iter().cloned().collect();
            insert_rows(&tx, &insert, &plain, s.now_ms)
                .await
                .map_err(&bad)?;
        }
        for (event_id, row) in flowing {
            if write_flow_row(&tx, &flow, event_id, row, s.now_ms)
                .await
                .map_err(&bad)?
            {
                written += 1;
            }
        }
        tx.execute(
            "UPDATE backfills SET enqueued = enqueued + $2, skipped = skipped + $3 WHERE id = $1",
            &[&s.id, &(written as i64), &(refused.len() as i64)],
        )
        .await
        .map_err(&bad)?;
        tx.commit().await.map_err(&bad)?;
        Ok(Some(written))
    }
}
