//! The embedded SQLite store's WAL stays bounded under steady load (issue 35): a
//! runtime on a real SQLite file ingests signed 1 KiB GitHub webhooks at 100/s over
//! real HTTP for a minute, and a binding delivers each to a local connector (an
//! ingest, a claim and a finish per webhook, as in production). The WAL file's size,
//! read every few milliseconds, must never pass the store's documented cap
//! (`store::sqlite::WAL_CAP`). Before the fix the same load grew it to hundreds of MB
//! in that minute: checkpoints never caught up with the commits, so the WAL never
//! restarted.
#![cfg(feature = "runtime")]

#[path = "ingest/support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard::__private::store::SQLITE_WAL_CAP;
use switchboard::{BaseConnector, Payload, Runtime, RuntimeConfig};

/// Webhooks per second, and for how long.
const RATE: u64 = 100;
const LOAD: Duration = Duration::from_secs(60);
/// How often the WAL file's size is read.
const WAL_POLL: Duration = Duration::from_millis(10);

/// Counts the deliveries it gets.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

#[async_trait]
impl BaseConnector for Counter {
    fn connector_type(&self) -> &str {
        "counter"
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Payload::Json(serde_json::json!({"ok": true})))
    }
}

/// A GitHub `issues` body of about 1 KiB carrying `n`.
fn body(n: u64) -> String {
    let pad = "x".repeat(900);
    format!(
        r#"{{"action":"opened","n":{n},"issue":{{"number":{n},"title":"soak","body":"{pad}"}},"repository":{{"full_name":"octo/wal"}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_under_its_cap_through_a_minute_of_steady_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wal.db");
    let text = format!(
        r#"listen = "127.0.0.1:0"
store = "sqlite:{}"

[[sources]]
id = "gh"
provider = "github"
secret_env = "GH_SECRET"

[[triggers]]
id = "deliver"
sources = ["gh"]
handler = {{ local = "counter", capability = "count" }}
"#,
        db.display()
    );
    let config = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(support::env)
        .unwrap();
    let counter = Counter::default();
    let rt = Runtime::builder(config)
        .local_connector("counter", counter.clone())
        .start()
        .await
        .unwrap();
    let url = format!("http://{}/hooks/gh", rt.local_addr());

    // The WAL's size, polled until the load and its deliveries are done.
    let largest = Arc::new(AtomicU64::new(0));
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (largest, watching) = (largest.clone(), watching.clone());
        let wal = dir.path().join("wal.db-wal");
        tokio::spawn(async move {
            while watching.load(Ordering::Relaxed) {
                if let Ok(m) = std::fs::metadata(&wal) {
                    largest.fetch_max(m.len(), Ordering::Relaxed);
                }
                tokio::time::sleep(WAL_POLL).await;
            }
        })
    };

    // Open-loop load: one webhook every 1/RATE s, each on its own task.
    let http = reqwest::Client::new();
    let key = support::env("GH_SECRET").unwrap();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = RATE * LOAD.as_secs();
    let mut posts = Vec::with_capacity(total as usize);
    for n in 0..total {
        tick.tick().await;
        let d = support::github_delivery(key.as_bytes(), &format!("wal-{n}"), body(n));
        let (http, url) = (http.clone(), url.clone());
        posts.push(tokio::spawn(async move {
            // A 503 (the machine's cores busy elsewhere: ingress sheds load) is sent
            // again, as providers do, so the load stays what it is.
            let mut refused = 0;
            loop {
                let mut req = http.post(&url);
                for (k, v) in &d.headers {
                    req = req.header(k, v);
                }
                let status = req
                    .body(d.body.clone())
                    .send()
                    .await
                    .expect("the runtime answers")
                    .status()
                    .as_u16();
                if status != 503 {
                    return (status, refused);
                }
                refused += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    let (mut accepted, mut refused) = (0, 0);
    for p in posts {
        let (status, r) = p.await.unwrap();
        assert_eq!(status, 200, "a webhook was not accepted");
        accepted += 1;
        refused += r;
    }
    support::eventually("every webhook delivered", || async {
        (counter.0.load(Ordering::Relaxed) >= accepted).then_some(())
    })
    .await;
    watching.store(false, Ordering::Relaxed);
    watcher.await.unwrap();

    let largest = largest.load(Ordering::Relaxed);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    assert!(largest > 0, "the WAL file was never seen: wrong path?");
    assert!(
        largest <= SQLITE_WAL_CAP,
        "the WAL reached {:.1} MiB, over its cap of {:.1} MiB",
        mib(largest),
        mib(SQLITE_WAL_CAP)
    );
    eprintln!(
        "{accepted} webhooks delivered ({refused} 503s sent again); the WAL's largest size was {:.1} MiB (cap {:.1} MiB)",
        mib(largest),
        mib(SQLITE_WAL_CAP)
    );
    rt.shutdown().await.unwrap();
}
