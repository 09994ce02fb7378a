//! [`VersionStore`] for [`PostgresBackend`]: binding versions, their lifecycle log and
//! pauses (migration 4, `super::schema`), shared by every runtime process on the
//! database.
//!
//! - A lifecycle commit is one transaction, which ends with
//!   `pg_notify('switchboard_triggers', '')` ([`NOTIFY`]): the notification is
//!   delivered at commit, so every process's listener ([`super::listen`]) wakes its
//!   [`VersionStore::lifecycle_wake`] only once the step can be read.
//! - Two processes may record a version of one binding at the same time. Each reads
//!   the records sharing the number or the fingerprint first (the same decision as on
//!   SQLite, `store::version_rows::upsert`); when both read before either committed,
//!   the unique keys make the second insert wait for the first and then fail, and that
//!   failure is a conflict too, so the caller reloads and decides again.
//! - Stranding picks its rows `FOR UPDATE SKIP LOCKED` (a claim in another process
//!   skips them, or holds them and they are skipped here) and moves each with the
//!   finish's own dead-letter statement ([`super::finish::FINISH_DEAD`]).

use std::sync::Arc;

use futures_util::future::try_join_all;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Row, Transaction};

use super::finish::FINISH_DEAD;
use super::{pg_err, PostgresBackend};
use crate::error::{Error, Result};
use crate::store::outbox_rows::{self as rows, to_u32};
use crate::store::version_rows::{self as vrows, Upsert};
use crate::triggers::versions::{LifecycleCommit, LifecycleEntry, VersionRecord, VersionStore};

/// Tells every listening process that a lifecycle step was committed.
const NOTIFY: &str = "SELECT pg_notify('switchboard_triggers', '')";

const NEWEST_SEQ: &str = "SELECT COALESCE(max(seq), 0)::BIGINT FROM trigger_lifecycle";

const ENTRY_COLUMNS: &str = "seq, binding_id, version, fingerprint, event, reason, process, at";

const SAME_NUMBER_OR_FINGERPRINT: &str = "SELECT version, fingerprint FROM trigger_versions
    WHERE binding_id = $1 AND (version = $2 OR fingerprint = $3)";

const INSERT_VERSION: &str = "INSERT INTO trigger_versions (binding_id, version, fingerprint,
    definition, origin, state, pinned, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

const UPDATE_VERSION: &str = "UPDATE trigger_versions SET state = $3, pinned = $4,
    updated_at = $5 WHERE binding_id = $1 AND version = $2";

const APPEND_ENTRY: &str = "INSERT INTO trigger_lifecycle (binding_id, version, fingerprint,
    event, reason, process, at) VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// The outbox rows no version record can run, and that no live lease holds: `$1` now.
/// Queue bindings (`queue:…`) have no versions and are never stranded.
const STRANDED: &str = "SELECT o.id, o.lease_token, o.binding_id, o.fingerprint, o.attempts
    FROM outbox o
    WHERE (o.next_attempt_at <= $1 OR o.lease_token IS NULL)
        AND substr(o.binding_id, 1, 6) <> 'queue:'
        AND NOT EXISTS (SELECT 1 FROM trigger_versions v
            WHERE v.binding_id = o.binding_id AND v.fingerprint = o.fingerprint)
    ORDER BY o.id
    FOR UPDATE OF o SKIP LOCKED";

/// Inserts or updates `v` inside `tx`, or refuses it as [`Error::Conflict`].
async fn write_version(tx: &Transaction<'_>, v: &VersionRecord) -> Result<()> {
    let n = vrows::version_col(v.version);
    let stored: Vec<(i64, String)> = tx
        .query(
            SAME_NUMBER_OR_FINGERPRINT,
            &[&v.binding_id, &n, &v.fingerprint],
        )
        .await
        .map_err(pg_err("read binding versions"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let written = match vrows::upsert(v, &stored)? {
        Upsert::Insert => {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
                &v.binding_id,
                &n,
                &v.fingerprint,
                &v.definition,
                &v.origin.as_str(),
                &v.state.as_str(),
                &v.pinned,
                &v.created_at_ms,
                &v.updated_at_ms,
            ];
            tx.execute(INSERT_VERSION, &params).await
        }
        Upsert::Update => {
            let state = v.state.as_str();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&v.binding_id, &n, &state, &v.pinned, &v.updated_at_ms];
            tx.execute(UPDATE_VERSION, &params).await
        }
    };
    match written {
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(Error::Conflict(format!(
            "binding {}@v{}: another process recorded a version of {} at the same time ({e}); \
             reload the versions and decide again",
            v.binding_id, v.version, v.binding_id
        ))),
        other => other.map(drop).map_err(pg_err("write a binding version")),
    }
}

async fn commit(tx: &Transaction<'_>, step: &LifecycleCommit, now_ms: i64) -> Result<i64> {
    for v in &step.versions {
        write_version(tx, v).await?;
    }
    let append = tx
        .prepare(APPEND_ENTRY)
        .await
        .map_err(pg_err("prepare a lifecycle append"))?;
    for e in &step.entries {
        let version = vrows::version_col(e.version);
        let event = e.event.as_str();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &e.binding_id,
            &version,
            &e.fingerprint,
            &event,
            &e.reason,
            &e.process,
            &e.at_ms,
        ];
        tx.execute(&append, &params)
            .await
            .map_err(pg_err("append to the lifecycle log"))?;
    }
    for (id, paused) in &step.pauses {
        let written = if *paused {
            let at = vrows::paused_at(step, id, now_ms);
            tx.execute(
                "INSERT INTO trigger_pauses (binding_id, paused_at) VALUES ($1, $2)
                 ON CONFLICT (binding_id) DO NOTHING",
                &[id, &at],
            )
            .await
        } else {
            tx.execute("DELETE FROM trigger_pauses WHERE binding_id = $1", &[id])
                .await
        };
        written.map_err(pg_err("write a pause"))?;
    }
    tx.execute(NOTIFY, &[])
        .await
        .map_err(pg_err("notify a lifecycle step"))?;
    let seq = tx
        .query_one(NEWEST_SEQ, &[])
        .await
        .map_err(pg_err("read the lifecycle seq"))?;
    Ok(seq.get(0))
}

/// The first columns of a row, in order, as a tuple (the shapes `store::version_rows`
/// reads records and entries from).
macro_rules! columns {
    ($r:expr; $($i:literal),*) => { ($($r.get($i)),*) };
}

fn entry(r: &Row) -> Result<LifecycleEntry> {
    vrows::lifecycle_entry(columns!(r; 0, 1, 2, 3, 4, 5, 6, 7))
}

#[async_trait::async_trait]
impl VersionStore for PostgresBackend {
    async fn versions(&self) -> Result<Vec<VersionRecord>> {
        let found = self
            .client()
            .await?
            .query(
                "SELECT binding_id, version, fingerprint, definition, origin, state, pinned,
                    created_at, updated_at FROM trigger_versions ORDER BY binding_id, version",
                &[],
            )
            .await
            .map_err(pg_err("read binding versions"))?;
        found
            .iter()
            .map(|r| vrows::version_record(columns!(r; 0, 1, 2, 3, 4, 5, 6, 7, 8)))
            .collect()
    }

    async fn pauses(&self) -> Result<Vec<String>> {
        let found = self
            .client()
            .await?
            .query(
                "SELECT binding_id FROM trigger_pauses ORDER BY binding_id",
                &[],
            )
            .await
            .map_err(pg_err("read paused bindings"))?;
        Ok(found.iter().map(|r| r.get(0)).collect())
    }

    async fn commit_lifecycle(&self, step: &LifecycleCommit) -> Result<i64> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_err("begin a lifecycle step"))?;
        // Any error drops `tx` uncommitted: nothing of the step is written.
        let seq = commit(&tx, step, crate::clock::now_ms()).await?;
        tx.commit()
            .await
            .map_err(pg_err("commit a lifecycle step"))?;
        Ok(seq)
    }

    async fn lifecycle_seq(&self) -> Result<i64> {
        let row = self
            .client()
            .await?
            .query_one(NEWEST_SEQ, &[])
            .await
            .map_err(pg_err("read the lifecycle seq"))?;
        Ok(row.get(0))
    }

    async fn history(
        &self,
        binding_id: &str,
        after_seq: Option<i64>,
        limit: usize,
    ) -> Result<Vec<LifecycleEntry>> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM trigger_lifecycle
             WHERE binding_id = $1 AND ($2::BIGINT IS NULL OR seq > $2) ORDER BY seq LIMIT $3"
        );
        let found = self
            .client()
            .await?
            .query(&sql, &[&binding_id, &after_seq, &(limit as i64)])
            .await
            .map_err(pg_err("read a binding's lifecycle"))?;
        found.iter().map(entry).collect()
    }

    async fn lifecycle(&self) -> Result<Vec<LifecycleEntry>> {
        let sql = format!("SELECT {ENTRY_COLUMNS} FROM trigger_lifecycle ORDER BY seq");
        let found = self
            .client()
            .await?
            .query(&sql, &[])
            .await
            .map_err(pg_err("read the lifecycle log"))?;
        found.iter().map(entry).collect()
    }

    async fn with_rows(&self, versions: &[(String, String)]) -> Result<Vec<(String, String)>> {
        let (bindings, fingerprints): (Vec<&str>, Vec<&str>) = versions
            .iter()
            .map(|(b, f)| (b.as_str(), f.as_str()))
            .unzip();
        let found = self
            .client()
            .await?
            .query(
                "SELECT v.b, v.f FROM unnest($1::TEXT[], $2::TEXT[]) AS v(b, f)
                 WHERE EXISTS (SELECT 1 FROM outbox o WHERE o.binding_id = v.b AND o.fingerprint = v.f)",
                &[&bindings, &fingerprints],
            )
            .await
            .map_err(pg_err("look for a version's rows"))?;
        Ok(found.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn strand(&self, now_ms: i64) -> Result<u64> {
        let mut client = self.client().await?;
        let dead = client
            .prepare_cached(FINISH_DEAD)
            .await
            .map_err(pg_err("prepare a dead letter"))?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_err("begin stranding"))?;
        let found = tx
            .query(STRANDED, &[&now_ms])
            .await
            .map_err(pg_err("find stranded rows"))?;
        let moves = found.iter().map(|r| {
            let (id, token): (i64, Option<i64>) = (r.get(0), r.get(1));
            let attempts = to_u32(r.get::<_, i32>(4).into());
            let error = vrows::stranded_error(r.get(2), r.get(3), attempts, now_ms);
            let (tx, dead) = (&tx, &dead);
            async move {
                let error = rows::error_json(&error);
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&id, &token, &error, &now_ms];
                tx.query_opt(dead, &params).await
            }
        });
        let moved = try_join_all(moves)
            .await
            .map_err(pg_err("dead-letter stranded rows"))?;
        tx.commit().await.map_err(pg_err("commit stranding"))?;
        Ok(moved.iter().filter(|m| m.is_some()).count() as u64)
    }

    fn lifecycle_wake(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.lifecycle.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::listen;

    #[test]
    fn a_lifecycle_step_notifies_the_channel_the_listener_listens_on() {
        assert!(NOTIFY.contains(&format!("pg_notify('{}', '')", listen::TRIGGERS_CHANNEL)));
    }
}
