//! [`BackfillStore`] for [`SqliteBackend`]: the jobs (migration 11, `super::schema`),
//! the event pages they walk, and a step's one transaction.
//!
//! A step runs on the writer in one `IMMEDIATE` transaction: the job's row is updated
//! first, under the condition that it is still running and leased to the stepping
//! process, and the rows go in only if it was (through the same [`Enqueuer`] as an
//! ingested event's rows, so the binding's dedupe, debounce and ordering apply). A
//! job paused, cancelled or taken over in between makes the step write nothing.

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, TransactionBehavior};

use super::enqueue::Enqueuer;
use super::events::{row_to_event, SELECT_EVENTS};
use super::{sql_err, SqliteBackend};
use crate::error::Result;
use crate::store::backfill_rows::{spec_json, states_sql, JobColumns, JOB_COLUMNS};
use crate::triggers::backfill::{
    BackfillJob, BackfillSpec, BackfillState, BackfillStep, BackfillStore, Window,
};
use crate::triggers::TriggerEvent;

fn job(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobColumns> {
    Ok(JobColumns {
        id: r.get(0)?,
        spec: r.get(1)?,
        state: r.get(2)?,
        counts: [
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
            r.get(8)?,
            r.get(9)?,
            r.get(10)?,
        ],
        error: r.get(11)?,
        lease_holder: r.get(12)?,
        lease_until_ms: r.get(13)?,
        created_at_ms: r.get(14)?,
        updated_at_ms: r.get(15)?,
    })
}

/// The WHERE clause of a window (sequence range, sources, received time) and its
/// arguments.
fn window_sql(w: &Window<'_>) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut sql = "seq > ?1 AND seq <= ?2".to_owned();
    let mut args = vec![V::Integer(w.after_seq), V::Integer(w.end_seq)];
    if !w.sources.is_empty() {
        let marks: Vec<String> = w
            .sources
            .iter()
            .map(|s| {
                args.push(V::Text(s.clone()));
                format!("?{}", args.len())
            })
            .collect();
        sql.push_str(&format!(" AND source IN ({})", marks.join(", ")));
    }
    if let Some(since) = w.since_ms {
        args.push(V::Integer(since));
        sql.push_str(&format!(" AND received_at >= ?{}", args.len()));
    }
    if let Some(until) = w.until_ms {
        args.push(V::Integer(until));
        sql.push_str(&format!(" AND received_at < ?{}", args.len()));
    }
    (sql, args)
}

/// How many events the condition `cond` (with `args`, from [`window_sql`]) holds.
fn count(c: &Connection, cond: &str, args: Vec<rusqlite::types::Value>) -> rusqlite::Result<i64> {
    c.prepare_cached(&format!("SELECT count(*) FROM events WHERE {cond}"))?
        .query_row(params_from_iter(args), |r| r.get(0))
}

fn read_jobs(c: &Connection, id: Option<i64>, limit: usize) -> rusqlite::Result<Vec<JobColumns>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {JOB_COLUMNS} FROM backfills WHERE (?1 IS NULL OR id = ?1)
         ORDER BY id DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![id, limit as i64], job)?;
    rows.collect()
}

fn step(c: &mut Connection, s: &BackfillStep) -> rusqlite::Result<Option<u64>> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let state = if s.done { "done" } else { "running" };
    let updated = tx.execute(
        "UPDATE backfills SET cursor = ?3, walked = walked + ?4, matched = matched + ?5,
            filtered = filtered + ?6, skipped = skipped + ?7, state = ?8,
            lease_until = ?9, updated_at = ?10, error = NULL
         WHERE id = ?1 AND lease_holder = ?2 AND state = 'running' AND cursor = ?11",
        params![
            s.id,
            s.holder,
            s.cursor,
            s.walked,
            s.matched,
            s.filtered,
            s.skipped,
            state,
            if s.done { 0 } else { s.lease_until_ms },
            s.now_ms,
            s.from_cursor
        ],
    )?;
    if updated == 0 {
        return Ok(None);
    }
    let mut taken_before = 0i64;
    let written = {
        let mut enqueuer = Enqueuer::new(&tx)?;
        let mut record = tx.prepare_cached(
            "INSERT OR IGNORE INTO backfilled (binding_id, fingerprint, event_id, backfill_id, at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (event_id, row) in &s.rows {
            let recorded = record.execute(params![
                row.binding_id,
                row.fingerprint,
                event_id,
                s.id,
                s.now_ms
            ])?;
            if s.exclusive && recorded == 0 {
                taken_before += 1;
                continue;
            }
            enqueuer.insert(event_id, std::slice::from_ref(row), s.now_ms)?;
        }
        enqueuer.created as u64
    };
    tx.execute(
        "UPDATE backfills SET enqueued = enqueued + ?2, skipped = skipped + ?3 WHERE id = ?1",
        params![s.id, written as i64, taken_before],
    )?;
    tx.commit()?;
    Ok(Some(written))
}

#[async_trait::async_trait]
impl BackfillStore for SqliteBackend {
    async fn create_backfill(&self, spec: &BackfillSpec, now_ms: i64) -> Result<BackfillJob> {
        let spec = spec.clone();
        let found = Self::with(&self.writer, move |c| {
            let err = sql_err("create a backfill");
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&err)?;
            let end_seq: i64 = tx
                .query_row("SELECT COALESCE(max(seq), 0) FROM events", [], |r| r.get(0))
                .map_err(&err)?;
            let window = Window {
                after_seq: 0,
                end_seq,
                sources: &spec.sources,
                since_ms: spec.since_ms,
                until_ms: spec.until_ms,
            };
            let (cond, args) = window_sql(&window);
            let total = count(&tx, &cond, args).map_err(&err)?;
            tx.execute(
                "INSERT INTO backfills (binding_id, spec, state, cursor, end_seq, total,
                    created_at, updated_at) VALUES (?1, ?2, 'running', 0, ?3, ?4, ?5, ?5)",
                params![spec.binding, spec_json(&spec), end_seq, total, now_ms],
            )
            .map_err(&err)?;
            let id = tx.last_insert_rowid();
            let job = read_jobs(&tx, Some(id), 1).map_err(&err)?;
            tx.commit().map_err(&err)?;
            Ok(job)
        })
        .await?;
        found
            .into_iter()
            .next()
            .expect("the job was just written")
            .into_job()
    }

    async fn backfills(&self, id: Option<i64>, limit: usize) -> Result<Vec<BackfillJob>> {
        let found = Self::with(&self.reader, move |c| {
            read_jobs(c, id, limit).map_err(sql_err("read backfills"))
        })
        .await?;
        found.into_iter().map(JobColumns::into_job).collect()
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
        let from: Vec<String> = states_sql(from).into_iter().map(str::to_owned).collect();
        let (error, holder) = (error.map(str::to_owned), holder.map(str::to_owned));
        Self::with(&self.writer, move |c| {
            let marks: Vec<String> = (0..from.len()).map(|i| format!("?{}", i + 6)).collect();
            let mut args: Vec<rusqlite::types::Value> = vec![
                id.into(),
                to.as_str().to_owned().into(),
                error.into(),
                now_ms.into(),
                holder.into(),
            ];
            args.extend(from.into_iter().map(Into::into));
            let changed = c
                .execute(
                    &format!(
                        "UPDATE backfills SET state = ?2, error = COALESCE(?3, error),
                            updated_at = ?4, lease_holder = NULL, lease_until = 0
                         WHERE id = ?1 AND (?5 IS NULL OR lease_holder = ?5)
                             AND state IN ({})",
                        marks.join(", ")
                    ),
                    params_from_iter(args),
                )
                .map_err(sql_err("change a backfill"))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn lease_backfill(
        &self,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<BackfillJob>> {
        let holder = holder.to_owned();
        let found = Self::with(&self.writer, move |c| {
            c.query_row(
                &format!(
                    "UPDATE backfills SET lease_holder = ?1, lease_until = ?3
                     WHERE id = (SELECT id FROM backfills WHERE state = 'running'
                         AND (lease_until <= ?2 OR lease_holder = ?1) ORDER BY id LIMIT 1)
                     RETURNING {JOB_COLUMNS}"
                ),
                params![holder, now_ms, until_ms],
                job,
            )
            .optional()
            .map_err(sql_err("lease a backfill"))
        })
        .await?;
        let Some(found) = found else {
            return Ok(None);
        };
        let id = found.id;
        match found.into_job() {
            Ok(job) => Ok(Some(job)),
            Err(e) => {
                tracing::warn!(backfill = id, error = %e, "a backfill this build cannot read is set aside for a lease period");
                Self::with(&self.writer, move |c| {
                    c.execute(
                        "UPDATE backfills SET lease_holder = NULL, lease_until = ?2 WHERE id = ?1",
                        params![id, until_ms],
                    )
                    .map_err(sql_err("set a backfill aside"))
                })
                .await?;
                Ok(None)
            }
        }
    }

    async fn backfill_events(
        &self,
        window: Window<'_>,
        limit: usize,
    ) -> Result<Vec<(i64, TriggerEvent)>> {
        let (cond, mut args) = window_sql(&window);
        args.push((limit as i64).into());
        let sql = format!(
            "{SELECT_EVENTS} WHERE {cond} ORDER BY seq LIMIT ?{}",
            args.len()
        );
        Self::with(&self.reader, move |c| {
            let mut stmt = c.prepare_cached(&sql).map_err(sql_err("read events"))?;
            let rows = stmt
                .query_map(params_from_iter(args), row_to_event)
                .map_err(sql_err("read events"))?;
            rows.map(|r| r.map(|e| (e.seq, e.event)))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err("read events"))
        })
        .await
    }

    async fn backfill_count(&self, window: Window<'_>) -> Result<i64> {
        let (cond, args) = window_sql(&window);
        Self::with(&self.reader, move |c| {
            count(c, &cond, args).map_err(sql_err("count events"))
        })
        .await
    }

    async fn backfill_handled(
        &self,
        binding_id: &str,
        fingerprint: &str,
        event_ids: &[String],
    ) -> Result<Vec<String>> {
        let (binding_id, fingerprint, ids) = (
            binding_id.to_owned(),
            fingerprint.to_owned(),
            event_ids.to_vec(),
        );
        Self::with(&self.reader, move |c| {
            let err = sql_err("read what a binding handled");
            let mut dead = c
                .prepare_cached(
                    "SELECT 1 FROM dead_letters WHERE event_id = ?1 AND binding_id = ?2
                        AND fingerprint = ?3 LIMIT 1",
                )
                .map_err(&err)?;
            let mut backfilled = c
                .prepare_cached(
                    "SELECT 1 FROM backfilled WHERE binding_id = ?1 AND fingerprint = ?2
                        AND event_id = ?3",
                )
                .map_err(&err)?;
            let mut pending = c
                .prepare_cached(
                    "SELECT 1 FROM outbox WHERE event_id = ?1 AND binding_id = ?2 LIMIT 1",
                )
                .map_err(&err)?;
            let mut handled = Vec::new();
            for id in ids {
                let found = dead
                    .exists(params![id, binding_id, fingerprint])
                    .map_err(&err)?
                    || backfilled
                        .exists(params![binding_id, fingerprint, id])
                        .map_err(&err)?
                    || pending.exists(params![id, binding_id]).map_err(&err)?;
                if found {
                    handled.push(id);
                }
            }
            Ok(handled)
        })
        .await
    }

    async fn backfill_step(&self, step_: &BackfillStep) -> Result<Option<u64>> {
        let s = step_.clone();
        Self::with(&self.writer, move |c| {
            step(c, &s).map_err(sql_err("write a backfill step"))
        })
        .await
    }
}
