//! Schema migrations at open, through the public path (`open_backend`), on SQLite and
//! PostgreSQL: several processes opening one fresh database at once all start, and
//! each migration is applied once (PostgreSQL: an advisory lock; SQLite: one
//! `IMMEDIATE` transaction); a database stamped with a schema version newer than
//! this build knows is refused with an error naming both versions and what to do,
//! and is left as it was.
#![cfg(all(feature = "runtime", feature = "postgres"))]

#[macro_use]
#[path = "ingest/support.rs"]
mod support;

use support::{fresh_postgres_schema, postgres_url, skip_postgres, StoreKind};
use switchboard::__private::store::{open_backend, StoreOptions};

on_both_stores!(
    openers_starting_at_once_all_start_and_apply_each_migration_once,
    a_database_from_a_newer_build_is_refused_with_both_versions_and_what_to_do,
);

/// Opens at once, as that many processes starting together would.
const OPENERS: usize = 8;

/// A fresh database of `kind` (the temp dir keeps a SQLite file alive).
async fn fresh(kind: &StoreKind) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = match kind {
        StoreKind::Sqlite => format!("sqlite:{}", dir.path().join("events.db").display()),
        StoreKind::Postgres(base) => fresh_postgres_schema(base).await,
    };
    (url, dir)
}

/// Runs `sql` on the database at `url` over a connection of its own; returns the
/// rows' first column as integers.
async fn query(url: &str, sql: &str) -> Vec<i64> {
    match url.strip_prefix("sqlite:") {
        Some(path) => {
            let c = rusqlite::Connection::open(path).unwrap();
            let mut stmt = c.prepare(sql).unwrap();
            let rows = stmt.query_map([], |r| r.get::<_, i64>(0)).unwrap();
            rows.collect::<Result<_, _>>().unwrap()
        }
        None => {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let rows = client.query(sql, &[]).await.unwrap();
            rows.iter().map(|r| r.get::<_, i64>(0)).collect()
        }
    }
}

/// The versions recorded in `schema_migrations`, in order, repeats included.
async fn versions(url: &str) -> Vec<i64> {
    query(
        url,
        "SELECT version FROM schema_migrations ORDER BY version",
    )
    .await
}

async fn openers_starting_at_once_all_start_and_apply_each_migration_once(kind: StoreKind) {
    // What one opener alone records: the reference.
    let (alone, _d1) = fresh(&kind).await;
    drop(
        open_backend(&alone, &StoreOptions::default())
            .await
            .unwrap(),
    );
    let want = versions(&alone).await;
    assert!(!want.is_empty());

    let (url, _d2) = fresh(&kind).await;
    let opens = (0..OPENERS).map(|_| {
        let url = url.clone();
        // Each on a task of its own, so the opens really overlap.
        tokio::spawn(async move { open_backend(&url, &StoreOptions::default()).await })
    });
    let results = futures_util::future::join_all(opens).await;
    let backends: Vec<_> = results
        .into_iter()
        .map(|r| r.unwrap().expect("every opener starts"))
        .collect();
    assert_eq!(backends.len(), OPENERS);
    assert_eq!(
        versions(&url).await,
        want,
        "each migration applied once, every one of them"
    );
}

async fn a_database_from_a_newer_build_is_refused_with_both_versions_and_what_to_do(
    kind: StoreKind,
) {
    let (url, _dir) = fresh(&kind).await;
    drop(open_backend(&url, &StoreOptions::default()).await.unwrap());
    let known = *versions(&url).await.last().unwrap();
    let newer = known + 93;
    query(
        &url,
        &format!("INSERT INTO schema_migrations (version, applied_at) VALUES ({newer}, 0) RETURNING version"),
    )
    .await;

    let err = open_backend(&url, &StoreOptions::default())
        .await
        .err()
        .expect("a newer schema is refused");
    let text = err.to_string();
    for part in [
        format!("has schema version {newer}"),
        format!("newer than this build knows (up to {known})"),
        "run that version (or newer) against it".to_owned(),
        "point `store` at another database".to_owned(),
    ] {
        assert!(text.contains(&part), "{part:?} missing from: {text}");
    }
    assert_eq!(
        *versions(&url).await.last().unwrap(),
        newer,
        "left as it was, not migrated down"
    );
}
