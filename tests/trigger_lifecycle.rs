//! Bindings that change while events flow, through the public API the way an operator
//! uses it: reloads of the configuration file (`POST /api/v1/triggers/reload`),
//! run-time bindings (`POST/PUT/DELETE /api/v1/triggers`), pause/resume/drain, the
//! lifecycle log, restarts on the same store. Real runtime, real SQLite file, real
//! HTTP; handlers are local recording connectors that say which version ran them
//! (`switchboard.binding_version` in their context).
#![cfg(feature = "runtime")]

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "outbox/fixture.rs"]
mod fixture;
#[path = "ingest/support.rs"]
mod support;

use std::sync::Arc;

use common::eventually;
use dsupport::{Recorder, Rt};
use serde_json::{json, Value};

/// v1 of `audit`: one attempt at a time.
const V1: &str = r#"
[[triggers]]
id = "audit"
handler = { local = "rec", capability = "record" }
max_concurrent = 1
"#;

/// v2 of `audit`: the same handler, a different definition (two at a time).
const V2: &str = r#"
[[triggers]]
id = "audit"
handler = { local = "rec", capability = "record" }
max_concurrent = 2
"#;

/// The numbers of `audit`'s versions in memory.
async fn in_memory_versions(rt: &Rt) -> Vec<u64> {
    rt.trigger("audit").await["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect()
}

async fn in_flight(rt: &Rt, id: &str) -> u64 {
    rt.trigger(id).await["counts"]["in_flight"]
        .as_u64()
        .unwrap_or(0)
}

async fn send(rt: &Rt, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", rt.base));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn change_lines(v: &Value) -> Vec<String> {
    dsupport::lifecycle_lines(&v["changes"])
}

/// Rewrites the file with `audit` at `max_concurrent = n` (a new definition), reloads,
/// and waits until the version it replaced has terminated.
async fn reload_to(rt: &Rt, n: u32) {
    rt.write_config(&format!(
        "[[triggers]]\nid = \"audit\"\nhandler = {{ local = \"rec\", capability = \"record\" }}\nmax_concurrent = {n}\n"
    ));
    let (status, v) = rt.post("/api/v1/triggers/reload", json!({})).await;
    assert_eq!(status, 200, "{v}");
    let old = format!("audit@v{} terminated", n - 1);
    eventually(&old, || async { rt.history("audit").await.contains(&old) }).await;
}

#[tokio::test]
async fn a_reload_lets_in_flight_and_due_rows_finish_on_the_old_version_and_new_events_take_the_new_one(
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    assert_eq!(rt.trigger("audit").await["active"], 1);
    // Row 1 starts and waits in the handler; row 2 is due behind v1's one permit.
    rt.enqueue("audit", json!({"n": 1})).await;
    rt.enqueue("audit", json!({"n": 2})).await;
    eventually("row 1 in flight", || async {
        in_flight(&rt, "audit").await == 1
    })
    .await;

    rt.write_config(V2);
    let (status, v) = rt.post("/api/v1/triggers/reload", json!({})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        change_lines(&v),
        [
            "audit@v1 draining",
            "audit@v2 registering",
            "audit@v2 active"
        ]
    );
    let t = rt.trigger("audit").await;
    assert_eq!(t["active"], 2, "{t}");
    assert_eq!(t["definition"]["max_concurrent"], 2, "{t}");
    // A new event goes to v2.
    rt.enqueue("audit", json!({"n": 3})).await;

    gate.add_permits(10);
    eventually("three deliveries", || async { rec.count() == 3 }).await;
    assert_eq!(
        rec.versions_by_payload(),
        [
            (1, "audit@v1".to_owned()),
            (2, "audit@v1".to_owned()),
            (3, "audit@v2".to_owned())
        ]
    );
    eventually("v1 to terminate", || async {
        rt.history("audit").await.last().map(String::as_str) == Some("audit@v1 terminated")
    })
    .await;
    assert_eq!(
        rt.history("audit").await,
        [
            "audit@v1 registering",
            "audit@v1 active",
            "audit@v1 draining",
            "audit@v2 registering",
            "audit@v2 active",
            "audit@v1 terminated"
        ]
    );
    let h = rt.get("/api/v1/triggers/audit/history").await;
    let entry = &h["history"][2];
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("replaced by audit@v2"),
        "{h}"
    );
    assert!(entry["process"].as_str().unwrap().contains(':'), "{h}");
    rt.stop().await;
}

#[tokio::test]
async fn a_reload_without_changes_writes_nothing_and_an_invalid_one_changes_nothing() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    let (status, v) = rt.post("/api/v1/triggers/reload", json!({})).await;
    assert_eq!((status, change_lines(&v).len()), (200, 0), "{v}");

    let before = rt.get("/api/v1/triggers").await;
    for (bad, says) in [
        (
            "[[triggers]]\nid = \"audit\"\nhandler = { local = \"rec\" }\n",
            "trigger \"audit\": handler: capability is required",
        ),
        (
            "[[triggers]]\nid = \"audit\"\nhandler = { local = \"nobody\", capability = \"x\" }\n",
            "local = \"nobody\"",
        ),
        (
            "[[triggers]]\nid = \"audit\"\nhandler = {",
            "TOML parse error at line 5",
        ),
        (
            "[[triggers]]\nid = \"audit\"\nhandler = { local = \"rec\", capability = \"x\" }\nfilter = 'payload.'\n",
            "trigger \"audit\"",
        ),
    ] {
        rt.write_config(bad);
        let (status, v) = rt.post("/api/v1/triggers/reload", json!({})).await;
        assert_eq!(status, 422, "{bad}: {v}");
        assert_eq!(v["error"], "validation", "{v}");
        let message = v["message"].as_str().unwrap();
        assert!(message.contains(says), "{bad}: {message}");
    }
    assert_eq!(rt.get("/api/v1/triggers").await, before);
    assert_eq!(
        rt.history("audit").await,
        ["audit@v1 registering", "audit@v1 active"]
    );
    rt.enqueue("audit", json!({"n": 1})).await;
    eventually("the delivery under v1", || async { rec.count() == 1 }).await;
    assert_eq!(rec.seen()[0].ctx("switchboard.binding_version"), "audit@v1");
    rt.stop().await;
}

#[tokio::test]
async fn a_restart_keeps_version_numbers_gives_a_changed_binding_the_next_and_strands_nothing() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let two = format!(
        "{V1}\n[[triggers]]\nid = \"gone\"\nhandler = {{ local = \"rec\", capability = \"x\" }}\n"
    );
    let mut rt = Rt::sqlite_file(&two, &[("rec", rec.clone())]).await;
    let (dir, url) = (rt.dir.clone(), rt.store_url.clone());
    rt.stop().await;

    // Same configuration: the same numbers, nothing written.
    let mut rt = Rt::on_file(url.clone(), dir.clone(), &two, &[("rec", rec.clone())]).await;
    assert_eq!(rt.trigger("audit").await["active"], 1);
    assert_eq!(rt.history("audit").await.len(), 2);
    // Rows of `gone` wait (the handler is gated) while the runtime restarts without it.
    rt.enqueue("gone", json!({"n": 7})).await;
    rt.enqueue("gone", json!({"n": 8})).await;
    rt.stop().await;

    // A changed `audit`, no `gone`: audit gets v2; gone drains its rows under v1.
    let mut rt = Rt::on_file(url.clone(), dir.clone(), V2, &[("rec", rec.clone())]).await;
    assert_eq!(rt.trigger("audit").await["active"], 2);
    let gone = rt.trigger("gone").await;
    assert_eq!(gone["active"], Value::Null, "{gone}");
    assert_eq!(gone["state"], "draining", "{gone}");
    gate.add_permits(10);
    eventually("gone's rows to be delivered", || async { rec.count() == 2 }).await;
    assert!(rec
        .seen()
        .iter()
        .all(|s| s.ctx("switchboard.binding_version") == "gone@v1"));
    eventually("gone@v1 to terminate", || async {
        rt.history("gone").await.last().map(String::as_str) == Some("gone@v1 terminated")
    })
    .await;
    let h = rt.get("/api/v1/triggers/gone/history").await;
    assert_eq!(
        h["history"][2]["reason"], "removed from the configuration",
        "{h}"
    );
    assert_eq!(
        rt.get("/api/v1/dead-letters").await["dead_letters"],
        json!([])
    );
    rt.stop().await;
}

#[tokio::test]
async fn rows_of_a_version_nobody_recorded_are_dead_lettered_with_a_reason_not_left_behind() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = format!("sqlite:{}", dir.path().join("rt.db").display());
    {
        // A row enqueued under a fingerprint no version record has (written before this
        // store recorded versions, or by hand).
        use switchboard::__private::outbox::model::Enqueue;
        use switchboard::__private::store::{open_backend, Store, StoreOptions};
        let backend = open_backend(&url, &StoreOptions::default()).await.unwrap();
        let store = Store::new(backend);
        let event = fixture::event("ghost-event", switchboard::__private::now_ms());
        store
            .append_enqueue(
                event,
                i64::MAX,
                vec![Enqueue::dispatch("ghost", "feedface")],
            )
            .await
            .unwrap();
    }
    let rec = Recorder::default();
    let mut rt = Rt::on_file(url, dir, V1, &[("rec", rec.clone())]).await;
    eventually("the stranded row to be dead-lettered", || async {
        rt.get("/api/v1/dead-letters").await["dead_letters"]
            .as_array()
            .is_some_and(|l| l.len() == 1)
    })
    .await;
    let dl = &rt.get("/api/v1/dead-letters").await["dead_letters"][0];
    assert_eq!(dl["binding_id"], "ghost");
    let error = &dl["errors"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(error["kind"], "stranded", "{dl}");
    assert!(error["message"].as_str().unwrap().contains("ghost"), "{dl}");
    let stats = rt.get("/api/v1/outbox/stats").await;
    assert_eq!(stats["due"], 0, "{stats}");
    assert_eq!(rec.count(), 0);
    rt.stop().await;
}

#[tokio::test]
async fn after_five_changes_only_the_newest_two_terminated_versions_stay_in_memory() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    for n in 2..=6 {
        reload_to(&rt, n).await;
    }
    let t = rt.trigger("audit").await;
    let kept: Vec<(u64, String)> = t["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            (4, "terminated".to_owned()),
            (5, "terminated".to_owned()),
            (6, "active".to_owned())
        ]
    );
    // The log keeps all of them.
    let log = rt.history("audit").await;
    assert_eq!(log.iter().filter(|l| l.ends_with("terminated")).count(), 5);
    rt.stop().await;
}

const DYNAMIC: &str = r#"
[[triggers]]
id = "manifest"
handler = { local = "rec", capability = "record" }
"#;

#[tokio::test]
async fn run_time_bindings_are_registered_refused_when_duplicate_replaced_persisted_and_deregistered(
) {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(DYNAMIC, &[("rec", rec.clone())]).await;
    let table = json!({"id": "dyn", "handler": {"local": "rec", "capability": "record"}});
    let (status, v) = rt.post("/api/v1/triggers", json!({"trigger": table})).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(change_lines(&v), ["dyn@v1 registering", "dyn@v1 active"]);
    let (status, v) = rt.post("/api/v1/triggers", json!({"trigger": table})).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    // The configuration owns a manifest binding.
    let (status, v) = send(
        &rt,
        reqwest::Method::PUT,
        "/api/v1/triggers/manifest",
        Some(json!({"handler": {"local": "rec", "capability": "other"}})),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("configuration file"),
        "{v}"
    );
    // An invalid table names the option.
    let (status, v) = rt
        .post(
            "/api/v1/triggers",
            json!({"trigger": {"id": "bad", "handler": {"local": "rec", "capability": "x"}, "sources": ["nope"]}}),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert!(v["message"].as_str().unwrap().contains("sources"), "{v}");

    rt.enqueue("dyn", json!({"n": 1})).await;
    eventually("dyn@v1 delivery", || async { rec.count() == 1 }).await;
    let (status, v) = send(
        &rt,
        reqwest::Method::PUT,
        "/api/v1/triggers/dyn",
        Some(json!({"handler": {"local": "rec", "capability": "record"}, "max_concurrent": 3})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        change_lines(&v),
        ["dyn@v1 draining", "dyn@v2 registering", "dyn@v2 active"]
    );
    let (dir, url) = (rt.dir.clone(), rt.store_url.clone());
    rt.stop().await;

    // It survives a restart, as a dynamic binding at v2.
    let mut rt = Rt::on_file(url, dir, DYNAMIC, &[("rec", rec.clone())]).await;
    let t = rt.trigger("dyn").await;
    assert_eq!(
        (t["origin"].as_str(), t["active"].as_u64()),
        (Some("dynamic"), Some(2)),
        "{t}"
    );
    rt.enqueue("dyn", json!({"n": 2})).await;
    eventually("dyn@v2 delivery", || async { rec.count() == 2 }).await;
    assert_eq!(rec.seen()[1].ctx("switchboard.binding_version"), "dyn@v2");

    let (status, v) = send(&rt, reqwest::Method::DELETE, "/api/v1/triggers/dyn", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(change_lines(&v), ["dyn@v2 draining"]);
    let (status, v) = rt.post("/api/v1/triggers/dyn/invoke", json!({})).await;
    assert_eq!(
        status, 404,
        "a deregistered binding takes no new events: {v}"
    );
    let (status, v) = send(
        &rt,
        reqwest::Method::DELETE,
        "/api/v1/triggers/manifest",
        None,
    )
    .await;
    assert_eq!(status, 422, "{v}");
    let (status, _) = send(
        &rt,
        reqwest::Method::GET,
        "/api/v1/triggers/nobody/history",
        None,
    )
    .await;
    assert_eq!(status, 404);
    rt.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_binding_keeps_its_rows_and_starts_none_until_resumed() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    let ops = rt.rt().ops().clone();
    ops.set_paused("audit", true).await.unwrap();
    let triggers = serde_json::to_value(rt.rt().ops().triggers()).unwrap();
    assert_eq!(triggers["triggers"][0]["state"], "paused");
    for n in 0..3 {
        rt.rt()
            .enqueue(switchboard::EnqueueRequest::to_binding(
                "audit",
                json!({"n": n}).to_string(),
            ))
            .await
            .unwrap();
    }
    // Ten virtual seconds: ten polls and many wake-ups, and nothing starts.
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    assert_eq!(rec.count(), 0);
    let stats = ops.stats().await.unwrap().stats;
    assert_eq!(stats.by_binding["audit"].due, 3, "{stats:?}");

    ops.set_paused("audit", false).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while rec.count() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "resumed rows run");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let log = serde_json::to_value(ops.history("audit", None, None).await.unwrap()).unwrap();
    let events: Vec<&str> = log["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["registering", "active", "paused", "resumed"]);
    rt.stop().await;
}

#[tokio::test]
async fn a_drained_binding_takes_no_new_events_finishes_its_rows_and_terminates() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    rt.enqueue("audit", json!({"n": 1})).await;
    let (status, v) = rt.post("/api/v1/triggers/audit/drain", json!({})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(change_lines(&v), ["audit@v1 draining"]);
    let (status, _) = rt
        .post("/api/v1/triggers/audit/invoke", json!({"n": 2}))
        .await;
    assert_eq!(status, 404);
    gate.add_permits(1);
    eventually("audit@v1 terminated", || async {
        rt.history("audit").await.last().map(String::as_str) == Some("audit@v1 terminated")
    })
    .await;
    assert_eq!(rec.count(), 1);
    rt.stop().await;
}

const HOOKED: &str = r#"
[[sources]]
id = "hook"
provider = "generic_hmac"
secret_env = "GENERIC_SECRET"
header = "X-Signature"
prefix = "sha256="

[[triggers]]
id = "opened"
sources = ["hook"]
filter = 'payload.action == "opened"'
handler = { local = "rec", capability = "record" }
max_concurrent = 1
"#;

async fn post_hook(rt: &Rt, body: Value) -> u16 {
    use hmac::{Hmac, Mac};
    let body = body.to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"generic-secret").unwrap();
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let sig = format!("sha256={hex}");
    reqwest::Client::new()
        .post(format!("{}/hooks/hook", rt.base))
        .header("X-Signature", sig)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn each_binding_reports_version_state_counts_and_outbox_depth_in_the_api_and_metrics() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let mut rt = Rt::sqlite_file(HOOKED, &[("rec", rec.clone())]).await;
    for (n, action) in [(1, "opened"), (2, "closed"), (3, "opened")] {
        let status = post_hook(&rt, json!({"action": action, "n": n})).await;
        assert_eq!(status, 200);
    }
    eventually("one row in flight, one due", || async {
        in_flight(&rt, "opened").await == 1
    })
    .await;
    let t = rt.trigger("opened").await;
    assert_eq!(t["counts"]["received"], 3, "{t}");
    assert_eq!(t["counts"]["matched"], 2, "{t}");
    assert!(t["counts"]["last_received_ms"].as_i64().unwrap() > 0, "{t}");
    let metrics = reqwest::get(format!("{}/metrics", rt.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "switchboard_ingress_trigger_received_total{binding=\"opened\"} 3",
        "switchboard_ingress_trigger_matched_total{binding=\"opened\"} 2",
        "switchboard_trigger_version{binding=\"opened\"} 1",
        "switchboard_trigger_state{binding=\"opened\",state=\"active\"} 1",
        "switchboard_trigger_state{binding=\"opened\",state=\"paused\"} 0",
        "switchboard_outbox_depth{binding=\"opened\",state=\"leased\"} 1",
        "switchboard_outbox_depth{binding=\"opened\",state=\"due\"} 1",
        "switchboard_outbox_oldest_age_seconds{binding=\"opened\"}",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    assert_eq!(metrics.matches("# EOF").count(), 1);
    gate.add_permits(10);
    eventually("both deliveries", || async { rec.count() == 2 }).await;
    rt.stop().await;
}

/// `POST /api/v1/events/{event}/replay{query}`.
async fn replay(rt: &Rt, event: &str, query: &str) -> (u16, Value) {
    rt.post(&format!("/api/v1/events/{event}/replay{query}"), json!({}))
        .await
}

/// The ids of `rec`'s deliveries with their versions, for payload `n`.
fn runs_of(rec: &Recorder, n: u64) -> Vec<String> {
    rec.seen()
        .iter()
        .filter(|s| s.payload["n"] == n)
        .map(|s| s.ctx("switchboard.binding_version").to_owned())
        .collect()
}

#[tokio::test]
async fn a_replayed_event_runs_under_the_version_in_force_when_it_arrived_or_a_pinned_one() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    let old = rt.enqueue("audit", json!({"n": 1})).await;
    eventually("the first delivery", || async { rec.count() == 1 }).await;
    rt.write_config(V2);
    let (status, _) = rt.post("/api/v1/triggers/reload", json!({})).await;
    assert_eq!(status, 200);

    // Replayed as of its arrival: v1, although v2 is active now.
    let (status, v) = replay(&rt, &old, "?binding=audit").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["replayed"][0]["version"], "audit@v1", "{v}");
    assert_eq!(v["notes"], json!([]));
    eventually("the replay", || async { rec.count() == 2 }).await;
    assert_eq!(runs_of(&rec, 1), ["audit@v1", "audit@v1"]);

    // Pinned to v2.
    let (status, v) = replay(&rt, &old, "?binding=audit&version=2").await;
    assert_eq!(status, 200, "{v}");
    eventually("the pinned replay", || async { rec.count() == 3 }).await;
    assert_eq!(runs_of(&rec, 1), ["audit@v1", "audit@v1", "audit@v2"]);

    // Without ?binding=, every binding whose version then took the event.
    let (status, v) = replay(&rt, &old, "").await;
    assert_eq!(
        (status, v["replayed"][0]["version"].as_str()),
        (200, Some("audit@v1")),
        "{v}"
    );
    eventually("the unnamed replay", || async { rec.count() == 4 }).await;

    let (status, v) = rt.post("/api/v1/events/evt_nope/replay", json!({})).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = replay(&rt, &old, "?binding=audit&version=9").await;
    assert_eq!(status, 404, "{v}");
    rt.stop().await;
}

/// Replaces the stored definition of `binding`'s version `n` with one that no longer
/// builds (what a definition written by a newer build looks like to this one).
fn break_stored_definition(rt: &Rt, binding: &str, n: u32) {
    let db = rusqlite::Connection::open(rt.dir.path().join("rt.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE trigger_versions SET definition = '{\"id\": 7}' WHERE binding_id = ?1 AND version = ?2",
            rusqlite::params![binding, n],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[tokio::test]
async fn a_replay_whose_version_was_collected_runs_under_its_stored_definition_or_says_why_not() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    let first = rt.enqueue("audit", json!({"n": 1})).await;
    eventually("the first delivery", || async { rec.count() == 1 }).await;
    reload_to(&rt, 2).await;
    let second = rt.enqueue("audit", json!({"n": 2})).await;
    eventually("the second delivery", || async { rec.count() == 2 }).await;
    for n in 3..=5 {
        reload_to(&rt, n).await;
    }
    assert_eq!(
        in_memory_versions(&rt).await,
        [3, 4, 5],
        "v1 and v2 left memory"
    );

    // v1 comes back from the store, pinned, and the replay runs under it.
    let (status, v) = replay(&rt, &first, "?binding=audit").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["replayed"][0]["version"], "audit@v1", "{v}");
    let note = v["notes"][0].as_str().unwrap();
    assert!(
        note.contains("audit@v1") && note.contains("stored definition") && note.contains("pinned"),
        "{note}"
    );
    eventually("the replay under v1", || async { rec.count() == 3 }).await;
    assert_eq!(runs_of(&rec, 1), ["audit@v1", "audit@v1"]);
    assert_eq!(in_memory_versions(&rt).await, [1, 3, 4, 5]);
    assert_eq!(rt.trigger("audit").await["versions"][0]["pinned"], true);
    assert!(rt
        .history("audit")
        .await
        .contains(&"audit@v1 pinned".to_owned()));
    // Replayed again, it is in memory: no note.
    let (_, v) = replay(&rt, &first, "?binding=audit").await;
    assert_eq!(v["notes"], json!([]), "{v}");
    eventually("the second replay", || async { rec.count() == 4 }).await;

    // v2's stored definition no longer builds: the live version, and the note says why.
    break_stored_definition(&rt, "audit", 2);
    let (status, v) = replay(&rt, &second, "?binding=audit").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["replayed"][0]["version"], "audit@v5", "{v}");
    let note = v["notes"][0].as_str().unwrap();
    assert!(
        note.contains("audit@v2")
            && note.contains("cannot be rebuilt")
            && note.contains("audit@v5"),
        "{note}"
    );
    eventually("the fallback replay", || async { rec.count() == 5 }).await;
    assert_eq!(runs_of(&rec, 2), ["audit@v2", "audit@v5"]);
    // Pinned to it explicitly: refused, with the reason, nothing enqueued.
    let (status, v) = replay(&rt, &second, "?binding=audit&version=2").await;
    assert_eq!(status, 404, "{v}");
    assert!(v.to_string().contains("no longer builds"), "{v}");
    rt.stop().await;
}

const FLAKY: &str = r#"
[[triggers]]
id = "flaky"
handler = { local = "flaky", capability = "x" }
retry = { max_attempts = 1 }
"#;

/// Enqueues `{"n": 1}` for `flaky` and waits for its dead letter; its id.
async fn one_dead_letter(rt: &Rt) -> Value {
    rt.enqueue("flaky", json!({"n": 1})).await;
    eventually("the dead letter", || async {
        rt.get("/api/v1/dead-letters").await["dead_letters"]
            .as_array()
            .is_some_and(|l| l.len() == 1)
    })
    .await;
    rt.get("/api/v1/dead-letters").await["dead_letters"][0]["id"].clone()
}

#[tokio::test]
async fn a_dead_letter_replays_under_the_version_it_ran_under_unless_pinned() {
    let flaky = Recorder::failing(1);
    let mut rt = Rt::sqlite_file(FLAKY, &[("flaky", flaky.clone())]).await;
    let dl = one_dead_letter(&rt).await;
    rt.write_config(&FLAKY.replace("max_attempts = 1", "max_attempts = 2"));
    rt.post("/api/v1/triggers/reload", json!({})).await;
    let (status, v) = rt
        .post(&format!("/api/v1/dead-letters/{dl}/replay"), json!({}))
        .await;
    assert_eq!(
        (status, v["version"].as_str()),
        (200, Some("flaky@v1")),
        "{v}"
    );
    eventually("the replay", || async { flaky.count() == 2 }).await;
    let (status, v) = rt
        .post(
            &format!("/api/v1/dead-letters/{dl}/replay?version=2"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, v["version"].as_str()),
        (200, Some("flaky@v2")),
        "{v}"
    );
    eventually("the pinned replay", || async { flaky.count() == 3 }).await;
    assert_eq!(runs_of(&flaky, 1), ["flaky@v1", "flaky@v1", "flaky@v2"]);
    rt.stop().await;
}

#[tokio::test]
async fn a_dead_letter_whose_version_left_memory_replays_under_its_stored_definition() {
    let flaky = Recorder::failing(1);
    let mut rt = Rt::sqlite_file(FLAKY, &[("flaky", flaky.clone())]).await;
    let dl = one_dead_letter(&rt).await;
    for n in 2..=5 {
        rt.write_config(&FLAKY.replace("max_attempts = 1", &format!("max_attempts = {n}")));
        rt.post("/api/v1/triggers/reload", json!({})).await;
        let old = format!("flaky@v{} terminated", n - 1);
        eventually(&old, || async { rt.history("flaky").await.contains(&old) }).await;
    }
    let (status, v) = rt
        .post(&format!("/api/v1/dead-letters/{dl}/replay"), json!({}))
        .await;
    assert_eq!(
        (status, v["version"].as_str()),
        (200, Some("flaky@v1")),
        "{v}"
    );
    assert!(
        v["notes"][0]
            .as_str()
            .unwrap()
            .contains("stored definition"),
        "{v}"
    );
    eventually("the replay", || async { flaky.count() == 2 }).await;
    assert_eq!(runs_of(&flaky, 1), ["flaky@v1", "flaky@v1"]);
    rt.stop().await;
}

#[tokio::test]
async fn a_pinned_version_stays_resolvable_for_replays_after_it_would_have_been_collected() {
    let rec = Recorder::default();
    let mut rt = Rt::sqlite_file(V1, &[("rec", rec.clone())]).await;
    let old = rt.enqueue("audit", json!({"n": 1})).await;
    eventually("the first delivery", || async { rec.count() == 1 }).await;
    reload_to(&rt, 2).await;
    let (status, v) = rt
        .post("/api/v1/triggers/audit/versions/1/pin", json!({}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["version"].as_str(), v["pinned"].as_bool()),
        (Some("audit@v1"), Some(true))
    );
    for n in 3..=5 {
        reload_to(&rt, n).await;
    }
    // v1 is older than the two newest terminated versions (v3, v4), and pinned: kept.
    let t = rt.trigger("audit").await;
    assert_eq!(in_memory_versions(&rt).await, [1, 3, 4, 5], "{t}");
    assert_eq!(t["versions"][0]["pinned"], true, "{t}");
    let (status, v) = replay(&rt, &old, "?binding=audit").await;
    assert_eq!(
        (status, v["replayed"][0]["version"].as_str()),
        (200, Some("audit@v1")),
        "{v}"
    );
    assert_eq!(v["notes"], json!([]));
    eventually("the replay under v1", || async { rec.count() == 2 }).await;
    assert_eq!(runs_of(&rec, 1), ["audit@v1", "audit@v1"]);
    // v2 has left memory: pinning it brings it back from its stored definition.
    let (status, v) = rt
        .post("/api/v1/triggers/audit/versions/2/pin", json!({}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(in_memory_versions(&rt).await, [1, 2, 3, 4, 5]);
    let (status, _) = rt
        .post("/api/v1/triggers/audit/versions/9/pin", json!({}))
        .await;
    assert_eq!(status, 404, "v9 was never recorded");
    rt.stop().await;
}
