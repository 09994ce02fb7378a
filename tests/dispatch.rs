//! The dispatcher end to end: bindings in a runtime config, rows enqueued through the
//! admin API, delivered to local connectors (and through a real gateway), on a real
//! SQLite store (and PostgreSQL where it matters).

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use common::eventually;
use dsupport::{Recorder, Rt};
use serde_json::json;

const ONE_LOCAL: &str = r#"
[[triggers]]
id = "audit"
handler = { local = "rec", capability = "record" }
retry = { max_attempts = 3, backoff = "constant", base = "20ms", jitter = 0.0 }
"#;

#[tokio::test]
async fn an_enqueued_row_is_delivered_once_to_its_local_connector_with_its_context() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite(ONE_LOCAL, &[("rec", rec.clone())]).await;
    let id = rt.enqueue("audit", json!({"n": 1})).await;
    eventually("the delivery", || async { rec.count() == 1 }).await;
    let seen = &rec.seen()[0];
    assert_eq!(seen.payload, json!({"n": 1}));
    assert_eq!(seen.ctx("switchboard.event_id"), id);
    assert_eq!(seen.ctx("switchboard.binding"), "audit");
    assert_eq!(seen.ctx("switchboard.attempt"), "1");
    eventually("the row to be gone", || async {
        rt.get("/api/v1/outbox/stats").await["by_binding"]["audit"]["due"]
            .as_u64()
            .unwrap_or(0)
            == 0
            && rt.get("/api/v1/triggers").await["triggers"][0]["counts"]["dispatched"] == 1
    })
    .await;
    rt.stop().await;
    assert_eq!(rec.count(), 1, "delivered exactly once");
}

#[tokio::test(start_paused = true)]
async fn failed_attempts_are_retried_on_the_exponential_schedule_in_virtual_time() {
    let rec = Recorder::failing(3);
    let config = r#"
[[triggers]]
id = "audit"
handler = { local = "rec", capability = "record" }
retry = { max_attempts = 5, backoff = "exponential", base = "10s", cap = "30s", jitter = 0.0 }
"#;
    let mut rt = Rt::sqlite(config, &[("rec", rec.clone())]).await;
    rt.enqueue_direct("audit", json!({"n": 1})).await;
    // Virtual time: the deadline is generous because waiting costs nothing.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(600);
    while rec.count() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "four attempts within 10 virtual minutes; saw {}",
            rec.count()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let seen = rec.seen();
    let attempts: Vec<_> = seen
        .iter()
        .map(|s| s.ctx("switchboard.attempt").to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2", "3", "4"]);
    let gaps: Vec<u64> = seen
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs())
        .collect();
    // 10 s, 20 s, then 40 s capped at 30 s; time is virtual, so the gaps are exact to
    // the second.
    assert_eq!(gaps, [10, 20, 30]);
    let triggers = rt.get_direct_counts("audit").await;
    assert_eq!(
        (triggers.dispatched, triggers.failed, triggers.retried),
        (1, 3, 3)
    );
    rt.stop().await;
}

const DEAD_LETTERS: &str = r#"
[[triggers]]
id = "flaky"
handler = { local = "flaky", capability = "x" }
retry = { max_attempts = 2, backoff = "constant", base = "10ms", jitter = 0.0 }

[[triggers]]
id = "dl-ok"
handler = { local = "dl_ok", capability = "x" }
dead_letter_for = ["flaky"]

[[triggers]]
id = "dl-bad"
handler = { local = "dl_bad", capability = "x" }
dead_letter_for = "*"
retry = { max_attempts = 2, backoff = "constant", base = "10ms", jitter = 0.0 }
"#;

#[tokio::test]
async fn exhausted_rows_are_dead_lettered_fanned_out_and_a_failing_dl_handler_only_annotates() {
    let flaky = Recorder::failing(u32::MAX);
    let dl_ok = Recorder::default();
    let dl_bad = Recorder::failing(u32::MAX);
    let mut rt = Rt::sqlite(
        DEAD_LETTERS,
        &[
            ("flaky", flaky.clone()),
            ("dl_ok", dl_ok.clone()),
            ("dl_bad", dl_bad.clone()),
        ],
    )
    .await;
    let event_id = rt.enqueue("flaky", json!({"order": 7})).await;
    eventually("both dead-letter handlers to have run", || async {
        dl_ok.count() == 1 && dl_bad.count() == 2
    })
    .await;
    assert_eq!(flaky.count(), 2, "max_attempts = 2");
    let report = &dl_ok.seen()[0];
    assert_eq!(report.payload["event"], json!({"order": 7}));
    assert_eq!(report.payload["dead_letter"]["binding_id"], "flaky");
    assert_eq!(report.payload["dead_letter"]["event_id"], event_id.as_str());
    assert_eq!(
        report.payload["dead_letter"]["errors"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let dl_id = report.payload["dead_letter"]["id"].as_i64().unwrap();
    assert_eq!(report.ctx("switchboard.dead_letter_id"), dl_id.to_string());
    // The dead letter's facts are in the context, not only its id.
    let errors = report.payload["dead_letter"]["errors"].as_array().unwrap();
    assert_eq!(report.ctx("switchboard.dead_letter.binding"), "flaky");
    assert_eq!(report.ctx("switchboard.dead_letter.attempts"), "2");
    assert_eq!(report.ctx("switchboard.dead_letter.errors"), "2");
    assert_eq!(
        report.ctx("switchboard.dead_letter.last_error_kind"),
        "handler"
    );
    assert!(
        report
            .ctx("switchboard.dead_letter.last_error")
            .contains("recorder told to fail"),
        "{:?}",
        report.context
    );
    assert_eq!(
        report.ctx("switchboard.dead_letter.first_attempt_ms"),
        errors[0]["at_ms"].to_string()
    );
    assert_eq!(
        report.ctx("switchboard.dead_letter.last_attempt_ms"),
        errors[1]["at_ms"].to_string()
    );
    // dl-bad's failures annotate the dead letter; they never make another one.
    eventually("the annotation", || async {
        let d = rt.get(&format!("/api/v1/dead-letters/{dl_id}")).await;
        d["annotations"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    let d = rt.get(&format!("/api/v1/dead-letters/{dl_id}")).await;
    let note = d["annotations"][0].as_str().unwrap();
    assert!(note.starts_with("dl-bad: handler:"), "{note}");
    let list = rt.get("/api/v1/dead-letters").await;
    assert_eq!(list["dead_letters"].as_array().unwrap().len(), 1, "{list}");
    let stats = rt.get("/api/v1/outbox/stats").await;
    assert_eq!(
        stats["due"].as_u64().unwrap()
            + stats["scheduled"].as_u64().unwrap()
            + stats["leased"].as_u64().unwrap(),
        0,
        "{stats}"
    );
    rt.stop().await;
}

#[tokio::test]
async fn a_replayed_dead_letter_is_delivered_again_from_attempt_one() {
    let flaky = Recorder::failing(2);
    let config = r#"
[[triggers]]
id = "flaky"
handler = { local = "flaky", capability = "x" }
retry = { max_attempts = 2, backoff = "constant", base = "10ms", jitter = 0.0 }
"#;
    let mut rt = Rt::sqlite(config, &[("flaky", flaky.clone())]).await;
    rt.enqueue("flaky", json!({"n": 1})).await;
    eventually("the dead letter", || async {
        rt.get("/api/v1/dead-letters").await["dead_letters"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    })
    .await;
    let id = rt.get("/api/v1/dead-letters").await["dead_letters"][0]["id"]
        .as_i64()
        .unwrap();
    let (status, v) = rt
        .post(&format!("/api/v1/dead-letters/{id}/replay"), json!(null))
        .await;
    assert_eq!(status, 200, "{v}");
    eventually("the replayed delivery", || async { flaky.count() == 3 }).await;
    assert_eq!(flaky.seen()[2].ctx("switchboard.attempt"), "1");
    let d = rt.get(&format!("/api/v1/dead-letters/{id}")).await;
    assert_eq!(d["replays"], 1);
    let (status, v) = rt
        .post("/api/v1/dead-letters/424242/replay", json!(null))
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    rt.stop().await;
}

/// A connector that records `(key, seq)` arrivals and holds the `slow` key until told.
#[derive(Clone, Default)]
struct Ordered {
    arrivals: std::sync::Arc<std::sync::Mutex<Vec<(String, u64)>>>,
    release_slow: std::sync::Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl switchboard::BaseConnector for Ordered {
    fn connector_type(&self) -> &str {
        "ordered"
    }
    async fn execute(
        &self,
        payload: switchboard::Payload,
        _: Option<&str>,
    ) -> switchboard::Result<switchboard::Payload> {
        let v = payload.as_json().cloned().unwrap_or_default();
        let key = v["key"].as_str().unwrap_or_default().to_owned();
        self.arrivals
            .lock()
            .unwrap()
            .push((key.clone(), v["seq"].as_u64().unwrap_or_default()));
        if key == "slow" {
            self.release_slow.notified().await;
        }
        Ok(switchboard::Payload::Json(json!({})))
    }
}

#[tokio::test]
async fn one_ordering_key_runs_in_enqueue_order_and_a_slow_key_holds_back_no_other() {
    let ordered = Ordered::default();
    let config = r#"
[[triggers]]
id = "ordered"
handler = { local = "ordered", capability = "x" }
ordering_key = 'payload.key'
max_concurrent = 8
"#;
    let mut rt = Rt::sqlite_with(config, |b| b.local_connector("ordered", ordered.clone())).await;
    let runtime = rt.rt();
    let ops = runtime.ops().clone();
    let enqueue = |key: &str, seq: u64| {
        let ops = ops.clone();
        let payload = serde_json::to_vec(&json!({"key": key, "seq": seq})).unwrap();
        async move {
            ops.enqueue(switchboard::EnqueueRequest::to_binding("ordered", payload))
                .await
                .unwrap();
        }
    };
    enqueue("slow", 0).await;
    enqueue("slow", 1).await;
    for seq in 0..20 {
        for key in ["a", "b", "c"] {
            enqueue(key, seq).await;
        }
    }
    let arrivals = ordered.arrivals.clone();
    let count = |key: &'static str| {
        let arrivals = arrivals.clone();
        move || {
            let n = arrivals
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k == key)
                .count();
            async move { n }
        }
    };
    let (a, b, c) = (count("a"), count("b"), count("c"));
    eventually(
        "every fast key delivered while the slow key is held",
        || {
            let (a, b, c) = (a(), b(), c());
            async move { a.await == 20 && b.await == 20 && c.await == 20 }
        },
    )
    .await;
    let slow = count("slow");
    assert_eq!(
        slow().await,
        1,
        "the slow key's second row waits for its first"
    );
    ordered.release_slow.notify_one();
    eventually("the slow key's second row", || {
        let s = slow();
        let release = ordered.release_slow.clone();
        async move {
            release.notify_one();
            s.await == 2
        }
    })
    .await;
    let arrivals = ordered.arrivals.lock().unwrap().clone();
    for key in ["a", "b", "c", "slow"] {
        let seqs: Vec<u64> = arrivals
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{key}: {seqs:?}");
    }
    rt.stop().await;
}

const QUEUES: &str = r#"
[[queues]]
name = "work"
visibility_timeout = "30s"
max_receives = 2

[[triggers]]
id = "to-work"
handler = { queue = "work" }
"#;

#[tokio::test]
async fn queue_messages_come_back_after_their_visibility_and_die_after_max_receives() {
    let mut rt = Rt::sqlite(QUEUES, &[]).await;
    let event_id = rt.enqueue("to-work", json!({"job": 1})).await;
    let recv = |vis_ms: u64| {
        let path = format!("/api/v1/queues/work/receive?max=5&visibility_ms={vis_ms}");
        let rt = &rt;
        async move { rt.post(&path, json!(null)).await }
    };
    let (status, first) = recv(50).await;
    assert_eq!(status, 200, "{first}");
    let msg = &first["messages"][0];
    assert_eq!(msg["event_id"], event_id.as_str());
    assert_eq!(msg["payload"], r#"{"job":1}"#);
    assert_eq!(msg["receives"], 1);
    // The visibility (50 ms) runs out: the message comes back, received twice now.
    let again = std::sync::Mutex::new(serde_json::Value::Null);
    eventually("the message to come back", || async {
        let got = recv(60_000).await.1;
        let back = got["messages"].as_array().is_some_and(|m| m.len() == 1);
        *again.lock().unwrap() = got;
        back
    })
    .await;
    let again = again.into_inner().unwrap();
    assert_eq!(again["messages"][0]["receives"], 2);
    // Received for a minute this time: invisible meanwhile, however slow the machine.
    let (_, hidden) = recv(50).await;
    assert_eq!(
        hidden["messages"].as_array().unwrap().len(),
        0,
        "invisible while received"
    );
    // The first receipt no longer holds it.
    let stale = format!(
        "/api/v1/queues/work/messages/{}/ack?receipt={}",
        msg["id"], msg["receipt"]
    );
    assert_eq!(rt.post(&stale, json!(null)).await.1["acked"], false);
    // A nack with no delay makes it visible at once; the next receive is its third,
    // past max_receives = 2, so it is dead-lettered instead of handed out.
    let m = &again["messages"][0];
    let nack = format!(
        "/api/v1/queues/work/messages/{}/nack?receipt={}&delay_ms=0",
        m["id"], m["receipt"]
    );
    assert_eq!(rt.post(&nack, json!(null)).await.1["nacked"], true);
    let (_, third) = recv(50).await;
    assert_eq!(third["messages"].as_array().unwrap().len(), 0, "{third}");
    assert_eq!(third["dead_lettered"], 1);
    let metrics = rt.metrics().await;
    assert!(
        metrics.contains(r#"switchboard_dispatch_queue_dead_lettered_total{queue="work"} 1"#),
        "{metrics}"
    );
    let dl = rt.get("/api/v1/dead-letters").await;
    assert_eq!(dl["dead_letters"][0]["queue"], "work", "{dl}");
    // An ack of a live receipt deletes.
    rt.enqueue("to-work", json!({"job": 2})).await;
    let (_, got) = recv(60_000).await;
    let m = &got["messages"][0];
    let ack = format!(
        "/api/v1/queues/work/messages/{}/ack?receipt={}",
        m["id"], m["receipt"]
    );
    assert_eq!(rt.post(&ack, json!(null)).await.1["acked"], true);
    let (status, v) = rt.post("/api/v1/queues/nope/receive", json!(null)).await;
    assert_eq!((status, v["error"].as_str()), (404, Some("not_found")));
    rt.stop().await;
}

/// Answers by what the payload asks: `ok`, `fail`, `busy`, `sleep_ms` then ok, or
/// `hold`: ok once the test releases it.
#[derive(Clone, Default)]
struct Scripted {
    /// Attempts that have started holding.
    holding: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    release: std::sync::Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl switchboard::BaseConnector for Scripted {
    fn connector_type(&self) -> &str {
        "scripted"
    }
    async fn execute(
        &self,
        payload: switchboard::Payload,
        _: Option<&str>,
    ) -> switchboard::Result<switchboard::Payload> {
        let v = payload.as_json().cloned().unwrap_or_default();
        if let Some(ms) = v["sleep_ms"].as_u64() {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        if v["do"] == "hold" {
            self.holding
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.release.notified().await;
        }
        match v["do"].as_str() {
            Some("fail") => Err(switchboard::Error::Connector("told to fail".into())),
            Some("busy") => Err(switchboard::Error::Overloaded("told to be busy".into())),
            _ => Ok(switchboard::Payload::Json(json!({"answer": v}))),
        }
    }
}

const SYNC: &str = r#"
[[queues]]
name = "work"

[[triggers]]
id = "sync"
handler = { local = "scripted", capability = "x" }
timeout = "300ms"
max_concurrent = 1

[[triggers]]
id = "to-work"
handler = { queue = "work" }
"#;

#[tokio::test]
async fn a_sync_invoke_answers_with_the_result_or_a_status_naming_the_failure() {
    let scripted = Scripted::default();
    let mut rt = Rt::sqlite_with(SYNC, |b| b.local_connector("scripted", scripted.clone())).await;
    let runtime = rt.rt();
    let base = format!("http://{}", runtime.local_addr());
    let client = reqwest::Client::new();
    let call = |binding: &str, body: serde_json::Value| {
        let req = client
            .post(format!("{base}/api/v1/triggers/{binding}/invoke?wait=true"))
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            (
                status,
                r.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    };
    let (status, v) = call("sync", json!({"do": "ok", "n": 1})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answer"]["n"], 1);
    let (status, v) = call("sync", json!({"do": "fail"})).await;
    assert_eq!((status, v["error"].as_str()), (502, Some("handler")), "{v}");
    let (status, v) = call("sync", json!({"do": "busy"})).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (503, Some("overloaded")),
        "{v}"
    );
    let (status, v) = call("sync", json!({"sleep_ms": 5_000})).await;
    assert_eq!((status, v["error"].as_str()), (504, Some("timeout")), "{v}");
    let (status, v) = call("to-work", json!({})).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (422, Some("validation")),
        "{v}"
    );
    let (status, _) = call("nope", json!({})).await;
    assert_eq!(status, 404);
    // max_concurrent = 1: while one attempt runs, another is refused, not queued.
    let held = tokio::spawn(call("sync", json!({"do": "hold"})));
    let holding = scripted.holding.clone();
    eventually("the held attempt to run", || async {
        holding.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let ops = runtime.ops().clone();
    let second = ops
        .invoke_now("sync", b"{}".to_vec(), 0, Default::default())
        .await;
    assert!(
        matches!(
            second,
            Err(switchboard::__private::runtime::ops::OpError::Busy(_))
        ),
        "{second:?}"
    );
    scripted.release.notify_one();
    assert_eq!(held.await.unwrap().0, 200);
    // The caller hangs up: the attempt still ends, and is recorded as abandoned.
    let impatient = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(50))
        .build()
        .unwrap();
    let gone = impatient
        .post(format!("{base}/api/v1/triggers/sync/invoke?wait=true"))
        .json(&json!({"sleep_ms": 200}))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up");
    let store = runtime.store().clone();
    eventually("the abandoned run to be recorded", || async {
        let runs = store.backend().runs(Some("sync"), 20).await.unwrap();
        runs.iter().any(|r| r.abandoned && r.status == "ok")
    })
    .await;
    let metrics = rt.metrics().await;
    assert!(
        metrics.contains(r#"switchboard_dispatch_sync_abandoned_total{binding="sync"} 1"#),
        "{metrics}"
    );
    let runs = store.backend().runs(Some("sync"), 20).await.unwrap();
    let statuses: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    for s in ["ok", "handler", "overloaded", "timeout"] {
        assert!(statuses.contains(&s), "{statuses:?}");
    }
    rt.stop().await;
}

const WEBHOOKS: &str = r#"
[[sources]]
id = "gh"
provider = "github"
secret_env = "GH_SECRET"

[[triggers]]
id = "opened"
sources = ["gh"]
events = ["issues.*"]
filter = 'payload.action == "opened"'
handler = { local = "opened", capability = "x" }

[[triggers]]
id = "closed"
events = ["issues.closed"]
handler = { local = "closed", capability = "x" }

[[triggers]]
id = "broken"
filter = 'payload.missing.deeper == 1'
handler = { local = "broken", capability = "x" }
"#;

#[tokio::test]
async fn signed_webhooks_reach_matching_bindings_once_and_a_failing_filter_skips_only_itself() {
    let (opened, closed, broken) = (
        Recorder::default(),
        Recorder::default(),
        Recorder::default(),
    );
    let mut rt = Rt::sqlite(
        WEBHOOKS,
        &[
            ("opened", opened.clone()),
            ("closed", closed.clone()),
            ("broken", broken.clone()),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let post = |d: support::Delivery| {
        let mut req = client
            .post(format!("{}/hooks/gh", rt.base))
            .body(d.body.clone());
        for (k, v) in &d.headers {
            req = req.header(k, v);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let secret = dsupport::env("GH_SECRET").unwrap();
    for id in ["d1", "d2", "d3"] {
        assert_eq!(
            post(support::Kind::Github.sign(&secret, id, support::now_s())).await,
            200
        );
    }
    // A redelivery of d1: acknowledged as a duplicate, enqueues nothing.
    assert_eq!(
        post(support::Kind::Github.sign(&secret, "d1", support::now_s())).await,
        200
    );
    eventually("the three opened issues delivered", || async {
        opened.count() == 3
    })
    .await;
    let stats_quiet = || async {
        let s = rt.get("/api/v1/outbox/stats").await;
        s["due"] == 0 && s["leased"] == 0 && s["scheduled"] == 0
    };
    eventually("the outbox to drain", stats_quiet).await;
    assert_eq!(opened.count(), 3, "the duplicate enqueued nothing");
    assert_eq!((closed.count(), broken.count()), (0, 0));
    let deliveries: Vec<String> = opened
        .seen()
        .iter()
        .map(|s| s.payload["delivery"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted = deliveries.clone();
    sorted.sort();
    assert_eq!(sorted, ["d1", "d2", "d3"]);
    let metrics = rt.metrics().await;
    assert!(
        metrics.contains("switchboard_ingress_trigger_filter_errors_total{binding=\"broken\"} 4"),
        "every request's evaluation is counted: {metrics}"
    );
    assert!(
        metrics.contains("switchboard_dispatch_dispatched_total{binding=\"opened\"} 3"),
        "{metrics}"
    );
    assert_eq!(metrics.matches("# EOF").count(), 1, "one exposition");
    rt.stop().await;
}

/// With `sqlite_body_compression = "zstd"` the event is stored as a zstd frame, and
/// the dispatcher's claim hands the handler the body that was received.
#[tokio::test]
async fn a_compressed_body_reaches_its_handler_as_received() {
    let (opened, closed, broken) = (
        Recorder::default(),
        Recorder::default(),
        Recorder::default(),
    );
    let config = format!("sqlite_body_compression = \"zstd\"\n{WEBHOOKS}");
    let mut rt = Rt::sqlite(
        &config,
        &[
            ("opened", opened.clone()),
            ("closed", closed),
            ("broken", broken),
        ],
    )
    .await;
    let labels: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"id":{i},"name":"label-{i}"}}"#))
        .collect();
    let body = format!(
        r#"{{"action":"opened","issue":{{"number":1,"labels":[{}]}},"delivery":"z1"}}"#,
        labels.join(",")
    );
    let secret = dsupport::env("GH_SECRET").unwrap();
    let sig = format!(
        "sha256={}",
        support::hex(&support::mac(secret.as_bytes(), &[body.as_bytes()]))
    );
    let status = reqwest::Client::new()
        .post(format!("{}/hooks/gh", rt.base))
        .header("X-Hub-Signature-256", sig)
        .header("X-GitHub-Event", "issues")
        .header("X-GitHub-Delivery", "z1")
        .body(body.clone())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    eventually("the opened issue delivered", || async {
        opened.count() == 1
    })
    .await;
    let want: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(opened.seen()[0].payload, want);
    let codec: i64 = rusqlite::Connection::open(rt.dir.path().join("rt.db"))
        .unwrap()
        .query_row("SELECT body_codec FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(codec, 1, "stored compressed");
    rt.stop().await;
}

// Virtual time: the lease and its keeper run on the dispatcher's tokio clock, so four
// lease lengths pass in no time and a slow machine cannot let a lease lapse.
#[tokio::test(start_paused = true)]
async fn a_handler_longer_than_its_lease_keeps_its_row_and_runs_once() {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let config = r#"
[dispatcher]
lease = "300ms"
poll_interval = "50ms"

[[triggers]]
id = "slow"
handler = { local = "rec", capability = "x" }
"#;
    let mut rt = Rt::sqlite(config, &[("rec", rec.clone())]).await;
    rt.enqueue_direct("slow", json!({})).await;
    let ops = rt.rt().ops().clone();
    let in_flight = || {
        serde_json::to_value(ops.triggers()).unwrap()["triggers"][0]["counts"]["in_flight"].clone()
    };
    eventually("the attempt to start", || async { in_flight() == 1 }).await;
    // Hold the handler for four lease lengths; the keeper extends the lease each third
    // of one. A lease that lapsed would be claimed again (the binding has permits to
    // spare) and start a second attempt beside the held one.
    for _ in 0..12 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(in_flight(), 1, "the held row was never claimed again");
    }
    assert_eq!(rec.count(), 0, "still the first attempt, held");
    gate.add_permits(1);
    eventually("the attempt to finish", || async {
        serde_json::to_value(ops.triggers()).unwrap()["triggers"][0]["counts"]["dispatched"] == 1
    })
    .await;
    rt.stop().await;
    assert_eq!(rec.count(), 1, "one execution");
    assert_eq!(rec.seen()[0].ctx("switchboard.attempt"), "1");
}

#[tokio::test]
async fn shutdown_waits_its_grace_then_releases_held_rows_for_the_next_start() {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let stuck = Recorder::gated(gate.clone());
    let config = r#"
[dispatcher]
shutdown_grace = "200ms"

[[triggers]]
id = "work"
handler = { local = "rec", capability = "x" }
max_concurrent = 1
"#;
    let mut rt = Rt::sqlite(config, &[("rec", stuck.clone())]).await;
    for n in 0..4 {
        rt.enqueue("work", json!({"n": n})).await;
    }
    let ops = rt.rt().ops().clone();
    eventually("one attempt to hold the binding's only permit", || async {
        serde_json::to_value(ops.triggers()).unwrap()["triggers"][0]["counts"]["in_flight"] == 1
    })
    .await;
    // The rows that got no permit are released after the attempt starts; wait for that.
    let store = rt.rt().store().clone();
    eventually("rows that got no permit not to be held", || async {
        let stats = store
            .backend()
            .stats(switchboard::__private::now_ms())
            .await
            .unwrap();
        (stats.total.leased, stats.total.due) == (1, 3)
    })
    .await;
    let (dir, url) = (rt.dir.clone(), rt.store_url.clone());
    rt.stop().await;
    let stats = store
        .backend()
        .stats(switchboard::__private::now_ms())
        .await
        .unwrap();
    assert_eq!(
        (stats.total.leased, stats.total.due),
        (0, 4),
        "the stuck attempt's row was released: {stats:?}"
    );
    let fresh = Recorder::default();
    let mut again = Rt::on(url, dir, config, &[("rec", fresh.clone())]).await;
    eventually("all four delivered after the restart", || async {
        fresh.count() == 4
    })
    .await;
    assert!(
        fresh
            .seen()
            .iter()
            .all(|s| s.ctx("switchboard.attempt") == "1"),
        "a released attempt does not count"
    );
    again.stop().await;
}
