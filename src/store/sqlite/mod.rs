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
//! - The WAL is bounded ([`WAL_CAP`]); see "Why the WAL grew" below.
//! - A new database gets 4 KiB pages ([`PAGE_SIZE`]). Every commit writes each page
//!   it touched whole into the WAL, and a delivery touches about twenty (the event, its
//!   dedupe claim, its outbox row, each with its indexes, in an ingest and a claim
//!   commit), so bytes written per delivery scale with the page size: 16 KiB pages
//!   (chosen earlier for the rate of 5 KiB bodies) wrote about 315 KiB per delivery at
//!   100/s. An existing database keeps its page size (`PRAGMA journal_mode = DELETE;
//!   PRAGMA page_size = 4096; VACUUM; PRAGMA journal_mode = WAL` converts one offline).
//! - Migrations are embedded and applied in order at open, each in its own
//!   transaction, recorded in `schema_migrations`.
//!
//! ## Why the WAL grew, and what bounds it
//!
//! SQLite writes commits at the end of the WAL and only starts it again from its
//! beginning when a writer finds *every* frame already copied into the database and no
//! reader still reading from the WAL. A PASSIVE checkpoint copies the frames that
//! were there when it began; under steady load (100 webhooks/s is about 200 commits/s:
//! an ingest and a claim per delivery) commits land while it copies and fsyncs, so it
//! ends with a few frames left and the WAL never restarts (its report even says it
//! copied every frame: every frame it saw when it began): it reset only when a
//! checkpoint happened to fall into a quiet instant, rarer as the database (and so
//! each checkpoint) grew. Nothing ever shrank the file either (no
//! `journal_size_limit`). Measured through the binary at 100 deliveries/s: 235 MB of
//! WAL after 60 s, 1.6 GB after 10 minutes (issue 35); 486 MB after the soak's minute;
//! 123 MiB after `tests/sqlite_wal.rs`'s minute, 8.3 MiB with the fix. Readers were not the cause (the reader and
//! the console hold a snapshot for one statement), but a long read can delay a
//! restart as well, so the fix waits for them only briefly.
//!
//! The fix, in the checkpointer: after its PASSIVE checkpoint, if the WAL holds more
//! than [`WAL_RESTART_AFTER`] (it has not restarted since it was that small), it
//! takes the writer connection (its mutex: the group commit waits for it rather than
//! racing it for SQLite's write lock, which a saturated writer would never leave
//! free) and runs a RESTART
//! checkpoint there: it copies the few frames the PASSIVE left (the bulk was copied
//! without blocking anyone), fsyncs, and waits at most [`RESTART_WAIT`] for readers
//! that started before; the next commit then writes from the WAL's beginning. A reader
//! that outlasts the wait only postpones the restart to the next tick. And
//! `journal_size_limit` ([`WAL_SIZE_LIMIT`]) makes the first commit after a restart
//! truncate a file that a burst made larger.
//!
//! So the WAL holds at most [`WAL_RESTART_AFTER`] plus the writes of one checkpoint
//! interval (two if a restart had to wait out a long reader). [`WAL_CAP`] is that
//! bound with room at the rate the issue measured (100 deliveries/s at tens of KiB
//! each): `tests/sqlite_wal.rs` holds the WAL under it for a minute of steady load. At
//! a much higher write rate the bound is the same two seconds of writes, larger in
//! bytes.
//!

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::store::backend::store_err;
use crate::store::body_codec::{self, BodyCompression};
use crate::store::options::StoreOptions;

mod backfills;
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
/// work of each checkpoint small and, with the restart (module doc), the WAL to about
/// a second of writes.
pub(crate) const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// WAL content past which a checkpoint that left frames behind is followed by a
/// RESTART checkpoint on the writer (module doc). Below it the WAL is left to restart
/// by itself when a checkpoint catches up, so light load never waits for one.
pub(crate) const WAL_RESTART_AFTER: u64 = 4 * 1024 * 1024;

/// How long a RESTART checkpoint waits for the writer's lock and for readers that
/// started before it; past it the checkpoint gives up until the next tick. Commits wait
/// behind it, so it is short.
pub(crate) const RESTART_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// `journal_size_limit`: the first commit after the WAL restarts truncates the file to
/// this when a burst made it larger. Twice [`WAL_RESTART_AFTER`], so a steady load
/// does not truncate and grow the file again every second.
pub(crate) const WAL_SIZE_LIMIT: u64 = 2 * WAL_RESTART_AFTER;

/// The WAL file's documented cap under steady load at the rate the issue measured
/// (module doc): `WAL_RESTART_AFTER` plus two checkpoint intervals of writes at
/// 100 deliveries/s and 64 KiB each, rounded up. `tests/sqlite_wal.rs` asserts it.
pub const WAL_CAP: u64 = 32 * 1024 * 1024;

/// Prepared statements kept per connection. rusqlite's default (16) is fewer than the
/// writer runs (ingest, claims, finishes, queues, retention), and an evicted ingest
/// statement would be prepared again on every batch.
pub(crate) const STATEMENT_CACHE: usize = 64;

/// Page cache per connection, KiB (`PRAGMA cache_size`), up from SQLite's 2 MiB: a
/// claim walks the front of its binding's range and joins each row's event, and with a
/// million rows waiting those pages no longer fit in 2 MiB, so every claim read them
/// again from the OS (claims of 100 rows took 2.3 ms at 1M rows against 0.9 ms at 1k,
/// `benches/backlog.rs`). Three connections (writer, reader, checkpointer) use at
/// most 3 × this, and only as the database grows.
const CACHE_KIB: u32 = 32 * 1024;

/// How long a connection waits for SQLite's locks (the writer for a checkpoint, a
/// second process's writer, another opener migrating) before a call fails as busy.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Page size of a newly created database (an existing one keeps its own): SQLite's
/// default, the smallest unit a commit writes (module doc).
pub(crate) const PAGE_SIZE: u32 = 4 * 1024;

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
            // Before the pragmas: switching a new file to WAL takes a lock.
            conn.busy_timeout(BUSY_TIMEOUT)
                .map_err(sql_err("busy_timeout"))?;
            let sync = match options.synchronous {
                Synchronous::Full => "FULL",
                Synchronous::Normal => "NORMAL",
            };
            conn.execute_batch(&format!(
                "PRAGMA page_size = {PAGE_SIZE}; PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}; PRAGMA cache_size = -{CACHE_KIB};"
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
        let page_size = writer
            .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
            .map_err(sql_err("page_size"))?
            .unsigned_abs();
        if let Some(max) = options.max_db_bytes {
            let pages = (max / page_size).max(1);
            writer
                .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
                .map_err(sql_err("max_page_count"))?;
        }
        writer
            .execute_batch("PRAGMA wal_autocheckpoint = 0;")
            .map_err(sql_err("wal_autocheckpoint"))?;
        let writer = Arc::new(Mutex::new(writer));
        let reader = open("reader")?;
        let checkpoint = open("checkpointer")?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let w = writer.clone();
        std::thread::Builder::new()
            .name("switchboard-sqlite-checkpoint".into())
            .spawn(move || checkpointer(checkpoint, w, page_size, stopped))
            .map_err(|e| Error::Store(format!("cannot start the checkpointer thread: {e}")))?;
        Ok(SqliteBackend {
            writer,
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

/// Runs a checkpoint in `mode`; returns the frames in the WAL when it began
/// (`PRAGMA wal_checkpoint`'s second column).
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))
}

/// Whether a PASSIVE checkpoint that found `frames` in the WAL should be followed by
/// a RESTART (module doc): they are more than [`WAL_RESTART_AFTER`] bytes of pages of
/// `page_size`. Whether the checkpoint copied every frame it saw says nothing: it
/// reports on the frames there when it began, and the commits that landed while it
/// ran are what keep the WAL from restarting.
fn needs_restart(frames: i64, page_size: u64) -> bool {
    let bytes = u64::try_from(frames).unwrap_or(0) * (page_size + WAL_FRAME_HEADER);
    bytes > WAL_RESTART_AFTER
}

/// Bytes of a WAL frame's header (before its page).
const WAL_FRAME_HEADER: u64 = 24;

/// Runs a RESTART checkpoint on the writer connection (module doc), waiting at most
/// [`RESTART_WAIT`] for readers, then puts the writer's own busy timeout back.
fn restart(writer: &Mutex<Connection>) -> rusqlite::Result<i64> {
    let conn = writer.lock().unwrap_or_else(|p| p.into_inner());
    conn.busy_timeout(RESTART_WAIT)?;
    let done = checkpoint(&conn, "RESTART");
    conn.busy_timeout(BUSY_TIMEOUT)?;
    done
}

/// Every [`CHECKPOINT_EVERY`] until the backend is dropped (the channel disconnects):
/// a PASSIVE checkpoint on its own connection, and a RESTART on the writer when that
/// left too much behind (module doc). Then a last TRUNCATE, so a clean shutdown leaves
/// an empty WAL.
fn checkpointer(
    conn: Connection,
    writer: Arc<Mutex<Connection>>,
    page_size: u64,
    stopped: std::sync::mpsc::Receiver<()>,
) {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        let last = !matches!(
            stopped.recv_timeout(CHECKPOINT_EVERY),
            Err(RecvTimeoutError::Timeout)
        );
        if last {
            if let Err(e) = restart(&writer).and_then(|_| checkpoint(&conn, "TRUNCATE")) {
                tracing::debug!(error = %e, "SQLite: the last checkpoint at close failed");
            }
            return;
        }
        match checkpoint(&conn, "PASSIVE") {
            Ok(frames) if needs_restart(frames, page_size) => {
                if let Err(e) = restart(&writer) {
                    tracing::warn!(error = %e, "SQLite WAL restart failed; will retry");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "SQLite checkpoint failed; will retry"),
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

    #[test]
    fn a_restart_follows_a_checkpoint_only_when_the_wal_is_large() {
        let page = u64::from(PAGE_SIZE);
        let frames_over = (WAL_RESTART_AFTER / (page + WAL_FRAME_HEADER)) as i64 + 1;
        // A WAL past the threshold: restart, even though the PASSIVE checkpoint may
        // have copied every frame it saw (commits landed while it ran).
        assert!(needs_restart(frames_over, page));
        // Small: left to restart by itself, so light load never waits for a restart.
        assert!(!needs_restart(frames_over - 1, page));
        assert!(!needs_restart(-1, page));
    }

    #[tokio::test]
    async fn a_new_database_gets_wal_its_page_size_a_wal_limit_and_the_chosen_sync_mode() {
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
            assert_eq!(
                pragma(&b.writer, "journal_size_limit"),
                WAL_SIZE_LIMIT.to_string()
            );
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
