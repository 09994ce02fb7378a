//! A `switchboard serve` process killed with SIGKILL and started again recognises what
//! it held (its `process_id`, by default the host name and the listen address):
//! the outbox row it had claimed under a ten-minute lease is delivered again at once,
//! and the poll source whose ten-minute lease it held is polled again at once, on
//! SQLite and on PostgreSQL. A process of ANOTHER identity leaves the row leased and
//! says who holds it and until when. The handler is an `http` endpoint in this test
//! process that never answers, so the row stays claimed until the kill.
#![cfg(all(feature = "gateway", feature = "runtime", feature = "postgres"))]

#[path = "common/mod.rs"]
mod common;
#[path = "ingest/support.rs"]
mod support;

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use serde_json::{json, Value};

use common::eventually;
use common::serve::{free_port, Serve};
use support::{fresh_postgres_schema, postgres_url, skip_postgres};

/// What the endpoint saw: the event id of every delivery, and how many polls.
#[derive(Default)]
struct Seen {
    deliveries: Mutex<Vec<String>>,
    polls: Mutex<usize>,
}

impl Seen {
    fn deliveries(&self) -> Vec<String> {
        self.deliveries.lock().unwrap().clone()
    }
    fn polls(&self) -> usize {
        *self.polls.lock().unwrap()
    }
}

/// `POST /hook` records the delivery and never answers; `GET /items` counts the poll
/// and answers an empty page. Returns its base URL.
async fn endpoint(seen: &Arc<Seen>) -> String {
    async fn hook(State(seen): State<Arc<Seen>>, headers: HeaderMap) -> &'static str {
        let id = headers
            .get("switchboard-event-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        seen.deliveries.lock().unwrap().push(id);
        std::future::pending::<()>().await;
        unreachable!()
    }
    async fn items(State(seen): State<Arc<Seen>>) -> axum::Json<Value> {
        *seen.polls.lock().unwrap() += 1;
        axum::Json(json!([]))
    }
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .route("/items", get(items))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// Logs at info (the start's release line) in plain text (`NO_COLOR`, so a test can
/// read `field=value`); the `http` handler's secret.
fn env() -> [(&'static str, String); 3] {
    [
        ("RUST_LOG", "warn,switchboard=info".to_owned()),
        ("NO_COLOR", "1".to_owned()),
        ("SW_SECRET", support::env("SW_SECRET").unwrap()),
    ]
}

/// Leases far longer than any wait of these tests: whatever is delivered or polled
/// again before the test's deadline was released, not expired.
const LONG: &str = "10m";

/// A runtime with one `http` binding `hook` to the endpoint, claims leased for
/// [`LONG`], and `process_id` when given.
fn delivery_config(port: u16, store: &str, endpoint: &str, process_id: Option<&str>) -> String {
    let id = process_id.map_or(String::new(), |id| format!("process_id = \"{id}\"\n"));
    format!(
        r#"listen = "127.0.0.1:{port}"
store = "{store}"
{id}
[dispatcher]
lease = "{LONG}"

[outbound]
allow = ["127.0.0.0/8"]

[[triggers]]
id = "hook"
handler = {{ http = "{endpoint}/hook", secret_env = "SW_SECRET", timeout = "{LONG}" }}
"#
    )
}

/// Enqueues one event for `hook`; returns its id.
async fn enqueue(serve: &Serve) -> String {
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/triggers/hook/invoke", serve.base))
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202, "{}", serve.log());
    let v: Value = resp.json().await.unwrap();
    v["event_id"].as_str().unwrap().to_owned()
}

/// The outbox's leased row count.
async fn leased(serve: &Serve) -> u64 {
    serve.get("/api/v1/outbox/stats").await["leased"]
        .as_u64()
        .unwrap()
}

async fn a_killed_process_started_again_delivers_its_claimed_row_at_once(store: String) {
    let seen = Arc::new(Seen::default());
    let endpoint = endpoint(&seen).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = delivery_config(port, &store, &endpoint, None);
    let mut first = Serve::started(dir.path(), "first", port, &text, &env()).await;
    let event = enqueue(&first).await;
    eventually("the row's first delivery", || async {
        seen.deliveries().len() == 1
    })
    .await;
    assert_eq!(leased(&first).await, 1, "claimed under its lease");
    first.kill();

    let restarted = std::time::Instant::now();
    let second = Serve::started(dir.path(), "second", port, &text, &env()).await;
    eventually(
        "the row delivered again by the restarted process",
        || async { seen.deliveries().len() == 2 },
    )
    .await;
    // Reported, not asserted: how long the restart took (before process identities
    // it waited out the whole lease).
    let _ = writeln!(
        std::io::stderr(),
        "{}: delivered again {:?} after the restart began, under a {LONG} lease",
        store.split(':').next().unwrap_or(""),
        restarted.elapsed()
    );
    assert_eq!(seen.deliveries(), [event.clone(), event], "the same row");
    let log = second.log();
    assert!(
        log.contains("released what this process held before this start: 1 outbox rows due now"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_killed_process_started_again_delivers_its_claimed_row_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    a_killed_process_started_again_delivers_its_claimed_row_at_once(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_killed_process_started_again_delivers_its_claimed_row_at_once() {
    let Some(url) = postgres_url() else {
        return skip_postgres(
            "postgres_a_killed_process_started_again_delivers_its_claimed_row_at_once",
        );
    };
    let store = fresh_postgres_schema(&url).await;
    a_killed_process_started_again_delivers_its_claimed_row_at_once(store).await;
}

/// Two identities on one store: the row a killed `runtime-a` claimed stays leased
/// while `runtime-b` runs (which warns who holds it), and `runtime-a` started again
/// delivers it at once.
async fn a_process_of_another_identity_leaves_the_row_leased_and_says_who_holds_it(store: String) {
    let seen = Arc::new(Seen::default());
    let endpoint = endpoint(&seen).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let a = delivery_config(port, &store, &endpoint, Some("runtime-a"));
    let b = delivery_config(port, &store, &endpoint, Some("runtime-b"));
    let mut first = Serve::started(dir.path(), "a", port, &a, &env()).await;
    enqueue(&first).await;
    eventually("the row's first delivery", || async {
        seen.deliveries().len() == 1
    })
    .await;
    first.kill();

    let mut other = Serve::started(dir.path(), "b", port, &b, &env()).await;
    let log = other.log();
    assert!(
        log.contains("released what this process held before this start: 0 outbox rows"),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("outbox rows leased by another process")
            && l.contains("holder=\"runtime-a\"")
            && l.contains("rows=1")),
        "a warning names the holder and the rows:\n{log}"
    );
    // Started after its release ran, so this reads the row as runtime-b left it.
    assert_eq!(leased(&other).await, 1, "still runtime-a's");
    assert_eq!(seen.deliveries().len(), 1);
    other.kill();

    let again = Serve::started(dir.path(), "a-again", port, &a, &env()).await;
    eventually("runtime-a started again delivers its row", || async {
        seen.deliveries().len() == 2
    })
    .await;
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_process_of_another_identity_leaves_the_row_leased_and_says_who_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    a_process_of_another_identity_leaves_the_row_leased_and_says_who_holds_it(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_process_of_another_identity_leaves_the_row_leased_and_says_who_holds_it() {
    let Some(url) = postgres_url() else {
        return skip_postgres(
            "postgres_a_process_of_another_identity_leaves_the_row_leased_and_says_who_holds_it",
        );
    };
    let store = fresh_postgres_schema(&url).await;
    a_process_of_another_identity_leaves_the_row_leased_and_says_who_holds_it(store).await;
}

/// A runtime with one `http_poll` source polled every [`LONG`] under a lease of
/// [`LONG`] (`poll_lease_secs`): after its first poll a process holds the lease for
/// ten minutes.
fn poll_config(port: u16, store: &str, endpoint: &str) -> String {
    format!(
        r#"listen = "127.0.0.1:{port}"
store = "{store}"

[[sources]]
id = "items"
provider = "http_poll"
url = "{endpoint}/items"
every = "{LONG}"
poll_lease_secs = 600
"#
    )
}

async fn a_killed_poller_started_again_polls_at_once(store: String) {
    let seen = Arc::new(Seen::default());
    let endpoint = endpoint(&seen).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = poll_config(port, &store, &endpoint);
    let mut first = Serve::started(dir.path(), "first", port, &text, &env()).await;
    eventually("the first poll", || async { seen.polls() == 1 }).await;
    first.kill();

    let restarted = std::time::Instant::now();
    let second = Serve::started(dir.path(), "second", port, &text, &env()).await;
    eventually("a poll by the restarted process", || async {
        seen.polls() == 2
    })
    .await;
    // Reported, not asserted: how long the restart took (before process identities
    // it waited out the whole lease).
    let _ = writeln!(
        std::io::stderr(),
        "{}: polled again {:?} after the restart began, under a {LONG} lease",
        store.split(':').next().unwrap_or(""),
        restarted.elapsed()
    );
    let log = second.log();
    assert!(
        log.contains("1 poll leases given back") && log.contains("sources=[\"items\"]"),
        "{log}"
    );
    assert!(
        !log.contains("waiting for the source's poll lease"),
        "its own lease is not waited for:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_killed_poller_started_again_polls_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    a_killed_poller_started_again_polls_at_once(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_killed_poller_started_again_polls_at_once() {
    let Some(url) = postgres_url() else {
        return skip_postgres("postgres_a_killed_poller_started_again_polls_at_once");
    };
    let store = fresh_postgres_schema(&url).await;
    a_killed_poller_started_again_polls_at_once(store).await;
}

/// Another process on the store while the first holds the poll lease: it does not
/// poll, and warns once who holds the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_waiting_for_the_poll_lease_warns_who_holds_it() {
    let Some(url) = postgres_url() else {
        return skip_postgres("a_second_process_waiting_for_the_poll_lease_warns_who_holds_it");
    };
    let store = fresh_postgres_schema(&url).await;
    let seen = Arc::new(Seen::default());
    let endpoint = endpoint(&seen).await;
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let first = Serve::started(
        dir.path(),
        "a",
        pa,
        &poll_config(pa, &store, &endpoint),
        &env(),
    )
    .await;
    eventually("the first poll", || async { seen.polls() == 1 }).await;
    // At the default log level (RUST_LOG unset): the warning must show there.
    let plain = [("NO_COLOR", "1".to_owned())];
    let second = Serve::started(
        dir.path(),
        "b",
        pb,
        &poll_config(pb, &store, &endpoint),
        &plain,
    )
    .await;
    eventually("the wait to be logged", || async {
        second.log().contains("waiting for the source's poll lease")
    })
    .await;
    let log = second.log();
    let line = log
        .lines()
        .find(|l| l.contains("waiting for the source's poll lease"))
        .unwrap();
    assert!(
        line.contains("WARN")
            && line.contains(&format!("/127.0.0.1:{pa}@"))
            && line.contains("until_ms="),
        "names the holder (the first process's default identity) and the lease's end: {line}"
    );
    assert_eq!(seen.polls(), 1, "the second process did not poll");
    assert_eq!(
        log.matches("waiting for the source's poll lease").count(),
        1,
        "once:\n{log}"
    );
    drop((first, second));
}
