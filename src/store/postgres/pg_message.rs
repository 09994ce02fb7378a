//! A driver error as a person needs it: tokio-postgres shows a server's error as
//! "db error" alone, so the server's own message (and its detail) is added. A leaf
//! of its own, so the schema's migration and the backend's error helper both use it
//! without importing each other.

/// `e` with the server's message and detail, when the server sent one.
pub(super) fn of(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{e}: {} ({detail})", db.message()),
            None => format!("{e}: {}", db.message()),
        },
        None => e.to_string(),
    }
}
