//! The PostgreSQL backend (feature `postgres`): tokio-postgres with a deadpool pool,
//! for several runtime processes sharing one database.
//!
//! Chosen over sqlx for its build time here (about 70 s against 100 s clean) and
//! because pipelining is explicit.
//!
//! One file per concern, each with at most one `impl` of a trait: [`schema`] (the
//! migrations, applied under an advisory lock), `events` ([`crate::store::Backend`]:
//! ingest as one statement per batch, events, audit, state, sweeps), `enqueue` (the
//! outbox rows an ingest or a dead letter's fan-out creates, written once for both),
//! `outbox` ([`crate::outbox::OutboxStore`]) with the SQL of its finishes (`finish`)
//! and queues (`queues`), `versions` ([`crate::triggers::versions::VersionStore`]:
//! binding versions, their lifecycle log, pauses, stranded rows) and `listen` (the
//! cross-process wake-ups). This file holds the pool.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::error::{Error, Result};
use crate::store::backend::store_err;
use crate::store::options::{redact_url, StoreOptions};

mod backfills;
mod claim;
mod enqueue;
mod events;
mod finish;
mod listen;
mod outbox;
mod pg_message;
mod queues;
mod schema;
mod versions;

pub(crate) use claim::explained;
pub(crate) use schema::newest as newest_schema;

/// How long a pool checkout or a new connection may take before the store counts as
/// down (ingress then answers 503).
const CONNECT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// The PostgreSQL backend.
pub(crate) struct PostgresBackend {
    pool: Pool,
    url: String,
    /// Woken by the `LISTEN switchboard_outbox` task on every notification.
    wake: std::sync::Arc<tokio::sync::Notify>,
    /// Woken by the same task on every `switchboard_triggers` notification (a
    /// lifecycle commit, in this process or another).
    lifecycle: std::sync::Arc<tokio::sync::Notify>,
    /// This backend's payload on the notifications its finishes send, random per
    /// backend: its own listener ignores them ([`listen::Wakes::own`]).
    notify_tag: std::sync::Arc<str>,
    /// Dropping it (with the backend) stops the listener task. `None` only while
    /// `connect` migrates.
    _listener: Option<tokio_util::sync::DropGuard>,
}

/// The schema version of the database at `url`, read on one short-lived connection
/// in a read-only transaction, so nothing is created or migrated (`switchboard serve
/// --check`): `None` when it has no `schema_migrations` table yet. An unreachable
/// server is an error naming it (`shown`, the redacted URL) within the connect
/// deadline.
pub(crate) async fn read_schema_version(url: &str, shown: &str) -> Result<Option<i64>> {
    let mut cfg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::Config(format!("store {shown:?} is not a PostgreSQL URL: {e}")))?;
    cfg.connect_timeout(CONNECT_DEADLINE);
    let unreachable = |e: &dyn std::fmt::Display| {
        Error::Store(format!(
            "cannot reach the PostgreSQL store {shown}: {e}; check that the server is up and the URL, user and database are right"
        ))
    };
    let (mut client, connection) = tokio::time::timeout(CONNECT_DEADLINE, cfg.connect(NoTls))
        .await
        .map_err(|_| unreachable(&"no answer within 5 s"))?
        .map_err(|e| unreachable(&e))?;
    let driver = tokio::spawn(connection);
    let bad = |e| store_err(&format!("postgres schema version of {shown}"), e);
    let read = async {
        let tx = client
            .build_transaction()
            .read_only(true)
            .start()
            .await
            .map_err(bad)?;
        let has_table: bool = tx
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await
            .map_err(bad)?
            .get(0);
        if !has_table {
            return Ok(None);
        }
        let version: i64 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(bad)?
            .get(0);
        Ok(Some(version))
    };
    let version = read.await;
    drop(client);
    driver.abort();
    version
}

fn pg_err(what: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| store_err(&format!("postgres {what}"), pg_message::of(&e))
}

impl PostgresBackend {
    /// Connects (checking the server is reachable) and applies migrations.
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<PostgresBackend> {
        let shown = redact_url(url);
        let mut cfg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| Error::Config(format!("store {shown:?} is not a PostgreSQL URL: {e}")))?;
        cfg.connect_timeout(CONNECT_DEADLINE);
        // JIT off, before the URL's own options (which win, should one set `jit`): the
        // store's statements are short index walks whose planned cost at a large backlog
        // crosses `jit_above_cost`, and compiling them took 14 ms against a 6 ms claim
        // at 1M rows (`benches/backlog.rs`' EXPLAIN).
        let session = match cfg.get_options() {
            Some(own) => format!("-c jit=off {own}"),
            None => "-c jit=off".to_owned(),
        };
        cfg.options(&session);
        let listen_cfg = cfg.clone();
        let manager = Manager::from_config(
            cfg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .wait_timeout(Some(CONNECT_DEADLINE))
            .create_timeout(Some(CONNECT_DEADLINE))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::Config(format!("store {shown:?}: {e}")))?;
        let notify_tag: std::sync::Arc<str> = format!("{:016x}", rand::random::<u64>()).into();
        let wakes = listen::Wakes {
            own: notify_tag.clone(),
            outbox: std::sync::Arc::new(tokio::sync::Notify::new()),
            lifecycle: std::sync::Arc::new(tokio::sync::Notify::new()),
        };
        // Migrate before listening: a database that cannot be migrated is reported as
        // such, not as a failed LISTEN.
        let mut backend = PostgresBackend {
            pool,
            url: shown.clone(),
            wake: wakes.outbox.clone(),
            lifecycle: wakes.lifecycle.clone(),
            notify_tag,
            _listener: None,
        };
        schema::migrate(&mut backend.client().await?, &shown).await?;
        backend._listener = Some(listen::start(listen_cfg, wakes, &shown).await?);
        Ok(backend)
    }

    /// A pooled connection, or an error naming the server when none can be had.
    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| Error::Store(format!("cannot reach PostgreSQL at {}: {e}", self.url)))
    }
}

/// `sql` prepared on `client`, once per pooled connection: the dispatcher and the
/// queue consumers repeat these statements many times a second, and an unprepared
/// statement costs a second round trip (parse and describe) every time.
async fn prepared(
    client: &deadpool_postgres::Object,
    sql: &str,
) -> Result<tokio_postgres::Statement> {
    client
        .prepare_cached(sql)
        .await
        .map_err(pg_err("prepare an outbox statement"))
}
