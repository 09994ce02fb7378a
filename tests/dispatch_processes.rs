//! Delivery across real `switchboard serve` processes: a runtime killed with SIGKILL
//! while it dispatches loses nothing once it is restarted (SQLite and PostgreSQL), two
//! runtimes on one PostgreSQL database share the work without delivering anything
//! twice and keep each ordering key in order, and the admin CLI works against a
//! running process, and a reload on one of two processes on one PostgreSQL database
//! is honoured by the other before it starts another row of that binding. The handler is a recording connector on a real gateway in this
//! test process; the runtimes invoke it over their own gateway registrations.
#![cfg(all(feature = "gateway", feature = "runtime", feature = "postgres"))]

#[path = "common/mod.rs"]
mod common;
#[path = "ingest/support.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use switchboard::gateway::TestGateway;
use switchboard::{
    BaseConnector, ConnectorConfig, ExecuteContext, MultiConnectorRunner, Payload, Registration,
    RunnerOptions,
};

use common::eventually;
use common::serve::{free_port, Serve};
use support::{env, fresh_postgres_schema, postgres_url, skip_postgres};

/// The tenant of the recorder and of every runtime's registration.
const TENANT: &str = "acme";
/// The webhook source every config declares (generic HMAC, signed by [`signed`]).
const SOURCE: &str = r#"
[[sources]]
id = "hook"
provider = "generic_hmac"
secret_env = "GENERIC_SECRET"
header = "X-Signature"
prefix = "sha256="
dedupe_header = "X-Delivery"
"#;

/// Writes a line to the test's stderr directly, so it shows in passing tests too.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

// ---------------------------------------------------------------------------------
// The recording connector.

/// One delivery the recorder saw, at its arrival.
#[derive(Debug, Clone)]
struct Seen {
    binding: String,
    /// `id@vN`: the binding version the row ran under.
    version: String,
    event_id: String,
    key: String,
    seq: u64,
}

/// Records every execute's binding, event id and payload (`key`, `seq`) on arrival,
/// then answers after `pause`, so deliveries are in flight while a test acts. The
/// capability `fail` fails instead; the capability `held` waits until [`Recorder::open`]
/// first (while [`Recorder::hold`] is in force).
#[derive(Clone)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    in_flight: Arc<AtomicUsize>,
    pause: Duration,
    open: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Recorder {
    fn new(pause: Duration) -> Recorder {
        Recorder {
            seen: Arc::default(),
            in_flight: Arc::default(),
            pause,
            open: Arc::new(tokio::sync::watch::Sender::new(true)),
        }
    }

    /// From now on, `held` executes wait for [`Recorder::open`].
    fn hold(&self) {
        self.open.send_replace(false);
    }

    /// Lets `held` executes answer.
    fn open(&self) {
        self.open.send_replace(true);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Distinct event ids delivered to `binding`.
    fn delivered(&self, binding: &str) -> HashSet<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.binding == binding)
            .map(|s| s.event_id.clone())
            .collect()
    }
}

#[async_trait]
impl BaseConnector for Recorder {
    fn connector_type(&self) -> &str {
        "recorder"
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        unreachable!("the gateway's executes come with a context")
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        capability: Option<&str>,
        ctx: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        let body = payload.as_json().cloned().unwrap_or_default();
        let get = |k: &str| ctx.get(k).cloned().unwrap_or_default();
        self.seen.lock().unwrap().push(Seen {
            binding: get("switchboard.binding"),
            version: get("switchboard.binding_version"),
            event_id: get("switchboard.event_id"),
            key: body["key"].as_str().unwrap_or("").to_owned(),
            seq: body["seq"].as_u64().unwrap_or(u64::MAX),
        });
        if capability == Some("fail") {
            return Err(switchboard::Error::Connector(
                "the recorder was told to fail".into(),
            ));
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if capability == Some("held") {
            let _ = self.open.subscribe().wait_for(|open| *open).await;
        }
        tokio::time::sleep(self.pause).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(Payload::Json(json!({"ok": true})))
    }
}

/// A gateway with the recorder registered on it as `acme.recorder.rec`, the dot key
/// the bindings invoke; keep the runner alive for the test.
async fn gateway_with(rec: &Recorder) -> (TestGateway, Arc<MultiConnectorRunner>) {
    let gw = TestGateway::start().await;
    let cfg = ConnectorConfig::builder(gw.ws_url(), TENANT)
        .instance_id("rec")
        .max_concurrent_requests(512)
        .max_queued_requests(512)
        .build()
        .unwrap();
    let (runner, _join) = common::start(
        RunnerOptions::default(),
        vec![Registration::new(cfg, rec.clone())],
    )
    .await;
    (gw, runner)
}

// ---------------------------------------------------------------------------------
// `switchboard serve` children.

/// What every runtime of these tests reads its webhook secret from.
fn secret_env() -> [(&'static str, String); 1] {
    [("GENERIC_SECRET", env("GENERIC_SECRET").unwrap())]
}

/// A runtime config: listen port, store, the gateway registration, the `[dispatcher]`
/// options (TOML lines), the webhook source, and `triggers`.
fn config(
    port: u16,
    store: &str,
    gw: &TestGateway,
    instance: &str,
    dispatcher: &str,
    triggers: &str,
) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\nstore = \"{store}\"\n\n[gateway]\nurl = \"{}\"\ntenant = \"{TENANT}\"\ninstance_id = \"{instance}\"\n\n[dispatcher]\n{dispatcher}\n{SOURCE}\n{triggers}",
        gw.ws_url()
    )
}

// ---------------------------------------------------------------------------------
// Webhooks.

/// A generic-HMAC webhook with delivery id `id` and body `{"key", "seq"}`.
fn signed(id: &str, key: &str, seq: u64) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let body = json!({"key": key, "seq": seq, "delivery": id}).to_string();
    let mut mac =
        Hmac::<Sha256>::new_from_slice(env("GENERIC_SECRET").unwrap().as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let sig = format!("sha256={}", support::hex(&mac.finalize().into_bytes()));
    (
        vec![
            ("X-Signature", sig),
            ("X-Delivery", id.to_owned()),
            ("Content-Type", "application/json".to_owned()),
        ],
        body.into_bytes(),
    )
}

/// POSTs the webhook once: the event id when it was accepted (2xx), `None` when the
/// process was not there or failed (5xx). Any other answer fails the test.
async fn post_once(
    http: &reqwest::Client,
    base: &str,
    hook: &(Vec<(&'static str, String)>, Vec<u8>),
) -> Option<String> {
    let mut req = http.post(format!("{base}/hooks/hook"));
    for (k, v) in &hook.0 {
        req = req.header(*k, v);
    }
    let resp = req.body(hook.1.clone()).send().await.ok()?;
    let status = resp.status();
    if status.is_server_error() {
        return None;
    }
    assert!(status.is_success(), "webhook refused: {status}");
    let v: Value = resp.json().await.ok()?;
    Some(
        v["id"]
            .as_str()
            .expect("the answer names the event")
            .to_owned(),
    )
}

/// POSTs the webhook until it is accepted, as a provider redelivers, or gives up at
/// the deadline (`None`: never acknowledged).
async fn post_until_accepted(
    http: &reqwest::Client,
    base: &str,
    hook: &(Vec<(&'static str, String)>, Vec<u8>),
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + common::DEADLINE;
    loop {
        if let Some(id) = post_once(http, base, hook).await {
            return Some(id);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        // Pacing between redeliveries while the process is away, not synchronisation.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------
// 1. SIGKILL while dispatching, then restart.

/// Webhooks posted in the kill test.
const KILL_EVENTS: usize = 300;

const ONE_BINDING: &str = r#"
[[triggers]]
id = "record"
sources = ["hook"]
handler = { invoke = "acme.recorder.rec", capability = "record" }
retry = { max_attempts = 10, backoff = "constant", base = "50ms", jitter = 0.0 }
max_concurrent = 16
timeout = "5s"
"#;

async fn killed_while_dispatching_then_restarted_delivers_every_accepted_event(
    store: String,
    what: &str,
) {
    let rec = Recorder::new(Duration::from_millis(20));
    let (gw, _runner) = gateway_with(&rec).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = config(
        port,
        &store,
        &gw,
        "runtime-1",
        "lease = \"2s\"",
        ONE_BINDING,
    );
    let mut first = Serve::started(dir.path(), "serve", port, &text, &secret_env()).await;

    // Post from 16 workers, each redelivering until its webhook is acknowledged
    // (across the kill and the restart).
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(Mutex::new(Vec::<String>::new()));
    let never = Arc::new(Mutex::new(Vec::<usize>::new()));
    let mut posters = Vec::new();
    for _ in 0..16 {
        let (next, accepted, never) = (next.clone(), accepted.clone(), never.clone());
        let base = first.base.clone();
        posters.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= KILL_EVENTS {
                    return;
                }
                let hook = signed(&format!("kill-{i}"), "k", i as u64);
                match post_until_accepted(&http, &base, &hook).await {
                    Some(id) => accepted.lock().unwrap().push(id),
                    None => never.lock().unwrap().push(i),
                }
            }
        }));
    }

    // Kill once a third is delivered and attempts are in flight.
    eventually("a third delivered, with attempts in flight", || async {
        rec.count() >= KILL_EVENTS / 3 && rec.in_flight.load(Ordering::SeqCst) > 0
    })
    .await;
    let in_flight = rec.in_flight.load(Ordering::SeqCst);
    let at_kill = rec.count();
    first.kill();
    let first_log = first.log();

    let second = Serve::started(dir.path(), "serve", port, &text, &secret_env()).await;
    for p in posters {
        p.await.unwrap();
    }
    let never = never.lock().unwrap().clone();
    assert!(
        never.is_empty(),
        "webhooks never acknowledged: {never:?}\n{}",
        second.log()
    );
    let ids: HashSet<String> = accepted.lock().unwrap().iter().cloned().collect();
    assert_eq!(ids.len(), KILL_EVENTS, "one event per webhook");

    // Polled to a deadline by hand (not `eventually`) to name what is missing and show
    // both processes' logs when something is.
    let complete = || {
        let got = rec.delivered("record");
        ids.iter().all(|id| got.contains(id))
    };
    let deadline = tokio::time::Instant::now() + common::DEADLINE;
    while !complete() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = rec.delivered("record");
    let missing: Vec<&String> = ids.iter().filter(|id| !got.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} accepted events never delivered (e.g. {:?})\nfirst process:\n{first_log}\nsecond process:\n{}",
        missing.len(),
        &missing[..missing.len().min(5)],
        second.log()
    );
    eventually("the outbox to drain", || second.drained()).await;
    let stats = second.get("/api/v1/outbox/stats").await;
    assert_eq!(stats["dead_letters"], 0, "{stats}");
    let deliveries = rec.seen().iter().filter(|s| s.binding == "record").count();
    assert!(
        rec.delivered("record").is_subset(&ids),
        "only accepted events are delivered"
    );
    report(&format!(
        "{what}: {KILL_EVENTS} accepted, killed at {at_kill} deliveries with {in_flight} in flight; \
         {deliveries} deliveries in all, {} duplicates (at-least-once)",
        deliveries - ids.len()
    ));
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_while_dispatching_then_restarted_delivers_every_accepted_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    killed_while_dispatching_then_restarted_delivers_every_accepted_event(store, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_while_dispatching_then_restarted_delivers_every_accepted_event() {
    let Some(url) = postgres_url() else {
        return skip_postgres(
            "postgres_killed_while_dispatching_then_restarted_delivers_every_accepted_event",
        );
    };
    let store = fresh_postgres_schema(&url).await;
    killed_while_dispatching_then_restarted_delivers_every_accepted_event(store, "postgres").await;
}

// ---------------------------------------------------------------------------------
// 2. Two processes on one PostgreSQL database.

/// Ordering keys in the shared-work test, and webhooks per key.
const KEYS: usize = 5;
const PER_KEY: u64 = 80;

const SHARED_BINDINGS: &str = r#"
[[triggers]]
id = "all"
sources = ["hook"]
handler = { invoke = "acme.recorder.rec", capability = "record" }
max_concurrent = 16

[[triggers]]
id = "ordered"
sources = ["hook"]
handler = { invoke = "acme.recorder.rec", capability = "held" }
ordering_key = 'payload.key'
max_concurrent = 16
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_postgres_share_the_work_once_each_and_keep_key_order() {
    let Some(url) = postgres_url() else {
        return skip_postgres(
            "two_processes_on_one_postgres_share_the_work_once_each_and_keep_key_order",
        );
    };
    let store = fresh_postgres_schema(&url).await;
    let rec = Recorder::new(Duration::from_millis(5));
    // Each key's first ordered delivery waits until every webhook is in, so the rest
    // of each key queue up behind it and both processes then compete for them.
    rec.hold();
    let (gw, _runner) = gateway_with(&rec).await;
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    // A lease longer than the test: nothing may be taken over, so nothing repeats.
    // A finish wakes only its own process, so the other one finds a key's next row on
    // its poll: a short poll makes the processes hand keys over often.
    let dispatcher = "lease = \"30s\"\npoll_interval = \"20ms\"";
    let a = Serve::start(
        dir.path(),
        "a",
        pa,
        &config(pa, &store, &gw, "runtime-a", dispatcher, SHARED_BINDINGS),
        &secret_env(),
    );
    let b = Serve::start(
        dir.path(),
        "b",
        pb,
        &config(pb, &store, &gw, "runtime-b", dispatcher, SHARED_BINDINGS),
        &secret_env(),
    );
    a.wait_healthy().await;
    b.wait_healthy().await;

    // Each key's webhooks are posted one after the other (each acknowledged before
    // the next), alternating between the two ingresses: their enqueue order is their
    // sequence. The keys run side by side.
    let mut posters = Vec::new();
    for k in 0..KEYS {
        let bases = [a.base.clone(), b.base.clone()];
        posters.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut ids = Vec::new();
            for seq in 0..PER_KEY {
                let hook = signed(&format!("shared-{k}-{seq}"), &format!("key-{k}"), seq);
                let base = &bases[(seq as usize + k) % 2];
                let id = post_once(&http, base, &hook)
                    .await
                    .unwrap_or_else(|| panic!("{base} did not accept key-{k} #{seq}"));
                ids.push(id);
            }
            ids
        }));
    }
    let mut ids = HashSet::new();
    for p in posters {
        ids.extend(p.await.unwrap());
    }
    let total = KEYS * PER_KEY as usize;
    assert_eq!(ids.len(), total);
    rec.open();

    eventually("every event delivered to both bindings", || async {
        let (all, ordered) = (rec.delivered("all"), rec.delivered("ordered"));
        ids.iter()
            .all(|id| all.contains(id) && ordered.contains(id))
    })
    .await;
    eventually("both outboxes drained", || async {
        a.drained().await && b.drained().await
    })
    .await;
    eventually("the processes to count every delivery", || async {
        let (da, db) = (a.dispatched().await, b.dispatched().await);
        da.values().sum::<u64>() + db.values().sum::<u64>() == 2 * total as u64
    })
    .await;

    let seen = rec.seen();
    for binding in ["all", "ordered"] {
        let mut times: HashMap<&str, usize> = HashMap::new();
        for s in seen.iter().filter(|s| s.binding == binding) {
            *times.entry(s.event_id.as_str()).or_default() += 1;
        }
        let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{binding}: delivered more than once: {twice:?}"
        );
        assert_eq!(times.len(), total, "{binding}: every event once");
    }
    for k in 0..KEYS {
        let key = format!("key-{k}");
        let order: Vec<u64> = seen
            .iter()
            .filter(|s| s.binding == "ordered" && s.key == key)
            .map(|s| s.seq)
            .collect();
        assert_eq!(
            order,
            (0..PER_KEY).collect::<Vec<_>>(),
            "{key}: deliveries in enqueue order"
        );
    }
    let (da, db) = (a.dispatched().await, b.dispatched().await);
    assert!(
        da["all"] > 0 && db["all"] > 0,
        "both processes delivered the unordered binding: a {da:?}, b {db:?}"
    );
    report(&format!(
        "two processes: runtime-a delivered {da:?}, runtime-b {db:?}; no duplicates; {KEYS} keys in order"
    ));
}

// ---------------------------------------------------------------------------------
// 3. The admin CLI against a running process.

const CLI_BINDINGS: &str = r#"
[[triggers]]
id = "doomed"
sources = ["hook"]
handler = { invoke = "acme.recorder.rec", capability = "fail" }
retry = { max_attempts = 1 }
"#;

// ---------------------------------------------------------------------------------
// 3. A reload on one process, honoured by the other.

fn versioned(capability: &str) -> String {
    format!(
        "[[triggers]]\nid = \"work\"\nsources = [\"hook\"]\nhandler = {{ invoke = \"acme.recorder.rec\", capability = \"{capability}\" }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_on_one_postgres_process_is_honoured_by_the_other_before_it_starts_a_row() {
    let Some(url) = postgres_url() else {
        return skip_postgres(
            "a_reload_on_one_postgres_process_is_honoured_by_the_other_before_it_starts_a_row",
        );
    };
    let store = fresh_postgres_schema(&url).await;
    let rec = Recorder::new(Duration::ZERO);
    rec.hold();
    let (gw, _runner) = gateway_with(&rec).await;
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    // A runs one attempt at a time, so with every v2 attempt held, B must start the
    // rest: B can only run them under v2, which A recorded.
    let a_opts = "max_in_flight = 1\npoll_interval = \"50ms\"";
    let b_opts = "poll_interval = \"50ms\"";
    let a = Serve::started(
        dir.path(),
        "a",
        pa,
        &config(pa, &store, &gw, "runtime-a", a_opts, &versioned("record")),
        &secret_env(),
    )
    .await;
    let b = Serve::started(
        dir.path(),
        "b",
        pb,
        &config(pb, &store, &gw, "runtime-b", b_opts, &versioned("record")),
        &secret_env(),
    )
    .await;
    std::fs::write(
        dir.path().join("a.toml"),
        config(pa, &store, &gw, "runtime-a", a_opts, &versioned("held")),
    )
    .unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/triggers/reload", a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", a.log());
    let http = reqwest::Client::new();
    const N: usize = 6;
    for i in 0..N {
        post_once(&http, &a.base, &signed(&format!("v2-{i}"), "k", i as u64))
            .await
            .expect("accepted");
    }
    eventually("every row to start somewhere", || async {
        rec.count() == N
    })
    .await;
    rec.open();
    eventually("the outbox to drain", || async { b.drained().await }).await;
    let versions: Vec<String> = rec.seen().into_iter().map(|s| s.version).collect();
    assert!(
        versions.iter().all(|v| v == "work@v2"),
        "every row enqueued after the reload ran under work@v2: {versions:?}\n{}\n{}",
        a.log(),
        b.log()
    );
    let on_b = b.dispatched().await["work"];
    assert!(on_b >= (N - 1) as u64, "B ran {on_b} of {N}: {}", b.log());
    let work = |v: Value| {
        v["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "work")
            .cloned()
            .unwrap()
    };
    eventually("B to show work@v2 active", || async {
        work(b.get("/api/v1/triggers").await)["active"] == 2
    })
    .await;
    let history_a = a.get("/api/v1/triggers/work/history").await["history"].clone();
    let history_b = b.get("/api/v1/triggers/work/history").await["history"].clone();
    assert_eq!(history_a, history_b, "one log, read by both");
    let events: Vec<String> = history_a
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("v{} {}", e["version"], e["event"].as_str().unwrap()))
        .collect();
    assert_eq!(
        &events[events.len() - 3..],
        ["v1 draining", "v2 registering", "v2 active"],
        "{events:?}"
    );
}

/// Runs `switchboard <args>`; (success, stdout, stderr).
async fn cli(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .env_remove("SWITCHBOARD_ADMIN_URL")
        .env_remove("SWITCHBOARD_ADMIN_TOKEN")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_reads_stats_and_dead_letters_of_a_running_process() {
    let rec = Recorder::new(Duration::ZERO);
    let (gw, _runner) = gateway_with(&rec).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    let text = config(port, &store, &gw, "runtime-cli", "", CLI_BINDINGS);
    let serve = Serve::started(dir.path(), "serve", port, &text, &secret_env()).await;
    let http = reqwest::Client::new();
    let event = post_once(&http, &serve.base, &signed("cli-1", "k", 1))
        .await
        .expect("accepted");
    eventually("the event to be dead-lettered", || async {
        serve.get("/api/v1/dead-letters").await["dead_letters"]
            .as_array()
            .is_some_and(|l| l.len() == 1)
    })
    .await;
    let url = serve.base.as_str();

    let (ok, out, err) = cli(&["outbox", "stats", "--url", url, "--json"]).await;
    assert!(ok, "outbox stats failed: {err}");
    let stats: Value = serde_json::from_str(&out).expect("outbox stats --json prints JSON");
    for k in [
        "due",
        "leased",
        "scheduled",
        "dead_letters",
        "by_binding",
        "queues",
    ] {
        assert!(stats.get(k).is_some(), "outbox stats has no {k:?}: {stats}");
    }
    assert_eq!(stats["dead_letters"], 1, "{stats}");

    let (ok, out, err) = cli(&["dead-letters", "list", "--url", url]).await;
    assert!(ok, "dead-letters list failed: {err}");
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default();
    for column in [
        "id",
        "binding",
        "event",
        "attempts",
        "replays",
        "last error",
    ] {
        assert!(header.contains(column), "no {column:?} column: {out}");
    }
    let row = lines.next().unwrap_or_default();
    assert!(
        row.contains("doomed") && row.contains(&event) && row.contains("handler"),
        "the dead letter's row names its binding, event and error kind: {out}"
    );

    let (ok, out, err) = cli(&["dead-letters", "list", "--url", url, "--json"]).await;
    assert!(ok, "dead-letters list --json failed: {err}");
    let list: Value = serde_json::from_str(&out).expect("dead-letters list --json prints JSON");
    assert_eq!(
        list["dead_letters"][0]["event_id"],
        event.as_str(),
        "{list}"
    );
    let dead_id = list["dead_letters"][0]["id"].as_i64().unwrap();

    let (ok, out, err) = cli(&["dead-letters", "replay", "999999", "--url", url]).await;
    assert!(
        !ok,
        "replaying a dead letter that does not exist must fail: {out}"
    );
    assert!(
        err.contains("not_found") && err.contains("no dead letter 999999"),
        "the error says the dead letter was not found: {err}"
    );

    let (ok, out, err) = cli(&["dead-letters", "replay", &dead_id.to_string(), "--url", url]).await;
    assert!(ok, "replay failed: {err}");
    assert!(
        out.contains(&format!("dead letter {dead_id} replayed as row")),
        "{out}"
    );
    drop(serve);
}

const LIFECYCLE_V1: &str = r#"
[[triggers]]
id = "life"
sources = ["hook"]
handler = { invoke = "acme.recorder.rec", capability = "record" }
"#;

const LIFECYCLE_V2: &str = r#"
[[triggers]]
id = "life"
sources = ["hook"]
handler = { invoke = "acme.recorder.rec", capability = "record" }
max_concurrent = 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_the_triggers_cli_lists_pauses_resumes_drains_and_shows_history() {
    let rec = Recorder::new(Duration::ZERO);
    let (gw, _runner) = gateway_with(&rec).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    let serve = Serve::started(
        dir.path(),
        "serve",
        port,
        &config(port, &store, &gw, "runtime-life", "", LIFECYCLE_V1),
        &secret_env(),
    )
    .await;
    let url = serve.base.as_str();

    // SIGHUP re-reads the file.
    std::fs::write(
        dir.path().join("serve.toml"),
        config(port, &store, &gw, "runtime-life", "", LIFECYCLE_V2),
    )
    .unwrap();
    let pid = serve.child.as_ref().unwrap().id().to_string();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(hup.success());
    eventually("SIGHUP to activate life@v2", || async {
        serve.get("/api/v1/triggers").await["triggers"][0]["active"] == 2
    })
    .await;
    eventually("the SIGHUP reload to be logged", || async {
        serve.log().contains("SIGHUP: configuration reloaded")
    })
    .await;
    eventually("life@v1 to terminate", || async {
        serve.get("/api/v1/triggers/life/history").await["history"]
            .as_array()
            .is_some_and(|h| h.iter().any(|e| e["event"] == "terminated"))
    })
    .await;

    let (ok, out, err) = cli(&["triggers", "list", "--url", url]).await;
    assert!(ok, "triggers list failed: {err}");
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default();
    for column in ["binding", "version", "state", "origin", "dispatched"] {
        assert!(header.contains(column), "no {column:?} column: {out}");
    }
    let row = lines.next().unwrap_or_default();
    assert!(
        row.contains("life")
            && row.contains("v2")
            && row.contains("active")
            && row.contains("manifest"),
        "{out}"
    );

    let (ok, out, err) = cli(&["triggers", "pause", "life", "--url", url]).await;
    assert!(
        ok && out.contains("life@v2") && out.contains("paused"),
        "{out}{err}"
    );
    let (ok, out, _) = cli(&["triggers", "list", "--url", url]).await;
    assert!(ok && out.contains("paused"), "{out}");
    let (ok, out, err) = cli(&["triggers", "resume", "life", "--url", url]).await;
    assert!(ok && out.contains("resumed"), "{out}{err}");
    let (ok, out, err) = cli(&["triggers", "reload", "--url", url]).await;
    assert!(ok && out.contains("nothing changed"), "{out}{err}");
    let (ok, out, err) = cli(&["triggers", "drain", "life", "--url", url]).await;
    assert!(ok && out.contains("draining"), "{out}{err}");
    let (ok, out, err) = cli(&["triggers", "pause", "nobody", "--url", url]).await;
    assert!(!ok && err.contains("not_found"), "{out}{err}");

    let (ok, out, err) = cli(&["triggers", "history", "life", "--url", url]).await;
    assert!(ok, "history failed: {err}");
    let events: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(
        &events[..8],
        [
            "registering",
            "active",
            "draining",
            "registering",
            "active",
            "terminated",
            "paused",
            "resumed"
        ],
        "{out}"
    );
    assert!(events[8..].starts_with(&["draining"]), "{out}");
    let (ok, out, _) = cli(&["triggers", "history", "life", "--url", url, "--json"]).await;
    assert!(ok);
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(v["binding"], "life");
    drop(serve);
}
