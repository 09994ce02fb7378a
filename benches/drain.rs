//! A backlog drained through the public API, as a user meets it after an outage: a
//! [`Runtime`] whose binding is paused while `Runtime::enqueue` fills the outbox, then
//! resumed, with a `local` connector that returns at once.
//!
//! Per store (SQLite FULL in a temp dir; PostgreSQL from `SWITCHBOARD_BENCH_POSTGRES_URL`
//! or `SWITCHBOARD_TEST_POSTGRES_URL`), each row on a fresh database holding `--rows`
//! rows (default 100,000):
//!
//! - **floor**: the least a claimer must do to take those rows off this table: a loop
//!   of one statement deleting the 100 oldest due rows (PostgreSQL `FOR UPDATE SKIP
//!   LOCKED`; SQLite a select and its deletes in one transaction), nothing leased,
//!   nothing run;
//! - **defaults**: the binding and `[dispatcher]` with every setting at its default;
//! - **tuned**: `[dispatcher] batch = 500, max_in_flight = 1024` and the binding's
//!   `max_concurrent = 1024`;
//! - **serial**: `max_concurrent = 1`, each row starting after the previous finished;
//! - **hot key**: every row with the same `ordering_key`.
//!
//! Drains time the resume until the connector has seen every row (serial and hot key:
//! the rows seen in `--window` seconds, default 5, with the backlog still above half
//! its size). The enqueue column is `Runtime::enqueue` from 64 tasks, for the first
//! and the last tenth of the fill: whether enqueueing slows as the backlog grows.
//!
//! `cargo bench --bench drain --features runtime,postgres -- [--rows N] [--window S]
//! [--only floor,defaults,tuned,serial,hot] [--store sqlite,postgres]`

#[path = "../tests/ingest/support.rs"]
mod ingest_support;
#[path = "support/pg_floor.rs"]
mod pg_floor;
#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use support::{arg, list};
use switchboard::{BaseConnector, EnqueueRequest, ExecuteContext, Payload, Runtime, RuntimeConfig};

/// Enqueueing tasks at once.
const ENQUEUERS: usize = 64;

/// Counts what it is given and answers at once.
#[derive(Clone, Default)]
struct Noop(Arc<AtomicU64>);

#[async_trait]
impl BaseConnector for Noop {
    fn connector_type(&self) -> &str {
        "noop"
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Payload::Json(serde_json::Value::Null))
    }

    async fn execute_with_context(
        &self,
        _: Payload,
        _: Option<&str>,
        _: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Payload::Json(serde_json::Value::Null))
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Defaults,
    Tuned,
    Serial,
    Hot,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Defaults => "defaults",
            Case::Tuned => "tuned",
            Case::Serial => "serial",
            Case::Hot => "hot",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Case::Defaults => "",
            Case::Tuned => "[dispatcher]\nbatch = 500\nmax_in_flight = 1024\n",
            Case::Serial | Case::Hot => "",
        }
    }

    fn binding(self) -> &'static str {
        match self {
            Case::Defaults => "",
            Case::Tuned => "max_concurrent = 1024\n",
            Case::Serial => "max_concurrent = 1\n",
            Case::Hot => "ordering_key = \"'hot'\"\n",
        }
    }

    /// Whether the drain is timed over a window rather than to the end.
    fn windowed(self) -> bool {
        matches!(self, Case::Serial | Case::Hot)
    }
}

fn selected(name: &str, item: &str) -> bool {
    list(name).is_none_or(|l| l.iter().any(|x| x == item))
}

/// A fresh database of `store`'s kind: a file in `dir`, or a schema in `base`.
async fn fresh(store: &str, dir: &std::path::Path, base: Option<&str>, n: usize) -> String {
    match store {
        "sqlite" => format!("sqlite:{}", dir.join(format!("{n}.db")).display()),
        _ => ingest_support::fresh_postgres_schema(base.expect("checked")).await,
    }
}

/// Drops the schema a `fresh_postgres_schema` URL selects.
async fn drop_schema(base: &str, url: &str) {
    let Some(schema) = url.rsplit("search_path%3D").next() else {
        return;
    };
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let _ = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await;
}

async fn start(url: &str, case: Case, noop: &Noop) -> Runtime {
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore = \"{url}\"\n{}\n[[triggers]]\nid = \"b\"\nhandler = {{ local = \"noop\", capability = \"x\" }}\n{}",
        case.config(),
        case.binding()
    );
    let config = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|_| None)
        .unwrap();
    Runtime::builder(config)
        .local_connector("noop", noop.clone())
        .start()
        .await
        .unwrap()
}

/// Enqueues `rows` rows for the paused binding from [`ENQUEUERS`] tasks; returns the
/// rate over the first and the last tenth.
async fn fill(rt: &Runtime, rows: usize) -> (f64, f64) {
    let ops = rt.ops().clone();
    let next = Arc::new(AtomicU64::new(0));
    let tenth = (rows / 10).max(1) as u64;
    let marks: Arc<Vec<std::sync::OnceLock<Instant>>> =
        Arc::new((0..=10).map(|_| std::sync::OnceLock::new()).collect());
    let _ = marks[0].set(Instant::now());
    let tasks: Vec<_> = (0..ENQUEUERS)
        .map(|_| {
            let (ops, next, marks) = (ops.clone(), next.clone(), marks.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= rows as u64 {
                        return;
                    }
                    let body = format!(r#"{{"n":{n}}}"#);
                    ops.enqueue(EnqueueRequest::to_binding("b", body))
                        .await
                        .expect("enqueue");
                    if (n + 1) % tenth == 0 {
                        let _ = marks[((n + 1) / tenth).min(10) as usize].set(Instant::now());
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let at = |i: usize| marks[i].get().copied();
    let rate = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
        (Some(a), Some(b)) => tenth as f64 / b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    (rate(at(0), at(1)), rate(at(9), at(10)))
}

/// Waits until `noop` has seen `target` rows, or `limit` passed; returns the time.
async fn seen(noop: &Noop, target: u64, limit: Duration) -> Duration {
    let started = Instant::now();
    while noop.0.load(Ordering::Relaxed) < target && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    started.elapsed()
}

struct Measured {
    rows_per_s: f64,
    enqueue: (f64, f64),
}

async fn drain(url: &str, case: Case, rows: usize, window: Duration) -> Measured {
    let noop = Noop::default();
    let rt = start(url, case, &noop).await;
    rt.ops().set_paused("b", true).await.unwrap();
    let enqueue = fill(&rt, rows).await;
    let started = Instant::now();
    rt.ops().set_paused("b", false).await.unwrap();
    let rows_per_s = if case.windowed() {
        tokio::time::sleep(window).await;
        let n = noop.0.load(Ordering::Relaxed);
        assert!(
            (n as usize) < rows / 2,
            "the window ended with the backlog below half its size: shorten it"
        );
        n as f64 / started.elapsed().as_secs_f64()
    } else {
        let took = seen(&noop, rows as u64, Duration::from_secs(600)).await;
        assert_eq!(noop.0.load(Ordering::Relaxed), rows as u64, "drained");
        rows as f64 / took.as_secs_f64()
    };
    rt.shutdown().await.expect("stop");
    Measured {
        rows_per_s,
        enqueue,
    }
}

/// The claim-and-delete floor over `rows` rows enqueued through a runtime.
async fn floor(url: &str, rows: usize) -> f64 {
    let noop = Noop::default();
    let rt = start(url, Case::Defaults, &noop).await;
    rt.ops().set_paused("b", true).await.unwrap();
    fill(&rt, rows).await;
    rt.shutdown().await.expect("stop");
    let now = switchboard::__private::now_ms();
    let started = Instant::now();
    let deleted = if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || sqlite_floor(&path, now))
            .await
            .unwrap()
    } else {
        pg_floor::PgFloor::connect(url).await.delete_due(now).await
    };
    assert_eq!(deleted, rows as u64);
    rows as f64 / started.elapsed().as_secs_f64()
}

fn sqlite_floor(path: &str, now: i64) -> u64 {
    let mut c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000;")
        .unwrap();
    let mut deleted = 0;
    loop {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        let n = tx
            .execute(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox
                    WHERE next_attempt_at <= ?1 ORDER BY next_attempt_at, id LIMIT 100)",
                [now],
            )
            .unwrap();
        tx.commit().unwrap();
        if n == 0 {
            return deleted;
        }
        deleted += n as u64;
    }
}

#[tokio::main]
async fn main() {
    let rows = arg("--rows", 100_000.0) as usize;
    let window = Duration::from_secs_f64(arg("--window", 5.0));
    let dir = tempfile::tempdir().unwrap();
    let base = std::env::var("SWITCHBOARD_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SWITCHBOARD_TEST_POSTGRES_URL"))
        .ok();
    let mut stores = vec!["sqlite"];
    match &base {
        Some(_) => stores.push("postgres"),
        None => eprintln!("postgres rows skipped: set SWITCHBOARD_TEST_POSTGRES_URL"),
    }
    stores.retain(|s| selected("--store", s));
    println!("drain through the public API: {rows} rows waiting, windows of {window:?}");
    let mut n = 0;
    for store in stores {
        println!("\n{store}\n");
        println!(
            "| run | rows/s | ratio to floor | enqueue /s, first tenth | enqueue /s, last tenth |"
        );
        println!("|---|---:|---:|---:|---:|");
        let mut base_rate = None;
        if selected("--only", "floor") {
            n += 1;
            let url = fresh(store, dir.path(), base.as_deref(), n).await;
            let r = floor(&url, rows).await;
            println!("| floor (claim and delete) | {r:.0} | 1.00 | | |");
            base_rate = Some(r);
            if let (Some(b), "postgres") = (&base, store) {
                drop_schema(b, &url).await;
            }
        }
        for case in [Case::Defaults, Case::Tuned, Case::Serial, Case::Hot] {
            if !selected("--only", case.name()) {
                continue;
            }
            n += 1;
            let url = fresh(store, dir.path(), base.as_deref(), n).await;
            let m = drain(&url, case, rows, window).await;
            let ratio = base_rate.map_or(String::new(), |b| format!("{:.2}", m.rows_per_s / b));
            println!(
                "| {} | {:.0} | {ratio} | {:.0} | {:.0} |",
                case.name(),
                m.rows_per_s,
                m.enqueue.0,
                m.enqueue.1
            );
            if let (Some(b), "postgres") = (&base, store) {
                drop_schema(b, &url).await;
            }
        }
    }
}
