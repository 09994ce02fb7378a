//! Durable verified webhook events per second through real HTTP.
//!
//! A load generator (a minimal HTTP/1.1 client, `CONCURRENCY` connections kept alive) posts signed
//! GitHub deliveries with a 5 KiB body and a fresh delivery id each, so every request
//! is verified (HMAC-SHA256), classified, claimed and stored. Rows:
//!
//! - **baseline**: the same HTTP stack (axum on hyper, same client) answering 200
//!   after reading the body, doing no other work: the ceiling of this machine for
//!   this request shape, with client and server sharing its cores;
//! - **sqlite (FULL)**: the default store, commits fsynced, group-committed;
//! - **sqlite (NORMAL)**: WAL's NORMAL sync;
//! - **postgres**: with `SWITCHBOARD_TEST_POSTGRES_URL` (or
//!   `SWITCHBOARD_BENCH_POSTGRES_URL`) set, a fresh schema in that database.
//!
//! Each row prints events/s, p50/p99 latency and the ratio to the baseline measured in
//! the same run, then checks the store holds exactly the acknowledged events.
//! `SWITCHBOARD_BENCH_SECS` sets the duration per row (default 2).

#[path = "support/mod.rs"]
mod support;
// The test suite's helpers: a fresh PostgreSQL schema per run.
#[path = "../tests/ingest/support.rs"]
mod ingest_support;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use support::{run_for, us, Sample};
use switchboard::{Runtime, RuntimeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests in flight at once.
const CONCURRENCY: usize = 256;
/// Body sizes measured: a typical Slack, Linear or Stripe event, and the 5 KiB of a
/// typical GitHub one.
const BODY_SIZES: [usize; 2] = [1024, 5 * 1024];
const SECRET: &str = "bench-secret";

fn body(size: usize) -> String {
    let pad = "x".repeat(size - 64);
    format!(r#"{{"action":"opened","issue":{{"number":1}},"pad":"{pad}"}}"#)
}

fn signature(body: &str) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(body.as_bytes());
    let hex: String = m
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// Drives `addr` for `dur` and returns the sample of acknowledged requests.
///
/// The load generator is a minimal HTTP/1.1 client over keep-alive connections (one
/// request in flight per connection; the request bytes are built once but for the
/// delivery id), so the machine's two cores go to the server rather than to the client.
async fn drive(addr: SocketAddr, size: usize, dur: Duration) -> Sample {
    let body = Arc::new(body(size));
    let sig = Arc::new(signature(&body));
    let tag = rand::random::<u32>();
    measure(dur, |deadline, counter| {
        let (body, sig) = (body.clone(), sig.clone());
        async move {
            let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
            conn.set_nodelay(true).unwrap();
            let mut lat = Vec::new();
            let mut req = Vec::with_capacity(body.len() + 512);
            let mut buf = vec![0u8; 16 * 1024];
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                req.clear();
                write!(
                    req,
                    "POST /hooks/gh HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
                         x-github-event: issues\r\nx-github-delivery: {tag:08x}-{n}\r\n\
                         x-hub-signature-256: {sig}\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .unwrap();
                req.extend_from_slice(body.as_bytes());
                let t = Instant::now();
                conn.write_all(&req).await.expect("write");
                let status = read_response(&mut conn, &mut buf).await;
                assert_eq!(status, 200, "request {n} was not acknowledged");
                lat.push(t.elapsed());
            }
            lat
        }
    })
    .await
}

/// Runs [`CONCURRENCY`] clients made by `client(deadline, request counter)` until the
/// deadline; each returns the latencies of its requests.
async fn measure<F, Fut>(dur: Duration, client: F) -> Sample
where
    F: Fn(Instant, Arc<AtomicU64>) -> Fut,
    Fut: std::future::Future<Output = Vec<Duration>> + Send + 'static,
{
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + dur;
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| tokio::spawn(client(deadline, counter.clone())))
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Sample {
        ops: latencies.len() as u64,
        elapsed: started.elapsed(),
        latencies,
    }
}

/// Reads one response (head plus a Content-Length body) and returns its status.
async fn read_response(conn: &mut tokio::net::TcpStream, buf: &mut [u8]) -> u16 {
    let mut filled = 0;
    loop {
        let n = conn.read(&mut buf[filled..]).await.expect("read");
        assert!(n > 0, "server closed the connection");
        filled += n;
        let Some(head_end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buf[..head_end]).expect("UTF-8 head");
        let status: u16 = head[9..12].parse().expect("status code");
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while filled < head_end + 4 + len {
            let n = conn.read(&mut buf[filled..]).await.expect("read");
            assert!(n > 0, "server closed the connection");
            filled += n;
        }
        return status;
    }
}

/// The store alone: `CONCURRENCY` tasks appending through the group commit, no HTTP.
async fn drive_store(
    store: switchboard::__private::store::Store,
    size: usize,
    dur: Duration,
) -> Sample {
    let body = Arc::new(body(size));
    measure(dur, |deadline, counter| {
        let (store, body) = (store.clone(), body.clone());
        async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let now = switchboard::__private::store::now_ms();
                let ev = switchboard::TriggerEvent::new(
                    "gh",
                    "github",
                    "issues.opened".into(),
                    now,
                    None,
                    format!("1:{n}"),
                    switchboard::__private::triggers::trace_id_from(None),
                    "default",
                    Default::default(),
                    body.as_bytes().to_vec(),
                    serde_json::Value::Null,
                    switchboard::__private::triggers::SignatureStatus::Verified,
                );
                let t = Instant::now();
                store.append(ev, now + 86_400_000).await.expect("append");
                lat.push(t.elapsed());
            }
            lat
        }
    })
    .await
}

async fn baseline() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/hooks/{id}",
        post(|body: axum::body::Bytes| async move {
            axum::Json(serde_json::json!({"ok": true, "len": body.len()}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

async fn runtime(store: &str, extra: &str) -> Runtime {
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore = \"{store}\"\n{extra}\n[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"BENCH_SECRET\"\n"
    );
    let config = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|n| (n == "BENCH_SECRET").then(|| SECRET.to_owned()))
        .unwrap();
    Runtime::start(config).await.unwrap()
}

async fn stored_count(rt: &Runtime) -> u64 {
    let mut total = 0;
    let mut before = None;
    loop {
        let q = switchboard::__private::store::EventQuery {
            source: Some("gh".into()),
            limit: 10_000,
            before_seq: before,
        };
        let page = rt.store().backend().events(&q).await.unwrap();
        total += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == 10_000 => before = Some(last.seq),
            _ => return total,
        }
    }
}

fn row(name: &str, s: &mut Sample, base: Option<f64>, batches: Option<(u64, u64)>) {
    let rate = s.rate();
    let ratio = base.map_or("1.00".to_owned(), |b| format!("{:.2}", rate / b));
    let per_batch = batches.map_or("-".to_owned(), |(b, w)| {
        format!("{:.1}", w as f64 / b.max(1) as f64)
    });
    println!(
        "| {name:<18} | {:>9.0} | {:>7} | {:>7} | {ratio:>5} | {per_batch:>10} |",
        rate,
        us(s.p(0.50)),
        us(s.p(0.99))
    );
}

#[tokio::main]
async fn main() {
    let dur = run_for();
    let pg = std::env::var("SWITCHBOARD_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SWITCHBOARD_TEST_POSTGRES_URL"))
        .ok();
    if pg.is_none() {
        eprintln!("postgres rows skipped: set SWITCHBOARD_TEST_POSTGRES_URL");
    }
    let dir = tempfile::tempdir().unwrap();
    println!("ingest: {CONCURRENCY} connections, signed GitHub deliveries, {dur:?} per row");
    for size in BODY_SIZES {
        println!("\nbody {size} B\n");
        println!("| row                | events/s  | p50 µs  | p99 µs  | ratio | writes/txn |");
        println!("|--------------------|----------:|--------:|--------:|------:|-----------:|");
        let (addr, server) = baseline().await;
        let mut s = drive(addr, size, dur).await;
        let base = s.rate();
        row("baseline (no work)", &mut s, None, None);
        server.abort();

        // The store alone, for scale: the same appends with no HTTP in front.
        let url = format!(
            "sqlite:{}",
            dir.path().join(format!("only-{size}.db")).display()
        );
        let store = switchboard::__private::store::Store::new(
            switchboard::__private::store::open_backend(&url, &Default::default())
                .await
                .unwrap(),
        );
        let mut s = drive_store(store.clone(), size, dur).await;
        let st = store.stats();
        row(
            "store only (FULL)",
            &mut s,
            Some(base),
            Some((st.batches, st.writes)),
        );
        drop(store);

        let mut stores = vec![
            (
                "sqlite (FULL)",
                format!(
                    "sqlite:{}",
                    dir.path().join(format!("full-{size}.db")).display()
                ),
                "",
            ),
            (
                "sqlite (NORMAL)",
                format!(
                    "sqlite:{}",
                    dir.path().join(format!("normal-{size}.db")).display()
                ),
                "sqlite_synchronous = \"normal\"",
            ),
        ];
        if let Some(base_url) = &pg {
            stores.push((
                "postgres",
                ingest_support::fresh_postgres_schema(base_url).await,
                "",
            ));
        }
        for (name, store, extra) in stores {
            let rt = runtime(&store, extra).await;
            let mut s = drive(rt.local_addr(), size, dur).await;
            let stats = rt.store().stats();
            row(
                name,
                &mut s,
                Some(base),
                Some((stats.batches, stats.writes)),
            );
            let stored = stored_count(&rt).await;
            assert_eq!(
                stored, s.ops,
                "{name}: stored events differ from acknowledged ones"
            );
            rt.shutdown().await.unwrap();
        }
    }
}
