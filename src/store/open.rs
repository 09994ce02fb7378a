//! [`open_backend`]: the one place that turns a store URL into a backend, so that
//! the runtime, the tests and the benches open stores the same way.

use std::sync::Arc;

use super::backend::Backend;
#[cfg(not(feature = "postgres"))]
use super::options::redact_url;
use super::options::StoreOptions;
#[cfg(feature = "postgres")]
use super::postgres;
use super::sqlite;
use crate::error::{Error, Result};

/// Whether a store URL names PostgreSQL (`postgres://…`, `postgresql://…`).
fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The file a SQLite store URL names (`sqlite:PATH`, `sqlite://PATH` or a bare path);
/// `None` for a PostgreSQL URL.
fn sqlite_path(url: &str) -> Option<&str> {
    if is_postgres(url) {
        return None;
    }
    Some(
        url.strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url),
    )
}

/// Opens the backend a store URL names: `sqlite:PATH` (or a bare path) or, with the
/// `postgres` feature, `postgres://…` / `postgresql://…`. Runs the embedded
/// migrations before returning.
pub async fn open_backend(url: &str, options: &StoreOptions) -> Result<Arc<dyn Backend>> {
    if is_postgres(url) {
        #[cfg(feature = "postgres")]
        {
            return Ok(Arc::new(
                postgres::PostgresBackend::connect(url, options).await?,
            ));
        }
        #[cfg(not(feature = "postgres"))]
        {
            return Err(Error::Config(format!(
                "store {:?} needs the `postgres` feature; rebuild with --features postgres",
                redact_url(url)
            )));
        }
    }
    let path = sqlite_path(url).unwrap_or_default();
    if path.is_empty() {
        return Err(Error::Config("store \"sqlite:\" names no file".into()));
    }
    Ok(Arc::new(sqlite::SqliteBackend::open(path, options).await?))
}
