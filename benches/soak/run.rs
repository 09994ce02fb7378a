//! One store's soak: the processes started, the load run while the schedule kills and
//! restarts them and samples all three, the final wait for deliveries, the report.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard::{ConnectorConfig, MultiConnectorRunner, Registration, RunnerOptions};
use tokio::sync::watch;

use crate::disk::{self, Disk, WalWatch};
use crate::ledger::{Ledger, Recorder};
use crate::procs::{free_port, usage, Child, Ready, Role};
use crate::report::{self, Restart, Run, Sample};
use crate::{ingest_support, load, payload, Args};

/// The tenant of the connector and of the runtime's registration.
const TENANT: &str = "soak";
/// Latency windows per run.
const WINDOWS: usize = 10;
/// Shortest restart period.
const MIN_PERIOD: f64 = 5.0;
/// A sample waits for every child to have served this long (and for the connector to
/// be registered), at most [`SETTLE_DEADLINE`].
const SETTLED_FOR: Duration = Duration::from_secs(2);
const SETTLE_DEADLINE: Duration = Duration::from_secs(5);
/// Distinct WARN/ERROR lines of each child's log printed at the end.
const LOG_GROUPS_SHOWN: usize = 8;

pub enum Store {
    Sqlite,
    /// A base URL; the run makes a fresh schema in it.
    Postgres(String),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Event {
    Sample,
    Restart(Role),
}

/// Durations and the schedule, from the options.
pub struct Plan {
    secs: f64,
    rate: f64,
    execute_rate: f64,
    drain: Duration,
    gateway_period: f64,
    runtime_period: f64,
    /// `(seconds since start, event)`, in time order, samples first on a tie.
    events: Vec<(f64, Event)>,
}

impl Plan {
    pub fn new(args: &Args) -> Plan {
        let secs = args.secs;
        let gateway_period = (secs / 10.0).max(MIN_PERIOD);
        let runtime_period = (secs * 0.3).max(MIN_PERIOD);
        let every = |period: f64, offset: f64, event: Event| {
            (1..)
                .map(move |k| k as f64 * period + offset)
                .take_while(move |t| *t < secs)
                .map(move |t| (t, event))
        };
        let sample_every = args.sample_every.max(1.0);
        let mut events: Vec<(f64, Event)> =
            every(gateway_period, 0.0, Event::Restart(Role::Gateway))
                .chain(every(
                    runtime_period,
                    gateway_period / 2.0,
                    Event::Restart(Role::Runtime),
                ))
                .chain(every(sample_every, -sample_every, Event::Sample))
                .chain([(secs, Event::Sample)])
                .collect();
        events.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then((a.1 != Event::Sample).cmp(&(b.1 != Event::Sample)))
        });
        Plan {
            secs,
            rate: args.rate,
            execute_rate: args.execute_rate,
            drain: Duration::from_secs_f64(args.drain_secs),
            gateway_period,
            runtime_period,
            events,
        }
    }

    pub fn describe(&self) -> String {
        let count = |role| {
            self.events
                .iter()
                .filter(|e| e.1 == Event::Restart(role))
                .count()
        };
        format!(
            "soak: {:.0} s per store; {:.0} webhooks/s, {:.0} executes/s; gateway SIGKILLed and restarted every {:.1} s ({} times), runtime every {:.1} s ({} times, offset {:.1} s)",
            self.secs,
            self.rate,
            self.execute_rate,
            self.gateway_period,
            count(Role::Gateway),
            self.runtime_period,
            count(Role::Runtime),
            self.gateway_period / 2.0
        )
    }
}

/// The runtime's configuration: the GitHub source, one binding invoking the recorder
/// through the gateway.
fn runtime_config(port: u16, store: &str, gateway: &str) -> String {
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    format!(
        r#"listen = "127.0.0.1:{port}"
store = {store}

[gateway]
url = {gateway}
tenant = "{TENANT}"
instance_id = "runtime"

[dispatcher]
lease = "5s"

[[sources]]
id = "github"
provider = "github"
secret_env = "{secret_env}"

[[triggers]]
id = "deliver"
sources = ["github"]
handler = {{ invoke = "{TENANT}.recorder.echo", capability = "{record}" }}
retry = {{ max_attempts = 1000, backoff = "exponential", base = "100ms", cap = "2s", jitter = 0.2 }}
max_concurrent = 64
timeout = "10s"
"#,
        store = quote(store),
        gateway = quote(gateway),
        secret_env = load::SECRET_ENV,
        record = crate::ledger::RECORD,
    )
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Runs the soak on `store`; whether it passed.
pub async fn soak(plan: &Plan, store: Store) -> Result<bool, String> {
    let dir = tempfile::Builder::new()
        .prefix("switchboard-soak-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let (name, store_url, pg_base) = match &store {
        Store::Sqlite => (
            "sqlite",
            format!("sqlite:{}", path(&dir.path().join("events.db"))),
            None,
        ),
        Store::Postgres(base) => (
            "postgres",
            ingest_support::fresh_postgres_schema(base).await,
            Some(base.clone()),
        ),
    };
    println!(
        "\n{name}: store {store_url}, files in {}",
        dir.path().display()
    );
    let (gw_port, rt_port) = (free_port(), free_port());
    let gw_listen = format!("127.0.0.1:{gw_port}");
    let (gw_ws, gw_http) = (format!("ws://{gw_listen}"), format!("http://{gw_listen}"));
    let rt_http = format!("http://127.0.0.1:{rt_port}");

    let mut gateway = Child::new(
        Role::Gateway,
        os(&[
            "gateway",
            "--listen",
            &gw_listen,
            "--grpc-listen",
            "off",
            "--data-dir",
            &path(&dir.path().join("gateway-data")),
        ]),
        Vec::new(),
        dir.path().join("gateway.log"),
        Ready::Listening(gw_port),
    );
    gateway.start(Duration::ZERO).await?;
    let config = dir.path().join("runtime.toml");
    std::fs::write(&config, runtime_config(rt_port, &store_url, &gw_ws))
        .map_err(|e| e.to_string())?;
    let mut runtime = Child::new(
        Role::Runtime,
        os(&["serve", "--config", &path(&config)]),
        vec![
            (load::SECRET_ENV.to_owned(), load::SECRET.to_owned()),
            (
                "SWITCHBOARD_CREDENTIALS_DIR".to_owned(),
                path(&dir.path().join("credentials-runtime")),
            ),
        ],
        dir.path().join("runtime.log"),
        Ready::Healthy(format!("{rt_http}/healthz")),
    );
    runtime.start(Duration::ZERO).await?;

    // Room for every webhook the run may post (it may overrun while the last sample
    // settles), allocated and touched now.
    let slots = (plan.rate * (plan.secs + SETTLE_DEADLINE.as_secs_f64() + 5.0)).ceil() as usize;
    let window = Duration::from_secs_f64(plan.secs / WINDOWS as f64);
    let ledger = Ledger::new(Instant::now(), slots, WINDOWS, window);
    let cfg = ConnectorConfig::builder(gw_ws.as_str(), TENANT)
        .instance_id("echo")
        .credentials_dir(dir.path().join("credentials-bench"))
        .max_concurrent_requests(1024)
        .max_queued_requests(1024)
        .build()
        .map_err(|e| e.to_string())?;
    let runner = Arc::new(
        MultiConnectorRunner::new(
            RunnerOptions::default(),
            vec![Registration::new(cfg, Recorder(ledger.clone()))],
        )
        .map_err(|e| e.to_string())?,
    );
    let running = tokio::spawn({
        let r = runner.clone();
        async move { r.run().await }
    });
    let echo = runner.registrations().remove(0);
    let arn = echo
        .wait_registered(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;

    let db_file = dir.path().join("events.db");
    let wal_watch =
        matches!(store, Store::Sqlite).then(|| WalWatch::start(dir.path().join("events.db-wal")));
    let server_wal_before = match &pg_base {
        Some(base) => disk::pg_wal_bytes(base).await,
        None => None,
    };
    let tag = format!("soak-{:08x}", rand::random::<u32>());
    let (stop, stopped) = watch::channel(false);
    let template = payload::github_issue(1024);
    let (hooks, hooks_done) = load::webhooks(
        &ledger,
        format!("{rt_http}/hooks/github"),
        template,
        tag.clone(),
        plan.rate,
        stopped.clone(),
    );
    let (execs, execs_done) = load::executes(&ledger, &gw_http, &arn, plan.execute_rate, stopped);

    let mut restarts = Vec::new();
    let mut samples = Vec::new();
    let start = ledger.start;
    for &(at, event) in &plan.events {
        tokio::time::sleep_until((start + Duration::from_secs_f64(at)).into()).await;
        match event {
            Event::Sample => {
                let settled = settle(&gateway, &runtime, || echo.arn().is_some()).await;
                let at = start.elapsed();
                let one = |pid: Option<u32>| pid.and_then(|p| usage(p).map(|u| (p, u)));
                samples.push(Sample {
                    at,
                    settled,
                    of: [
                        one(Some(std::process::id())),
                        one(gateway.pid()),
                        one(runtime.pid()),
                    ],
                });
                eprintln!(
                    "{name} t={:.0}s: {} webhooks accepted, {} executes ok, {} undelivered",
                    at.as_secs_f64(),
                    hooks.ok.load(std::sync::atomic::Ordering::Relaxed),
                    execs.ok.load(std::sync::atomic::Ordering::Relaxed),
                    ledger.undelivered()
                );
            }
            Event::Restart(role) => {
                let child = if role == Role::Gateway {
                    &mut gateway
                } else {
                    &mut runtime
                };
                let at = start.elapsed();
                let old_pid = child.pid();
                child.kill().await;
                let back_after = child.start(at).await?;
                restarts.push(Restart {
                    at,
                    role,
                    old_pid,
                    new_pid: child.pid(),
                    back_after,
                });
            }
        }
    }
    stop.send_replace(true);
    let _ = hooks_done.await;
    let _ = execs_done.await;
    let ran_for = start.elapsed();

    // Every accepted webhook delivered at least once, or the deadline.
    let waited = Instant::now();
    let mut drained_in = None;
    while waited.elapsed() < plan.drain {
        if ledger.undelivered() == 0 {
            drained_in = Some(waited.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut diagnostics = diagnose(&rt_http, drained_in.is_none()).await;
    for child in [&gateway, &runtime] {
        let summary = child.log_summary();
        let total: usize = summary.iter().map(|(n, _)| n).sum();
        diagnostics.push(format!(
            "{} log: {total} WARN/ERROR lines over all its starts{}",
            child.role.name(),
            if total > 0 { ", most frequent:" } else { "" }
        ));
        for (n, line) in summary.iter().take(LOG_GROUPS_SHOWN) {
            diagnostics.push(format!("  {n} × {line}"));
        }
        if drained_in.is_none() {
            diagnostics.push(format!(
                "{} log tail:\n{}",
                child.role.name(),
                child.log_tail(40)
            ));
        }
    }

    let mut disk = Disk {
        runtime_written: runtime.written(),
        ..Disk::default()
    };
    match (&pg_base, schema_of(&store_url)) {
        (Some(base), Some(schema)) => {
            let after = disk::pg_wal_bytes(base).await;
            disk.server_wal = after.zip(server_wal_before).map(|(a, b)| a - b);
            disk.db_bytes = disk::pg_schema_bytes(base, schema).await;
        }
        _ => {
            disk.db_bytes = disk::file_len(&db_file);
            disk.wal_end = disk::file_len(&db_file.with_extension("db-wal"));
            disk.wal_max = wal_watch.as_ref().map(WalWatch::largest);
        }
    }
    drop(wal_watch);

    runner.shutdown_handle().shutdown();
    let _ = running.await;
    runtime.kill().await;
    gateway.kill().await;
    if let Some(base) = pg_base {
        drop_schema(&base, &store_url).await;
    }
    let run = Run {
        store: name.to_owned(),
        secs: plan.secs,
        window,
        ran_for,
        delivery_tag: tag,
        ledger,
        webhooks: hooks.errors(),
        executes: (
            execs.sent.load(std::sync::atomic::Ordering::Relaxed),
            execs.ok.load(std::sync::atomic::Ordering::Relaxed),
            execs.errors(),
        ),
        restarts,
        samples,
        drained_in,
        diagnostics,
        disk,
    };
    let passed = report::print(&run);
    if !passed {
        println!("kept for inspection: {}", dir.keep().display());
    }
    Ok(passed)
}

/// Waits until both children have served for [`SETTLED_FOR`] and `registered()`, at
/// most [`SETTLE_DEADLINE`]; whether they got there.
async fn settle(gateway: &Child, runtime: &Child, registered: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    loop {
        let up = |c: &Child| c.ready_at.is_some_and(|t| t.elapsed() >= SETTLED_FOR);
        if up(gateway) && up(runtime) && registered() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The runtime's outbox stats, and with `lost` its dead letters.
async fn diagnose(base: &str, lost: bool) -> Vec<String> {
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let req = http
            .get(format!("{base}{path}"))
            .timeout(Duration::from_secs(10));
        async move {
            match req.send().await {
                Ok(r) => r.text().await.unwrap_or_else(|e| e.to_string()),
                Err(e) => format!("unreachable: {e}"),
            }
        }
    };
    let mut lines = vec![format!(
        "runtime outbox at the end: {}",
        get("/api/v1/outbox/stats").await
    )];
    if lost {
        lines.push(format!(
            "runtime dead letters: {}",
            get("/api/v1/dead-letters").await
        ));
    }
    lines
}

/// The run's fresh PostgreSQL schema, named in `url`'s `search_path`.
fn schema_of(url: &str) -> Option<&str> {
    url.rsplit("search_path%3D")
        .next()
        .filter(|s| s.starts_with("sb_test_"))
}

/// Drops the run's schema (named in `url`'s `search_path`) from `base`'s database.
async fn drop_schema(base: &str, url: &str) {
    let Some(schema) = schema_of(url) else {
        return;
    };
    if let Ok((client, conn)) = tokio_postgres::connect(base, tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        if let Err(e) = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
        {
            eprintln!("could not drop schema {schema}: {e}");
        }
    }
}
