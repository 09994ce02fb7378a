//! The demo's deliver section: the whole loop, webhook to connector, on an embedded
//! SQLite store.
//!
//! 1. Three target connectors (`tickets`, `flaky`, `audit`, see [`super::connectors`])
//!    register on the in-process gateway through one `MultiConnectorRunner`: one socket.
//! 2. A [`Runtime`] starts from TOML text ([`config_toml`], the same file a `serve`
//!    user writes): ingress on an ephemeral loopback port, a SQLite file in a fresh
//!    directory under the system temp dir (removed at the end), a `github` source, the
//!    runtime's own `[gateway]` registration, and three bindings: `issues-to-tickets`
//!    (opened issues, by a CEL filter), `flaky-sync` (closed issues, to the connector
//!    that always fails; 3 attempts 50 ms apart) and `dl-audit`, the dead-letter
//!    handler of `flaky-sync`.
//! 3. Signed GitHub `issues` webhooks are POSTed to `/hooks/github` by concurrent
//!    senders, then one is redelivered (same delivery id: a duplicate).
//! 4. The demo waits, with a deadline, until the outbox has drained and every
//!    expected delivery has arrived, then reads the runtime's admin API
//!    (`/api/v1/outbox/stats`, `/api/v1/triggers`) and `/metrics`, shuts down, and
//!    hands everything to [`super::report`] for the table and the checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use switchboard::gateway::Gateway;
use switchboard::{
    ConnectorConfig, Error, MultiConnectorRunner, Registration, RunnerOptions, Runtime,
    RuntimeConfig,
};

use super::connectors::{DemoConnector, Journal, Role};
use super::histogram::Scrape;
use super::observed::{Observed, Sizing, TENANT};
use super::report;
use super::webhooks::{self, Delivery};

/// The instance id of each target connector: dot keys `demo.tickets.main`, ….
const INSTANCE: &str = "main";
/// The environment variable the config names for the webhook secret; the demo resolves
/// it from [`SECRET`] instead of the process environment.
const SECRET_ENV: &str = "DEMO_GITHUB_WEBHOOK_SECRET";
/// The GitHub hook's secret, known to the sender and the runtime only.
const SECRET: &str = "switchboard-demo-secret";
/// How long registrations may take to be approved.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the demo looks at the outbox while it waits.
const WAIT_POLL: Duration = Duration::from_millis(20);

/// Runs the section and prints its table; fails when an expectation does not hold.
pub(super) async fn run(
    sizing: Sizing,
    gateway: &Gateway,
    sockets_before: u64,
) -> switchboard::Result<()> {
    let journal = Journal::default();
    let regs = Role::ALL
        .iter()
        .map(|&role| {
            let cfg = ConnectorConfig::builder(gateway.ws_url(), TENANT)
                .instance_id(INSTANCE)
                .display_name(format!("demo {}", role.connector_type()))
                .build()?;
            Ok(Registration::new(
                cfg,
                DemoConnector::new(role, journal.clone()),
            ))
        })
        .collect::<switchboard::Result<Vec<_>>>()?;
    let runner = Arc::new(MultiConnectorRunner::new(RunnerOptions::default(), regs)?);
    let stop = runner.shutdown_handle();
    let connectors = tokio::spawn({
        let runner = runner.clone();
        async move { runner.run().await }
    });
    let result = async {
        runner.wait_registered(REGISTER_TIMEOUT).await?;
        let store = TempStore::create()?;
        let observed = with_runtime(&sizing, gateway, &store, &journal).await;
        drop(store);
        observed
    }
    .await;
    stop.shutdown();
    let _ = connectors.await;
    let mut observed = result?;
    observed.sockets = gateway.stats().sockets_accepted - sockets_before;
    report::print(&sizing, &observed);
    let failed = report::check(&observed);
    if failed.is_empty() {
        return Ok(());
    }
    for f in &failed {
        eprintln!("demo: expectation failed: {f}");
    }
    Err(Error::Connector(format!(
        "demo: {} expectation(s) of the deliver section failed (listed above)",
        failed.len()
    )))
}

/// Starts the runtime on `store`, drives the webhooks, waits, reads the runtime's
/// figures, and shuts it down whatever happened.
async fn with_runtime(
    sizing: &Sizing,
    gateway: &Gateway,
    store: &TempStore,
    journal: &Journal,
) -> switchboard::Result<Observed> {
    let text = config_toml(&gateway.ws_url(), &store.url());
    let config = RuntimeConfig::from_toml(&text)?
        .resolve_with(|name| (name == SECRET_ENV).then(|| SECRET.to_owned()))?;
    let runtime = Runtime::start(config).await?;
    println!(
        "consoles: gateway {}/console, runtime http://{}/console{}",
        gateway.http_url(),
        runtime.local_addr(),
        if sizing.keep_running {
            ""
        } else {
            " (--keep-running keeps them up)"
        }
    );
    let observed = drive(sizing, gateway, &runtime, journal).await;
    if sizing.keep_running {
        println!(
            "demo: the deliver section is done; both consoles stay up until SIGTERM or Ctrl-C"
        );
        switchboard::shutdown_signal().await;
    }
    let stopped = runtime.shutdown().await;
    let observed = observed?;
    stopped?;
    Ok(observed)
}

async fn drive(
    sizing: &Sizing,
    gateway: &Gateway,
    runtime: &Runtime,
    journal: &Journal,
) -> switchboard::Result<Observed> {
    if let Some(r) = runtime.registration() {
        r.wait_registered(REGISTER_TIMEOUT).await?;
    }
    let connector_sockets = {
        let mut ids: Vec<u64> = gateway
            .registrations()
            .iter()
            .filter(|r| r.tenant_id == TENANT && r.instance_id == INSTANCE)
            .map(|r| r.socket_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    };
    let base = format!("http://{}", runtime.local_addr());
    let hook = format!("{base}/hooks/github");
    let run_id: u32 = rand::random();
    let deliveries: Vec<Delivery> = (1..=u64::from(sizing.webhooks))
        .map(|issue| Delivery::new(SECRET.as_bytes(), run_id, issue))
        .collect();
    let client = reqwest::Client::new();

    let started = Instant::now();
    let deliveries = Arc::new(deliveries);
    let mut senders = Vec::new();
    for w in 0..sizing.concurrency {
        let (client, hook, deliveries) = (client.clone(), hook.clone(), deliveries.clone());
        let step = sizing.concurrency;
        senders.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for d in deliveries.iter().skip(w).step_by(step) {
                out.push(webhooks::post(&client, &hook, d).await);
            }
            out
        }));
    }
    let mut posted = Vec::with_capacity(deliveries.len() + 1);
    for s in senders {
        posted.extend(s.await.map_err(|e| Error::Connector(e.to_string()))?);
    }
    // GitHub's "Redeliver" button: the same delivery (id, body, signature) again.
    let again = deliveries
        .iter()
        .find(|d| d.action == "opened")
        .expect("at least two webhooks: one opens");
    posted.push(webhooks::post(&client, &hook, again).await);

    let expected = report::Expected::of(&deliveries);
    let deadline = started + sizing.deadline;
    let drained_in = loop {
        let stats: Value = get(&client, &format!("{base}/api/v1/outbox/stats")).await;
        let pending = ["due", "leased", "scheduled"]
            .iter()
            .map(|k| stats[k].as_u64().unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add);
        let arrived = journal.count(Role::Tickets) >= expected.opened
            && journal.count(Role::Flaky) >= expected.closed * report::FLAKY_ATTEMPTS
            && journal.count(Role::Audit) >= expected.closed;
        if pending == 0 && arrived {
            break Some(started.elapsed());
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(WAIT_POLL).await;
    };
    let metrics = reqwest_text(&client, &format!("{base}/metrics")).await;
    Ok(Observed {
        deliveries: Arc::try_unwrap(deliveries).unwrap_or_else(|d| (*d).clone()),
        posted,
        visits: journal.visits(),
        triggers: get(&client, &format!("{base}/api/v1/triggers")).await,
        stats: get(&client, &format!("{base}/api/v1/outbox/stats")).await,
        metrics: Scrape::parse(&metrics),
        drained_in,
        connector_sockets,
        sockets: 0,
    })
}

/// GETs JSON from the runtime's admin API; `null` if it cannot be had (the checks
/// then fail with the figure missing).
async fn get(client: &reqwest::Client, url: &str) -> Value {
    match client.get(url).send().await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(e) => {
            tracing::warn!(error = %e, url, "admin API request failed");
            Value::Null
        }
    }
}

async fn reqwest_text(client: &reqwest::Client, url: &str) -> String {
    match client.get(url).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, url, "metrics request failed");
            String::new()
        }
    }
}

/// The runtime's configuration: what a `switchboard.toml` for this loop says.
fn config_toml(gateway_url: &str, store_url: &str) -> String {
    // Quoted by the TOML writer, so a temp dir with quotes or backslashes stays valid.
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    format!(
        r#"listen = "127.0.0.1:0"
store = {store}

[gateway]
url = {gateway}
tenant = "{TENANT}"
instance_id = "runtime"

[[sources]]
id = "github"
provider = "github"
secret_env = "{SECRET_ENV}"

[[triggers]]
id = "issues-to-tickets"
sources = ["github"]
events = ["issues.*"]
filter = 'payload.action == "opened"'
handler = {{ invoke = "{TENANT}.tickets.{INSTANCE}", capability = "create_ticket" }}

[[triggers]]
id = "flaky-sync"
sources = ["github"]
events = ["issues.closed"]
handler = {{ invoke = "{TENANT}.flaky.{INSTANCE}", capability = "sync" }}
retry = {{ max_attempts = {attempts}, backoff = "constant", base = "50ms" }}

[[triggers]]
id = "dl-audit"
handler = {{ invoke = "{TENANT}.audit.{INSTANCE}", capability = "record" }}
dead_letter_for = ["flaky-sync"]
"#,
        store = quote(store_url),
        gateway = quote(gateway_url),
        attempts = report::FLAKY_ATTEMPTS,
    )
}

/// A fresh directory under the system temp dir for the SQLite file, removed (with the
/// database and its WAL files) when dropped.
struct TempStore {
    dir: PathBuf,
}

impl TempStore {
    fn create() -> switchboard::Result<TempStore> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("switchboard-demo-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::Config(format!(
                "demo: cannot create a store directory at {}: {e}; set TMPDIR to a writable directory",
                dir.display()
            ))
        })?;
        Ok(TempStore { dir })
    }

    fn url(&self) -> String {
        format!("sqlite:{}", self.dir.join("events.db").display())
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(error = %e, dir = %self.dir.display(), "could not remove the demo's store directory");
        }
    }
}
