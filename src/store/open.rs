//! [`open_backend`]: the one place that turns a store URL into a backend, so that
//! the runtime, the tests and the benches open stores the same way; and
//! [`probe_schema`], which reads where a store's schema stands without opening it for
//! use (no file created, no migration run), for `switchboard serve --check`.

use std::sync::Arc;

use super::backend::Backend;
use super::options::redact_url;
use super::options::StoreOptions;
#[cfg(feature = "postgres")]
use super::postgres;
use super::sqlite;
use crate::error::{Error, Result};

/// What a store URL names.
enum StoreLocation<'a> {
    /// A PostgreSQL URL, as written.
    Postgres(&'a str),
    /// A SQLite file's path.
    Sqlite(&'a str),
}

/// `postgres://…` / `postgresql://…`, else `sqlite:PATH`, `sqlite://PATH` or a bare
/// path; an empty path is an error.
fn locate(url: &str) -> Result<StoreLocation<'_>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(StoreLocation::Postgres(url));
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() {
        return Err(Error::Config("store \"sqlite:\" names no file".into()));
    }
    Ok(StoreLocation::Sqlite(path))
}

#[cfg(not(feature = "postgres"))]
fn needs_postgres(url: &str) -> Error {
    Error::Config(format!(
        "store {:?} needs the `postgres` feature; rebuild with --features postgres",
        redact_url(url)
    ))
}

/// Opens the backend a store URL names: `sqlite:PATH` (or a bare path) or, with the
/// `postgres` feature, `postgres://…` / `postgresql://…`. Runs the embedded
/// migrations before returning.
pub async fn open_backend(url: &str, options: &StoreOptions) -> Result<Arc<dyn Backend>> {
    match locate(url)? {
        #[cfg(feature = "postgres")]
        StoreLocation::Postgres(url) => Ok(Arc::new(
            postgres::PostgresBackend::connect(url, options).await?,
        )),
        #[cfg(not(feature = "postgres"))]
        StoreLocation::Postgres(url) => Err(needs_postgres(url)),
        StoreLocation::Sqlite(path) => {
            Ok(Arc::new(sqlite::SqliteBackend::open(path, options).await?))
        }
    }
}

/// Where a store's schema stands, against the newest version this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchemaProbe {
    /// The database's version: `None` for a SQLite file that does not exist yet,
    /// `Some(0)` for a database without switchboard's tables.
    pub(crate) version: Option<i64>,
    /// The newest version this build's migrations reach.
    pub(crate) known: i64,
}

impl SchemaProbe {
    /// Whether this build can start on the store: a newer schema is refused at start
    /// (an older build would misread its rows).
    pub(crate) fn usable(&self) -> bool {
        self.version.is_none_or(|v| v <= self.known)
    }
}

impl std::fmt::Display for SchemaProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known;
        match self.version {
            None => write!(
                f,
                "no file yet: it will be created and migrated to version {known} at start"
            ),
            Some(0) => write!(f, "empty: migrations will run at start (to version {known})"),
            Some(v) if v == known => write!(f, "at schema version {v} of {known}"),
            Some(v) if v < known => write!(
                f,
                "at schema version {v} of {known}: migrations will run at start"
            ),
            Some(v) => write!(
                f,
                "schema version {v} is newer than this build knows ({v} > {known}): start would refuse it; run a newer switchboard"
            ),
        }
    }
}

/// Reads the schema version of the store `url` names without creating or migrating
/// anything: a SQLite file that does not exist is reported as such (and stays
/// absent), an existing one is read through a read-only connection, a PostgreSQL
/// server in a read-only transaction. Errors name the store (redacted) and why it
/// cannot be read (unreachable server, not a database).
pub(crate) async fn probe_schema(url: &str) -> Result<SchemaProbe> {
    match locate(url)? {
        #[cfg(feature = "postgres")]
        StoreLocation::Postgres(url) => Ok(SchemaProbe {
            version: Some(
                postgres::read_schema_version(url, &redact_url(url))
                    .await?
                    .unwrap_or(0),
            ),
            known: postgres::newest_schema(),
        }),
        #[cfg(not(feature = "postgres"))]
        StoreLocation::Postgres(url) => Err(needs_postgres(url)),
        StoreLocation::Sqlite(path) => {
            let known = sqlite::newest_schema();
            if !std::path::Path::new(path).exists() {
                return Ok(SchemaProbe {
                    version: None,
                    known,
                });
            }
            let path = path.to_owned();
            let version = tokio::task::spawn_blocking(move || sqlite::read_schema_version(&path))
                .await
                .map_err(|e| Error::Store(format!("sqlite schema probe: {e}")))??;
            Ok(SchemaProbe {
                version: Some(version.unwrap_or(0)),
                known,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_sqlite_file_is_reported_and_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("events.db");
        let probe = probe_schema(&format!("sqlite:{}", path.display()))
            .await
            .unwrap();
        assert_eq!(probe.version, None);
        assert!(probe.usable());
        assert!(!path.exists() && !path.parent().unwrap().exists());
    }

    #[tokio::test]
    async fn a_migrated_sqlite_store_reads_at_the_newest_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let url = format!("sqlite:{}", path.display());
        // Held open, as a running runtime holds it (WAL mode, its -shm in place).
        let _backend = open_backend(&url, &StoreOptions::default()).await.unwrap();
        let probe = probe_schema(&url).await.unwrap();
        assert_eq!(probe.version, Some(sqlite::newest_schema()));
        assert_eq!(
            probe.to_string(),
            format!("at schema version {0} of {0}", probe.known)
        );
    }

    #[tokio::test]
    async fn a_newer_sqlite_schema_is_not_usable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO schema_migrations VALUES (99, 0);",
        )
        .unwrap();
        drop(conn);
        let probe = probe_schema(&format!("sqlite:{}", path.display()))
            .await
            .unwrap();
        assert_eq!(probe.version, Some(99));
        assert!(!probe.usable());
        assert!(probe.to_string().contains("99 >"), "{probe}");
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        std::fs::write(&path, b"not a database, just text that is long enough").unwrap();
        let e = probe_schema(&format!("sqlite:{}", path.display()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("events.db"), "{e}");
    }
}
