//! Per-binding flow control end to end: a runtime from TOML on a real SQLite store,
//! rows enqueued through its operations, delivered to recording local connectors.
//! Priority decides which of the piled-up due rows runs first; a debounce window lets
//! only the last of a burst run; a binding dedupe key drops a repeat. Time-based cases
//! run in tokio's virtual time (`start_paused`), so windows pass without waiting.
#![cfg(feature = "runtime")]

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use dsupport::{Recorder, Rt};
use serde_json::json;

/// The `n` of every payload `rec` was given, in delivery order.
fn delivered(rec: &Recorder) -> Vec<i64> {
    rec.seen()
        .iter()
        .map(|s| s.payload["n"].as_i64().unwrap())
        .collect()
}

/// Lets virtual time run on for `d`, for whatever else might still be delivered.
async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn due_rows_are_delivered_highest_priority_first() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let config = r#"
[dispatcher]
max_in_flight = 1
batch = 1

[[triggers]]
id = "low"
handler = { local = "rec", capability = "record" }
priority = -5
max_concurrent = 1

[[triggers]]
id = "normal"
handler = { local = "rec", capability = "record" }
max_concurrent = 1

[[triggers]]
id = "high"
handler = { local = "rec", capability = "record" }
priority = 10
max_concurrent = 1
"#;
    let mut rt = Rt::sqlite(config, &[("rec", rec.clone())]).await;
    // The first row takes the one slot and waits at the gate; the rest pile up, due.
    rt.enqueue_direct("low", json!({"n": 0})).await;
    let ops = rt.rt().ops().clone();
    let in_flight = || {
        serde_json::to_value(ops.triggers()).unwrap()["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["counts"]["in_flight"].as_u64().unwrap())
            .sum::<u64>()
    };
    eventually("the first attempt to start", || async { in_flight() == 1 }).await;
    for (binding, n) in [
        ("low", 1),
        ("normal", 2),
        ("high", 3),
        ("low", 4),
        ("high", 5),
        ("normal", 6),
    ] {
        rt.enqueue_direct(binding, json!({ "n": n })).await;
    }
    // The dispatcher's clock is virtual and the commits' the wall clock: let it pass
    // them all, so every piled-up row is due when the slot frees.
    settle(Duration::from_secs(1)).await;
    gate.add_permits(7);
    eventually("every delivery", || async { rec.count() == 7 }).await;
    assert_eq!(
        delivered(&rec),
        [0, 3, 5, 2, 6, 1, 4],
        "by priority, then in enqueue order"
    );
    rt.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_debounced_burst_delivers_only_its_last_event_after_the_window() {
    let rec = Recorder::default();
    let config = r#"
[[triggers]]
id = "sync"
handler = { local = "rec", capability = "record" }
debounce = { key = 'payload.doc', window = "5s" }
"#;
    let mut rt = Rt::sqlite(config, &[("rec", rec.clone())]).await;
    let start = tokio::time::Instant::now();
    for n in 1..=3 {
        rt.enqueue_direct("sync", json!({"doc": "a", "n": n})).await;
    }
    rt.enqueue_direct("sync", json!({"doc": "b", "n": 10}))
        .await;
    eventually("the two survivors", || async { rec.count() == 2 }).await;
    settle(Duration::from_secs(30)).await;
    let mut got = delivered(&rec);
    got.sort();
    assert_eq!(got, [3, 10], "of doc a's burst only the last; doc b's own");
    for seen in rec.seen() {
        assert!(
            seen.at - start >= Duration::from_secs(4),
            "held for the window: delivered {:?} after the first enqueue",
            seen.at - start
        );
    }
    let stats = rt.rt().ops().stats().await.unwrap().stats;
    assert_eq!(stats.total.superseded, 2, "{stats:?}");
    assert_eq!(stats.by_binding["sync"].superseded, 2);
    rt.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_repeated_dedupe_key_enqueues_nothing_for_its_binding() {
    let rec = Recorder::default();
    let config = r#"
[[triggers]]
id = "once"
handler = { local = "rec", capability = "record" }
dedupe_key = 'payload.order'
dedupe_retention = "1h"
"#;
    let mut rt = Rt::sqlite(config, &[("rec", rec.clone())]).await;
    rt.enqueue_direct("once", json!({"order": "o-1", "n": 1}))
        .await;
    eventually("the first delivery", || async { rec.count() == 1 }).await;
    rt.enqueue_direct("once", json!({"order": "o-1", "n": 2}))
        .await;
    rt.enqueue_direct("once", json!({"order": "o-2", "n": 3}))
        .await;
    eventually("the other order", || async { rec.count() == 2 }).await;
    settle(Duration::from_secs(30)).await;
    assert_eq!(delivered(&rec), [1, 3], "the repeat of o-1 was dropped");
    rt.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_throttle_starts_at_most_n_per_period_and_the_rest_wait() {
    let rec = Recorder::default();
    let config = r#"
[[triggers]]
id = "api"
handler = { local = "rec", capability = "record" }
throttle = { starts = 3, per = "1s" }
"#;
    let mut rt = Rt::sqlite(config, &[("rec", rec.clone())]).await;
    for n in 0..10 {
        rt.enqueue_direct("api", json!({"n": n})).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while rec.count() < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "all ten start within a virtual minute"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let at: Vec<tokio::time::Instant> = rec.seen().iter().map(|s| s.at).collect();
    // In every window of one second, at most three starts.
    for (i, &t) in at.iter().enumerate() {
        let in_window = at[i..]
            .iter()
            .take_while(|&&u| u < t + Duration::from_secs(1))
            .count();
        assert!(
            in_window <= 3,
            "{in_window} starts within a second of start {i}"
        );
    }
    // And no slower than the throttle asks: ten starts at three a second take three
    // seconds and a bit (virtual time: exact to the poll of the window's room).
    let spread = at[9] - at[0];
    assert!(
        spread >= Duration::from_secs(3) && spread < Duration::from_millis(3_100),
        "{spread:?}"
    );
    let counts = rt.get_direct_counts("api").await;
    assert_eq!(counts.dispatched, 10);
    rt.stop().await;
}
