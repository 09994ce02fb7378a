//! The `http_poll` source against a real paging API served by this test process
//! (axum on 127.0.0.1:0), with a real runtime and store: every item stored once and in
//! page order, through a `field` cursor and through `Link` headers, while the API
//! changes; `If-None-Match` answered 304 without duplicates; a failing API backed off
//! from (the gaps between failing requests grow) and recovered from; and a
//! `switchboard serve` process killed (SIGKILL) between fetching a page and committing
//! it re-reads exactly that page after a restart, storing every item once (its
//! credentials header read from the environment and never logged); and a cursor
//! deleted through the admin API makes the running source start over.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "common/mod.rs"]
mod common;
#[path = "ingest/support.rs"]
mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use common::serve::{free_port, Serve};
use support::Harness;

/// Items per page.
const PAGE: usize = 2;

/// How the API pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Paging {
    /// `{"data": [...], "next": "<page>"}`, the next page asked for as `?cursor=`.
    Field,
    /// A bare array, the next page in `Link: </items?page=N>; rel="next"`.
    Link,
}

/// One request the API answered.
#[derive(Debug, Clone)]
struct Seen {
    page: usize,
    authorization: Option<String>,
    if_none_match: bool,
    status: u16,
    at: Instant,
}

/// A paging JSON API over a growing list of items `{"id": n}`, pages of [`PAGE`],
/// oldest first. Each page's `ETag` is derived from what it holds, and a request
/// carrying it as `If-None-Match` is answered 304. It can fail its first requests
/// (500), and hold one page's answer open after sending its body.
struct Api {
    paging: Paging,
    items: Mutex<Vec<Value>>,
    seen: Mutex<Vec<Seen>>,
    fail_first: AtomicUsize,
    /// The page whose first answer sends its whole body and then never ends.
    hold: Mutex<Option<usize>>,
    /// Notified once the held page's body was handed to the connection.
    held: Notify,
}

impl Api {
    fn new(paging: Paging, items: usize) -> Arc<Api> {
        let api = Arc::new(Api {
            paging,
            items: Mutex::default(),
            seen: Mutex::default(),
            fail_first: AtomicUsize::new(0),
            hold: Mutex::new(None),
            held: Notify::new(),
        });
        api.add(items);
        api
    }

    /// Appends `n` items.
    fn add(&self, n: usize) {
        let mut items = self.items.lock().unwrap();
        let first = items.len() + 1;
        items.extend((first..first + n).map(|id| json!({"id": id, "title": format!("item {id}")})));
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self, f: impl Fn(&Seen) -> bool) -> usize {
        self.seen().iter().filter(|s| f(s)).count()
    }

    /// Serves it on a free port; returns its base URL.
    async fn serve(self: &Arc<Api>) -> String {
        let app = axum::Router::new()
            .route("/items", get(answer))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }
}

async fn answer(
    State(api): State<Arc<Api>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let param = match api.paging {
        Paging::Field => "cursor",
        Paging::Link => "page",
    };
    let page: usize = query.get(param).and_then(|p| p.parse().ok()).unwrap_or(0);
    let if_none_match = headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let record = |status: u16| {
        api.seen.lock().unwrap().push(Seen {
            page,
            authorization: authorization.clone(),
            if_none_match: if_none_match.is_some(),
            status,
            at: Instant::now(),
        })
    };
    let failing = api
        .fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        record(500);
        return (StatusCode::INTERNAL_SERVER_ERROR, "down for a while").into_response();
    }
    let (slice, next) = {
        let items = api.items.lock().unwrap();
        let from = (page * PAGE).min(items.len());
        let to = ((page + 1) * PAGE).min(items.len());
        let next = ((page + 1) * PAGE < items.len()).then_some(page + 1);
        (items[from..to].to_vec(), next)
    };
    let etag = format!("\"p{page}-{}-{next:?}\"", slice.len());
    if if_none_match.as_deref() == Some(etag.as_str()) {
        record(304);
        return (StatusCode::NOT_MODIFIED, [("etag", etag)]).into_response();
    }
    record(200);
    let body = match api.paging {
        Paging::Field => json!({"data": slice, "next": next.map(|n| n.to_string())}),
        Paging::Link => Value::Array(slice),
    };
    let mut resp = Response::builder()
        .header("content-type", "application/json")
        .header("etag", etag);
    if api.paging == Paging::Link {
        resp = resp.header("link", "</items?page=0>; rel=\"first\"");
        if let Some(n) = next {
            resp = resp.header("link", format!("</items?page={n}>; rel=\"next\""));
        }
    }
    let hold = {
        let mut h = api.hold.lock().unwrap();
        (*h == Some(page)).then(|| h.take()).flatten().is_some()
    };
    if !hold {
        return resp.body(Body::from(body.to_string())).unwrap();
    }
    // The whole page, then a body that never ends: the client holds every byte of
    // the page but its read of the body has not finished.
    let api = api.clone();
    let chunks = futures_util::stream::unfold(0, move |step| {
        let api = api.clone();
        let body = body.to_string();
        async move {
            match step {
                0 => Some((Ok::<_, std::io::Error>(body), 1)),
                _ => {
                    api.held.notify_one();
                    std::future::pending::<()>().await;
                    None
                }
            }
        }
    });
    resp.body(Body::from_stream(chunks)).unwrap()
}

/// A source over `api` at `base`, polled every `every`.
fn source(id: &str, base: &str, paging: Paging, every: &str) -> String {
    let paging = match paging {
        Paging::Field => "items = \"/data\"\ncursor = { field = \"/next\" }",
        Paging::Link => "cursor = \"link\"",
    };
    format!(
        "[[sources]]\nid = \"{id}\"\nprovider = \"http_poll\"\nurl = \"{base}/items\"\nevery = \"{every}\"\nkind = \"thing\"\ndedupe = \"item.id\"\n{paging}\n"
    )
}

/// The stored events' item ids, oldest first, and their dedupe keys.
fn ids_and_keys(events: &[Value]) -> (Vec<u64>, Vec<String>) {
    let oldest_first = events.iter().rev();
    oldest_first
        .map(|e| {
            (
                e["payload"]["id"].as_u64().unwrap(),
                e["dedupe_key"].as_str().unwrap().to_owned(),
            )
        })
        .unzip()
}

/// Waits until `source` has exactly `n` events and returns them (newest first).
async fn stored(h: &Harness, source: &str, n: usize) -> Vec<Value> {
    support::eventually(&format!("{n} events of {source}"), || async {
        let events = h.events(source).await;
        assert!(events.len() <= n, "more events than items: {events:#?}");
        (events.len() == n).then_some(events)
    })
    .await
}

async fn every_item_once_in_page_order_with_etags(paging: Paging) {
    let api = Api::new(paging, 3 * PAGE);
    let base = api.serve().await;
    let h = Harness::sqlite(&source("items", &base, paging, "100ms")).await;

    stored(&h, "items", 6).await;
    support::eventually("a 304 for the last page", || async {
        (api.count(|s| s.status == 304) > 0).then_some(())
    })
    .await;
    let first: Vec<(usize, bool, u16)> = api
        .seen()
        .iter()
        .take(4)
        .map(|s| (s.page, s.if_none_match, s.status))
        .collect();
    assert_eq!(
        first,
        [
            (0, false, 200),
            (1, false, 200),
            (2, false, 200),
            (2, true, 304)
        ],
        "each page read once, in order, then the last page asked for with its ETag"
    );

    // The API changes: the last page fills up and two more pages appear.
    let before = api.seen().len();
    api.add(2 * PAGE - 1);
    stored(&h, "items", 9).await;
    support::eventually("a 304 for the new last page", || async {
        (api.count(|s| s.status == 304 && s.page == 4) > 0).then_some(())
    })
    .await;
    let events = h.events("items").await;
    let (ids, keys) = ids_and_keys(&events);
    assert_eq!(
        ids,
        (1..=9).collect::<Vec<_>>(),
        "every item once, in page order"
    );
    assert_eq!(keys, (1..=9).map(|i| i.to_string()).collect::<Vec<_>>());
    for e in &events {
        assert_eq!(
            (
                e["kind"].as_str(),
                e["provider"].as_str(),
                e["source"].as_str()
            ),
            (Some("thing"), Some("http_poll"), Some("items"))
        );
    }
    let after: Vec<usize> = api.seen()[before..]
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| s.page)
        .collect();
    assert!(
        after.starts_with(&[2, 3, 4]),
        "the changed last page re-read, then the new pages: {after:?}"
    );
}

#[tokio::test]
async fn field_cursor_pages_are_stored_once_in_order_and_304_is_respected() {
    every_item_once_in_page_order_with_etags(Paging::Field).await;
}

#[tokio::test]
async fn link_header_pages_are_stored_once_in_order_and_304_is_respected() {
    every_item_once_in_page_order_with_etags(Paging::Link).await;
}

/// Failures answered by the API before it recovers.
const FAILURES: usize = 5;

#[tokio::test]
async fn a_failing_api_is_polled_with_growing_gaps_then_recovers() {
    let api = Api::new(Paging::Field, PAGE);
    api.fail_first.store(FAILURES, Ordering::SeqCst);
    let base = api.serve().await;
    // Polled every 50 ms when healthy: without a backoff, 5 failures would take 250 ms.
    let h = Harness::sqlite(&source("flaky", &base, Paging::Field, "50ms")).await;
    stored(&h, "flaky", PAGE).await;
    support::eventually("two polls after the recovery", || async {
        (api.seen().len() >= FAILURES + 2).then_some(())
    })
    .await;
    let seen = api.seen();
    assert!(seen[..FAILURES].iter().all(|s| s.status == 500));
    assert_eq!(seen[FAILURES].status, 200, "{seen:?}");
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
    let failing = &gaps[..FAILURES];
    // The driver's retries: 250 ms doubling, each jittered down by at most half.
    for (i, g) in failing.iter().enumerate() {
        assert!(*g >= Duration::from_millis(120), "gap {i}: {failing:?}");
    }
    for i in 0..FAILURES - 2 {
        assert!(
            failing[i + 2] > failing[i],
            "the gaps grow: {failing:?} (gap {} vs {i})",
            i + 2
        );
    }
    let span = seen[FAILURES - 1].at - seen[0].at;
    assert!(
        span >= Duration::from_millis(1800),
        "{FAILURES} failing requests spread over at least 1.8 s, not every 50 ms: {span:?}"
    );
    assert!(
        gaps[FAILURES] < Duration::from_secs(1),
        "after a success the backoff is reset and polls follow `every`: {gaps:?}"
    );
    let metrics = h.metrics().await;
    assert!(
        metrics.contains(&format!(
            "switchboard_ingress_poll_failures_total{{source=\"flaky\"}} {FAILURES}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "switchboard_ingress_http_poll_responses_total{source=\"flaky\",status=\"500\"} 5"
        ),
        "{metrics}"
    );
}

/// The admin API's events of `source` on a `serve` process, newest first.
async fn serve_events(serve: &Serve, source: &str) -> Vec<Value> {
    serve
        .get(&format!("/api/v1/events?source={source}&limit=500"))
        .await["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The value of the kill test's `Authorization` header, from `POLL_TOKEN`.
const TOKEN: &str = "Bearer s3cret-poll-token";

/// What the kill interrupts: the API sends page 2's headers and whole body but never
/// ends the body, so the process is inside its fetch of page 2, which it cannot
/// finish, when it is killed: page 1's items and the cursor pointing at page 2 are
/// committed (checked through the admin API just before the kill), page 2's are not.
/// From the store's point of view this is every moment between "page 2 fetched" and
/// "page 2 committed", since a page's events and the cursor that moves past it commit
/// in one transaction: a kill lands before it (this case) or after it (nothing to
/// re-read). The restarted process must read page 2 again (its cursor), not page 1
/// (already committed), and not skip to page 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_between_fetching_and_committing_a_page_reads_it_again() {
    let api = Api::new(Paging::Field, 3 * PAGE);
    *api.hold.lock().unwrap() = Some(1);
    let held = api.held.notified();
    let base = api.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("events.db").display());
    let config = |port: u16| {
        format!(
            // A one-second lease: the killed process cannot give its lease back, so
            // the restarted one takes it over once it has expired.
            "listen = \"127.0.0.1:{port}\"\nstore = \"{store}\"\n{}headers = {{ Authorization = \"POLL_TOKEN\" }}\npoll_lease_secs = 1\n",
            source("paged", &base, Paging::Field, "100ms")
        )
    };
    let env = [("POLL_TOKEN", TOKEN.to_owned())];
    let port = free_port();
    let mut first = Serve::started(dir.path(), "first", port, &config(port), &env).await;
    tokio::time::timeout(common::DEADLINE, held)
        .await
        .unwrap_or_else(|_| panic!("page 2 was never asked for:\n{}", first.log()));
    let before_kill = serve_events(&first, "paged").await;
    assert_eq!(
        ids_and_keys(&before_kill).0,
        [1, 2],
        "page 1 is committed while page 2 is being read"
    );
    first.kill();

    let port = free_port();
    let second = Serve::started(dir.path(), "second", port, &config(port), &env).await;
    common::eventually("all six items after the restart", || async {
        serve_events(&second, "paged").await.len() >= 3 * PAGE
    })
    .await;
    common::eventually("the last page asked for with its ETag", || async {
        api.count(|s| s.status == 304) > 0
    })
    .await;
    let events = serve_events(&second, "paged").await;
    let (ids, keys) = ids_and_keys(&events);
    assert_eq!(
        ids,
        (1..=6).collect::<Vec<_>>(),
        "every item exactly once, in order\n{}",
        second.log()
    );
    assert_eq!(keys, (1..=6).map(|i| i.to_string()).collect::<Vec<_>>());
    let pages: Vec<usize> = api
        .seen()
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| s.page)
        .collect();
    assert_eq!(
        pages,
        [0, 1, 1, 2],
        "page 1 read once (committed before the kill), page 2 read again after it, page 3 not skipped"
    );
    assert!(
        api.seen()
            .iter()
            .all(|s| s.authorization.as_deref() == Some(TOKEN)),
        "every request carried the header read from POLL_TOKEN"
    );
    for log in [first.log(), second.log()] {
        assert!(!log.contains("s3cret"), "a header value was logged:\n{log}");
    }
}

#[tokio::test]
async fn deleting_the_cursor_through_the_admin_api_restarts_from_the_first_page() {
    let api = Api::new(Paging::Field, 2 * PAGE);
    let base = api.serve().await;
    let h = Harness::sqlite(&source("items", &base, Paging::Field, "100ms")).await;
    stored(&h, "items", 2 * PAGE).await;
    support::eventually("a 304 for the last page", || async {
        (api.count(|s| s.status == 304) > 0).then_some(())
    })
    .await;
    let shown = h.get("/api/v1/sources/items").await;
    assert!(
        shown["cursor"]
            .as_str()
            .is_some_and(|c| c.contains("cursor=1")),
        "the stored cursor is on the last page: {shown}"
    );

    let before = api.seen().len();
    let resp = h
        .http
        .delete(h.url("/api/v1/sources/items/state/switchboard.cursor"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    support::eventually(
        "the first page read again, then a 304 for the last",
        || async {
            let later = api.seen()[before..].to_vec();
            let first = later.iter().position(|s| s.page == 0 && s.status == 200)?;
            later[first..]
                .iter()
                .any(|s| s.page == 1 && s.status == 304)
                .then_some(())
        },
    )
    .await;
    let (ids, _) = ids_and_keys(&h.events("items").await);
    assert_eq!(ids, [1, 2, 3, 4], "the items read again are duplicates");
}
