//! The `sse` source against a real Server-Sent Events endpoint served by this test
//! process (axum on 127.0.0.1:0), with a real runtime and store. The endpoint drops the
//! first connection in the middle of an event (after a partial `data:` line), ends the
//! second one cleanly after resending the event the client last saw, and keeps the
//! third open: every event is stored exactly once and in order, each reconnect carries
//! the last committed id as `Last-Event-ID`, and the server resumes after it.
#![cfg(feature = "runtime")]

#[path = "ingest/support.rs"]
mod support;

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use serde_json::Value;
use tokio::sync::Notify;

use support::Harness;

/// Events the feed has: ids 1 to 10.
const EVENTS: u64 = 10;

/// An SSE endpoint that records each connection's `Last-Event-ID`.
struct Feed {
    connections: Mutex<Vec<Option<String>>>,
    /// Drops the first connection when notified.
    drop_first: Notify,
}

/// Event `n` on the wire: an `id`, a type for even ids, JSON data over two lines.
fn event(n: u64) -> String {
    let kind = if n % 2 == 0 { "event: even\n" } else { "" };
    format!("id: {n}\n{kind}data: {{\"n\": {n},\ndata: \"text\": \"event {n}\"}}\n\n")
}

/// Events `from..=to` in one chunk.
fn events(from: u64, to: u64) -> String {
    (from..=to).map(event).collect()
}

async fn stream(State(feed): State<Arc<Feed>>, headers: HeaderMap) -> Response {
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let nth = {
        let mut c = feed.connections.lock().unwrap();
        c.push(last.clone());
        c.len()
    };
    let resumed: u64 = last.as_deref().and_then(|l| l.parse().ok()).unwrap_or(0);
    type Chunk = Result<String, std::io::Error>;
    let body = match nth {
        // Events 1-4, a comment, a retry, and the start of event 5 cut inside its data
        // line; then, once the test has seen 1-4 stored, the connection is dropped.
        1 => {
            let feed = feed.clone();
            let first = format!(
                ": hello\nretry: 100\n{}id: 5\ndata: {{\"n\": 5,",
                events(1, 4)
            );
            Body::from_stream(futures_util::stream::unfold(0, move |step| {
                let (feed, first) = (feed.clone(), first.clone());
                async move {
                    match step {
                        0 => Some((Ok::<_, std::io::Error>(first), 1)),
                        1 => {
                            feed.drop_first.notified().await;
                            Some((Err(std::io::Error::other("dropped mid-event")), 2))
                        }
                        _ => None,
                    }
                }
            }))
        }
        // From the last id the client has, inclusive (a duplicate it must dedupe), to
        // 7; then the stream ends.
        2 => Body::from(events(resumed.max(1), 7)),
        // The rest, then the connection stays open.
        _ => {
            let chunk: Chunk = Ok(events(resumed + 1, EVENTS));
            Body::from_stream(futures_util::StreamExt::chain(
                futures_util::stream::iter([chunk]),
                futures_util::stream::pending(),
            ))
        }
    };
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

/// The stored events' `n`, oldest first.
fn numbers(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .rev()
        .map(|e| e["payload"]["n"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_stream_dropped_mid_event_resumes_after_the_last_committed_id() {
    let feed = Arc::new(Feed {
        connections: Mutex::default(),
        drop_first: Notify::new(),
    });
    let app = axum::Router::new()
        .route("/events", get(stream))
        .with_state(feed.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let h = Harness::sqlite(&format!(
        "[[sources]]\nid = \"feed\"\nprovider = \"sse\"\nurl = \"http://{addr}/events\"\n"
    ))
    .await;

    let first = support::eventually("events 1-4 stored", || async {
        let events = h.events("feed").await;
        (events.len() >= 4).then_some(events)
    })
    .await;
    assert_eq!(numbers(&first), [1, 2, 3, 4]);
    feed.drop_first.notify_one();

    let all = support::eventually("every event stored", || async {
        let events = h.events("feed").await;
        (events.len() >= EVENTS as usize).then_some(events)
    })
    .await;
    assert_eq!(
        feed.connections.lock().unwrap().clone(),
        [None, Some("4".to_owned()), Some("7".to_owned())],
        "each reconnect sent the last committed id"
    );
    // Nothing more arrives on the open connection; read again to be sure no late
    // duplicate slipped in with the last ones.
    let all_again = h.events("feed").await;
    assert_eq!(all_again.len(), all.len());
    assert_eq!(
        numbers(&all),
        (1..=EVENTS).collect::<Vec<_>>(),
        "every event once, in order: none lost at the drop, the resent one deduplicated"
    );
    for e in all.iter().rev() {
        let n = e["payload"]["n"].as_u64().unwrap();
        assert_eq!(e["dedupe_key"], n.to_string(), "keyed by its SSE id");
        let kind = if n % 2 == 0 { "even" } else { "message" };
        assert_eq!(e["kind"], kind);
        assert_eq!(e["payload"]["text"], format!("event {n}"));
        assert_eq!(e["provider"], "sse");
    }
    let source = h.get("/api/v1/sources/feed").await;
    let shown = source.to_string();
    assert!(shown.contains("\"retry_ms\":100"), "{shown}");
    let metrics = h.metrics().await;
    assert!(
        metrics.contains("switchboard_ingress_stream_reconnects_total{source=\"feed\"} 2"),
        "{metrics}"
    );
}
