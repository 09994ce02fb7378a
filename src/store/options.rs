//! What names and tunes a store: [`StoreOptions`] (pool size, SQLite's sync mode and
//! size cap, the write queue's bound, body compression) and [`redact_url`], which keeps
//! a store URL's password out of logs.
//!
//! Apart from the backends so that both read it, and [`super::open_backend`] hands it
//! to either.

use super::body_codec;
use super::group_commit;

/// Tuning shared by the backends. Defaults suit one runtime process.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// PostgreSQL pool size. Default 8: the group commit writes from one connection at
    /// a time, the rest serve the admin API and state reads.
    pub pool_size: usize,
    /// SQLite only: refuse to grow the database file past this many bytes (writes then
    /// fail as "full" and ingress answers 503), so a flood cannot fill the disk.
    /// Default: no cap.
    pub max_db_bytes: Option<u64>,
    /// SQLite only: how commits are synced. Default `FULL`.
    pub synchronous: Synchronous,
    /// Bytes of writes the group commit may hold (queued or committing); beyond, a
    /// write is refused with [`crate::Error::Overloaded`]. Default 64 MiB.
    pub write_queue_max_bytes: usize,
    /// SQLite only: how event bodies are stored. Default: as received
    /// (`sqlite_body_compression`; `store::body_codec` says why).
    pub body_compression: body_codec::BodyCompression,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            pool_size: 8,
            max_db_bytes: None,
            synchronous: Synchronous::Full,
            write_queue_max_bytes: group_commit::DEFAULT_QUEUE_MAX_BYTES,
            body_compression: body_codec::BodyCompression::default(),
        }
    }
}

/// A store URL with any password replaced, for logs and errors: the user info's, and a
/// `password` query parameter's (tokio-postgres takes every connection parameter in
/// the query too, so `postgres://app@db/x?password=…` is as much a password).
pub fn redact_url(url: &str) -> String {
    let (url, host_start) = match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let creds = &url[scheme_end + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => {
                    let head = format!("{}{user}:[redacted]", &url[..scheme_end + 3]);
                    let start = head.len() + 1;
                    (format!("{head}{}", &url[at..]), start)
                }
                None => (url.to_owned(), at + 1),
            }
        }
        (Some(scheme_end), _) => (url.to_owned(), scheme_end + 3),
        _ => (url.to_owned(), 0),
    };
    let Some(q) = url[host_start..].find('?').map(|q| host_start + q + 1) else {
        return url;
    };
    let query: Vec<String> = url[q..]
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=[redacted]"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{}{}", &url[..q], query.join("&"))
}

/// How SQLite syncs commits (see `store::sqlite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync on every commit (group-committed): survives power loss.
    #[default]
    Full,
    /// WAL's NORMAL: survives a process crash, may lose the last commits on an OS crash.
    Normal,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/x"),
            "postgres://app:[redacted]@db:5432/x"
        );
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact_url("sqlite:/tmp/a.db"), "sqlite:/tmp/a.db");
        // In the query, as tokio-postgres also reads it (found by the config fuzzer).
        assert_eq!(
            redact_url("postgres://app:st0re-pass@db:543per_se?password=cond2/events"),
            "postgres://app:[redacted]@db:543per_se?password=[redacted]"
        );
        assert_eq!(
            redact_url("postgres://app@db/x?sslmode=require&password=hunter2&x=1"),
            "postgres://app@db/x?sslmode=require&password=[redacted]&x=1"
        );
        assert_eq!(
            redact_url("postgres://db/x?password=hunter2"),
            "postgres://db/x?password=[redacted]"
        );
    }
}
