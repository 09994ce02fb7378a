//! A store for one outbox test: a SQLite file in a temp dir, or a fresh PostgreSQL
//! schema; events and rows to enqueue; the claim and finish requests the tests repeat.
#![allow(dead_code)]

use std::sync::Arc;

use switchboard::__private::outbox::model::{
    AttemptError, ClaimRequest, ClaimedRow, Destination, Enqueue,
};
use switchboard::__private::store::{open_backend, Appended, Backend, Store, StoreOptions};
use switchboard::__private::triggers::{SignatureStatus, TriggerEvent};

use super::support::{drop_stale, fresh_postgres_schema, now_s, StoreKind};

/// A clock well past every real commit time, so rows enqueued "now" are due at it.
pub const T: i64 = 4_000_000_000_000;

/// A long lease, for claims whose lease must not run out during the test.
pub const LEASE: i64 = 60_000;

/// The binding most tests enqueue for.
pub const B: &str = "binding-a";

/// One store under test.
pub struct Fixture {
    pub backend: Arc<dyn Backend>,
    pub store: Store,
    pub url: String,
    _dir: tempfile::TempDir,
    /// The base URL and the URL of a database made for this fixture alone, dropped by
    /// [`Fixture::close`].
    alone: Option<(String, String)>,
}

impl Fixture {
    /// Opens a fresh store of `kind`.
    pub async fn open(kind: &StoreKind) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = match kind {
            StoreKind::Sqlite => format!("sqlite:{}", dir.path().join("outbox.db").display()),
            StoreKind::Postgres(base) => fresh_postgres_schema(base).await,
        };
        Fixture::open_url(url, dir).await
    }

    /// Opens a fresh store of `kind` that no other test shares a PostgreSQL database
    /// with, for tests of wake-ups: a `NOTIFY` reaches every session of its database
    /// that listens on the channel, so in the shared test database another test's
    /// commit could pass for the one under test. `None`, having said why, when the
    /// role may not create databases.
    pub async fn open_alone(kind: &StoreKind, test: &str) -> Option<Fixture> {
        match kind {
            StoreKind::Sqlite => Some(Fixture::open(kind).await),
            StoreKind::Postgres(base) => {
                let url = fresh_postgres_database(base, test).await?;
                let mut f = Fixture::open_url(url.clone(), tempfile::tempdir().unwrap()).await;
                f.alone = Some((base.clone(), url));
                Some(f)
            }
        }
    }

    /// Closes the store, and drops the database [`Fixture::open_alone`] made for it.
    pub async fn close(self) {
        let Fixture {
            backend,
            store,
            alone,
            ..
        } = self;
        drop((store, backend));
        if let Some((base, url)) = alone {
            drop_postgres_database(&base, &url).await;
        }
    }

    async fn open_url(url: String, dir: tempfile::TempDir) -> Fixture {
        let backend = open_backend(&url, &StoreOptions::default()).await.unwrap();
        let store = Store::new(backend.clone());
        Fixture {
            backend,
            store,
            url,
            _dir: dir,
            alone: None,
        }
    }

    /// Another backend on the same database, as a second process would open it.
    pub async fn second_process(&self) -> Arc<dyn Backend> {
        open_backend(&self.url, &StoreOptions::default())
            .await
            .unwrap()
    }

    /// Runs `sql` on the fixture's database over a connection of its own, as an
    /// operator (or a broken migration) would.
    pub async fn execute_sql(&self, sql: &str) {
        match self.url.strip_prefix("sqlite:") {
            Some(path) => rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(sql)
                .unwrap(),
            None => {
                let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                client.batch_execute(sql).await.unwrap();
            }
        }
    }

    /// Appends a fresh event (dedupe key `key`) with `rows`; returns what it did.
    pub async fn append(&self, key: &str, rows: Vec<Enqueue>) -> Appended {
        self.append_event(event(key, 1_000), rows).await
    }

    /// Appends `event` with `rows`.
    pub async fn append_event(&self, event: TriggerEvent, rows: Vec<Enqueue>) -> Appended {
        self.store.append_enqueue(event, T * 2, rows).await.unwrap()
    }

    /// Appends one event per key, each with one dispatch row for [`B`].
    pub async fn append_rows(&self, keys: &[&str]) {
        for k in keys {
            self.append(k, vec![row(B)]).await;
        }
    }

    /// Claims up to `limit` rows of [`B`] at `now` under `token`, leased for [`LEASE`].
    pub async fn claim(&self, now: i64, token: i64, limit: usize) -> Vec<ClaimedRow> {
        self.claim_for(&[B], now, token, limit).await
    }

    /// Claims rows of `bindings`.
    pub async fn claim_for(
        &self,
        bindings: &[&str],
        now: i64,
        token: i64,
        limit: usize,
    ) -> Vec<ClaimedRow> {
        self.backend
            .claim(&claim_request(bindings, now, now + LEASE, token, limit))
            .await
            .unwrap()
    }
}

/// A new database next to the one `base` names, and the URL of it; `None` when it
/// cannot be created (the skip is written to stderr, naming `test`). Databases of
/// earlier runs (over an hour old, by their name) are dropped on the way.
pub async fn fresh_postgres_database(base: &str, test: &str) -> Option<String> {
    use std::io::Write as _;
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(conn);
    drop_stale(
        &client,
        "SELECT datname FROM pg_database WHERE datname LIKE 'sb\\_testdb\\_%'",
        |name| format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    )
    .await;
    let name = format!("sb_testdb_{}_{:08x}", now_s(), rand::random::<u32>());
    let (path, query) = base.split_once('?').unwrap_or((base, ""));
    let created = match path.rsplit_once('/') {
        Some((server, _)) if server.contains("://") => client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map(|()| match query {
                "" => format!("{server}/{name}"),
                _ => format!("{server}/{name}?{query}"),
            })
            .map_err(|e| e.to_string()),
        _ => Err(format!("{base} does not end in /DATABASE")),
    };
    created
        .map_err(|why| {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: it needs a PostgreSQL database of its own (CREATE DATABASE): {why}"
            );
        })
        .ok()
}

/// Drops the database at `url` that [`fresh_postgres_database`] made from `base`,
/// ending the sessions still on it.
pub async fn drop_postgres_database(base: &str, url: &str) {
    let name = url.split('?').next().and_then(|p| p.rsplit('/').next());
    let Some(name) = name.filter(|n| n.starts_with("sb_testdb_")) else {
        return;
    };
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(conn);
    let _ = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
}

/// A claim request.
pub fn claim_request(
    bindings: &[&str],
    now: i64,
    lease_until: i64,
    token: i64,
    limit: usize,
) -> ClaimRequest {
    ClaimRequest {
        now_ms: now,
        lease_until_ms: lease_until,
        token,
        limit,
        bindings: bindings.iter().map(|b| b.to_string()).collect(),
        holder: None,
    }
}

/// A GitHub event with a JSON body naming its dedupe key, received at `received_at`.
pub fn event(key: &str, received_at: i64) -> TriggerEvent {
    let body = format!(r#"{{"delivery":"{key}"}}"#).into_bytes();
    let payload = serde_json::from_slice(&body).unwrap();
    TriggerEvent::new(
        "gh",
        "github",
        "issues.opened".into(),
        received_at,
        None,
        key.into(),
        format!("{:032x}", key.len() + 1),
        "acme",
        Default::default(),
        body,
        payload,
        SignatureStatus::Verified,
    )
}

/// A dispatch row for `binding`, due at once.
pub fn row(binding: &str) -> Enqueue {
    Enqueue::dispatch(binding, format!("fp-{binding}"))
}

/// A dispatch row for [`B`] with an ordering key.
pub fn keyed(key: &str) -> Enqueue {
    Enqueue {
        ordering_key: Some(key.into()),
        ..row(B)
    }
}

/// A dispatch row for [`B`] first due at `at`.
pub fn due_at(at: i64) -> Enqueue {
    Enqueue {
        not_before_ms: Some(at),
        ..row(B)
    }
}

/// A message for `queue`, enqueued by [`B`].
pub fn message(queue: &str) -> Enqueue {
    Enqueue {
        destination: Destination::Queue(queue.into()),
        ..row(B)
    }
}

/// A handler error of attempt `attempt`.
pub fn failure(attempt: u32, at_ms: i64, message: &str) -> AttemptError {
    AttemptError {
        attempt,
        at_ms,
        kind: "handler".into(),
        message: message.into(),
        took_ms: None,
    }
}

/// The stored event id of an append that must have been stored.
pub fn stored(a: Appended) -> String {
    match a {
        Appended::Stored(id) => id,
        other => panic!("expected a stored event, got {other:?}"),
    }
}
