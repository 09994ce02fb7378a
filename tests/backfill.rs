//! Backfills through the admin API the way an operator runs them: stored webhook
//! events run through a binding added after they arrived, under its filter, dedupe
//! and version; dry runs; pause, resume and cancel; `skip_delivered` both ways; a
//! `switchboard serve` killed with SIGKILL mid-walk and restarted (nothing enqueued
//! twice); two runtimes on one PostgreSQL database (one walker at a time, handed over
//! at shutdown). Real runtimes, real SQLite files and PostgreSQL schemas, real HTTP.
#![cfg(all(feature = "runtime", feature = "gateway"))]

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "outbox/fixture.rs"]
mod fixture;
#[path = "ingest/support.rs"]
mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use common::eventually;
use dsupport::{Recorder, Rt};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The webhook source: generic HMAC, the kind read from the body's `type`.
const SOURCE: &str = r#"
[[sources]]
id = "hook"
provider = "generic_hmac"
secret_env = "GENERIC_SECRET"
header = "X-Signature"
prefix = "sha256="
dedupe_header = "X-Delivery"
kind_pointer = "/type"
"#;

/// The binding added after the events arrived (at run time): `issues.*`, all but
/// `n == 3`; `extra` adds fields to its table.
fn tickets(extra: Value) -> Value {
    let mut t = json!({
        "sources": ["hook"],
        "events": ["issues.*"],
        "filter": "payload.n != 3",
        "handler": {"local": "tickets", "capability": "record"},
    });
    t.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    t
}

/// Adds (or replaces) `tickets` as a run-time binding.
async fn put_tickets(base: &str, extra: Value) {
    let resp = reqwest::Client::new()
        .put(format!("{base}/api/v1/triggers/tickets"))
        .json(&tickets(extra))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{:?}", resp.text().await);
}

/// A signed webhook of `kind` with body `{"type", "n", ...extra}`, delivery id `d{n}`.
async fn post(base: &str, kind: &str, n: u64, extra: Value) -> String {
    let mut body = json!({"type": kind, "n": n});
    if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(x.clone());
    }
    let body = body.to_string();
    let secret = support::env("GENERIC_SECRET").unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let sig = format!("sha256={}", support::hex(&mac.finalize().into_bytes()));
    let resp = reqwest::Client::new()
        .post(format!("{base}/hooks/hook"))
        .header("X-Signature", sig)
        .header("X-Delivery", format!("d{n}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    v["event_id"].as_str().unwrap_or_default().to_owned()
}

/// Starts a backfill (or a dry run) with `body`: (status, answer).
async fn backfill(base: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{base}/api/v1/backfills"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn job(base: &str, id: &Value) -> Value {
    reqwest::get(format!("{base}/api/v1/backfills/{id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits until job `id` is in `state`; the job.
async fn until_state(base: &str, id: &Value, state: &str) -> Value {
    eventually(&format!("backfill {id} {state}"), || async {
        job(base, id).await["state"] == state
    })
    .await;
    job(base, id).await
}

async fn act(base: &str, id: &Value, action: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{base}/api/v1/backfills/{id}/{action}"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The `n`s `rec` was handed, in order, with the backfill each came from ("" live).
fn runs(rec: &Recorder) -> Vec<(u64, String)> {
    rec.seen()
        .iter()
        .map(|s| {
            (
                s.payload["n"].as_u64().unwrap(),
                s.ctx("switchboard.backfill").to_owned(),
            )
        })
        .collect()
}

fn counts(j: &Value) -> [i64; 5] {
    ["walked", "matched", "filtered", "skipped", "enqueued"].map(|k| j[k].as_i64().unwrap())
}

/// Six events arrive (`issues.opened` 1–4, `push` 5, `issues.closed` 6) before
/// `tickets` exists; then it is added by a reload.
async fn history_then_tickets(rt: &Rt) {
    for n in 1..=4 {
        post(&rt.base, "issues.opened", n, json!({})).await;
    }
    post(&rt.base, "push", 5, json!({})).await;
    post(&rt.base, "issues.closed", 6, json!({})).await;
    put_tickets(&rt.base, json!({})).await;
}

async fn a_backfill_runs_history_through_the_bindings_filter_once_unless_asked_again(
    rt: Rt,
    tickets: Recorder,
) {
    let mut rt = rt;
    history_then_tickets(&rt).await;
    let base = rt.base.clone();

    // The dry run: what the selection and the binding's filter take, nothing enqueued.
    let (status, dry) = backfill(
        &base,
        json!({"binding": "tickets", "kinds": ["issues.opened"], "dry_run": true}),
    )
    .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(
        dry,
        json!({"walked": 6, "matched": 4, "filtered": 1, "skipped": 0,
            "would_enqueue": 3, "complete": true})
    );
    assert_eq!(tickets.count(), 0);

    let (status, started) = backfill(
        &base,
        json!({"binding": "tickets", "kinds": ["issues.opened"], "rate": 1000}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].clone();
    assert_eq!(started["total"], 6, "{started}");
    let done = until_state(&base, &id, "done").await;
    assert_eq!(counts(&done), [6, 4, 1, 0, 3], "{done}");
    assert_eq!(done["progress"], 1.0);
    eventually("three deliveries", || async { tickets.count() == 3 }).await;
    let first = id.to_string();
    assert_eq!(
        runs(&tickets),
        [(1, first.clone()), (2, first.clone()), (4, first.clone())]
    );
    assert!(tickets
        .seen()
        .iter()
        .all(|s| s.ctx("switchboard.binding_version") == "tickets@v1"));
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "switchboard_dispatch_backfill_events_total{binding=\"tickets\",outcome=\"walked\"} 6",
        "switchboard_dispatch_backfill_events_total{binding=\"tickets\",outcome=\"enqueued\"} 3",
        "switchboard_dispatch_backfill_events_total{binding=\"tickets\",outcome=\"filtered\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }

    // Again, skip_delivered on (the default): everything was handled.
    let (_, again) = backfill(
        &base,
        json!({"binding": "tickets", "kinds": ["issues.opened"]}),
    )
    .await;
    let again = until_state(&base, &again["id"], "done").await;
    assert_eq!(counts(&again), [6, 4, 1, 3, 0], "{again}");

    // A live event arrives; then a backfill of every kind skips what tickets took
    // live, and takes the one it never had (n = 6, issues.closed).
    post(&base, "issues.opened", 7, json!({})).await;
    eventually("the live delivery", || async { tickets.count() == 4 }).await;
    let (_, wide) = backfill(&base, json!({"binding": "tickets"})).await;
    let wide = until_state(&base, &wide["id"], "done").await;
    assert_eq!(counts(&wide), [7, 7, 2, 4, 1], "{wide}");
    eventually("n = 6", || async { tickets.count() == 5 }).await;

    // skip_delivered off: the opened ones go again.
    let (_, redo) = backfill(
        &base,
        json!({"binding": "tickets", "kinds": ["issues.opened"], "skip_delivered": false}),
    )
    .await;
    let redo = until_state(&base, &redo["id"], "done").await;
    assert_eq!(counts(&redo), [7, 5, 1, 0, 4], "{redo}");
    eventually("four more", || async { tickets.count() == 9 }).await;
    let live: Vec<u64> = runs(&tickets)
        .into_iter()
        .filter(|(_, b)| b.is_empty())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(live, [7], "only n = 7 came live");

    let list = rt.get("/api/v1/backfills").await;
    assert_eq!(list["backfills"].as_array().unwrap().len(), 4, "{list}");
    assert_eq!(list["backfills"][0]["id"], redo["id"], "newest first");
    rt.stop().await;
}

#[tokio::test]
async fn sqlite_a_backfill_runs_history_through_the_bindings_filter_once_unless_asked_again() {
    let tickets = Recorder::default();
    let rt = Rt::sqlite_file(SOURCE, &[("tickets", tickets.clone())]).await;
    a_backfill_runs_history_through_the_bindings_filter_once_unless_asked_again(rt, tickets).await;
}

#[tokio::test]
async fn postgres_a_backfill_runs_history_through_the_bindings_filter_once_unless_asked_again() {
    let Some(base) = support::postgres_url() else {
        return support::skip_postgres(
            "postgres_a_backfill_runs_history_through_the_bindings_filter_once_unless_asked_again",
        );
    };
    let url = support::fresh_postgres_schema(&base).await;
    let tickets = Recorder::default();
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let rt = Rt::on_file(url, dir, SOURCE, &[("tickets", tickets.clone())]).await;
    a_backfill_runs_history_through_the_bindings_filter_once_unless_asked_again(rt, tickets).await;
}

#[tokio::test]
async fn a_backfill_applies_the_bindings_dedupe_and_can_run_under_a_pinned_version() {
    let tickets = Recorder::default();
    let mut rt = Rt::sqlite_file(SOURCE, &[("tickets", tickets.clone())]).await;
    for (n, group) in [(1, "a"), (2, "a"), (4, "b")] {
        post(&rt.base, "issues.opened", n, json!({"group": group})).await;
    }
    // v1 dedupes by group; v2 (the live one) does not.
    put_tickets(&rt.base, json!({"dedupe_key": "payload.group"})).await;
    put_tickets(&rt.base, json!({})).await;
    assert_eq!(rt.trigger("tickets").await["active"], 2);

    let (status, started) = backfill(&rt.base, json!({"binding": "tickets", "version": 1})).await;
    assert_eq!(status, 201, "{started}");
    let done = until_state(&rt.base, &started["id"], "done").await;
    // Three taken; the binding's dedupe (v1's) wrote two: group "a" once.
    assert_eq!(counts(&done), [3, 3, 0, 0, 2], "{done}");
    eventually("two deliveries", || async { tickets.count() == 2 }).await;
    let seen = tickets.seen();
    assert!(
        seen.iter()
            .all(|s| s.ctx("switchboard.binding_version") == "tickets@v1"),
        "pinned to v1"
    );
    let ns: Vec<u64> = seen
        .iter()
        .map(|s| s.payload["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [1, 4]);

    // A version never recorded, a binding that does not exist, and bad fields.
    for (body, want) in [
        (json!({"binding": "tickets", "version": 9}), 404),
        (json!({"binding": "nope"}), 404),
        (json!({"binding": "tickets", "rate": 0}), 422),
        (json!({"binding": "tickets", "source": ["hook"]}), 422),
        (json!({"binding": "tickets", "since": "yesterday"}), 422),
        (json!({"binding": "tickets", "filter": "payload.("}), 422),
        (json!({"nothing": true}), 422),
    ] {
        let (status, v) = backfill(&rt.base, body.clone()).await;
        assert_eq!(status, want, "{body}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    rt.stop().await;
}

#[tokio::test]
async fn a_backfill_pauses_resumes_and_cancels_and_refuses_what_its_state_forbids() {
    let tickets = Recorder::default();
    let mut rt = Rt::sqlite_file(SOURCE, &[("tickets", tickets.clone())]).await;
    for n in 1..=6 {
        post(&rt.base, "issues.opened", n + 10, json!({})).await;
    }
    put_tickets(&rt.base, json!({})).await;
    let base = rt.base.clone();

    // One event a second: the walk takes about six seconds.
    let (_, started) = backfill(&base, json!({"binding": "tickets", "rate": 1})).await;
    let id = started["id"].clone();
    eventually("the first delivery", || async { tickets.count() >= 1 }).await;
    let (status, paused) = act(&base, &id, "pause").await;
    assert_eq!(
        (status, paused["state"].as_str()),
        (200, Some("paused")),
        "{paused}"
    );
    let (status, v) = act(&base, &id, "pause").await;
    assert_eq!(status, 409, "paused already: {v}");
    let (status, resumed) = act(&base, &id, "resume").await;
    assert_eq!((status, resumed["state"].as_str()), (200, Some("running")));
    let done = until_state(&base, &id, "done").await;
    assert_eq!(done["walked"], 6, "{done}");
    eventually("six deliveries", || async { tickets.count() == 6 }).await;
    let ns: HashSet<u64> = runs(&tickets).into_iter().map(|(n, _)| n).collect();
    assert_eq!(ns.len(), 6, "each once");

    // A cancelled job stays cancelled; what it enqueued stays enqueued.
    let (_, slow) = backfill(
        &base,
        json!({"binding": "tickets", "rate": 0.5, "skip_delivered": false}),
    )
    .await;
    let slow_id = slow["id"].clone();
    let (status, cancelled) = act(&base, &slow_id, "cancel").await;
    assert_eq!(
        (status, cancelled["state"].as_str()),
        (200, Some("cancelled"))
    );
    for action in ["resume", "pause", "cancel"] {
        let (status, v) = act(&base, &slow_id, action).await;
        assert_eq!(status, 409, "{action} on a cancelled job: {v}");
    }
    let (status, _) = act(&base, &id, "resume").await;
    assert_eq!(status, 409, "a done job does not resume");
    let (status, _) = act(&base, &id, "rewind").await;
    assert_eq!(status, 404);
    let (status, _) = act(&base, &json!(999), "pause").await;
    assert_eq!(status, 404);
    let gone = reqwest::get(format!("{base}/api/v1/backfills/999"))
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    rt.stop().await;
}

/// Two runtimes on one PostgreSQL schema: one walks a job at a time; stopped, it
/// hands the job to the other, which goes on from the committed cursor. Every event
/// is delivered once across both.
#[tokio::test]
async fn two_postgres_runtimes_walk_a_backfill_once_between_them() {
    let Some(base) = support::postgres_url() else {
        return support::skip_postgres("two_postgres_runtimes_walk_a_backfill_once_between_them");
    };
    let url = support::fresh_postgres_schema(&base).await;
    let (a_rec, b_rec) = (Recorder::default(), Recorder::default());
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut a = Rt::on_file(
        url.clone(),
        dir.clone(),
        SOURCE,
        &[("tickets", a_rec.clone())],
    )
    .await;
    const N: u64 = 60;
    for n in 1..=N {
        post(&a.base, "issues.opened", n + 100, json!({})).await;
    }
    put_tickets(&a.base, json!({})).await;
    let dir_b = Arc::new(tempfile::tempdir().unwrap());
    let mut b = Rt::on_file(url, dir_b, SOURCE, &[("tickets", b_rec.clone())]).await;

    // 20 a second: about three seconds of walking.
    let (status, started) = backfill(&a.base, json!({"binding": "tickets", "rate": 20})).await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].clone();
    eventually("a third walked", || async {
        job(&b.base, &id).await["walked"].as_i64() >= Some(20)
    })
    .await;
    let holder = job(&b.base, &id).await["lease_holder"].clone();
    // Stop whichever walks it: the other takes over.
    // A process's default identity ends with its listen address.
    let a_addr = a.base.trim_start_matches("http://").to_owned();
    let (walker, other) = if holder.as_str().is_some_and(|h| h.ends_with(&a_addr)) {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    walker.stop().await;
    let done = until_state(&other.base, &id, "done").await;
    assert_eq!(done["walked"], N as i64, "{done}");
    assert_eq!(done["enqueued"], N as i64, "{done}");
    eventually("every event delivered", || async {
        a_rec.count() + b_rec.count() >= N as usize
    })
    .await;
    let mut times: BTreeMap<u64, usize> = BTreeMap::new();
    for (n, _) in runs(&a_rec).into_iter().chain(runs(&b_rec)) {
        *times.entry(n).or_default() += 1;
    }
    assert_eq!(times.len(), N as usize);
    assert!(times.values().all(|&t| t == 1), "each once: {times:?}");
    a.stop().await;
    b.stop().await;
}

/// A `switchboard serve` killed with SIGKILL in the middle of a backfill, and started
/// again on the same file: the job goes on from its last committed step and every
/// event lands in the binding's queue exactly once.
#[tokio::test]
async fn a_backfill_killed_mid_walk_resumes_after_a_restart_and_enqueues_nothing_twice() {
    use common::serve::{free_port, Serve};
    const N: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\nstore = \"sqlite:{}\"\n{SOURCE}\n[[queues]]\nname = \"work\"\n",
        dir.path().join("sb.db").display()
    );
    let env = [("GENERIC_SECRET", support::env("GENERIC_SECRET").unwrap())];
    let mut first = Serve::started(dir.path(), "sb", port, &text, &env).await;
    for n in 1..=N {
        post(&first.base, "issues.opened", n, json!({})).await;
    }
    let resp = reqwest::Client::new()
        .put(format!("{}/api/v1/triggers/tickets", first.base))
        .json(&json!({"sources": ["hook"], "handler": {"queue": "work"}}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{:?}", resp.text().await);
    // 100 a second: three seconds of walking; killed after the first 50.
    let (status, started) = backfill(&first.base, json!({"binding": "tickets", "rate": 100})).await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].clone();
    eventually("50 walked", || async {
        job(&first.base, &id).await["walked"].as_i64() >= Some(50)
    })
    .await;
    first.kill();
    let walked_then = query_walked(dir.path().join("sb.db"), &id);
    assert!(
        walked_then < N as i64,
        "killed mid-walk ({walked_then} of {N})"
    );

    let second = Serve::started(dir.path(), "sb", port, &text, &env).await;
    let done = until_state(&second.base, &id, "done").await;
    assert_eq!(
        (done["walked"].as_u64(), done["enqueued"].as_u64()),
        (Some(N), Some(N)),
        "{done}"
    );
    // Every message of the queue, each received once (a long visibility).
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        let resp = reqwest::Client::new()
            .post(format!(
                "{}/api/v1/queues/work/receive?max=100&visibility_ms=600000",
                second.base
            ))
            .send()
            .await
            .unwrap();
        let got: Value = resp.json().await.unwrap();
        let messages = got["messages"].as_array().unwrap().clone();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            *seen
                .entry(m["event_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(seen.len(), N as usize, "every event");
    assert!(seen.values().all(|&c| c == 1), "none twice");
}

/// The job's committed cursor position (`walked`) read from the SQLite file itself.
fn query_walked(db: std::path::PathBuf, id: &Value) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT walked FROM backfills WHERE id = ?1",
            [id.as_i64().unwrap()],
            |r| r.get(0),
        )
        .unwrap()
}

/// Two jobs into one binding at once, both skipping what was handled: each event is
/// enqueued by one of them only. A job whose binding goes away fails with the reason,
/// and resumes once the binding is back.
#[tokio::test]
async fn two_jobs_into_one_binding_enqueue_each_event_once_and_a_failed_job_resumes() {
    let tickets = Recorder::default();
    let mut rt = Rt::sqlite_file(SOURCE, &[("tickets", tickets.clone())]).await;
    const N: u64 = 300;
    for n in 1..=N {
        post(&rt.base, "issues.opened", n + 1000, json!({})).await;
    }
    put_tickets(&rt.base, json!({"filter": "true"})).await;
    let (_, a) = backfill(&rt.base, json!({"binding": "tickets", "rate": 5000})).await;
    let (_, b) = backfill(&rt.base, json!({"binding": "tickets", "rate": 5000})).await;
    let a = until_state(&rt.base, &a["id"], "done").await;
    let b = until_state(&rt.base, &b["id"], "done").await;
    let enqueued = a["enqueued"].as_i64().unwrap() + b["enqueued"].as_i64().unwrap();
    assert_eq!(enqueued, N as i64, "{a}\n{b}");
    eventually("every event delivered", || async {
        tickets.count() >= N as usize
    })
    .await;
    let ns: HashSet<u64> = runs(&tickets).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        (ns.len(), tickets.count()),
        (N as usize, N as usize),
        "each once"
    );

    // The binding goes: the next step fails the job, saying why.
    let (_, slow) = backfill(
        &rt.base,
        json!({"binding": "tickets", "rate": 1, "skip_delivered": false}),
    )
    .await;
    let id = slow["id"].clone();
    let resp = reqwest::Client::new()
        .delete(format!("{}/api/v1/triggers/tickets", rt.base))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let failed = until_state(&rt.base, &id, "failed").await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("no active version"),
        "{failed}"
    );
    // Back, and resumed: it goes on from its cursor.
    put_tickets(&rt.base, json!({"filter": "true"})).await;
    let (status, resumed) = act(&rt.base, &id, "resume").await;
    assert_eq!(
        (status, resumed["state"].as_str()),
        (200, Some("running")),
        "{resumed}"
    );
    let (status, _) = act(&rt.base, &id, "cancel").await;
    assert_eq!(status, 200);
    rt.stop().await;
}
