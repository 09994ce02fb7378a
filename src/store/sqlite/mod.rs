//! The embedded SQLite backend (rusqlite, bundled SQLite: nothing to install).
//!
//! - WAL journal, so the admin API's reads never wait for the writer.
//! - `synchronous = FULL` by default: a commit is on disk before the sender gets its
//!   2xx, power loss included. `NORMAL` (durable across a process crash, not an OS
//!   crash) is an option for those who want the extra speed; group commit makes FULL
//!   cheap enough that it is the default.
//! - Two connections: one writer (only the group-commit task writes) and one reader,
//!   each behind a mutex and used from `spawn_blocking`, never from an async task.
//! - Checkpoints run off the write path: the writer's automatic checkpoint is off and a
//!   checkpointer thread with its own connection runs a PASSIVE checkpoint every
//!   [`CHECKPOINT_EVERY`]. A PASSIVE checkpoint never blocks the writer, so a commit
//!   no longer pays, now and then, for copying the WAL into the database and fsyncing
//!   it (measured: 20–30 ms stalls every few hundred 5 KiB events with the automatic
//!   checkpoint in the committing connection).
//! - A new database gets 16 KiB pages ([`PAGE_SIZE`]): webhook bodies of a few KiB
//!   then share leaf pages instead of each dragging an overflow chain of 4 KiB pages,
//!   so a commit writes fewer WAL frames (measured with 5 KiB bodies: about 1.4×
//!   the rows/s of 4 KiB pages).
//! - Migrations are embedded and applied in order at open, each in its own
//!   transaction, recorded in `schema_migrations`.
//!
//! One file per concern, each with at most one `impl` of a trait: [`schema`] (the
//! migrations), `events` ([`crate::store::Backend`]: ingest, events, audit, state,
//! sweeps), `enqueue` (the outbox rows an ingest or a finish creates), `outbox`
//! ([`crate::outbox::OutboxStore`]), with the SQL of its claims (`claim`), finishes
//! (`finish`) and queues and retention (`queues`), and `versions`
//! ([`crate::triggers::versions::VersionStore`]: binding versions, their lifecycle log,
//! pauses, stranded rows). This file opens the connections.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::store::backend::store_err;
use crate::store::body_codec::{self, BodyCompression};
use crate::store::options::StoreOptions;

mod claim;
mod enqueue;
mod events;
mod finish;
mod outbox;
mod queues;
mod schema;
mod versions;

/// How SQLite syncs commits; see the module doc.
pub(crate) use crate::store::options::Synchronous;
pub(crate) use schema::{newest as newest_schema, read_version as read_schema_version};

/// How often the checkpointer copies the WAL into the database. A second keeps the
/// WAL to about a second of writes and the work of each checkpoint small.
pub(crate) const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Prepared statements kept per connection. rusqlite's default (16) is fewer than the
/// writer runs (ingest, claims, finishes, queues, retention), and an evicted ingest
/// statement would be prepared again on every batch.
pub(crate) const STATEMENT_CACHE: usize = 64;

/// Page size of a newly created database (an existing one keeps its own).
pub(crate) const PAGE_SIZE: u32 = 16 * 1024;

/// The SQLite backend.
pub(crate) struct SqliteBackend {
    writer: Arc<Mutex<Connection>>,
    reader: Arc<Mutex<Connection>>,
    /// Woken after every commit that made outbox rows or queue messages due.
    wake: Arc<tokio::sync::Notify>,
    /// How the writer syncs its commits (claims may sync less; see `claim`).
    synchronous: Synchronous,
    /// How event bodies are stored.
    body_compression: BodyCompression,
    /// Dropping it stops the checkpointer thread.
    _checkpointer: std::sync::mpsc::Sender<()>,
}

fn sql_err(what: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| store_err(&format!("sqlite {what}"), e)
}

impl SqliteBackend {
    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub(crate) async fn open(path: &str, options: &StoreOptions) -> Result<SqliteBackend> {
        let path = path.to_owned();
        let options = options.clone();
        tokio::task::spawn_blocking(move || Self::open_blocking(&path, &options))
            .await
            .map_err(|e| store_err("sqlite open", e))?
    }

    fn open_blocking(path: &str, options: &StoreOptions) -> Result<SqliteBackend> {
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::Store(format!(
                    "cannot create the directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let open = |role: &str| -> Result<Connection> {
            let conn = Connection::open(path).map_err(|e| {
                Error::Store(format!(
                    "cannot open the SQLite database {path:?} ({role}): {e}"
                ))
            })?;
            let sync = match options.synchronous {
                Synchronous::Full => "FULL",
                Synchronous::Normal => "NORMAL",
            };
            conn.execute_batch(&format!(
                "PRAGMA page_size = {PAGE_SIZE}; PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync};"
            ))
            .map_err(|e| {
                Error::Store(format!(
                    "{path:?} is not a usable SQLite database ({e}); move it aside or point `store` elsewhere"
                ))
            })?;
            conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            body_codec::register_sql_function(&conn)
                .map_err(sql_err("register switchboard_body"))?;
            Ok(conn)
        };
        let mut writer = open("writer")?;
        schema::migrate(&mut writer, path)?;
        if let Some(max) = options.max_db_bytes {
            let page: i64 = writer
                .query_row("PRAGMA page_size", [], |r| r.get(0))
                .map_err(sql_err("page_size"))?;
            let pages = (max as i64 / page).max(1);
            writer
                .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
                .map_err(sql_err("max_page_count"))?;
        }
        writer
            .execute_batch("PRAGMA wal_autocheckpoint = 0;")
            .map_err(sql_err("wal_autocheckpoint"))?;
        let reader = open("reader")?;
        let checkpoint = open("checkpointer")?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("switchboard-sqlite-checkpoint".into())
            .spawn(move || checkpointer(checkpoint, stopped))
            .map_err(|e| Error::Store(format!("cannot start the checkpointer thread: {e}")))?;
        Ok(SqliteBackend {
            writer: Arc::new(Mutex::new(writer)),
            reader: Arc::new(Mutex::new(reader)),
            wake: Arc::new(tokio::sync::Notify::new()),
            synchronous: options.synchronous,
            body_compression: options.body_compression,
            _checkpointer: stop,
        })
    }

    /// Runs `f` on `conn` on the blocking pool: SQLite calls block, and must never run
    /// on an async worker.
    async fn with<T: Send + 'static>(
        conn: &Arc<Mutex<Connection>>,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| store_err("sqlite task", e))?
    }
}

/// Runs PASSIVE checkpoints until the backend is dropped (the channel disconnects),
/// then a last one, so a clean shutdown leaves a small WAL.
fn checkpointer(conn: Connection, stopped: std::sync::mpsc::Receiver<()>) {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        let last = !matches!(
            stopped.recv_timeout(CHECKPOINT_EVERY),
            Err(RecvTimeoutError::Timeout)
        );
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "SQLite checkpoint failed; will retry");
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::OutboxStore;
    use crate::store::backend::{Backend, Write};
    use crate::store::testing;

    fn pragma(conn: &Arc<Mutex<Connection>>, name: &str) -> String {
        let c = conn.lock().unwrap();
        c.query_row(&format!("PRAGMA {name}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_new_database_gets_wal_big_pages_and_the_chosen_sync_mode() {
        let dir = tempfile::tempdir().unwrap();
        for (sync, want) in [(Synchronous::Full, "2"), (Synchronous::Normal, "1")] {
            let path = dir.path().join(format!("{want}.db"));
            let options = StoreOptions {
                synchronous: sync,
                ..Default::default()
            };
            let b = SqliteBackend::open(path.to_str().unwrap(), &options)
                .await
                .unwrap();
            assert_eq!(pragma(&b.writer, "journal_mode"), "wal");
            assert_eq!(pragma(&b.writer, "synchronous"), want);
            assert_eq!(pragma(&b.writer, "page_size"), PAGE_SIZE.to_string());
            assert_eq!(pragma(&b.writer, "wal_autocheckpoint"), "0");
        }
    }

    #[tokio::test]
    async fn a_database_from_a_newer_build_is_refused_not_migrated_down() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("newer.db");
        let path = path.to_str().unwrap();
        drop(
            SqliteBackend::open(path, &StoreOptions::default())
                .await
                .unwrap(),
        );
        let c = Connection::open(path).unwrap();
        c.execute("INSERT INTO schema_migrations VALUES (99, 0)", [])
            .unwrap();
        drop(c);
        let err = SqliteBackend::open(path, &StoreOptions::default())
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("schema version 99"), "{err}");
    }

    #[tokio::test]
    async fn migrations_apply_once_and_reopening_keeps_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("again.db");
        let path = path.to_str().unwrap();
        let b = SqliteBackend::open(path, &StoreOptions::default())
            .await
            .unwrap();
        b.put_state("s", "k", Some("v")).await.unwrap();
        drop(b);
        let b = SqliteBackend::open(path, &StoreOptions::default())
            .await
            .unwrap();
        assert_eq!(b.get_state("s", "k").await.unwrap().as_deref(), Some("v"));
        let versions = pragma(&b.reader, "user_version");
        assert_eq!(
            versions, "0",
            "the schema version lives in schema_migrations"
        );
        let c = b.reader.lock().unwrap();
        let n: i64 = c
            .query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, schema::MIGRATIONS.len() as i64);
    }

    #[tokio::test]
    async fn a_garbage_file_is_refused_at_open_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.db");
        std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
        let err = SqliteBackend::open(path.to_str().unwrap(), &StoreOptions::default())
            .await
            .err()
            .expect("a garbage file is not opened");
        let text = err.to_string();
        assert!(matches!(err, Error::Store(_)), "{err:?}");
        assert!(
            text.contains("is not a usable SQLite database") && text.contains("move it aside"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_database_replaced_by_garbage_while_open_fails_each_call_with_a_store_error() {
        use crate::outbox::model::{Enqueue, Finish};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replaced.db");
        let b = SqliteBackend::open(path.to_str().unwrap(), &StoreOptions::default())
            .await
            .unwrap();
        b.put_state("s", "k", Some("v")).await.unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("replaced.db{suffix}"));
            if file.exists() {
                std::fs::write(&file, vec![0x5a; 64 * 1024]).unwrap();
            }
        }
        let claim = testing::claim();
        let event = testing::event(b"{}".to_vec());
        let append = Write::Append {
            event: Box::new(event),
            claim_expires_at_ms: 1,
            enqueue: vec![Enqueue::dispatch("b", "f")],
            prepared: Default::default(),
        };
        let done = vec![Finish::Done { id: 1, token: 1 }];
        let errors = [
            b.claim(&claim).await.err(),
            b.finish(done, 0).await.err(),
            b.stats(0).await.err(),
            b.expire(0, 10).await.err(),
            b.write_batch(vec![append], 0).await.err(),
        ];
        for err in errors {
            let err = err.expect("a call on a garbage file fails");
            assert!(matches!(err, Error::Store(_)), "{err:?}");
            assert!(err.to_string().contains("file is not a database"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_claim_leaves_the_writer_at_its_configured_sync_level() {
        let dir = tempfile::tempdir().unwrap();
        for (sync, level) in [(Synchronous::Full, "2"), (Synchronous::Normal, "1")] {
            let options = StoreOptions {
                synchronous: sync,
                ..Default::default()
            };
            let path = dir.path().join(format!("{level}.db"));
            let b = SqliteBackend::open(path.to_str().unwrap(), &options)
                .await
                .unwrap();
            assert!(b.claim(&testing::claim()).await.unwrap().is_empty());
            assert_eq!(pragma(&b.writer, "synchronous"), level, "{sync:?}");
        }
    }
}
