//! The console's event list at scale: what each query of `GET /api/v1/events` (and
//! the console's event list, which calls the same `ingress::event_search::list_events`)
//! costs in a store holding a million events.
//!
//! Issue 25 asks that the list "stay usable with 1,000,000 stored events (server-side
//! paging and filtering; no endpoint loads a whole table)". This bench fills a fresh
//! store with N events (default 1,000,000; `--events N` or `SWITCHBOARD_BENCH_EVENTS`)
//! spread over 4 sources and 20 kinds (drawn from a fixed hash of the event's number, so
//! kind and source are independent), received over the 24 hours before the run, each
//! with a distinct delivery id, plus a rare kind held by 10 events spread through the
//! table. The fill goes through [`Backend::write_batch`] with batches of plain
//! appends, the statements the group commit runs for every ingested webhook (dedupe
//! claim, then the event row with every index), so the table and its indexes are the
//! real ones; it prints the fill rate.
//!
//! Then it times each query over up to [`REPS`] repetitions after [`WARMUP`] (fewer
//! when a query is slow: each row stops after [`ROW_BUDGET`]), printing the median and
//! p99 beside the **baseline**, measured in the same run: the newest page with no
//! filter (page 1, 50 events). That is what the console opens on and the cheapest
//! page a store of any size can answer (50 rows off the end of the primary key), so
//! the ratio says how much dearer a filter or a deep page is than merely opening the
//! list. Each query is the full `list_events` call, JSON page included.
//!
//! Rows: page 2,000 deep via the `after` cursor (keyset); `source=`; `kind=`;
//! `delivery_id=` (exact); `kind=` + `source=`; `since=` the last 5 minutes and the
//! last hour; a rare kind (10 matches among N); `since=` alone in an empty window
//! (nothing received since: the case where a time filter walking the primary key
//! reads the whole table to find none; on SQLite it took 250 ms at 1M events before
//! the store counted small windows on `events_by_received` first); and the event detail's store reads (`Operations::event_detail` does
//! `Backend::events` by `event_id`, then `event_deliveries`, and those two calls are
//! timed here: the rest of it is formatting and needs the runtime's registry).
//!
//! SQLite (FULL, in a temp dir; `SWITCHBOARD_BENCH_DIR` keeps the file in that
//! directory for `EXPLAIN QUERY PLAN`) always; PostgreSQL with
//! `SWITCHBOARD_TEST_POSTGRES_URL` (or `SWITCHBOARD_BENCH_POSTGRES_URL`) set, in a
//! fresh schema of that database (left for an hour for `EXPLAIN`, then dropped by the
//! next run's cleanup), analysed after the fill ([`analyze`]; `SWITCHBOARD_BENCH_NO_ANALYZE=1`
//! measures the unanalysed table). `SWITCHBOARD_BENCH_ROWS=sqlite|postgres` runs one
//! backend.

#[path = "../tests/ingest/support.rs"]
mod ingest_support;
#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::percentile;
use switchboard::__private::ingress::event_search::list_events;
use switchboard::__private::store::{append_write, open_backend, Backend, EventQuery, Store};

/// Events in the store unless `--events N` / `SWITCHBOARD_BENCH_EVENTS` says otherwise.
const DEFAULT_EVENTS: u64 = 1_000_000;
/// Appends per `write_batch` transaction while filling.
const FILL_BATCH: usize = 2_000;
/// Timed repetitions per query (at most).
const REPS: usize = 50;
/// Untimed repetitions first.
const WARMUP: usize = 5;
/// A row stops repeating after this much time (at least [`MIN_REPS`] repetitions).
const ROW_BUDGET: Duration = Duration::from_secs(10);
const MIN_REPS: usize = 5;
/// The console's page size.
const PAGE: usize = 50;
/// How deep the keyset row pages.
const DEEP_PAGES: u64 = 2_000;
/// The received times span this long, ending at the run's start.
const SPAN_MS: i64 = 24 * 3_600_000;
/// Events of the rare kind.
const RARE: u64 = 10;
const RARE_KIND: &str = "account.closed";

const SOURCES: [(&str, &str); 4] = [
    ("gh", "github"),
    ("stripe", "stripe"),
    ("linear", "linear"),
    ("slack", "slack"),
];
const KINDS: [&str; 20] = [
    "issues.opened",
    "issues.closed",
    "issue_comment.created",
    "pull_request.opened",
    "pull_request.closed",
    "pull_request.synchronize",
    "push",
    "check_run.completed",
    "invoice.paid",
    "invoice.payment_failed",
    "customer.created",
    "customer.updated",
    "charge.succeeded",
    "Issue.create",
    "Issue.update",
    "Comment.create",
    "message",
    "app_mention",
    "reaction_added",
    "member_joined_channel",
];

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// How many events, from `--events N`, else `SWITCHBOARD_BENCH_EVENTS`, else 1M.
fn event_count() -> u64 {
    let args: Vec<String> = std::env::args().collect();
    let flag = args
        .iter()
        .position(|a| a == "--events")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--events=").map(str::to_owned))
        })
        .or_else(|| std::env::var("SWITCHBOARD_BENCH_EVENTS").ok());
    flag.map(|s| s.replace('_', "").parse().expect("--events takes a number"))
        .unwrap_or(DEFAULT_EVENTS)
}

/// What the fill wrote that the queries look for.
struct Filled {
    /// The last event's received time: the "now" of the `since` rows.
    newest_ms: i64,
    /// The delivery id of the event in the middle of the table.
    middle_delivery: String,
    /// The id of that event.
    middle_id: String,
    /// Events of [`RARE_KIND`].
    rare_count: u64,
}

/// The event number `i` of `n`, received around `start_ms + i * SPAN_MS / n`.
fn event(i: u64, n: u64, start_ms: i64, body: &[u8]) -> switchboard::TriggerEvent {
    let h = splitmix(i);
    let (source, provider) = SOURCES[(h % 4) as usize];
    let every = (n / RARE).max(1);
    let kind = if i % every == every / 2 {
        RARE_KIND
    } else {
        KINDS[((h >> 8) % 20) as usize]
    };
    // Up to two seconds either way: received order is close to, not exactly, seq order.
    let jitter = ((h >> 32) % 4_000) as i64 - 2_000;
    let received = start_ms + (i as i128 * SPAN_MS as i128 / n as i128) as i64 + jitter;
    let mut headers = std::collections::BTreeMap::new();
    headers.insert("content-type".to_owned(), "application/json".to_owned());
    headers.insert("user-agent".to_owned(), "bench".to_owned());
    switchboard::TriggerEvent::new(
        source,
        provider,
        kind.to_owned(),
        received,
        Some(received - 150),
        delivery_id(i),
        switchboard::__private::triggers::trace_id_from(None),
        "default",
        headers,
        body.to_vec(),
        serde_json::Value::Null,
        switchboard::__private::triggers::SignatureStatus::Verified,
    )
}

fn delivery_id(i: u64) -> String {
    format!(
        "{:08x}-{:04x}-4d2e-9c1a-{:012x}",
        splitmix(!i) as u32,
        i >> 48,
        i
    )
}

/// Appends `n` events in [`FILL_BATCH`]es through `write_batch`; returns what the
/// queries need and prints the rate.
async fn fill(backend: &Arc<dyn Backend>, n: u64) -> Filled {
    let body = format!(
        "{{\"action\":\"opened\",\"issue\":{{\"number\":1347,\"title\":\"Found a bug\",\"body\":\"{}\"}},\"repository\":{{\"full_name\":\"octocat/Hello-World\"}},\"sender\":{{\"login\":\"octocat\"}}}}",
        "x".repeat(300)
    );
    let body = body.as_bytes();
    let run_start = switchboard::__private::now_ms();
    let start_ms = run_start - SPAN_MS;
    let mut middle_id = String::new();
    let mut newest_ms = 0;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + FILL_BATCH as u64).min(n);
        let writes: Vec<_> = (i..end)
            .map(|j| {
                let e = event(j, n, start_ms, body);
                if j == n / 2 {
                    middle_id = e.id.clone();
                }
                newest_ms = newest_ms.max(e.received_at_ms);
                append_write(e, run_start + SPAN_MS, Vec::new())
            })
            .collect();
        let out = backend.write_batch(writes, run_start).await.expect("fill");
        assert!(out
            .iter()
            .all(|a| matches!(a, Some(switchboard::__private::store::Appended::Stored(_)))));
        i = end;
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  filled {i} of {n} ({:.0} events/s)",
                i as f64 / started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
    }
    let took = started.elapsed();
    println!(
        "filled {n} events in {:.1} s: {:.0} events/s ({FILL_BATCH} appends per write_batch)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    let every = (n / RARE).max(1);
    Filled {
        newest_ms,
        middle_delivery: delivery_id(n / 2),
        middle_id,
        rare_count: (0..n).filter(|i| i % every == every / 2).count() as u64,
    }
}

/// Times `op` ([`WARMUP`] untimed, then up to [`REPS`] within [`ROW_BUDGET`]); returns
/// the latencies and the rows the last call returned.
async fn time<F, Fut>(mut op: F) -> (Vec<Duration>, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let mut rows = 0;
    for _ in 0..WARMUP {
        rows = op().await;
    }
    let mut lat = Vec::with_capacity(REPS);
    let started = Instant::now();
    while lat.len() < REPS && (lat.len() < MIN_REPS || started.elapsed() < ROW_BUDGET) {
        let t = Instant::now();
        rows = op().await;
        lat.push(t.elapsed());
    }
    lat.sort_unstable();
    (lat, rows)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One `list_events` page; returns its events and `next`.
async fn page(store: &Store, q: &EventQuery) -> (usize, Option<i64>) {
    let v = list_events(store, q).await.expect("list_events");
    let rows = v["events"].as_array().expect("events").len();
    let next = v["next"].as_str().map(|s| s.parse().expect("next"));
    (rows, next)
}

async fn run(name: &str, url: &str, n: u64) {
    println!("\n{name}: {url}\n");
    let backend = open_backend(url, &Default::default()).await.unwrap();
    let store = Store::new(backend.clone());
    let f = fill(&backend, n).await;
    if url.starts_with("postgres") {
        analyze(url).await;
    }

    // The cursor an operator holds after paging DEEP_PAGES pages of PAGE: walked in
    // pages of 500 (the largest the API serves), as fast as paging gets there.
    let want = (DEEP_PAGES * PAGE as u64).min(n.saturating_sub(PAGE as u64));
    let mut cursor = None;
    let mut walked = 0u64;
    while walked < want {
        let step = (want - walked).min(500) as usize;
        let (rows, next) = page(
            &store,
            &EventQuery {
                limit: step,
                before_seq: cursor,
                ..Default::default()
            },
        )
        .await;
        walked += rows as u64;
        cursor = next;
        if next.is_none() {
            break;
        }
    }
    let deep_pages = walked / PAGE as u64;

    let q = |f: fn(&mut EventQuery)| {
        let mut q = EventQuery {
            limit: PAGE,
            ..Default::default()
        };
        f(&mut q);
        q
    };
    let newest = f.newest_ms;
    let mut cases: Vec<(String, EventQuery, Option<usize>)> = vec![
        ("newest page (baseline)".into(), q(|_| {}), None),
        (
            format!("page {} deep (after=)", deep_pages + 1),
            EventQuery {
                limit: PAGE,
                before_seq: cursor,
                ..Default::default()
            },
            None,
        ),
        (
            "source=".into(),
            q(|q| q.source = Some(SOURCES[1].0.into())),
            None,
        ),
        ("kind=".into(), q(|q| q.kind = Some(KINDS[3].into())), None),
        (
            "delivery_id= (exact)".into(),
            EventQuery {
                limit: PAGE,
                dedupe_key: Some(f.middle_delivery.clone()),
                ..Default::default()
            },
            Some(1),
        ),
        (
            "kind= + source=".into(),
            q(|q| {
                q.kind = Some(KINDS[3].into());
                q.source = Some(SOURCES[1].0.into());
            }),
            None,
        ),
        (
            format!("rare kind= ({} of {n})", f.rare_count),
            q(|q| q.kind = Some(RARE_KIND.into())),
            Some((f.rare_count as usize).min(PAGE)),
        ),
    ];
    for (label, since) in [
        ("since= last 5 min", newest - 5 * 60_000),
        ("since= last hour", newest - 3_600_000),
        ("since= empty window", newest + 60_000),
    ] {
        cases.push((
            label.into(),
            EventQuery {
                limit: PAGE,
                since_ms: Some(since),
                ..Default::default()
            },
            (label == "since= empty window").then_some(0),
        ));
    }

    println!("| query                          | rows | reps | median ms |  p99 ms | × baseline |");
    println!("|--------------------------------|-----:|-----:|----------:|--------:|-----------:|");
    let mut base = None;
    let print = |label: &str, rows: usize, lat: &[Duration], base: &mut Option<f64>| {
        let med = ms(percentile(lat, 0.5));
        let p99 = ms(percentile(lat, 0.99));
        let b = *base.get_or_insert(med);
        println!(
            "| {label:<30} | {rows:>4} | {:>4} | {med:>9.3} | {p99:>7.3} | {:>10.1} |",
            lat.len(),
            med / b
        );
    };
    for (label, query, expect) in &cases {
        let (lat, rows) = time(|| async { page(&store, query).await.0 }).await;
        if let Some(e) = expect {
            assert_eq!(rows, *e, "{label}: rows");
        }
        print(label, rows, &lat, &mut base);
    }
    let (lat, rows) = time(|| async {
        let found = backend
            .events(&EventQuery {
                limit: 1,
                event_id: Some(f.middle_id.clone()),
                ..Default::default()
            })
            .await
            .expect("events by id");
        backend
            .event_deliveries(&found[0].event.id)
            .await
            .expect("deliveries");
        found.len()
    })
    .await;
    assert_eq!(rows, 1);
    print("event detail (id + deliveries)", rows, &lat, &mut base);
}

/// `ANALYZE events` on PostgreSQL after the fill, unless `SWITCHBOARD_BENCH_NO_ANALYZE`
/// is set: what autovacuum's autoanalyze does on a default server soon after a bulk
/// load, and what a server with autovacuum off (as test servers often are) never does.
/// Without it the planner plans a million rows with the statistics of an empty table
/// and picks bitmap scans or a primary-key walk that cost hundreds of milliseconds
/// (`kind=` + `source=`, `since=` in an empty window): a property of the statistics,
/// not of the queries, so the rows measure the analysed table and say so.
async fn analyze(url: &str) {
    if std::env::var_os("SWITCHBOARD_BENCH_NO_ANALYZE").is_some() {
        println!("(no ANALYZE: the planner has the statistics of an empty table)");
        return;
    }
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect for ANALYZE");
    tokio::spawn(conn);
    let t = Instant::now();
    client
        .batch_execute("ANALYZE events")
        .await
        .expect("ANALYZE");
    println!(
        "ANALYZE events: {:.1} s (as autovacuum would; SWITCHBOARD_BENCH_NO_ANALYZE=1 skips it)",
        t.elapsed().as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    let n = event_count();
    let only = std::env::var("SWITCHBOARD_BENCH_ROWS").unwrap_or_default();
    println!(
        "event search: {n} events, 4 sources, 20 kinds, 24 h of received times; \
         pages of {PAGE}; median and p99 of up to {REPS} calls after {WARMUP} warm-up"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var("SWITCHBOARD_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().to_owned());
    if only.is_empty() || "sqlite".contains(only.as_str()) {
        let path = dir.join(format!("event_search_{n}.db"));
        let _ = std::fs::remove_file(&path);
        run("sqlite (FULL)", &format!("sqlite:{}", path.display()), n).await;
    }
    if only.is_empty() || "postgres".contains(only.as_str()) {
        match std::env::var("SWITCHBOARD_BENCH_POSTGRES_URL")
            .or_else(|_| std::env::var("SWITCHBOARD_TEST_POSTGRES_URL"))
        {
            Ok(base) if !base.is_empty() => {
                let url = ingest_support::fresh_postgres_schema(&base).await;
                run("postgres", &url, n).await;
            }
            _ => eprintln!("postgres rows skipped: set SWITCHBOARD_TEST_POSTGRES_URL"),
        }
    }
}
