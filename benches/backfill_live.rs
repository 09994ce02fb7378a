//! What a running backfill costs live traffic: the enqueue-to-handler latency of live
//! events while a backfill walks history, against the same live load with no
//! backfill, in the same run.
//!
//! Per store (SQLite FULL in a temp dir; PostgreSQL from `SWITCHBOARD_BENCH_POSTGRES_URL`
//! or `SWITCHBOARD_TEST_POSTGRES_URL`), each mode on a fresh database holding
//! `--history` stored events (default 20,000), with two bindings, `live` and `other`,
//! each a `local` connector that answers at once:
//!
//! - **no backfill** (the baseline): live events enqueued for `live` at `--live` per
//!   second (default 200) for `--secs` seconds (default 8);
//! - **backfill into another binding**: the same, while a backfill at `--rate` events
//!   per second (default 2,000) runs the history through `other`;
//! - **backfill into the same binding**: the same, while the backfill runs the history
//!   through `live` itself (its rows at the default backfill priority, -1, below the
//!   live rows' 0).
//!
//! A live event carries the instant it was enqueued; its handler records the time
//! since. Backfilled events are counted, not timed. The table gives p50, p99 and max
//! per mode, p99's ratio to the baseline's, and the rows the backfill delivered per
//! second over the window.
//!
//! `cargo bench --bench backfill_live --features runtime,postgres -- [--history N]
//! [--live R] [--rate R] [--secs S] [--store sqlite,postgres]`

#[path = "../tests/ingest/support.rs"]
mod ingest_support;
#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::{json, Value};
use support::{arg, percentile};
use switchboard::{BaseConnector, EnqueueRequest, ExecuteContext, Payload, Runtime, RuntimeConfig};

/// Enqueueing tasks for the history.
const FILLERS: usize = 64;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Times live events (payload `t`, the unix µs they were enqueued) and counts the rest.
#[derive(Clone, Default)]
struct Clocked {
    latencies: Arc<Mutex<Vec<Duration>>>,
    backfilled: Arc<AtomicU64>,
}

impl Clocked {
    fn record(&self, payload: &Payload, ctx: Option<&ExecuteContext>) {
        let v = match payload {
            Payload::Json(v) => v.clone(),
            Payload::Bytes(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let backfill = ctx.is_some_and(|c| c.get("switchboard.backfill").is_some());
        match v["t"].as_u64() {
            Some(t) if !backfill => {
                let d = Duration::from_micros(now_us().saturating_sub(t));
                self.latencies.lock().unwrap().push(d);
            }
            _ => {
                self.backfilled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[async_trait]
impl BaseConnector for Clocked {
    fn connector_type(&self) -> &str {
        "clocked"
    }

    async fn execute(&self, p: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        self.record(&p, None);
        Ok(Payload::Json(Value::Null))
    }

    async fn execute_with_context(
        &self,
        p: Payload,
        _: Option<&str>,
        ctx: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        self.record(&p, Some(ctx));
        Ok(Payload::Json(Value::Null))
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Baseline,
    Other,
    Same,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "no backfill",
            Mode::Other => "backfill into another binding",
            Mode::Same => "backfill into the same binding",
        }
    }
}

async fn start(url: &str, live: &Clocked, other: &Clocked) -> Runtime {
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore = \"{url}\"\n\
         [[triggers]]\nid = \"live\"\nhandler = {{ local = \"live\", capability = \"x\" }}\n\
         [[triggers]]\nid = \"other\"\nhandler = {{ local = \"other\", capability = \"x\" }}\n"
    );
    let config = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|_| None)
        .unwrap();
    Runtime::builder(config)
        .local_connector("live", live.clone())
        .local_connector("other", other.clone())
        .start()
        .await
        .unwrap()
}

/// Stores `n` history events (for `other`, delivered and done before the window).
async fn fill(rt: &Runtime, other: &Clocked, n: u64) {
    let ops = rt.ops().clone();
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..FILLERS)
        .map(|_| {
            let (ops, next) = (ops.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let body = json!({"history": i}).to_string();
                    ops.enqueue(EnqueueRequest::to_binding("other", body))
                        .await
                        .expect("enqueue");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while other.backfilled.load(Ordering::Relaxed) < n {
        assert!(Instant::now() < deadline, "the history did not drain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other.backfilled.store(0, Ordering::Relaxed);
}

struct Row {
    mode: Mode,
    latencies: Vec<Duration>,
    backfilled_per_s: f64,
}

async fn run(url: &str, mode: Mode, history: u64, live_rate: f64, rate: f64, secs: f64) -> Row {
    let (live, other) = (Clocked::default(), Clocked::default());
    let rt = start(url, &live, &other).await;
    fill(&rt, &other, history).await;
    let base = format!("http://{}", rt.local_addr());
    let target = match mode {
        Mode::Baseline => None,
        Mode::Other => Some("other"),
        Mode::Same => Some("live"),
    };
    if let Some(binding) = target {
        let resp = reqwest::Client::new()
            .post(format!("{base}/api/v1/backfills"))
            .json(&json!({"binding": binding, "rate": rate, "skip_delivered": false}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
    }
    let window = Duration::from_secs_f64(secs);
    let every = Duration::from_secs_f64(1.0 / live_rate);
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    while t0.elapsed() < window {
        tick.tick().await;
        let body = json!({"t": now_us(), "n": sent}).to_string();
        rt.ops()
            .enqueue(EnqueueRequest::to_binding("live", body))
            .await
            .expect("live enqueue");
        sent += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while (live.latencies.lock().unwrap().len() as u64) < sent {
        assert!(Instant::now() < deadline, "live events went missing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let backfilled =
        live.backfilled.load(Ordering::Relaxed) + other.backfilled.load(Ordering::Relaxed);
    rt.shutdown().await.unwrap();
    let mut latencies = live.latencies.lock().unwrap().clone();
    latencies.sort_unstable();
    Row {
        mode,
        latencies,
        backfilled_per_s: backfilled as f64 / elapsed,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let history = arg("--history", 20_000.0) as u64;
    let live_rate = arg("--live", 200.0);
    let rate = arg("--rate", 2_000.0);
    let secs = arg("--secs", 8.0);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "backfill_live: {history} stored events, live {live_rate}/s for {secs} s, backfill at {rate}/s; {}",
        support::machine()
    );
    let stores = ingest_support::bench_stores(dir.path(), "unused.db").await;
    let only = support::list("--store");
    for (n, (store, _)) in stores.iter().enumerate() {
        let kind = if store.starts_with("sqlite") {
            "sqlite"
        } else {
            "postgres"
        };
        if only.as_ref().is_some_and(|o| !o.iter().any(|s| s == kind)) {
            continue;
        }
        println!("\n{store}");
        println!(
            "| mode | live p50 ms | live p99 ms | live max ms | p99 ratio to no backfill | backfilled rows/s |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        let mut baseline_p99 = None;
        for (m, mode) in [Mode::Baseline, Mode::Other, Mode::Same]
            .into_iter()
            .enumerate()
        {
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
            let row = run(&url, mode, history, live_rate, rate, secs).await;
            let p99 = percentile(&row.latencies, 0.99);
            let base = *baseline_p99.get_or_insert(p99);
            println!(
                "| {} | {} | {} | {} | {:.2} | {:.0} |",
                row.mode.name(),
                ms(percentile(&row.latencies, 0.5)),
                ms(p99),
                ms(row.latencies.last().copied().unwrap_or_default()),
                p99.as_secs_f64() / base.as_secs_f64().max(1e-9),
                row.backfilled_per_s,
            );
        }
    }
}
