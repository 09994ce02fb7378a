//! The admin API the console is built on, driven over HTTP as an operator's tools
//! would: the event search's filters and keyset paging, one event's detail with its
//! deliveries, the filtered bulk replay of dead letters, the outbox depth series and
//! the per-source counts. Every case runs on SQLite and, when
//! `SWITCHBOARD_TEST_POSTGRES_URL` is set, on PostgreSQL.

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
#[macro_use]
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::eventually;
use dsupport::{Recorder, Rt};
use serde_json::{json, Value};
use support::{fresh_postgres_schema, postgres_url, skip_postgres, Kind, StoreKind};

const CONFIG: &str = r#"
[[sources]]
id = "gh"
provider = "github"
secret_env = "GH_SECRET"
rate_limit = { per_second = 100, burst = 1000 }

[[triggers]]
id = "opened"
sources = ["gh"]
events = ["issues.*"]
handler = { local = "opened", capability = "x" }

[[triggers]]
id = "flaky"
events = ["enqueue"]
handler = { local = "flaky", capability = "x" }
retry = { max_attempts = 2, backoff = "constant", base = "10ms", jitter = 0.0 }

[[triggers]]
id = "other"
events = ["enqueue"]
handler = { local = "other", capability = "x" }
retry = { max_attempts = 1, backoff = "constant", base = "10ms", jitter = 0.0 }
"#;

/// A runtime on `store` with the three recorders: `opened` succeeds, `flaky` and
/// `other` always fail.
async fn start(store: StoreKind) -> (Rt, Recorder) {
    let opened = Recorder::default();
    let locals = [
        ("opened", opened.clone()),
        ("flaky", Recorder::failing(u32::MAX)),
        ("other", Recorder::failing(u32::MAX)),
    ];
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = match store {
        StoreKind::Sqlite => format!("sqlite:{}", dir.path().join("rt.db").display()),
        StoreKind::Postgres(base) => fresh_postgres_schema(&base).await,
    };
    (Rt::on(url, dir, CONFIG, &locals).await, opened)
}

/// Posts a signed GitHub delivery with delivery id `id`; its status.
async fn post_github(rt: &Rt, id: &str) -> u16 {
    post_delivery(rt, Kind::Github.signed(id)).await
}

async fn post_delivery(rt: &Rt, d: support::Delivery) -> u16 {
    let mut req = reqwest::Client::new()
        .post(format!("{}/hooks/gh", rt.base))
        .body(d.body.clone());
    for (k, v) in &d.headers {
        req = req.header(k, v);
    }
    req.send().await.unwrap().status().as_u16()
}

/// GETs `path`: status and JSON body.
async fn get(rt: &Rt, path: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{}{path}", rt.base)).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// POSTs with an empty body: status and JSON answer.
async fn post_empty(rt: &Rt, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", rt.base))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Every event the filter `query` selects, walking the pages of `limit`; the ids in
/// page order and the number of pages.
async fn walk(rt: &Rt, query: &str, limit: usize) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let (status, v) = get(
            rt,
            &format!("/api/v1/events?{query}&limit={limit}&after={after}"),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        pages += 1;
        let page = v["events"].as_array().unwrap();
        assert!(page.len() <= limit);
        ids.extend(page.iter().map(|e| e["id"].as_str().unwrap().to_owned()));
        match v["next"].as_str() {
            Some(n) => after = n.to_owned(),
            None => return (ids, pages),
        }
        assert!(pages < 100, "paging does not end");
    }
}

/// An event as the unfiltered list shows it.
async fn all_events(rt: &Rt) -> Vec<Value> {
    get(rt, "/api/v1/events?limit=500").await.1["events"]
        .as_array()
        .unwrap()
        .clone()
}

async fn events_are_filtered_and_paged_by_keyset(store: StoreKind) {
    let (mut rt, _) = start(store).await;
    for i in 1..=5 {
        assert_eq!(post_github(&rt, &format!("d{i}")).await, 200);
    }
    rt.enqueue("flaky", json!({"n": 1})).await;
    rt.enqueue("other", json!({"n": 2})).await;
    let all = all_events(&rt).await;
    assert_eq!(all.len(), 7, "{all:?}");

    // Source, kind and their combination; pages of 2 hold every match exactly once,
    // newest first.
    let (gh, pages) = walk(&rt, "source=gh", 2).await;
    assert_eq!((gh.len(), pages), (5, 3), "{gh:?}");
    assert_eq!(gh.iter().collect::<BTreeSet<_>>().len(), 5);
    let mut sorted = gh.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(gh, sorted, "newest first (event ids are time-ordered)");
    let (opened, _) = walk(&rt, "kind=issues.opened", 2).await;
    assert_eq!(opened, gh);
    let (api, _) = walk(&rt, "kind=enqueue", 1).await;
    assert_eq!(api.len(), 2);
    assert_eq!(walk(&rt, "kind=enqueue&source=gh", 10).await.0.len(), 0);

    // The delivery id as stored finds that one event.
    let d3 = all
        .iter()
        .find(|e| e["payload"]["delivery"] == "d3")
        .unwrap();
    let key = d3["dedupe_key"].as_str().unwrap();
    let (found, _) = walk(&rt, &format!("delivery_id={key}"), 10).await;
    assert_eq!(found, vec![d3["id"].as_str().unwrap().to_owned()]);
    assert_eq!(walk(&rt, "delivery_id=nope", 10).await.0.len(), 0);
    // GitHub's key is `{hook id}:{delivery GUID}`; the GUID alone (what GitHub's UI
    // shows) finds the same event, and the hook id alone finds nothing.
    assert_eq!(key, "1:d3", "the stored key this test is about");
    let (by_guid, _) = walk(&rt, "delivery_id=d3", 10).await;
    assert_eq!(by_guid, found);
    assert_eq!(walk(&rt, "delivery_id=1", 10).await.0.len(), 0);
    assert_eq!(walk(&rt, "delivery_id=2:d3", 10).await.0.len(), 0);

    // since (inclusive) and until (exclusive) split the events at any instant.
    let mut times: Vec<i64> = all
        .iter()
        .map(|e| e["received_at_ms"].as_i64().unwrap())
        .collect();
    times.sort();
    let cut = times[3];
    let (newer, _) = walk(&rt, &format!("since={cut}"), 2).await;
    let (older, _) = walk(&rt, &format!("until={cut}"), 2).await;
    assert_eq!(newer.len(), times.iter().filter(|t| **t >= cut).count());
    assert_eq!(newer.len() + older.len(), 7);
    let (window, _) = walk(&rt, &format!("since={}&until={}", times[0], cut), 1).await;
    assert_eq!(window, older);

    // Bad values get a 400 naming what is wrong.
    for (query, reason) in [
        ("limit=0", "bad_limit"),
        ("limit=501", "bad_limit"),
        ("since=yesterday", "bad_filter"),
        ("until=-1", "bad_filter"),
        ("after=x", "bad_cursor"),
    ] {
        let (status, v) = get(&rt, &format!("/api/v1/events?{query}")).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some(reason)),
            "{query}: {v}"
        );
    }
    rt.stop().await;
}

async fn an_event_detail_shows_its_deliveries_and_never_a_secret(store: StoreKind) {
    let (mut rt, opened) = start(store).await;
    let d = Kind::Github.signed("detail-1");
    let signature = d
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-hub-signature-256"))
        .unwrap()
        .1
        .clone();
    assert_eq!(post_delivery(&rt, d).await, 200);
    let failing = rt.enqueue("flaky", json!({"n": 7})).await;
    eventually("the delivery and the dead letter", || async {
        opened.count() == 1
            && rt.get("/api/v1/dead-letters?binding=flaky").await["dead_letters"]
                .as_array()
                .is_some_and(|a| a.len() == 1)
    })
    .await;

    // The failed event: one dead letter with both attempts' errors and its version.
    let (status, v) = get(&rt, &format!("/api/v1/events/{failing}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["event"]["id"], failing.as_str());
    assert_eq!(v["event"]["encoding"], "json");
    assert_eq!(v["event"]["payload"], json!({"n": 7}));
    let dl = &v["deliveries"].as_array().unwrap()[0];
    assert_eq!(v["deliveries"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(dl["record"], "dead_letter");
    assert_eq!(dl["binding_id"], "flaky");
    assert_eq!(dl["version"], "flaky@v1");
    assert_eq!(dl["state"], "dead");
    assert_eq!(dl["attempts"], 2);
    assert_eq!(dl["errors"].as_array().unwrap().len(), 2);
    assert_eq!(dl["last_error"]["kind"], "handler");
    assert!(dl["fingerprint"].as_str().is_some_and(|f| !f.is_empty()));

    // The webhook: its fields, delivery id, decoded payload, redacted headers.
    let gh = all_events(&rt)
        .await
        .into_iter()
        .find(|e| e["source"] == "gh")
        .unwrap();
    let (status, v) = get(
        &rt,
        &format!("/api/v1/events/{}", gh["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let e = &v["event"];
    assert_eq!(e["source"], "gh");
    assert_eq!(e["kind"], "issues.opened");
    assert_eq!(e["delivery_id"], gh["dedupe_key"]);
    assert_eq!(e["payload"]["action"], "opened");
    assert!(e["received_at_ms"].as_i64().unwrap() > 0);
    assert!(e["trace_id"].as_str().is_some_and(|t| t.len() == 32));
    assert!(e["headers"]["x-github-delivery"].is_string(), "{e}");
    let text = v.to_string();
    assert!(!text.contains(&signature), "a signature leaked: {text}");
    assert!(!text.contains("It's a Secret to Everybody"));
    eventually("the delivered row to be gone from the detail", || async {
        get(
            &rt,
            &format!("/api/v1/events/{}", gh["id"].as_str().unwrap()),
        )
        .await
        .1["deliveries"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    })
    .await;

    let (status, v) = get(&rt, "/api/v1/events/evt_nothing_here").await;
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("unknown_event")),
        "{v}"
    );
    rt.stop().await;
}

/// Waits until `binding` has `n` dead letters; their ids, newest first.
async fn dead_letter_ids(rt: &Rt, binding: &str, n: usize) -> Vec<i64> {
    eventually("the dead letters", || async {
        rt.get(&format!("/api/v1/dead-letters?binding={binding}&limit=500"))
            .await["dead_letters"]
            .as_array()
            .is_some_and(|a| a.len() == n)
    })
    .await;
    rt.get(&format!("/api/v1/dead-letters?binding={binding}&limit=500"))
        .await["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect()
}

async fn a_filtered_bulk_replay_pages_through_its_selection(store: StoreKind) {
    let (mut rt, _) = start(store).await;
    for n in 0..5 {
        rt.enqueue("flaky", json!({"n": n})).await;
    }
    for n in 0..2 {
        rt.enqueue("other", json!({"n": n})).await;
    }
    let flaky = dead_letter_ids(&rt, "flaky", 5).await;
    let other = dead_letter_ids(&rt, "other", 2).await;

    // The error-kind filter matches the last attempt's kind.
    let (status, v) = post_empty(
        &rt,
        "/api/v1/dead-letters/replay?binding=flaky&error_kind=timeout",
    )
    .await;
    assert_eq!((status, v["replayed"].as_u64()), (200, Some(0)), "{v}");

    // Five of flaky's in pages of two: 2, 2, 1, each resuming at `next`.
    let mut replayed = Vec::new();
    let mut after = String::new();
    let mut calls = 0;
    loop {
        let (status, v) = post_empty(
            &rt,
            &format!("/api/v1/dead-letters/replay?binding=flaky&error_kind=handler&limit=2&after={after}"),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        calls += 1;
        assert_eq!(v["failed"], json!([]), "{v}");
        replayed.extend(
            v["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_i64().unwrap()),
        );
        match v["next"].as_i64() {
            Some(n) => after = n.to_string(),
            None => break,
        }
    }
    assert_eq!(calls, 3);
    assert_eq!(
        replayed, flaky,
        "each selected dead letter once, newest first"
    );
    for id in &flaky {
        assert_eq!(
            rt.get(&format!("/api/v1/dead-letters/{id}")).await["replays"],
            1
        );
    }
    for id in &other {
        assert_eq!(
            rt.get(&format!("/api/v1/dead-letters/{id}")).await["replays"],
            0
        );
    }

    // A body carries the same keys; a time bound before every dead letter selects none.
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/dead-letters/replay", rt.base))
        .json(&json!({"binding": "other", "before": 1, "limit": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["replayed"], 0);
    let (status, v) = post_empty(&rt, "/api/v1/dead-letters/replay?binding=other&until=1").await;
    assert_eq!((status, v["replayed"].as_u64()), (200, Some(0)), "{v}");

    for query in ["limit=0", "limit=1001", "since=soon", "after=-3"] {
        let (status, v) = post_empty(&rt, &format!("/api/v1/dead-letters/replay?{query}")).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (422, Some("validation")),
            "{query}: {v}"
        );
    }
    rt.stop().await;
}

async fn the_outbox_series_samples_depth_and_dead_letters(store: StoreKind) {
    let (mut rt, _) = start(store).await;
    let (status, v) = get(&rt, "/api/v1/outbox/series").await;
    assert_eq!(
        (status, v["interval_ms"].as_u64()),
        (200, Some(1000)),
        "{v}"
    );
    rt.enqueue("other", json!({"n": 1})).await;
    eventually("a sample counting the dead letter", || async {
        get(&rt, "/api/v1/outbox/series").await.1["points"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["dead_letters"] == 1))
    })
    .await;
    let points = get(&rt, "/api/v1/outbox/series").await.1["points"]
        .as_array()
        .unwrap()
        .clone();
    let at: Vec<i64> = points
        .iter()
        .map(|p| p["at_ms"].as_i64().unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "in time order: {at:?}");
    assert!(points
        .iter()
        .all(|p| p["due"].is_u64() && p["leased"].is_u64()));
    rt.stop().await;
}

async fn sources_show_accepted_refused_and_rate_limit_state(store: StoreKind) {
    let (mut rt, _) = start(store).await;
    assert_eq!(post_github(&rt, "s1").await, 200);
    assert_eq!(post_github(&rt, "s2").await, 200);
    let forged = Kind::Github.sign("not the secret", "s3", support::now_s());
    assert_eq!(post_delivery(&rt, forged).await, 401);
    let (status, v) = get(&rt, "/api/v1/sources").await;
    assert_eq!(status, 200);
    let gh = v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "gh")
        .unwrap()
        .clone();
    let c = &gh["counts"];
    assert_eq!(c["accepted"], 2, "{gh}");
    let refused: u64 = c["refusals"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(refused, 1, "{c}");
    assert!(c["last_event_ms"].as_i64().unwrap() > 0);
    assert!(c["last_refusal_ms"].as_i64().unwrap() > 0);
    let tokens = c["rate_limit"]["tokens"].as_f64().unwrap();
    assert!(tokens > 990.0 && tokens <= 1000.0, "{c}");
    assert_eq!(c["rate_limit"]["limited"], false);
    let (_, one) = get(&rt, "/api/v1/sources/gh").await;
    assert_eq!(one["counts"]["accepted"], 2);
    rt.stop().await;
}

on_both_stores!(
    events_are_filtered_and_paged_by_keyset,
    an_event_detail_shows_its_deliveries_and_never_a_secret,
    a_filtered_bulk_replay_pages_through_its_selection,
    the_outbox_series_samples_depth_and_dead_letters,
    sources_show_accepted_refused_and_rate_limit_state,
);
