//! Outbound `http` deliveries per second to a local endpoint, beside a bare hyper
//! client posting the same bodies in the same run.
//!
//! - **endpoint**: an axum (hyper) server on `127.0.0.1:0` in this process that reads
//!   each body and answers `200 ok`, keep-alive;
//! - **bare hyper**: `CONCURRENCY` tasks, each owning one HTTP/1.1 keep-alive
//!   connection (`hyper::client::conn::http1`), POSTing the body and reading the
//!   answer: the least a client can do per request;
//! - **http handler**: the same number of tasks sharing the runtime's one
//!   `HttpDelivery` (what `handler = { http = … }` sends through), each request signed
//!   per Standard Webhooks with two secrets (the rotation case), checked against the
//!   egress policy (127.0.0.0/8 allow-listed), through the endpoint's breaker, the
//!   redirect policy and the response cap, reading the answer.
//!
//! The two alternate for `ROUNDS` rounds after a warm-up and the best round of each
//! is reported; the target is a ratio of at least 0.5. The dispatcher (claims,
//! finishes, the store) is not in the loop: `benches/dispatch.rs` measures it.
//!
//! `cargo bench --features runtime --bench http_deliver`

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use switchboard::__private::outbound::{
    message_id, HttpDelivery, HttpRequest, OutboundSettings, Signing, SigningKey,
};

/// Requests in flight at once: a binding's default `max_concurrent` is 16; twice
/// that keeps both clients busy on two cores.
const CONCURRENCY: usize = 32;
/// Requests per round.
const REQUESTS: usize = 20_000;
/// Timed rounds per client.
const ROUNDS: usize = 3;

fn body() -> Bytes {
    // About 600 B of JSON, a typical small webhook event.
    let items: Vec<_> = (0..12)
        .map(
            |i| serde_json::json!({"id": i, "title": format!("issue number {i}"), "state": "open"}),
        )
        .collect();
    Bytes::from(
        serde_json::to_vec(&serde_json::json!({"action": "opened", "items": items})).unwrap(),
    )
}

async fn endpoint() -> SocketAddr {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|body: axum::body::Bytes| async move {
            std::hint::black_box(body.len());
            "ok"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// `REQUESTS` posts over `CONCURRENCY` connections of bare hyper; the elapsed time.
async fn bare_hyper(addr: SocketAddr, body: Bytes) -> Duration {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..CONCURRENCY {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            for _ in (w..REQUESTS).step_by(CONCURRENCY) {
                let req = hyper::Request::post(format!("http://{addr}/hook"))
                    .header("host", addr.to_string())
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .unwrap();
                send.ready().await.unwrap();
                let resp = send.send_request(req).await.unwrap();
                assert_eq!(resp.status(), 200);
                let got = resp.into_body().collect().await.unwrap().to_bytes();
                std::hint::black_box(got);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    t0.elapsed()
}

/// The same posts through the http handler's client, signed; the elapsed time.
async fn handler(client: Arc<HttpDelivery>, addr: SocketAddr, body: Bytes) -> Duration {
    let keys = vec![
        SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
        SigningKey::parse("whsec_dGhlLXByZXZpb3VzLXNlY3JldA==").unwrap(),
    ];
    let url = format!("http://{addr}/hook");
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..CONCURRENCY {
        let (client, body, keys, url) = (client.clone(), body.clone(), keys.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for n in (w..REQUESTS).step_by(CONCURRENCY) {
                let req = HttpRequest {
                    method: reqwest::Method::POST,
                    url: url.clone(),
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: body.clone(),
                    sign: Some(Signing {
                        id: message_id(&format!("evt_{n}"), "bench"),
                        keys: keys.clone(),
                    }),
                    timeout: Duration::from_secs(10),
                };
                let resp = client.deliver(req).await.unwrap();
                assert_eq!(resp.status, 200);
                std::hint::black_box(resp.body);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    t0.elapsed()
}

fn per_second(d: Duration) -> f64 {
    REQUESTS as f64 / d.as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = endpoint().await;
        let body = body();
        let settings = OutboundSettings::default().allow("127.0.0.0/8").unwrap();
        let client = Arc::new(HttpDelivery::new(&settings).unwrap());
        // Warm-up: connections open, allocators settle.
        bare_hyper(addr, body.clone()).await;
        handler(client.clone(), addr, body.clone()).await;
        let (mut hyper_best, mut handler_best) = (Duration::MAX, Duration::MAX);
        for _ in 0..ROUNDS {
            hyper_best = hyper_best.min(bare_hyper(addr, body.clone()).await);
            handler_best = handler_best.min(handler(client.clone(), addr, body.clone()).await);
        }
        let (h, s) = (per_second(hyper_best), per_second(handler_best));
        println!(
            "\nhttp deliveries to a local keep-alive endpoint: {REQUESTS} POSTs of {} B, {CONCURRENCY} in flight, best of {ROUNDS} rounds\n",
            body.len()
        );
        println!("| client | deliveries/s | latency per delivery at this concurrency (µs) |");
        println!("|---|---|---|");
        for (name, rate) in [("bare hyper (unsigned)", h), ("http handler (signed, policy, breaker)", s)] {
            println!(
                "| {name} | {rate:.0} | {:.1} |",
                1e6 / rate * CONCURRENCY as f64
            );
        }
        println!("\nratio http handler / bare hyper: {:.2} (target ≥ 0.5)", s / h);
    });
}
