//! An inbound connector written here through the public API only (no `__private`),
//! hosted by a real runtime on a real port and store, the way a connector developer
//! would add Shopify or an internal system:
//!
//! - a webhook provider with a signature scheme of its own (`X-Acme-Token` compared
//!   with its secret) whose delivery carries several orders: a **batch**, each order
//!   its own event, matched by a binding and delivered to a local connector;
//! - a refused delivery answered with the connector's own **response**;
//! - an **immediate response** (202 "queued") sent after its events are stored;
//! - a **poll** source of its own, whose events and cursor the runtime commits;
//! - its options checked at start, with errors naming the source and the option; a
//!   provider id that is taken refused.
#![cfg(feature = "runtime")]

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use common::{eventually, eventually_some};
use dsupport::{Recorder, Rt};
use serde::Deserialize;
use serde_json::{json, Value};
use switchboard::{
    InboundConnector, InboundEvent, InboundRequest, InboundResponse, InboundSource, Polled,
    Received, Refusal, Runtime, RuntimeConfig, SourceContext, SourceKind,
};

/// Acme's webhooks: a shared token in `X-Acme-Token`, a body `{"orders": [...]}`.
/// Records what the runtime told its sources: the bindings of each activation, and
/// whether it was shut down.
#[derive(Clone, Default)]
struct Acme {
    activations: Arc<std::sync::Mutex<Vec<Vec<String>>>>,
    shut_down: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AcmeOptions {
    /// The event kind prefix, e.g. `order` makes `order.created`.
    prefix: String,
}

struct AcmeSource {
    ctx: SourceContext,
    prefix: String,
    seen: Acme,
}

#[async_trait]
impl InboundConnector for Acme {
    fn provider(&self) -> &str {
        "acme"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Webhook]
    }

    async fn init(&self, ctx: SourceContext) -> switchboard::Result<Box<dyn InboundSource>> {
        let o: AcmeOptions = ctx.options()?;
        if ctx.secrets().is_empty() {
            return Err(ctx.invalid("secret_env is required"));
        }
        Ok(Box::new(AcmeSource {
            ctx,
            prefix: o.prefix,
            seen: self.clone(),
        }))
    }
}

#[async_trait]
impl InboundSource for AcmeSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Webhook
    }

    async fn activate(&self, bindings: &[String]) -> switchboard::Result<()> {
        self.seen
            .activations
            .lock()
            .unwrap()
            .push(bindings.to_vec());
        Ok(())
    }

    async fn shutdown(&self, _deadline: std::time::Instant) {
        self.seen.shut_down.store(true, Ordering::SeqCst);
    }

    async fn receive(&self, req: &InboundRequest<'_>) -> Received {
        let token = req.header("x-acme-token").unwrap_or("");
        let known = self.ctx.secrets();
        if !known.iter().any(|s| s.expose() == token.as_bytes()) {
            return Received::Reject(
                Refusal::new(403, "bad_token", "X-Acme-Token does not match").respond_with(
                    InboundResponse::text(403, "acme says no").header("x-acme-reason", "token"),
                ),
            );
        }
        let Ok(body) = serde_json::from_slice::<Value>(req.body) else {
            return Received::Reject(Refusal::new(400, "invalid_json", "not JSON"));
        };
        let events: Vec<InboundEvent> = body["orders"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                InboundEvent::new(
                    format!("{}.{}", self.prefix, o["status"].as_str().unwrap_or("?")),
                    format!("order:{}", o["id"]),
                    o.clone(),
                )
            })
            .collect();
        if body["ack"] == true {
            return Received::Respond {
                response: InboundResponse::text(202, "queued"),
                events,
            };
        }
        Received::Events(events)
    }
}

/// A poll source of its own: each poll returns the next two numbers after the cursor.
struct Counter {
    polls: Arc<AtomicU64>,
}

struct CounterSource {
    polls: Arc<AtomicU64>,
}

#[async_trait]
impl InboundConnector for Counter {
    fn provider(&self) -> &str {
        "counter"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Poll]
    }

    async fn init(&self, _ctx: SourceContext) -> switchboard::Result<Box<dyn InboundSource>> {
        Ok(Box::new(CounterSource {
            polls: self.polls.clone(),
        }))
    }
}

#[async_trait]
impl InboundSource for CounterSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Poll
    }

    async fn poll(&self, cursor: Option<&str>, now_ms: i64) -> switchboard::Result<Polled> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        let from: u64 = cursor.map_or(0, |c| c.parse().unwrap());
        if from >= 6 {
            return Ok(Polled::new(vec![], None).next_poll_at(now_ms + 3_600_000));
        }
        let events = (from + 1..=from + 2)
            .map(|n| InboundEvent::new("tick", format!("n:{n}"), json!({ "n": n })))
            .collect();
        Ok(Polled::new(events, Some((from + 2).to_string())).more())
    }
}

const ACME: &str = r#"
[[sources]]
id = "shop"
provider = "acme"
secret_env = "GENERIC_SECRET"
prefix = "order"

[[triggers]]
id = "created"
sources = ["shop"]
events = ["order.created"]
handler = { local = "orders", capability = "record" }
"#;

async fn acme_runtime(rec: &Recorder) -> Rt {
    let rec = rec.clone();
    Rt::sqlite_with(ACME, move |b| {
        b.inbound_connector(Acme::default())
            .local_connector("orders", rec)
    })
    .await
}

async fn post(rt: &Rt, token: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/hooks/shop", rt.base))
        .header("x-acme-token", token)
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_batch_becomes_one_event_per_order_and_matching_ones_are_delivered() {
    let rec = Recorder::default();
    let rt = acme_runtime(&rec).await;
    let orders = json!({"orders": [
        {"id": 1, "status": "created"},
        {"id": 2, "status": "paid"},
        {"id": 3, "status": "created"},
        {"id": 1, "status": "created"}
    ]});
    let resp = post(&rt, "generic-secret", orders.clone()).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    let events = answer["events"].as_array().unwrap();
    assert_eq!(events.len(), 4, "one answer per event: {answer}");
    let dup: Vec<bool> = events
        .iter()
        .map(|e| e["duplicate"].as_bool().unwrap())
        .collect();
    assert_eq!(
        dup,
        [false, false, false, true],
        "the repeated order is its first copy's duplicate"
    );
    assert_eq!(events[3]["id"], events[0]["id"]);

    let stored = rt.get("/api/v1/events?source=shop").await;
    let stored = stored["events"].as_array().unwrap();
    assert_eq!(stored.len(), 3);
    assert!(stored.iter().all(|e| e["provider"] == "acme"
        && e["tenant"] == "default"
        && e["headers"]["x-acme-token"].is_string()));
    eventually("both created orders delivered", || async {
        rec.count() == 2
    })
    .await;
    let mut ids: Vec<i64> = rec
        .seen()
        .iter()
        .map(|s| s.payload["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 3], "{:?}", rec.seen());

    // The same delivery again: every event a duplicate, nothing delivered twice.
    let again: Value = post(&rt, "generic-secret", orders)
        .await
        .json()
        .await
        .unwrap();
    assert!(again["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["duplicate"] == true));
    let metrics = rt.metrics().await;
    assert!(
        metrics
            .contains(r#"switchboard_ingress_requests_total{source="shop",outcome="duplicate"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_refusal_is_answered_with_the_connectors_own_response_and_audited() {
    let rec = Recorder::default();
    let rt = acme_runtime(&rec).await;
    let resp = post(
        &rt,
        "wrong",
        json!({"orders": [{"id": 9, "status": "created"}]}),
    )
    .await;
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers()["x-acme-reason"], "token");
    assert_eq!(resp.text().await.unwrap(), "acme says no");
    let stored = rt.get("/api/v1/events?source=shop").await;
    assert!(stored["events"].as_array().unwrap().is_empty());
    let audit = eventually_some("the refusal audited", || async {
        let rows = rt.get("/api/v1/rejections?source=shop").await;
        let rows = rows["rejections"].as_array().unwrap().clone();
        (!rows.is_empty()).then_some(rows)
    })
    .await;
    assert_eq!(audit[0]["reason"], "bad_token");
}

#[tokio::test]
async fn an_immediate_response_is_sent_after_its_events_are_stored() {
    let rec = Recorder::default();
    let rt = acme_runtime(&rec).await;
    let resp = post(
        &rt,
        "generic-secret",
        json!({"ack": true, "orders": [{"id": 7, "status": "created"}]}),
    )
    .await;
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.text().await.unwrap(), "queued");
    // Stored before the answer: no waiting needed to see it.
    let stored = rt.get("/api/v1/events?source=shop").await;
    assert_eq!(stored["events"].as_array().unwrap().len(), 1);
    eventually("the order delivered", || async { rec.count() == 1 }).await;
}

#[tokio::test]
async fn a_poll_source_of_its_own_is_polled_and_its_cursor_committed() {
    let polls = Arc::new(AtomicU64::new(0));
    let counter = Counter {
        polls: polls.clone(),
    };
    let rt = Rt::sqlite_with(
        "[[sources]]\nid = \"count\"\nprovider = \"counter\"\n",
        move |b| b.inbound_connector(counter),
    )
    .await;
    let events = eventually_some("six numbers", || async {
        let e = rt.get("/api/v1/events?source=count").await;
        let e = e["events"].as_array().unwrap().clone();
        (e.len() >= 6).then_some(e)
    })
    .await;
    let mut ns: Vec<i64> = events
        .iter()
        .map(|e| e["payload"]["n"].as_i64().unwrap())
        .collect();
    ns.sort();
    assert_eq!(ns, [1, 2, 3, 4, 5, 6], "none skipped, none twice");
    assert!(events.iter().all(|e| e["signature"] == "internal"));
    let shown = eventually_some("the cursor at 6", || async {
        let s = rt.get("/api/v1/sources/count").await;
        (s["cursor"] == "6").then_some(s)
    })
    .await;
    assert_eq!(shown["kind"], "poll");
    assert_eq!(shown["ingress_path"], Value::Null);
    // Three pages, then a poll that finds nothing new and asks for an hour's rest.
    eventually("the fourth poll", || async {
        polls.load(Ordering::SeqCst) >= 4
    })
    .await;
}

fn config(dir: &tempfile::TempDir, text: &str) -> switchboard::ResolvedConfig {
    let store = dir.path().join("rt.db");
    RuntimeConfig::from_toml(&format!(
        "listen = \"127.0.0.1:0\"\nstore = \"sqlite:{}\"\n{text}",
        store.display()
    ))
    .unwrap()
    .resolve_with(support::env)
    .unwrap()
}

#[tokio::test]
async fn options_are_checked_at_start_and_a_taken_provider_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = |text: &str| config(&dir, text);
    let misspelt = "[[sources]]\nid = \"shop\"\nprovider = \"acme\"\nsecret_env = \"GENERIC_SECRET\"\nprefx = \"order\"\n";
    let err = Runtime::builder(config(misspelt))
        .inbound_connector(Acme::default())
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"shop\"") && err.contains("option prefx does not apply to provider acme"),
        "{err}"
    );
    let unknown = "[[sources]]\nid = \"shop\"\nprovider = \"acme\"\nprefix = \"o\"\n";
    let err = Runtime::start(config(unknown))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown provider \"acme\""), "{err}");
    assert!(
        err.contains("github"),
        "the error lists the known ones: {err}"
    );

    struct Impostor;
    #[async_trait]
    impl InboundConnector for Impostor {
        fn provider(&self) -> &str {
            "github"
        }
        fn kinds(&self) -> Vec<SourceKind> {
            vec![SourceKind::Webhook]
        }
        async fn init(&self, _: SourceContext) -> switchboard::Result<Box<dyn InboundSource>> {
            unreachable!("never started")
        }
    }
    let err = Runtime::builder(config(""))
        .inbound_connector(Impostor)
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"github\" is already registered"), "{err}");
}

#[tokio::test]
async fn sources_are_told_their_bindings_at_start_and_after_a_reload_and_are_shut_down() {
    let acme = Acme::default();
    let seen = acme.clone();
    // A reload reads the file's secrets from the process environment.
    std::env::set_var("GENERIC_SECRET", "generic-secret");
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = format!("sqlite:{}", dir.path().join("rt.db").display());
    let path = dir.path().join("switchboard.toml");
    let rt = Rt::on_with(url, dir, ACME, move |b| {
        b.config_path(&path)
            .inbound_connector(acme)
            .local_connector("orders", Recorder::default())
    })
    .await;
    rt.write_config(ACME);
    eventually("activated with the one binding", || async {
        seen.activations.lock().unwrap().last() == Some(&vec!["created".to_owned()])
    })
    .await;
    rt.write_config(&format!(
        "{ACME}\n[[triggers]]\nid = \"everything\"\nhandler = {{ local = \"orders\", capability = \"record\" }}\n"
    ));
    rt.rt().reload().await.unwrap();
    eventually("activated again with both bindings", || async {
        seen.activations.lock().unwrap().last()
            == Some(&vec!["created".to_owned(), "everything".to_owned()])
    })
    .await;
    let mut rt = rt;
    rt.stop().await;
    assert!(
        seen.shut_down.load(Ordering::SeqCst),
        "shutdown reached the source"
    );
}

/// A GitHub delivery signed with `secret`.
async fn post_github(rt: &Rt, secret: &str, delivery: &str) -> u16 {
    use hmac::Mac as _;
    let body = br#"{"action":"opened","issue":{"number":1}}"#;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let sig = format!("sha256={}", support::hex(&mac.finalize().into_bytes()));
    reqwest::Client::new()
        .post(format!("{}/hooks/gh", rt.base))
        .header("x-hub-signature-256", sig)
        .header("x-github-event", "issues")
        .header("x-github-delivery", delivery)
        .body(body.to_vec())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_rotated_secret_file_applies_at_the_next_reload() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let secret = dir.path().join("github-secret");
    std::fs::write(&secret, "first-secret\n").unwrap();
    let config = format!(
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_file = \"{}\"\n",
        secret.display()
    );
    let url = format!("sqlite:{}", dir.path().join("rt.db").display());
    let path = dir.path().join("switchboard.toml");
    let rt = Rt::on_with(url, dir, &config, move |b| b.config_path(&path)).await;
    rt.write_config(&config);
    assert_eq!(post_github(&rt, "first-secret", "d-1").await, 200);

    std::fs::write(&secret, "second-secret\n").unwrap();
    assert_eq!(
        post_github(&rt, "second-secret", "d-2").await,
        401,
        "a rotated file is read at the reload, not before"
    );
    rt.rt().reload().await.unwrap();
    assert_eq!(post_github(&rt, "second-secret", "d-3").await, 200);
    assert_eq!(
        post_github(&rt, "first-secret", "d-4").await,
        401,
        "the old secret verifies no more"
    );

    // A file that is gone fails the reload and changes nothing.
    std::fs::remove_file(&secret).unwrap();
    let err = rt.rt().reload().await.unwrap_err().to_string();
    assert!(
        err.contains("secret_file") && err.contains("github-secret"),
        "{err}"
    );
    assert_eq!(post_github(&rt, "second-secret", "d-5").await, 200);
}

/// A poll source that counts how many of its polls run at once, across every
/// runtime that hosts it: each poll holds for a moment, returns the next number.
#[derive(Clone, Default)]
struct Overlap {
    running: Arc<AtomicU64>,
    most: Arc<AtomicU64>,
}

struct OverlapSource(Overlap);

#[async_trait]
impl InboundConnector for Overlap {
    fn provider(&self) -> &str {
        "overlap"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Poll]
    }

    async fn init(&self, _ctx: SourceContext) -> switchboard::Result<Box<dyn InboundSource>> {
        Ok(Box::new(OverlapSource(self.clone())))
    }
}

#[async_trait]
impl InboundSource for OverlapSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Poll
    }

    async fn poll(&self, cursor: Option<&str>, now_ms: i64) -> switchboard::Result<Polled> {
        let now = self.0.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.most.fetch_max(now, Ordering::SeqCst);
        // Work that takes a while: long enough for another poller to start meanwhile,
        // were it allowed to.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        let n: u64 = cursor.map_or(0, |c| c.parse().unwrap()) + 1;
        if n > 20 {
            return Ok(Polled::new(vec![], None).next_poll_at(now_ms + 3_600_000));
        }
        let event = InboundEvent::new("n", format!("n:{n}"), json!({ "n": n }));
        Ok(Polled::new(vec![event], Some(n.to_string())).next_poll_at(now_ms + 5))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_on_one_store_never_poll_a_source_at_once() {
    let overlap = Overlap::default();
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = format!("sqlite:{}", dir.path().join("rt.db").display());
    let config = "[[sources]]\nid = \"o\"\nprovider = \"overlap\"\npoll_lease_secs = 1\n";
    let (a, b) = (overlap.clone(), overlap.clone());
    let first = Rt::on_with(url.clone(), dir.clone(), config, move |x| {
        x.inbound_connector(a)
    })
    .await;
    let second = Rt::on_with(url, dir, config, move |x| x.inbound_connector(b)).await;
    let events = eventually_some("twenty numbers", || async {
        let e = first.get("/api/v1/events?source=o&limit=100").await;
        let e = e["events"].as_array().unwrap().clone();
        (e.len() >= 20).then_some(e)
    })
    .await;
    let mut ns: Vec<i64> = events
        .iter()
        .map(|e| e["payload"]["n"].as_i64().unwrap())
        .collect();
    ns.sort();
    assert_eq!(ns, (1..=20).collect::<Vec<_>>(), "each number once");
    assert_eq!(
        overlap.most.load(Ordering::SeqCst),
        1,
        "two polls of the source ran at once"
    );
    drop(second);
}
