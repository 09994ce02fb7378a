//! [`VersionStore`] for [`SqliteBackend`]: binding versions, their lifecycle log and
//! pauses (migration 4, `super::schema`), and the two outbox questions versions ask:
//! how many rows each (binding, fingerprint) still has, and which rows no version can
//! run any more.
//!
//! Writes go to the writer connection in one `IMMEDIATE` transaction each, reads to
//! the reader, both from the blocking pool like the rest of the backend. SQLite has
//! one writer, so the conflict check of a commit (read the records sharing a number or
//! a fingerprint, then insert) cannot race another commit. A stranded row becomes a
//! dead letter exactly as an exhausted one does ([`super::finish::dead_letter`]).

use rusqlite::{params, Connection, TransactionBehavior};

use super::{finish, sql_err, SqliteBackend};
use crate::error::Result;
use crate::store::outbox_rows::to_u32;
use crate::store::version_rows::{self as vrows, Upsert};
use crate::triggers::versions::{LifecycleCommit, LifecycleEntry, VersionRecord, VersionStore};

const NEWEST_SEQ: &str = "SELECT COALESCE(max(seq), 0) FROM trigger_lifecycle";

const ENTRY_COLUMNS: &str = "seq, binding_id, version, fingerprint, event, reason, process, at";

/// The outbox rows no version record can run, and that no live lease holds: `?1` now.
/// Queue bindings (`queue:…`) have no versions and are never stranded.
const STRANDED: &str = "SELECT o.id, o.lease_token, o.binding_id, o.fingerprint, o.attempts
    FROM outbox o
    WHERE (o.next_attempt_at <= ?1 OR o.lease_token IS NULL)
        AND substr(o.binding_id, 1, 6) <> 'queue:'
        AND NOT EXISTS (SELECT 1 FROM trigger_versions v
            WHERE v.binding_id = o.binding_id AND v.fingerprint = o.fingerprint)
    ORDER BY o.id";

fn commit(c: &mut Connection, commit: &LifecycleCommit, now_ms: i64) -> Result<i64> {
    let err = sql_err("commit a lifecycle step");
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(&err)?;
    {
        let mut found = tx
            .prepare_cached(
                "SELECT version, fingerprint FROM trigger_versions
                 WHERE binding_id = ?1 AND (version = ?2 OR fingerprint = ?3)",
            )
            .map_err(&err)?;
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO trigger_versions (binding_id, version, fingerprint, definition,
                    origin, state, pinned, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .map_err(&err)?;
        let mut update = tx
            .prepare_cached(
                "UPDATE trigger_versions SET state = ?3, pinned = ?4, updated_at = ?5
                 WHERE binding_id = ?1 AND version = ?2",
            )
            .map_err(&err)?;
        for v in &commit.versions {
            let n = vrows::version_col(v.version);
            let stored = found
                .query_map(params![v.binding_id, n, v.fingerprint], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(&err)?;
            let written = match vrows::upsert(v, &stored)? {
                Upsert::Insert => insert.execute(params![
                    v.binding_id,
                    n,
                    v.fingerprint,
                    v.definition,
                    v.origin.as_str(),
                    v.state.as_str(),
                    v.pinned,
                    v.created_at_ms,
                    v.updated_at_ms
                ]),
                Upsert::Update => update.execute(params![
                    v.binding_id,
                    n,
                    v.state.as_str(),
                    v.pinned,
                    v.updated_at_ms
                ]),
            };
            written.map_err(&err)?;
        }
        let mut append = tx
            .prepare_cached(
                "INSERT INTO trigger_lifecycle (binding_id, version, fingerprint, event, reason,
                    process, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .map_err(&err)?;
        for e in &commit.entries {
            append
                .execute(params![
                    e.binding_id,
                    vrows::version_col(e.version),
                    e.fingerprint,
                    e.event.as_str(),
                    e.reason,
                    e.process,
                    e.at_ms
                ])
                .map_err(&err)?;
        }
        for (id, paused) in &commit.pauses {
            let written = if *paused {
                tx.prepare_cached(
                    "INSERT INTO trigger_pauses (binding_id, paused_at) VALUES (?1, ?2)
                     ON CONFLICT (binding_id) DO NOTHING",
                )
                .and_then(|mut s| s.execute(params![id, vrows::paused_at(commit, id, now_ms)]))
            } else {
                tx.prepare_cached("DELETE FROM trigger_pauses WHERE binding_id = ?1")
                    .and_then(|mut s| s.execute(params![id]))
            };
            written.map_err(&err)?;
        }
    }
    let seq = tx.query_row(NEWEST_SEQ, [], |r| r.get(0)).map_err(&err)?;
    tx.commit().map_err(&err)?;
    Ok(seq)
}

fn strand(c: &mut Connection, now_ms: i64) -> rusqlite::Result<u64> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = tx
        .prepare_cached(STRANDED)?
        .query_map(params![now_ms], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut moved = 0;
    for (id, token, binding_id, fingerprint, attempts) in found {
        let error = vrows::stranded_error(&binding_id, &fingerprint, to_u32(attempts), now_ms);
        if finish::dead_letter(&tx, id, token, error, now_ms)?.is_some() {
            moved += 1;
        }
    }
    tx.commit()?;
    Ok(moved)
}

/// Reads every row of `sql` (no parameters) with `row`.
fn read_all<T>(
    c: &Connection,
    sql: &str,
    row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    c.prepare_cached(sql)?.query_map([], row)?.collect()
}

#[async_trait::async_trait]
impl VersionStore for SqliteBackend {
    async fn versions(&self) -> Result<Vec<VersionRecord>> {
        let found = Self::with(&self.reader, |c| {
            read_all(
                c,
                "SELECT binding_id, version, fingerprint, definition, origin, state, pinned,
                    created_at, updated_at FROM trigger_versions ORDER BY binding_id, version",
                |r| vrows::VersionRow::try_from(r),
            )
            .map_err(sql_err("read binding versions"))
        })
        .await?;
        found.into_iter().map(vrows::version_record).collect()
    }

    async fn pauses(&self) -> Result<Vec<String>> {
        Self::with(&self.reader, |c| {
            read_all(
                c,
                "SELECT binding_id FROM trigger_pauses ORDER BY binding_id",
                |r| r.get(0),
            )
            .map_err(sql_err("read paused bindings"))
        })
        .await
    }

    async fn commit_lifecycle(&self, step: &LifecycleCommit) -> Result<i64> {
        let step = step.clone();
        let now_ms = crate::clock::now_ms();
        Self::with(&self.writer, move |c| commit(c, &step, now_ms)).await
    }

    async fn lifecycle_seq(&self) -> Result<i64> {
        Self::with(&self.reader, |c| {
            c.query_row(NEWEST_SEQ, [], |r| r.get(0))
                .map_err(sql_err("read the lifecycle seq"))
        })
        .await
    }

    async fn history(
        &self,
        binding_id: &str,
        after_seq: Option<i64>,
        limit: usize,
    ) -> Result<Vec<LifecycleEntry>> {
        let binding_id = binding_id.to_owned();
        let found = Self::with(&self.reader, move |c| {
            c.prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM trigger_lifecycle
                 WHERE binding_id = ?1 AND (?2 IS NULL OR seq > ?2) ORDER BY seq LIMIT ?3"
            ))
            .and_then(|mut s| {
                s.query_map(params![binding_id, after_seq, limit as i64], |r| {
                    vrows::EntryRow::try_from(r)
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(sql_err("read a binding's lifecycle"))
        })
        .await?;
        found.into_iter().map(vrows::lifecycle_entry).collect()
    }

    async fn lifecycle(&self) -> Result<Vec<LifecycleEntry>> {
        let found = Self::with(&self.reader, |c| {
            let sql = format!("SELECT {ENTRY_COLUMNS} FROM trigger_lifecycle ORDER BY seq");
            read_all(c, &sql, |r| vrows::EntryRow::try_from(r))
                .map_err(sql_err("read the lifecycle log"))
        })
        .await?;
        found.into_iter().map(vrows::lifecycle_entry).collect()
    }

    async fn with_rows(&self, versions: &[(String, String)]) -> Result<Vec<(String, String)>> {
        let versions = versions.to_vec();
        Self::with(&self.reader, move |c| {
            with_rows(c, versions).map_err(sql_err("look for a version's rows"))
        })
        .await
    }

    async fn strand(&self, now_ms: i64) -> Result<u64> {
        Self::with(&self.writer, move |c| {
            strand(c, now_ms).map_err(sql_err("dead-letter stranded rows"))
        })
        .await
    }
}

/// The `versions` that still hold an outbox row: one indexed-or-not existence check
/// each (the oldest rows, a draining version's, are found at once).
fn with_rows(
    c: &mut Connection,
    versions: Vec<(String, String)>,
) -> rusqlite::Result<Vec<(String, String)>> {
    let mut exists = c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM outbox WHERE binding_id = ?1 AND fingerprint = ?2)",
    )?;
    let mut found = Vec::new();
    for (binding, fingerprint) in versions {
        if exists.query_row(params![binding, fingerprint], |r| r.get::<_, bool>(0))? {
            found.push((binding, fingerprint));
        }
    }
    Ok(found)
}
