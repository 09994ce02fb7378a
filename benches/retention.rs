//! Whether retention keeps up: webhooks ingested at a steady rate for minutes with a
//! short `event_retention`, the sweeper deleting behind them, against the same ingest
//! with nothing expiring, in the same run.
//!
//! Per store (SQLite FULL in a temp dir; PostgreSQL from `SWITCHBOARD_BENCH_POSTGRES_URL`
//! or `SWITCHBOARD_TEST_POSTGRES_URL`), each phase on a fresh database, a runtime with
//! one generic-HMAC source and no binding (so events are all there is to expire):
//!
//! - **no sweeper**: `event_retention` of a day; signed webhooks POSTed at `--rate`
//!   per second (default 1,000) for `--secs` seconds (default 120) from 16 tasks;
//! - **sweeper**: the same with `event_retention = --retention` seconds (default 20),
//!   the dedupe claims kept as long, and `sweep_interval_secs = 1`.
//!
//! Every `--every` seconds (default 10) a sample: events stored, the size of the
//! events table with its indexes and of the dedupe claims (PostgreSQL:
//! `pg_total_relation_size`; SQLite: the database file and its WAL), the ingest
//! latency of that interval (p50, p99) and the events the sweeper deleted per second
//! in it (ingested minus the growth of the table). A summary line per phase gives the
//! ingest p99 over the steady part (after the first retention period) and the deletes
//! per second there; the sweeper phase's table should stay flat once the first
//! retention period has passed.
//!
//! `cargo bench --bench retention --features runtime,postgres -- [--rate R] [--secs S]
//! [--retention S] [--every S] [--store sqlite,postgres] [--phase none|sweeper]`

#[path = "../tests/ingest/support.rs"]
mod ingest_support;
#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{arg, hmac_sha256_signature, percentile};
use switchboard::{Runtime, RuntimeConfig};

/// Tasks POSTing webhooks.
const SENDERS: u64 = 16;

const SECRET: &str = "retention-bench-secret";

/// One sample of a phase.
struct Sample {
    at_s: f64,
    events: i64,
    events_bytes: i64,
    claims_bytes: i64,
    p50: Duration,
    p99: Duration,
    deleted_per_s: f64,
}

/// The runtime's configuration for a phase.
fn config(url: &str, retention_s: Option<u64>) -> String {
    let (events, claims, sweep) = match retention_s {
        Some(r) => (format!("{r}s"), r, 1),
        None => ("1d".to_owned(), 86_400, 3_600),
    };
    format!(
        "listen = \"127.0.0.1:0\"\nstore = \"{url}\"\nevent_retention = \"{events}\"\n\
         sweep_interval_secs = {sweep}\n\n[[sources]]\nid = \"hook\"\nprovider = \"generic_hmac\"\n\
         secret_env = \"RETENTION_SECRET\"\nheader = \"X-Signature\"\nprefix = \"sha256=\"\n\
         dedupe_header = \"X-Delivery\"\ndedupe_retention_secs = {claims}\n"
    )
}

/// A connection to the bench's PostgreSQL schema.
async fn pg(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Rows and bytes of the events table (with its indexes) and of the dedupe claims.
async fn sizes(url: &str) -> (i64, i64, i64) {
    match url.strip_prefix("sqlite:") {
        Some(path) => {
            let c = rusqlite::Connection::open(path).unwrap();
            let events: i64 = c
                .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
                .unwrap();
            let file = |p: String| std::fs::metadata(p).map_or(0, |m| m.len() as i64);
            let bytes = file(path.to_owned()) + file(format!("{path}-wal"));
            // One file: the claims are inside it; reported with the events.
            (events, bytes, 0)
        }
        None => {
            let client = pg(url).await;
            let row = client
                .query_one(
                    "SELECT (SELECT count(*) FROM events),
                        pg_total_relation_size('events'),
                        pg_total_relation_size('dedupe_claims')",
                    &[],
                )
                .await
                .unwrap();
            (row.get(0), row.get(1), row.get(2))
        }
    }
}

/// For PostgreSQL, the server's `autovacuum` setting: deleted rows' space is reused
/// only once a vacuum has passed, so a server with it off grows whatever is deleted.
async fn autovacuum(url: &str) -> String {
    if url.starts_with("sqlite:") {
        return String::new();
    }
    let client = pg(url).await;
    let row = client
        .query_one(
            "SELECT current_setting('autovacuum'), current_setting('autovacuum_naptime')",
            &[],
        )
        .await
        .unwrap();
    format!(
        " (server autovacuum {}, naptime {})",
        row.get::<_, String>(0),
        row.get::<_, String>(1)
    )
}

async fn phase(
    url: &str,
    retention_s: Option<u64>,
    rate: f64,
    secs: f64,
    every: f64,
) -> Vec<Sample> {
    let text = config(url, retention_s);
    let config = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|n| (n == "RETENTION_SECRET").then(|| SECRET.to_owned()))
        .unwrap();
    let rt = Runtime::builder(config).start().await.unwrap();
    let base = format!("http://{}/hooks/hook", rt.local_addr());
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let sent = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let window = Duration::from_secs_f64(secs);
    let senders: Vec<_> = (0..SENDERS)
        .map(|k| {
            let (base, latencies, sent) = (base.clone(), latencies.clone(), sent.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut tick =
                    tokio::time::interval(Duration::from_secs_f64(SENDERS as f64 / rate));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut n = 0u64;
                while t0.elapsed() < window {
                    tick.tick().await;
                    let id = format!("{k}-{n}");
                    let body = format!(r#"{{"id":"{id}","pad":"{}"}}"#, "x".repeat(400));
                    let sig = hmac_sha256_signature(SECRET, &body);
                    let started = Instant::now();
                    let resp = http
                        .post(&base)
                        .header("X-Signature", sig)
                        .header("X-Delivery", &id)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .expect("POST");
                    let status = resp.status();
                    assert!(
                        status.is_success(),
                        "{status}: {}",
                        resp.text().await.unwrap_or_default()
                    );
                    latencies.lock().unwrap().push(started.elapsed());
                    sent.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    let mut samples = Vec::new();
    let mut last = (0u64, 0i64, t0);
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_secs_f64(every)).await;
        let now = Instant::now();
        let mut interval = std::mem::take(&mut *latencies.lock().unwrap());
        interval.sort_unstable();
        let ingested = sent.load(Ordering::Relaxed);
        let (events, events_bytes, claims_bytes) = sizes(url).await;
        let dt = now.duration_since(last.2).as_secs_f64();
        let grown = events - last.1;
        let deleted = (ingested - last.0) as i64 - grown;
        samples.push(Sample {
            at_s: now.duration_since(t0).as_secs_f64(),
            events,
            events_bytes,
            claims_bytes,
            p50: percentile(&interval, 0.5),
            p99: percentile(&interval, 0.99),
            deleted_per_s: deleted.max(0) as f64 / dt,
        });
        last = (ingested, events, now);
    }
    for s in senders {
        s.await.unwrap();
    }
    rt.shutdown().await.unwrap();
    samples
}

fn mib(b: i64) -> String {
    format!("{:.1}", b as f64 / (1024.0 * 1024.0))
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let rate = arg("--rate", 1_000.0);
    let secs = arg("--secs", 120.0);
    let retention = arg("--retention", 20.0) as u64;
    let every = arg("--every", 10.0);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "retention: {rate} webhooks/s for {secs} s, retention {retention} s, samples every {every} s; {}",
        support::machine()
    );
    let only = support::list("--store");
    let phase_only: Option<String> = std::env::args().skip_while(|a| a != "--phase").nth(1);
    let stores = ingest_support::bench_stores(dir.path(), "unused.db").await;
    for (n, (store, _)) in stores.iter().enumerate() {
        let kind = if store.starts_with("sqlite") {
            "sqlite"
        } else {
            "postgres"
        };
        if only.as_ref().is_some_and(|o| !o.iter().any(|s| s == kind)) {
            continue;
        }
        let mut summary = Vec::new();
        let phases: Vec<Option<u64>> = [None, Some(retention)]
            .into_iter()
            .filter(|p| match phase_only.as_deref() {
                Some("sweeper") => p.is_some(),
                Some("none") => p.is_none(),
                _ => true,
            })
            .collect();
        for (m, retention_s) in phases.into_iter().enumerate() {
            let url = match kind {
                "sqlite" => format!(
                    "sqlite:{}",
                    dir.path().join(format!("{n}-{m}.db")).display()
                ),
                _ => {
                    let base = std::env::var("SWITCHBOARD_BENCH_POSTGRES_URL")
                        .or_else(|_| std::env::var("SWITCHBOARD_TEST_POSTGRES_URL"))
                        .unwrap();
                    ingest_support::fresh_postgres_schema(&base).await
                }
            };
            let name = if retention_s.is_some() {
                "sweeper"
            } else {
                "no sweeper"
            };
            println!("\n{store}, {name}{}", autovacuum(&url).await);
            println!("| at s | events | events MiB | claims MiB | ingest p50 ms | ingest p99 ms | deleted/s |");
            println!("|---:|---:|---:|---:|---:|---:|---:|");
            let samples = phase(&url, retention_s, rate, secs, every).await;
            for s in &samples {
                println!(
                    "| {:.0} | {} | {} | {} | {} | {} | {:.0} |",
                    s.at_s,
                    s.events,
                    mib(s.events_bytes),
                    mib(s.claims_bytes),
                    ms(s.p50),
                    ms(s.p99),
                    s.deleted_per_s
                );
            }
            // The steady part: after the first retention period (and a sweep).
            let steady: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.at_s > retention as f64 + every)
                .collect();
            let worst_p99 = steady.iter().map(|s| s.p99).max().unwrap_or_default();
            let deleted =
                steady.iter().map(|s| s.deleted_per_s).sum::<f64>() / steady.len().max(1) as f64;
            let (first, last) = (steady.first(), steady.last());
            summary.push(format!(
                "| {name} | {} | {:.0} | {} → {} | {} → {} |",
                ms(worst_p99),
                deleted,
                first.map_or(0, |s| s.events),
                last.map_or(0, |s| s.events),
                first.map_or("-".into(), |s| mib(s.events_bytes + s.claims_bytes)),
                last.map_or("-".into(), |s| mib(s.events_bytes + s.claims_bytes)),
            ));
        }
        println!("\n{store}: steady part (after the first {retention} s)");
        println!("| phase | worst interval ingest p99 ms | deleted/s | events (first → last sample) | MiB (first → last) |");
        println!("|---|---:|---:|---|---|");
        for line in summary {
            println!("{line}");
        }
    }
}
