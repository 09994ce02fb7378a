//! What the outbox's statements cost as the backlog grows: the same operations timed
//! with 1k, 10k, 100k and 1M rows waiting, per store, so a cost that depends on the
//! backlog shows as a curve instead of one number.
//!
//! Per store (SQLite FULL in a temp dir; PostgreSQL from `SWITCHBOARD_BENCH_POSTGRES_URL`
//! or `SWITCHBOARD_TEST_POSTGRES_URL`, a fresh schema), the backlog is filled in steps
//! (events of 1,000 outbox rows each, through `Store::append_enqueue`, all due) and at
//! each step, with the backlog held at that size:
//!
//! - **claim 100**: `finish_and_claim` as a busy dispatcher calls it (the previous
//!   batch's `Done` folded into the next claim), 100 rows a call; each claimed batch is
//!   replaced by 100 new rows (untimed), so the backlog stays put;
//! - **serial**: the same with one row a call, then `next_due_ms` as the dispatcher
//!   asks it after a claim that took fewer rows than it could: a serial binding's
//!   per-row cost at the store (rows/s counts both statements);
//! - **hot key**: one row a call from a binding whose rows all share one ordering key
//!   (1,000 of them waiting, beside the backlog);
//! - **enqueue**: 64 tasks appending one-row events into the backlog (a second binding,
//!   whose rows are drained untimed afterwards);
//! - **depth**: `depth` (the sampler's figure each second) and `stats` (the admin
//!   API's).
//!
//! The flat-cost rule: each column at 1M within 20% of its figure at 1k. The last
//! column of each table is the ratio to the 1k row. On PostgreSQL the bench prints
//! `EXPLAIN (ANALYZE, BUFFERS)` of the claim and the next-due query at the largest
//! step (`SWITCHBOARD_BENCH_EXPLAIN=all` at every step).
//!
//! `SWITCHBOARD_BENCH_BACKLOG` sets the steps (comma-separated, default
//! `1000,10000,100000,1000000`); `SWITCHBOARD_BENCH_SECS` the time per measurement
//! (default 1).
//!
//! `cargo bench --bench backlog --features runtime,postgres`

#[path = "../tests/ingest/support.rs"]
mod ingest_support;
#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{percentile, run_for_or};
use switchboard::__private::now_ms;
use switchboard::__private::outbox::model::{ClaimRequest, ClaimedRow, Enqueue, Finish};
use switchboard::__private::store::{open_backend, Backend, Store};

const BINDING: &str = "bench";
const KEYED: &str = "keyed";
const EXTRA: &str = "extra";
/// Rows per prefill event.
const PER_EVENT: usize = 1000;
const BATCH: usize = 100;
const HOT_ROWS: usize = 1000;

fn event(tag: &str, n: u64) -> switchboard::TriggerEvent {
    switchboard::TriggerEvent::new(
        "gh",
        "github",
        "issues.opened".into(),
        now_ms(),
        None,
        format!("{tag}:{n}:{:x}", rand::random::<u64>()),
        switchboard::__private::triggers::trace_id_from(None),
        "default",
        Default::default(),
        vec![b'x'; 256],
        serde_json::Value::Null,
        switchboard::__private::triggers::SignatureStatus::Verified,
    )
}

fn rows(binding: &str, n: usize, key: Option<&str>) -> Vec<Enqueue> {
    (0..n)
        .map(|_| {
            let mut e = Enqueue::dispatch(binding, "fp");
            e.ordering_key = key.map(str::to_owned);
            e
        })
        .collect()
}

/// Appends `n` rows of `binding` in events of up to [`PER_EVENT`] rows, 8 at a time.
async fn fill(store: &Store, binding: &'static str, n: usize, key: Option<&'static str>) {
    let counter = Arc::new(AtomicU64::new(0));
    let events = n.div_ceil(PER_EVENT) as u64;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, counter) = (store.clone(), counter.clone());
            tokio::spawn(async move {
                loop {
                    let i = counter.fetch_add(1, Ordering::Relaxed);
                    if i >= events {
                        return;
                    }
                    let k = if i + 1 == events && n % PER_EVENT != 0 {
                        n % PER_EVENT
                    } else {
                        PER_EVENT
                    };
                    store
                        .append_enqueue(event(binding, i), now_ms() + 60_000, rows(binding, k, key))
                        .await
                        .expect("prefill");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

fn claim_req(binding: &str, limit: usize) -> ClaimRequest {
    let now = now_ms();
    ClaimRequest {
        now_ms: now,
        lease_until_ms: now + 60_000,
        token: rand::random::<i64>() & i64::MAX,
        limit,
        bindings: vec![binding.into()],
        holder: None,
    }
}

fn done(rows: &[ClaimedRow]) -> Vec<Finish> {
    rows.iter()
        .map(|r| Finish::Done {
            id: r.id,
            token: r.token,
        })
        .collect()
}

/// Times, p50 in µs.
fn p50(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    percentile(&v, 0.5).as_secs_f64() * 1e6
}

/// Claims of `limit` rows of `binding` (the previous batch finished in the same call)
/// for `dur`; with `next_due`, each claim is followed by `next_due_ms`. Returns rows/s,
/// the claim's p50 µs and the next-due query's p50 µs.
async fn claims(
    store: &Store,
    binding: &'static str,
    limit: usize,
    next_due: bool,
    dur: Duration,
    key: Option<&'static str>,
) -> (f64, f64, f64) {
    let backend = store.backend();
    let (mut claim_t, mut due_t) = (Vec::new(), Vec::new());
    let mut prev: Vec<Finish> = Vec::new();
    let (mut taken, mut refill) = (0usize, 0usize);
    let mut busy = Duration::ZERO;
    let deadline = Instant::now() + dur;
    let served = vec![binding.to_owned()];
    while Instant::now() < deadline {
        let req = claim_req(binding, limit);
        let t = Instant::now();
        let (_, got) = backend
            .finish_and_claim(std::mem::take(&mut prev), req.now_ms, &req)
            .await
            .expect("claim");
        let c = t.elapsed();
        claim_t.push(c);
        busy += c;
        if next_due {
            let t = Instant::now();
            backend
                .next_due_ms(&served, req.now_ms)
                .await
                .expect("next due");
            let d = t.elapsed();
            due_t.push(d);
            busy += d;
        }
        assert!(!got.is_empty(), "the backlog ran dry");
        taken += got.len();
        prev = done(&got);
        refill += got.len();
        if refill >= BATCH {
            // Keep the backlog where it was (untimed).
            let add = rows(binding, std::mem::take(&mut refill), key);
            store
                .append_enqueue(event("refill", 0), now_ms() + 60_000, add)
                .await
                .unwrap();
        }
    }
    backend.finish(prev, now_ms()).await.unwrap();
    fill(store, binding, refill, key).await;
    let rate = taken as f64 / busy.as_secs_f64();
    let due = if due_t.is_empty() { 0.0 } else { p50(due_t) };
    (rate, p50(claim_t), due)
}

/// 64 tasks appending one-row events of [`EXTRA`] for `dur`: events/s and p50 µs; the
/// rows are drained afterwards (untimed).
async fn enqueue(store: &Store, dur: Duration) -> (f64, f64) {
    let deadline = Instant::now() + dur;
    let start = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    store
                        .append_enqueue(event("enq", i), now_ms() + 60_000, rows(EXTRA, 1, None))
                        .await
                        .unwrap();
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let rate = lat.len() as f64 / start.elapsed().as_secs_f64();
    let backend = store.backend();
    loop {
        let req = claim_req(EXTRA, 1000);
        let got = backend.claim(&req).await.unwrap();
        if got.is_empty() {
            break;
        }
        backend.finish(done(&got), now_ms()).await.unwrap();
    }
    (rate, p50(lat))
}

/// p50 µs of `depth` and of `stats`, 20 calls each.
async fn depth(backend: &dyn Backend) -> (f64, f64) {
    let (mut d, mut s) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let t = Instant::now();
        backend.depth(now_ms()).await.unwrap();
        d.push(t.elapsed());
        let t = Instant::now();
        backend.stats(now_ms()).await.unwrap();
        s.push(t.elapsed());
    }
    (p50(d), p50(s))
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the claim and the next-due query, rolled back.
async fn explain(url: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let statements = switchboard::__private::store::postgres_explained(BINDING, now_ms());
    for (name, sql) in statements {
        client.batch_execute("BEGIN").await.unwrap();
        let plan = client
            .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), &[])
            .await;
        client.batch_execute("ROLLBACK").await.unwrap();
        println!("\n```\n-- {name}");
        match plan {
            Ok(rows) => rows
                .iter()
                .for_each(|r| println!("{}", r.get::<_, String>(0))),
            Err(e) => println!("EXPLAIN failed: {e}"),
        }
        println!("```");
    }
}

#[derive(Default)]
struct Row {
    claim_rate: f64,
    claim_p50: f64,
    serial_rate: f64,
    serial_claim: f64,
    next_due: f64,
    hot_rate: f64,
    enqueue_rate: f64,
    enqueue_p50: f64,
    depth: f64,
    stats: f64,
}

fn steps() -> Vec<usize> {
    std::env::var("SWITCHBOARD_BENCH_BACKLOG")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000, 1_000_000])
}

#[tokio::main]
async fn main() {
    let dur = run_for_or(1.0);
    let dir = tempfile::tempdir().unwrap();
    let stores = ingest_support::bench_stores(dir.path(), "backlog.db").await;
    let explain_all = std::env::var("SWITCHBOARD_BENCH_EXPLAIN").is_ok_and(|v| v == "all");
    let steps = steps();
    println!("outbox cost by backlog: {dur:?} per measurement, steps {steps:?}");
    for (name, url) in stores {
        let backend = open_backend(&url, &Default::default()).await.unwrap();
        let store = Store::new(backend.clone());
        fill(&store, KEYED, HOT_ROWS, Some("hot")).await;
        let mut table = Vec::new();
        let mut filled = 0;
        for (i, &step) in steps.iter().enumerate() {
            fill(&store, BINDING, step - filled, None).await;
            filled = step;
            let mut r = Row::default();
            (r.claim_rate, r.claim_p50, _) = claims(&store, BINDING, BATCH, false, dur, None).await;
            (r.serial_rate, r.serial_claim, r.next_due) =
                claims(&store, BINDING, 1, true, dur, None).await;
            (r.hot_rate, _, _) = claims(&store, KEYED, 1, true, dur, Some("hot")).await;
            (r.enqueue_rate, r.enqueue_p50) = enqueue(&store, dur).await;
            (r.depth, r.stats) = depth(&*backend).await;
            table.push((step, r));
            if name == "postgres" && (explain_all || i + 1 == steps.len()) {
                println!("\n{name}, {step} rows waiting:");
                explain(&url).await;
            }
        }
        println!("\n{name}\n");
        println!("| waiting | claim 100 rows/s | claim p50 µs | serial rows/s | serial claim p50 µs | next-due p50 µs | hot key rows/s | enqueue /s | enqueue p50 µs | depth p50 µs | stats p50 µs |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (step, r) in &table {
            println!(
                "| {step} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                r.claim_rate, r.claim_p50, r.serial_rate, r.serial_claim, r.next_due,
                r.hot_rate, r.enqueue_rate, r.enqueue_p50, r.depth, r.stats
            );
        }
        if let (Some((_, a)), Some((last, b))) = (table.first(), table.last()) {
            println!(
                "\nratio {last} / {} waiting: claim rate {:.2}, serial rate {:.2}, hot key {:.2}, enqueue {:.2}, depth time {:.2}",
                table[0].0,
                b.claim_rate / a.claim_rate,
                b.serial_rate / a.serial_rate,
                b.hot_rate / a.hot_rate,
                b.enqueue_rate / a.enqueue_rate,
                b.depth / a.depth,
            );
        }
    }
}
