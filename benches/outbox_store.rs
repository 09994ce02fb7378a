//! The outbox's cost on the ingest path, and its drain rate, at the store (no HTTP).
//!
//! Rows, per backend (SQLite FULL in a temp dir; PostgreSQL with
//! `SWITCHBOARD_TEST_POSTGRES_URL` or `SWITCHBOARD_BENCH_POSTGRES_URL`, a fresh schema):
//!
//! - **append, N rows**: `CONCURRENCY` tasks appending fresh 1 KiB events through the
//!   group commit with `Store::append_enqueue`, each with N outbox rows (0, 1, or 2
//!   dispatch rows and 1 queue message): what enqueueing in the ingest transaction
//!   costs against N = 0;
//! - **claim + done**: one claimer draining what the append rows left, `BATCH` rows a
//!   claim, each batch finished `Done` in one call: rows/s through the outbox's two
//!   statements per batch.
//!
//! `SWITCHBOARD_BENCH_SECS` sets the duration per append row (default 2).

#[path = "../tests/ingest/support.rs"]
mod ingest_support;
#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{run_for, us, Sample};
use switchboard::__private::outbox::model::{ClaimRequest, Destination, Enqueue, Finish};
use switchboard::__private::store::{open_backend, Backend, Store};

/// Appending tasks at once: a burst of concurrent webhooks.
const CONCURRENCY: usize = 256;
/// Rows per claim and per finish call, as a dispatcher would take them.
const BATCH: usize = 256;
const BINDING: &str = "bench";

fn rows(n: usize) -> Vec<Enqueue> {
    (0..n)
        .map(|i| {
            let mut e = Enqueue::dispatch(BINDING, "fp");
            if i == 2 {
                e.destination = Destination::Queue("bench-q".into());
            }
            e
        })
        .collect()
}

async fn append(store: &Store, per_event: usize, dur: Duration) -> Sample {
    let counter = Arc::new(AtomicU64::new(0));
    let body = Arc::new(vec![b'x'; 1024]);
    let deadline = Instant::now() + dur;
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (store, counter, body) = (store.clone(), counter.clone(), body.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let now = switchboard::__private::now_ms();
                    let ev = switchboard::TriggerEvent::new(
                        "gh",
                        "github",
                        "issues.opened".into(),
                        now,
                        None,
                        format!("{per_event}:{n}"),
                        switchboard::__private::triggers::trace_id_from(None),
                        "default",
                        Default::default(),
                        body.to_vec(),
                        serde_json::Value::Null,
                        switchboard::__private::triggers::SignatureStatus::Verified,
                    );
                    let t = Instant::now();
                    store
                        .append_enqueue(ev, now + 86_400_000, rows(per_event))
                        .await
                        .expect("append");
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Sample {
        ops: latencies.len() as u64,
        elapsed: start.elapsed(),
        latencies,
    }
}

/// Claims and finishes every due row of [`BINDING`]; returns rows and time.
async fn drain(backend: &Arc<dyn Backend>) -> Sample {
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut ops = 0;
    for token in 1.. {
        let now = switchboard::__private::now_ms();
        let t = Instant::now();
        let got = backend
            .claim(&ClaimRequest {
                now_ms: now,
                lease_until_ms: now + 60_000,
                token,
                limit: BATCH,
                bindings: vec![BINDING.into()],
                holder: None,
            })
            .await
            .expect("claim");
        if got.is_empty() {
            break;
        }
        let done = got
            .iter()
            .map(|r| Finish::Done { id: r.id, token })
            .collect();
        let applied = backend.finish(done, now).await.expect("finish");
        assert_eq!(applied as usize, got.len());
        latencies.push(t.elapsed());
        ops += got.len() as u64;
    }
    Sample {
        ops,
        elapsed: start.elapsed(),
        latencies,
    }
}

fn print(name: &str, unit: &str, s: &mut Sample, base: Option<f64>) {
    let ratio = base.map_or("".into(), |b| format!("{:.2}", s.rate() / b));
    println!(
        "| {name:<28} | {:>9.0} {unit:<7} | {:>7} | {:>7} | {ratio:>5} |",
        s.rate(),
        us(s.p(0.5)),
        us(s.p(0.99)),
    );
}

#[tokio::main]
async fn main() {
    let dur = run_for();
    let dir = tempfile::tempdir().unwrap();
    let stores = ingest_support::bench_stores(dir.path(), "outbox.db").await;
    println!("outbox store: {CONCURRENCY} appending tasks, 1 KiB events, {dur:?} per append row");
    for (name, url) in stores {
        println!("\n{name}\n");
        println!(
            "| row                          | rate              | p50 µs  | p99 µs  | ratio |"
        );
        println!(
            "|------------------------------|------------------:|--------:|--------:|------:|"
        );
        let backend = open_backend(&url, &Default::default()).await.unwrap();
        let store = Store::new(backend.clone());
        let mut base = None;
        for per_event in [0, 1, 3] {
            let mut s = append(&store, per_event, dur).await;
            let label = format!("append, {per_event} rows");
            print(&label, "events/s", &mut s, base);
            base.get_or_insert(s.rate());
        }
        let mut s = drain(&backend).await;
        print(
            &format!("claim {BATCH} + done ({} rows)", s.ops),
            "rows/s",
            &mut s,
            None,
        );
    }
}
