//! Durable verified webhook events per second through real HTTP.
//!
//! A load generator (a minimal HTTP/1.1 client, `CONCURRENCY` connections kept alive)
//! posts signed GitHub deliveries, GitHub's own header set and a realistic
//! `issues.opened` body ([`support::payload`]), with a fresh delivery id each, so
//! every request is verified (HMAC-SHA256), classified, claimed and stored. Rows:
//!
//! - **baseline**: the same HTTP stack (axum on hyper, same client) answering 200
//!   after reading the body, doing no other work: the ceiling of this machine for
//!   this request shape, with client and server sharing its cores;
//! - **store only**: the same appends through the group commit with no HTTP in front;
//! - **sqlite (FULL)**: the default store, commits fsynced, group-committed;
//!   **sqlite (FULL, zstd bodies)**: the same with `sqlite_body_compression = "zstd"`
//!   (about half the bytes per row, at the CPU of compressing each body);
//! - **sqlite (NORMAL)**: WAL's NORMAL sync;
//! - **postgres**: with `SWITCHBOARD_TEST_POSTGRES_URL` (or
//!   `SWITCHBOARD_BENCH_POSTGRES_URL`) set, a fresh schema in that database.
//!
//! Two client placements, each with its own baseline: **in-process** (the client's
//! tasks share the server's tokio runtime) and **child process** (the same client in a
//! separate process with its own runtime, so the figure is the server's and the two
//! schedulers do not interleave). Both share the machine's cores either way.
//!
//! Each row prints events/s, p50/p99 latency and the ratio to the baseline measured in
//! the same run and placement, then checks the store holds exactly the acknowledged
//! events. `SWITCHBOARD_BENCH_SECS` sets the duration per row (default 2);
//! `SWITCHBOARD_BENCH_PLACEMENT=child|in-process` runs one placement only;
//! `SWITCHBOARD_BENCH_ROWS=<text>` only the store rows whose name contains it (for
//! profiling one row); `SWITCHBOARD_BENCH_DROP_INDEXES=a,b` drops those indexes of the
//! PostgreSQL schema after its migrations (what each index costs ingest).
//!
//! `CPU µs/event` is this process's CPU time (user + system, every thread) during the
//! row over the events acknowledged: with the client in a child process, the server's
//! cost per request. It moves with the machine's load as the rate does (46–59 µs for
//! one build's SQLite FULL row over a session), so compare it within one run.
//!
//! `KiB written/event` is what this process caused to be written to storage during the
//! row (`/proc/self/io` `write_bytes`: the WAL's frames, checkpoints into the database
//! file) over the events acknowledged; on the PostgreSQL row, the server's WAL bytes
//! (`pg_stat_wal.wal_bytes`, the whole server's) instead, as the server does the
//! writing. `DB KiB/event` is the database's own growth over the same events: the
//! SQLite file after the runtime's shutdown (its last checkpoint moves the WAL in), or
//! the PostgreSQL schema's relations. The rows run at the rate the machine allows, so
//! a commit holds many events; a lower rate writes more per event (`benches/soak.rs`).
//!
//! `allocs/event` counts heap allocations (and reallocations) in this process during
//! the row, divided by the events acknowledged: with the client in a child process,
//! what the server's path allocates per request, which unlike the rate and the CPU
//! time does not move with whatever else the machine is doing. Counted per thread and added to a shared
//! total every [`ALLOC_FLUSH`] allocations, so counting costs no contended atomic per
//! allocation and the rates stay comparable to an uncounted build.

#[path = "support/payload.rs"]
mod payload;
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

use support::{process_cpu, process_written, run_for, us, Sample};
use switchboard::{Runtime, RuntimeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Allocations a thread counts before adding them to [`ALLOCS`].
const ALLOC_FLUSH: u64 = 256;
/// Allocations counted so far, give or take [`ALLOC_FLUSH`] per thread.
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD_ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The system allocator, counting.
struct Counting;

impl Counting {
    fn count() {
        // `try_with`: a thread being torn down has no counter left; its allocation
        // goes uncounted.
        let _ = THREAD_ALLOCS.try_with(|n| {
            let v = n.get() + 1;
            if v == ALLOC_FLUSH {
                ALLOCS.fetch_add(v, Ordering::Relaxed);
                n.set(0);
            } else {
                n.set(v);
            }
        });
    }
}

// SAFETY: every call is forwarded unchanged to `System`; counting touches no memory
// the allocator hands out.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        Counting::count();
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        Counting::count();
        unsafe { std::alloc::System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        Counting::count();
        unsafe { std::alloc::System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Requests in flight at once.
const CONCURRENCY: usize = 256;
/// Body sizes measured: a typical Slack, Linear or Stripe event, and the 5 KiB of a
/// typical GitHub one.
const BODY_SIZES: [usize; 2] = [1024, 5 * 1024];
const SECRET: &str = "bench-secret";
/// Set in the child process's environment: `addr size secs`.
const CLIENT_ENV: &str = "SWITCHBOARD_BENCH_CLIENT";

/// Drives `addr` for `dur` and returns the sample of acknowledged requests.
///
/// The load generator is a minimal HTTP/1.1 client over keep-alive connections (one
/// request in flight per connection; the request bytes are built once but for the
/// delivery id), so the machine's two cores go to the server rather than to the client.
async fn drive(addr: SocketAddr, size: usize, dur: Duration) -> Sample {
    let body = Arc::new(payload::github_issue(size));
    let sig = Arc::new(support::hmac_sha256_signature(SECRET, &body));
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
                    "POST /hooks/gh HTTP/1.1\r\nhost: bench\r\naccept: */*\r\n\
                         user-agent: GitHub-Hookshot/6b02022\r\ncontent-type: application/json\r\n\
                         x-github-event: issues\r\nx-github-delivery: {tag:08x}-{n:04x}-11ef-8c5e-0242ac120002\r\n\
                         x-github-hook-id: 512345678\r\nx-github-hook-installation-target-id: 1296269\r\n\
                         x-github-hook-installation-target-type: repository\r\n\
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
    let body = Arc::new(payload::github_issue(size));
    measure(dur, |deadline, counter| {
        let (store, body) = (store.clone(), body.clone());
        async move {
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
    let rt = Runtime::start(config).await.unwrap();
    drop_indexes(store).await;
    rt
}

/// `SWITCHBOARD_BENCH_DROP_INDEXES=a,b`: on a PostgreSQL store, drops those indexes
/// after the migrations made them, so a row measures what each index costs ingest
/// (issue 36, part 3). Never in the README's runs.
async fn drop_indexes(store: &str) {
    let Ok(names) = std::env::var("SWITCHBOARD_BENCH_DROP_INDEXES") else {
        return;
    };
    if !store.starts_with("postgres") {
        return;
    }
    let client = pg(store).await.expect("connect to drop indexes");
    for name in names.split(',').filter(|n| !n.is_empty()) {
        client
            .batch_execute(&format!("DROP INDEX {name}"))
            .await
            .unwrap_or_else(|e| panic!("drop index {name}: {e}"));
        eprintln!("dropped index {name}");
    }
}

async fn stored_count(rt: &Runtime) -> u64 {
    let mut total = 0;
    let mut before = None;
    loop {
        let q = switchboard::__private::store::EventQuery {
            source: Some("gh".into()),
            limit: 10_000,
            before_seq: before,
            ..Default::default()
        };
        let page = rt.store().backend().events(&q).await.unwrap();
        total += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == 10_000 => before = Some(last.seq),
            _ => return total,
        }
    }
}

/// What the process spent on one row: CPU time, heap allocations, bytes written; and
/// the database's growth, when measured.
#[derive(Clone, Copy)]
struct Cost {
    cpu: Duration,
    allocs: u64,
    written: u64,
    db_growth: Option<u64>,
}

impl Cost {
    /// Runs `f` and returns its output with what the process spent meanwhile.
    async fn of<T>(f: impl std::future::Future<Output = T>) -> (T, Cost) {
        let (cpu, allocs) = (process_cpu(), ALLOCS.load(Ordering::Relaxed));
        let written = process_written();
        let out = f.await;
        let cost = Cost {
            cpu: process_cpu() - cpu,
            allocs: ALLOCS.load(Ordering::Relaxed) - allocs,
            written: process_written() - written,
            db_growth: None,
        };
        (out, cost)
    }
}

/// Where a row's bytes go, to measure its disk figures.
enum DiskOf {
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL schema in the database at this URL.
    Postgres {
        base: String,
        schema: String,
    },
    None,
}

impl DiskOf {
    fn of(url: &str, pg: &Option<String>) -> DiskOf {
        if let Some(path) = url.strip_prefix("sqlite:") {
            return DiskOf::Sqlite(path.into());
        }
        match (pg, url.rsplit("search_path%3D").next()) {
            (Some(base), Some(schema)) => DiskOf::Postgres {
                base: base.clone(),
                schema: schema.to_owned(),
            },
            _ => DiskOf::None,
        }
    }

    /// The server's WAL bytes so far (PostgreSQL), to subtract.
    async fn server_wal(&self) -> Option<u64> {
        let DiskOf::Postgres { base, .. } = self else {
            return None;
        };
        let client = pg(base).await?;
        let row = client
            .query_one("SELECT wal_bytes::bigint FROM pg_stat_wal", &[])
            .await
            .ok()?;
        Some(row.get::<_, i64>(0) as u64)
    }

    /// After a shutdown: waits (up to 10 s) for the SQLite store's last checkpoint,
    /// which empties or removes the WAL, so the file's size holds every page.
    async fn wait_checkpointed(&self) {
        let DiskOf::Sqlite(path) = self else {
            return;
        };
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The database's size now (a SQLite file, WAL apart; a schema's relations).
    async fn size(&self) -> Option<u64> {
        match self {
            DiskOf::Sqlite(path) => std::fs::metadata(path).ok().map(|m| m.len()),
            DiskOf::Postgres { base, schema } => {
                let client = pg(base).await?;
                let row = client
                    .query_one(
                        "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = $1 AND c.relkind = 'r'",
                        &[schema],
                    )
                    .await
                    .ok()?;
                Some(row.get::<_, i64>(0) as u64)
            }
            DiskOf::None => None,
        }
    }
}

async fn pg(base: &str) -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(client)
}

fn row(name: &str, s: &Figures, base: Option<f64>, batches: Option<(u64, u64)>, cost: Cost) {
    let rate = s.rate;
    let ops = s.ops.max(1) as f64;
    let cpu = format!("{:.1}", cost.cpu.as_secs_f64() * 1e6 / ops);
    let allocs = format!("{:.0}", cost.allocs as f64 / ops);
    let written = format!("{:.1}", cost.written as f64 / 1024.0 / ops);
    let db = cost.db_growth.map_or("-".to_owned(), |b| {
        format!("{:.2}", b as f64 / 1024.0 / ops)
    });
    let ratio = base.map_or("1.00".to_owned(), |b| format!("{:.2}", rate / b));
    let per_batch = batches.map_or("-".to_owned(), |(b, w)| {
        format!("{:.1}", w as f64 / b.max(1) as f64)
    });
    println!(
        "| {name:<26} | {:>9.0} | {:>7} | {:>7} | {ratio:>5} | {per_batch:>10} | {cpu:>12} | {allocs:>12} | {written:>17} | {db:>12} |",
        rate,
        us(s.p50),
        us(s.p99)
    );
}

/// Where the load generator runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Tasks on the server's own runtime.
    InProcess,
    /// This bench binary again, in a child process with its own runtime.
    Child,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::InProcess => "in-process",
            Placement::Child => "child process",
        }
    }

    /// Drives `addr` with bodies of `size` for `dur`.
    async fn drive(self, addr: SocketAddr, size: usize, dur: Duration) -> Figures {
        match self {
            Placement::InProcess => Figures::of(&mut drive(addr, size, dur).await),
            Placement::Child => drive_from_child(addr, size, dur).await,
        }
    }
}

/// What a row reports of a sample: rate and latency percentiles.
struct Figures {
    ops: u64,
    rate: f64,
    p50: Duration,
    p99: Duration,
}

impl Figures {
    fn of(s: &mut Sample) -> Figures {
        Figures {
            ops: s.ops,
            rate: s.rate(),
            p50: s.p(0.50),
            p99: s.p(0.99),
        }
    }
}

/// Runs the load generator in a child process (this binary, [`CLIENT_ENV`] set) and
/// reads its one line of figures: `ops rate p50_ns p99_ns`.
async fn drive_from_child(addr: SocketAddr, size: usize, dur: Duration) -> Figures {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let out = tokio::process::Command::new(exe)
        .env(CLIENT_ENV, format!("{addr} {size} {}", dur.as_secs_f64()))
        .output()
        .await
        .expect("start the client process");
    assert!(
        out.status.success(),
        "client process failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).expect("UTF-8 figures");
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|v| v.parse().expect("a number"))
        .collect();
    Figures {
        ops: f[0] as u64,
        rate: f[1],
        p50: Duration::from_nanos(f[2] as u64),
        p99: Duration::from_nanos(f[3] as u64),
    }
}

/// The child process's side: drive the address it was given, print the figures.
fn client_main(spec: &str) {
    let mut parts = spec.split_whitespace();
    let addr: SocketAddr = parts.next().unwrap().parse().unwrap();
    let size: usize = parts.next().unwrap().parse().unwrap();
    let secs: f64 = parts.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut s = rt.block_on(drive(addr, size, Duration::from_secs_f64(secs)));
    let f = Figures::of(&mut s);
    println!(
        "{} {} {} {}",
        f.ops,
        f.rate,
        f.p50.as_nanos(),
        f.p99.as_nanos()
    );
}

fn main() {
    if let Ok(spec) = std::env::var(CLIENT_ENV) {
        return client_main(&spec);
    }
    let placements = match std::env::var("SWITCHBOARD_BENCH_PLACEMENT").as_deref() {
        Ok("child") => vec![Placement::Child],
        Ok("in-process") => vec![Placement::InProcess],
        _ => vec![Placement::Child, Placement::InProcess],
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(placements));
}

async fn bench(placements: Vec<Placement>) {
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
        let body = payload::github_issue(size);
        println!(
            "\nbody {} B (zstd level 1 would store {} B)",
            body.len(),
            zstd_len(body.as_bytes())
        );
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
        let (mut only, mut only_cost) = Cost::of(drive_store(store.clone(), size, dur)).await;
        let only_stats = store.stats();
        drop(store);
        only_cost.db_growth = DiskOf::of(&url, &pg).size().await;
        for &placement in &placements {
            println!("\nclient: {}\n", placement.name());
            println!("| row                        | events/s  | p50 µs  | p99 µs  | ratio | writes/txn | CPU µs/event | allocs/event | KiB written/event | DB KiB/event |");
            println!("|----------------------------|----------:|--------:|--------:|------:|-----------:|-------------:|-------------:|------------------:|-------------:|");
            let (addr, server) = baseline().await;
            let (f, cost) = Cost::of(placement.drive(addr, size, dur)).await;
            let base = f.rate;
            row("baseline (no work)", &f, None, None, cost);
            server.abort();
            row(
                "store only (FULL, no HTTP)",
                &Figures::of(&mut only),
                Some(base),
                Some((only_stats.batches, only_stats.writes)),
                only_cost,
            );
            for (name, store, extra) in stores(dir.path(), size, placement, &pg).await {
                let rt = runtime(&store, extra).await;
                let disk = DiskOf::of(&store, &pg);
                let (db_before, wal_before) = (disk.size().await, disk.server_wal().await);
                let (f, mut cost) = Cost::of(placement.drive(rt.local_addr(), size, dur)).await;
                if let (Some(before), Some(after)) = (wal_before, disk.server_wal().await) {
                    cost.written = after - before;
                }
                let stats = rt.store().stats();
                let stored = stored_count(&rt).await;
                assert_eq!(
                    stored, f.ops,
                    "{name}: stored events differ from acknowledged ones"
                );
                rt.shutdown().await.unwrap();
                disk.wait_checkpointed().await;
                cost.db_growth = db_before
                    .zip(disk.size().await)
                    .map(|(before, after)| after.saturating_sub(before));
                row(
                    name,
                    &f,
                    Some(base),
                    Some((stats.batches, stats.writes)),
                    cost,
                );
            }
        }
    }
}

/// The stores of one table: name, URL, extra switchboard.toml lines.
async fn stores(
    dir: &std::path::Path,
    size: usize,
    placement: Placement,
    pg: &Option<String>,
) -> Vec<(&'static str, String, &'static str)> {
    let file = |kind: &str| {
        let tag = match placement {
            Placement::InProcess => "in",
            Placement::Child => "child",
        };
        format!(
            "sqlite:{}",
            dir.join(format!("{kind}-{size}-{tag}.db")).display()
        )
    };
    let only = std::env::var("SWITCHBOARD_BENCH_ROWS").unwrap_or_default();
    let mut stores = vec![
        ("sqlite (FULL)", file("full"), ""),
        (
            "sqlite (FULL, zstd bodies)",
            file("zstd"),
            "sqlite_body_compression = \"zstd\"",
        ),
        (
            "sqlite (NORMAL)",
            file("normal"),
            "sqlite_synchronous = \"normal\"",
        ),
    ];
    if let Some(base_url) = pg {
        stores.push((
            "postgres",
            ingest_support::fresh_postgres_schema(base_url).await,
            "",
        ));
    }
    stores.retain(|(name, _, _)| name.contains(only.as_str()));
    stores
}

/// What zstd at level 1 makes of `body`, for the table's heading.
fn zstd_len(body: &[u8]) -> usize {
    zstd::bulk::compress(body, 1).map_or(body.len(), |c| c.len())
}
