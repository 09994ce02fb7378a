//! Schema migrations at open, through the public path (`open_backend`), on SQLite and
//! PostgreSQL: several processes opening one fresh database at once all start, and
//! each migration is applied once (PostgreSQL: an advisory lock; SQLite: one
//! `IMMEDIATE` transaction); a database stamped with a schema version newer than
//! this build knows is refused with an error naming both versions and what to do,
//! and is left as it was; a database of schema 7 with rows waiting behind their
//! ordering key's head has them parked by migration 8; events stored before
//! migration 9 are found by their provider's delivery id after it; events stored
//! before migration 10 read back with an empty trace context; outbox rows written
//! before migration 11 stay (with no backfill) and backfill jobs can be made after it.
#![cfg(all(feature = "runtime", feature = "postgres"))]

#[macro_use]
#[path = "ingest/support.rs"]
mod support;

use support::{fresh_postgres_schema, postgres_url, skip_postgres, StoreKind};
use switchboard::__private::store::{open_backend, StoreOptions};

on_both_stores!(
    openers_starting_at_once_all_start_and_apply_each_migration_once,
    a_database_from_a_newer_build_is_refused_with_both_versions_and_what_to_do,
    an_upgrade_to_schema_8_parks_the_rows_waiting_behind_their_keys_head,
    an_upgrade_to_schema_9_finds_stored_github_events_by_their_delivery_guid,
    an_upgrade_to_schema_10_keeps_older_events_readable_without_a_trace_context,
    an_upgrade_to_schema_11_keeps_outbox_rows_and_takes_backfill_jobs,
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

/// Runs the statements `sql` on the database at `url` over a connection of its own.
async fn exec(url: &str, sql: &str) {
    match url.strip_prefix("sqlite:") {
        Some(path) => rusqlite::Connection::open(path)
            .unwrap()
            .execute_batch(sql)
            .unwrap(),
        None => {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            client.batch_execute(sql).await.unwrap();
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

/// A parked row's `next_attempt_at` (`store::outbox_rows::PARKED`).
const PARKED: i64 = i64::MAX;

/// Undoes migration 11 (backfill jobs and records, the outbox's backfill column), the
/// first step back to an older schema; the same statements on both stores.
const UNDO_11: &str = "DROP TABLE backfilled;
    DROP TABLE backfills;
    ALTER TABLE outbox DROP COLUMN backfill_id;
    DELETE FROM schema_migrations WHERE version >= 11;";

/// Undoes migration 10 (the events' trace context columns), the next step back; the
/// same statements on both stores.
const UNDO_10: &str = "ALTER TABLE events DROP COLUMN traceparent;
    ALTER TABLE events DROP COLUMN tracestate;
    DELETE FROM schema_migrations WHERE version >= 10;";

/// Schema 7 as it was, made from a schema-8 database: no parking triggers, the
/// claim index of then (and migration 9's index back to the delivery search's of
/// then). The test's own knowledge of what migrations 8 and 9 changed.
const BACK_TO_7_SQLITE: &str = "DROP INDEX events_by_delivery;
    CREATE INDEX events_by_dedupe ON events (dedupe_key);
    DROP TRIGGER outbox_park; DROP TRIGGER outbox_unpark;
    DROP INDEX outbox_by_binding;
    CREATE INDEX outbox_by_claim ON outbox (priority DESC, next_attempt_at, id);
    DELETE FROM schema_migrations WHERE version >= 8;";
const BACK_TO_7_POSTGRES: &str = "DROP INDEX events_by_delivery;
    CREATE INDEX events_by_dedupe ON events (dedupe_key, seq);
    DROP TRIGGER outbox_park ON outbox;
    DROP TRIGGER outbox_unpark ON outbox;
    DROP FUNCTION switchboard_outbox_park(); DROP FUNCTION switchboard_outbox_unpark();
    DROP INDEX outbox_by_binding;
    CREATE INDEX outbox_by_claim ON outbox (priority DESC, next_attempt_at, id);
    DELETE FROM schema_migrations WHERE version >= 8;";

/// Inserts one outbox row as schema 7 wrote it; returns its id.
async fn row_of_7(url: &str, binding: &str, key: Option<&str>, lease: Option<i64>) -> i64 {
    let key = key.map_or("NULL".to_owned(), |k| format!("'{k}'"));
    let (next, token) = match lease {
        Some(until) => (until, "7".to_owned()),
        None => (1_000, "NULL".to_owned()),
    };
    query(
        url,
        &format!(
            "INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
                next_attempt_at, lease_token, enqueued_at, due_at)
             VALUES ('{binding}', 'fp', 'ev', {key}, 0, {next}, {token}, 1000, 1000)
             RETURNING id"
        ),
    )
    .await[0]
}

/// An upgraded database's waiting rows are parked as new ones are: the key's first row
/// (due or leased) stays, each later row of the key is parked, other bindings and
/// unkeyed rows are untouched; and the new trigger unparks the next row when the head
/// goes.
async fn an_upgrade_to_schema_8_parks_the_rows_waiting_behind_their_keys_head(kind: StoreKind) {
    let (url, _dir) = fresh(&kind).await;
    drop(open_backend(&url, &StoreOptions::default()).await.unwrap());
    let back = match kind {
        StoreKind::Sqlite => BACK_TO_7_SQLITE,
        StoreKind::Postgres(_) => BACK_TO_7_POSTGRES,
    };
    exec(&url, UNDO_11).await;
    exec(&url, UNDO_10).await;
    exec(&url, back).await;
    assert_eq!(versions(&url).await.last(), Some(&7));

    let a_head = row_of_7(&url, "b", Some("a"), None).await;
    let a_next = row_of_7(&url, "b", Some("a"), None).await;
    let b_head = row_of_7(&url, "b", Some("k2"), Some(9_000)).await;
    let b_next = row_of_7(&url, "b", Some("k2"), None).await;
    let unkeyed = row_of_7(&url, "b", None, None).await;
    let other_binding = row_of_7(&url, "c", Some("a"), None).await;
    let a_last = row_of_7(&url, "b", Some("a"), None).await;

    drop(open_backend(&url, &StoreOptions::default()).await.unwrap());
    assert!(versions(&url).await.contains(&8), "migrated");
    let parked = format!("SELECT id FROM outbox WHERE next_attempt_at = {PARKED} ORDER BY id");
    assert_eq!(query(&url, &parked).await, vec![a_next, b_next, a_last]);
    let due = |id: i64| format!("SELECT next_attempt_at FROM outbox WHERE id = {id}");
    assert_eq!(query(&url, &due(a_head)).await, vec![1_000]);
    assert_eq!(
        query(&url, &due(b_head)).await,
        vec![9_000],
        "a leased head keeps its lease"
    );
    assert_eq!(query(&url, &due(unkeyed)).await, vec![1_000]);
    assert_eq!(query(&url, &due(other_binding)).await, vec![1_000]);

    // The head's delete unparks the key's next row at its own due time, not the last.
    query(
        &url,
        &format!("DELETE FROM outbox WHERE id = {a_head} RETURNING id"),
    )
    .await;
    assert_eq!(query(&url, &due(a_next)).await, vec![1_000]);
    assert_eq!(query(&url, &parked).await, vec![b_next, a_last]);
}

/// Migration 9 indexes the part of each stored dedupe key after its first `:`: a GitHub
/// event stored before it (key `{hook id}:{GUID}`) is found afterwards by its GUID, by
/// its whole key, and not by its hook id.
async fn an_upgrade_to_schema_9_finds_stored_github_events_by_their_delivery_guid(kind: StoreKind) {
    let (url, _dir) = fresh(&kind).await;
    drop(open_backend(&url, &StoreOptions::default()).await.unwrap());
    let back = match kind {
        StoreKind::Sqlite => {
            "DROP INDEX events_by_delivery;
            CREATE INDEX events_by_dedupe ON events (dedupe_key);
            DELETE FROM schema_migrations WHERE version >= 9;"
        }
        StoreKind::Postgres(_) => {
            "DROP INDEX events_by_delivery;
            CREATE INDEX events_by_dedupe ON events (dedupe_key, seq);
            DELETE FROM schema_migrations WHERE version >= 9;"
        }
    };
    exec(&url, UNDO_11).await;
    exec(&url, UNDO_10).await;
    exec(&url, back).await;
    assert_eq!(versions(&url).await.last(), Some(&8));
    for (id, key) in [("evt_gh", "77:5c1f-guid"), ("evt_plain", "5c1f-guid-2")] {
        exec(
            &url,
            &format!(
                "INSERT INTO events (id, source, provider, kind, received_at, dedupe_key,
                    trace_id, tenant, headers, body, signature)
                 VALUES ('{id}', 'gh', 'github', 'push', 1000, '{key}', 't', '', '{{}}',
                    '', 'verified')"
            ),
        )
        .await;
    }

    let backend = open_backend(&url, &StoreOptions::default()).await.unwrap();
    assert!(versions(&url).await.contains(&9), "migrated");
    let found = |delivery: &'static str| {
        let backend = backend.clone();
        async move {
            let q = switchboard::__private::store::EventQuery {
                dedupe_key: Some(delivery.to_owned()),
                limit: 10,
                ..Default::default()
            };
            let events = backend.events(&q).await.unwrap();
            events.into_iter().map(|e| e.event.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(found("5c1f-guid").await, vec!["evt_gh"], "by the GUID");
    assert_eq!(found("77:5c1f-guid").await, vec!["evt_gh"], "by the key");
    assert!(found("77").await.is_empty(), "not by the hook id");
    assert_eq!(found("5c1f-guid-2").await, vec!["evt_plain"]);
}

/// Migration 10 adds the events' trace context with constant defaults: an event stored
/// before it reads back with an empty `traceparent` (its attempts then root in its
/// trace id), and a new event keeps the context it was created under.
async fn an_upgrade_to_schema_10_keeps_older_events_readable_without_a_trace_context(
    kind: StoreKind,
) {
    let (url, _dir) = fresh(&kind).await;
    drop(open_backend(&url, &StoreOptions::default()).await.unwrap());
    exec(&url, UNDO_11).await;
    exec(&url, UNDO_10).await;
    assert_eq!(versions(&url).await.last(), Some(&9));
    exec(
        &url,
        "INSERT INTO events (id, source, provider, kind, received_at, dedupe_key, trace_id,
            tenant, headers, body, signature)
         VALUES ('evt_old', 'gh', 'github', 'push', 1000, 'k', '4bf92f3577b34da6a3ce929d0e0e4736',
            '', '{}', '', 'verified')",
    )
    .await;
    let backend = open_backend(&url, &StoreOptions::default()).await.unwrap();
    assert_eq!(versions(&url).await.last(), Some(&11), "migrated");
    let q = switchboard::__private::store::EventQuery {
        limit: 10,
        ..Default::default()
    };
    let events = backend.events(&q).await.unwrap();
    assert_eq!(events.len(), 1);
    let old = &events[0].event;
    assert_eq!(old.id, "evt_old");
    assert_eq!(old.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        (old.traceparent.as_str(), old.tracestate.as_str()),
        ("", "")
    );
}

/// A schema-10 database's outbox rows stay as they were (no backfill named) and the
/// upgraded store takes backfill jobs.
async fn an_upgrade_to_schema_11_keeps_outbox_rows_and_takes_backfill_jobs(kind: StoreKind) {
    let (url, _dir) = fresh(&kind).await;
    drop(open_backend(&url, &StoreOptions::default()).await.unwrap());
    exec(&url, UNDO_11).await;
    assert_eq!(versions(&url).await.last(), Some(&10));
    let row = row_of_7(&url, "b", None, None).await;
    let backend = open_backend(&url, &StoreOptions::default()).await.unwrap();
    assert_eq!(versions(&url).await.last(), Some(&11), "migrated");
    assert_eq!(
        query(&url, "SELECT id FROM outbox WHERE backfill_id IS NULL").await,
        [row]
    );
    let spec: switchboard::__private::triggers::versions::BackfillSpec =
        serde_json::from_value(serde_json::json!({"binding": "b"})).unwrap();
    let job = backend.create_backfill(&spec, 5_000).await.unwrap();
    assert_eq!(
        (job.state.as_str(), job.cursor, job.created_at_ms),
        ("running", 0, 5_000)
    );
}
