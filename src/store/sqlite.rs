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

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{
    store_err, Appended, Backend, EventQuery, Rejected, StoreOptions, StoredEvent, Swept, Write,
};
use crate::error::{Error, Result};
use crate::triggers::{SignatureStatus, TriggerEvent};

/// Schema versions, applied in order. Never edit a released one: add the next.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL,
        source TEXT NOT NULL,
        provider TEXT NOT NULL,
        kind TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        occurred_at INTEGER,
        dedupe_key TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        headers TEXT NOT NULL,
        body BLOB NOT NULL,
        signature TEXT NOT NULL
    );
    CREATE INDEX events_by_source ON events (source, seq);
    CREATE TABLE dedupe_claims (
        source TEXT NOT NULL,
        dedupe_key TEXT NOT NULL,
        event_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (source, dedupe_key)
    ) WITHOUT ROWID;
    CREATE INDEX dedupe_claims_by_expiry ON dedupe_claims (expires_at);
    CREATE TABLE rejections (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        headers TEXT NOT NULL,
        body_len INTEGER NOT NULL
    );
    CREATE INDEX rejections_by_time ON rejections (received_at);
    CREATE TABLE source_state (
        source TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (source, key)
    ) WITHOUT ROWID;",
    ),
    (2, super::sqlite_outbox::SCHEMA),
    // How each body is stored (super::body_codec): rows before this version are raw.
    (
        3,
        "ALTER TABLE events ADD COLUMN body_codec INTEGER NOT NULL DEFAULT 0;",
    ),
];

const CLAIM: &str = "INSERT INTO dedupe_claims (source, dedupe_key, event_id, expires_at)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (source, dedupe_key) DO UPDATE
    SET event_id = excluded.event_id, expires_at = excluded.expires_at
    WHERE dedupe_claims.expires_at <= ?5";
const HOLDER: &str = "SELECT event_id FROM dedupe_claims WHERE source = ?1 AND dedupe_key = ?2";
const INSERT_EVENT: &str = "INSERT INTO events (id, source, provider, kind, received_at,
    occurred_at, dedupe_key, trace_id, tenant, headers, body, signature, body_codec)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
const INSERT_REJECTION: &str = "INSERT INTO rejections (source, reason, detail, received_at,
    headers, body_len) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const SELECT_EVENTS: &str = "SELECT seq, id, source, provider, kind, received_at, occurred_at,
    dedupe_key, trace_id, tenant, headers, switchboard_body(body_codec, body), signature FROM events
    WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR seq < ?2)
    ORDER BY seq DESC LIMIT ?3";

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
    pub(super) writer: Arc<Mutex<Connection>>,
    pub(super) reader: Arc<Mutex<Connection>>,
    /// Woken after every commit that made outbox rows or queue messages due.
    pub(super) wake: Arc<tokio::sync::Notify>,
    /// How the writer syncs its commits (claims may sync less; see
    /// [`super::sqlite_outbox`]).
    pub(super) synchronous: Synchronous,
    /// How event bodies are stored.
    body_compression: super::body_codec::BodyCompression,
    /// Dropping it stops the checkpointer thread.
    _checkpointer: std::sync::mpsc::Sender<()>,
}

/// How SQLite syncs commits; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync on every commit (group-committed): survives power loss.
    #[default]
    Full,
    /// WAL's NORMAL: survives a process crash, may lose the last commits on an OS crash.
    Normal,
}

pub(super) fn sql_err(what: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
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
            super::body_codec::register_sql_function(&conn)
                .map_err(sql_err("register switchboard_body"))?;
            Ok(conn)
        };
        let mut writer = open("writer")?;
        migrate(&mut writer, path)?;
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
    pub(super) async fn with<T: Send + 'static>(
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

fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    let bad = |e: rusqlite::Error| {
        Error::Store(format!(
            "{path:?} is not a usable SQLite database ({e}); move it aside or point `store` elsewhere"
        ))
    };
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )
    .map_err(bad)?;
    let current: i64 = conn
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(bad)?;
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(Error::Store(format!(
            "{path:?} has schema version {current}, newer than this build knows ({newest}); run a newer switchboard"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        let tx = conn.transaction().map_err(bad)?;
        tx.execute_batch(sql).map_err(bad)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
            params![version, super::now_ms()],
        )
        .map_err(bad)?;
        tx.commit().map_err(bad)?;
    }
    Ok(())
}

/// Applies a batch; returns each write's result and how many outbox rows and queue
/// messages it created.
fn write_all(
    conn: &mut Connection,
    writes: &[Write],
    now_ms: i64,
) -> rusqlite::Result<(Vec<Option<Appended>>, usize)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut out = Vec::with_capacity(writes.len());
    let created;
    {
        let mut enqueuer = super::sqlite_outbox::Enqueuer::new(&tx)?;
        let mut claim = tx.prepare_cached(CLAIM)?;
        let mut holder = tx.prepare_cached(HOLDER)?;
        let mut insert = tx.prepare_cached(INSERT_EVENT)?;
        let mut reject = tx.prepare_cached(INSERT_REJECTION)?;
        for w in writes {
            match w {
                Write::Append {
                    event: e,
                    claim_expires_at_ms,
                    enqueue,
                    prepared,
                } => {
                    let claimed = claim.execute(params![
                        e.source,
                        e.dedupe_key,
                        e.id,
                        claim_expires_at_ms,
                        now_ms
                    ])? == 1;
                    if claimed {
                        insert.execute(params![
                            e.id,
                            e.source,
                            e.provider,
                            e.kind,
                            e.received_at_ms,
                            e.occurred_at_ms,
                            e.dedupe_key,
                            e.trace_id,
                            e.tenant,
                            prepared.headers_json,
                            prepared.body,
                            e.signature.as_str(),
                            prepared.codec
                        ])?;
                        enqueuer.insert(&e.id, enqueue, now_ms)?;
                        out.push(Some(Appended::Stored(e.id.clone())));
                    } else {
                        let id: String =
                            holder.query_row(params![e.source, e.dedupe_key], |r| r.get(0))?;
                        out.push(Some(Appended::Duplicate(id)));
                    }
                }
                Write::Reject(r) => {
                    reject.execute(params![
                        r.source,
                        r.reason,
                        r.detail,
                        r.received_at_ms,
                        r.headers_json,
                        r.body_len
                    ])?;
                    out.push(None);
                }
            }
        }
        created = enqueuer.created;
    }
    tx.commit()?;
    Ok((out, created))
}

fn row_to_event(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
    let headers: String = r.get(10)?;
    let body: Vec<u8> = r.get(11)?;
    let signature: String = r.get(12)?;
    let payload = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    Ok(StoredEvent {
        seq: r.get(0)?,
        event: TriggerEvent {
            id: r.get(1)?,
            source: r.get(2)?,
            provider: r.get(3)?,
            kind: r.get(4)?,
            received_at_ms: r.get(5)?,
            occurred_at_ms: r.get(6)?,
            dedupe_key: r.get(7)?,
            trace_id: r.get(8)?,
            tenant: r.get(9)?,
            headers: serde_json::from_str(&headers).unwrap_or_default(),
            body,
            payload,
            signature: SignatureStatus::parse(&signature).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    12,
                    rusqlite::types::Type::Text,
                    format!("unknown signature status {signature:?}").into(),
                )
            })?,
        },
    })
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn body_compression(&self) -> super::body_codec::BodyCompression {
        self.body_compression
    }

    async fn write_batch(&self, writes: Vec<Write>, now_ms: i64) -> Result<Vec<Option<Appended>>> {
        let (out, created) = Self::with(&self.writer, move |c| {
            write_all(c, &writes, now_ms).map_err(sql_err("write"))
        })
        .await?;
        if created > 0 {
            self.wake.notify_one();
        }
        Ok(out)
    }

    async fn events(&self, query: &EventQuery) -> Result<Vec<StoredEvent>> {
        let q = query.clone();
        Self::with(&self.reader, move |c| {
            let mut stmt = c
                .prepare_cached(SELECT_EVENTS)
                .map_err(sql_err("read events"))?;
            let rows = stmt
                .query_map(
                    params![q.source, q.before_seq, q.limit as i64],
                    row_to_event,
                )
                .map_err(sql_err("read events"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err("read events"))
        })
        .await
    }

    async fn rejections(&self, source: Option<&str>, limit: usize) -> Result<Vec<Rejected>> {
        let source = source.map(str::to_owned);
        Self::with(&self.reader, move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT source, reason, detail, received_at, headers, body_len FROM rejections
                     WHERE (?1 IS NULL OR source = ?1) ORDER BY seq DESC LIMIT ?2",
                )
                .map_err(sql_err("read rejections"))?;
            let rows = stmt
                .query_map(params![source, limit as i64], |r| {
                    Ok(Rejected {
                        source: r.get(0)?,
                        reason: r.get(1)?,
                        detail: r.get(2)?,
                        received_at_ms: r.get(3)?,
                        headers_json: r.get(4)?,
                        body_len: r.get(5)?,
                    })
                })
                .map_err(sql_err("read rejections"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err("read rejections"))
        })
        .await
    }

    async fn get_state(&self, source: &str, key: &str) -> Result<Option<String>> {
        let (source, key) = (source.to_owned(), key.to_owned());
        Self::with(&self.reader, move |c| {
            c.query_row(
                "SELECT value FROM source_state WHERE source = ?1 AND key = ?2",
                params![source, key],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql_err("read state"))
        })
        .await
    }

    async fn put_state(&self, source: &str, key: &str, value: Option<&str>) -> Result<()> {
        let (source, key, value) = (source.to_owned(), key.to_owned(), value.map(str::to_owned));
        Self::with(&self.writer, move |c| {
            match value {
                Some(v) => c.execute(
                    "INSERT INTO source_state (source, key, value) VALUES (?1, ?2, ?3)
                     ON CONFLICT (source, key) DO UPDATE SET value = excluded.value",
                    params![source, key, v],
                ),
                None => c.execute(
                    "DELETE FROM source_state WHERE source = ?1 AND key = ?2",
                    params![source, key],
                ),
            }
            .map(drop)
            .map_err(sql_err("write state"))
        })
        .await
    }

    async fn put_state_if_absent(
        &self,
        source: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>> {
        let (source, key, value) = (source.to_owned(), key.to_owned(), value.to_owned());
        Self::with(&self.writer, move |c| {
            let written = c
                .execute(
                    "INSERT INTO source_state (source, key, value) VALUES (?1, ?2, ?3)
                     ON CONFLICT (source, key) DO NOTHING",
                    params![source, key, value],
                )
                .map_err(sql_err("write state"))?;
            if written == 1 {
                return Ok(None);
            }
            c.query_row(
                "SELECT value FROM source_state WHERE source = ?1 AND key = ?2",
                params![source, key],
                |r| r.get(0),
            )
            .map(Some)
            .map_err(sql_err("read state"))
        })
        .await
    }

    async fn sweep(&self, now_ms: i64, rejections_before_ms: i64) -> Result<Swept> {
        Self::with(&self.writer, move |c| {
            let claims = c
                .execute(
                    "DELETE FROM dedupe_claims WHERE expires_at <= ?1",
                    params![now_ms],
                )
                .map_err(sql_err("sweep claims"))? as u64;
            let rejections = c
                .execute(
                    "DELETE FROM rejections WHERE received_at < ?1",
                    params![rejections_before_ms],
                )
                .map_err(sql_err("sweep rejections"))? as u64;
            Ok(Swept { claims, rejections })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(n, MIGRATIONS.len() as i64);
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
        use crate::outbox::model::{ClaimRequest, Enqueue, Finish};
        use crate::outbox::OutboxStore;

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
        let claim = ClaimRequest {
            now_ms: 0,
            lease_until_ms: 1,
            token: 1,
            limit: 10,
            bindings: vec!["b".into()],
        };
        let event = crate::triggers::TriggerEvent::new(
            "s",
            "github",
            "k".into(),
            0,
            None,
            "d".into(),
            "t".into(),
            "default",
            Default::default(),
            b"{}".to_vec(),
            serde_json::Value::Null,
            SignatureStatus::Verified,
        );
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
}
