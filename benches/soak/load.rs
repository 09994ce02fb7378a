//! The soak's two load streams, each paced open-loop at a fixed rate: signed GitHub
//! webhooks to the runtime's `POST /hooks/github`, and executes through the gateway's
//! HTTP API to the recording connector. Ticket `n` is due at `start + n / rate`, handed
//! round-robin to a fixed set of workers that each own one keep-alive connection (so
//! the bench's socket count is fixed while the children are up); a ticket that finds
//! every worker busy is counted as an error, not queued.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::ledger::{Ledger, SEQ_FIELD};
use crate::ingest_support::hex;

/// Workers (and connections) per stream.
pub const WORKERS: usize = 16;
/// Tickets a worker may have waiting.
const WORKER_QUEUE: usize = 2;
/// Upper bound on one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// What each execute allows the connector (the gateway's `timeout_ms`).
const EXECUTE_TIMEOUT_MS: u64 = 5_000;
/// The webhook secret (the runtime reads it from [`SECRET_ENV`]).
pub const SECRET: &str = "soak-secret";
pub const SECRET_ENV: &str = "SOAK_GITHUB_SECRET";

/// One stream's counters and errors by kind.
#[derive(Default)]
pub struct Stream {
    pub sent: AtomicU64,
    pub ok: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Stream {
    fn error(&self, kind: String) {
        *self.errors.lock().unwrap().entry(kind).or_default() += 1;
    }

    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.errors.lock().unwrap().clone()
    }
}

/// A failed request's kind: what failed, and the innermost cause.
fn kind(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    };
    let mut root: &dyn std::error::Error = e;
    while let Some(s) = root.source() {
        root = s;
    }
    format!("{what}: {root}")
}

/// A non-2xx answer's kind: its status and the `code` of a JSON error body.
async fn status_kind(resp: reqwest::Response) -> String {
    let status = resp.status().as_u16();
    let code = resp.json::<Value>().await.ok().and_then(|v| {
        v["code"]
            .as_str()
            .or(v["error"].as_str())
            .map(str::to_owned)
    });
    match code {
        Some(code) => format!("HTTP {status} {code}"),
        None => format!("HTTP {status}"),
    }
}

/// Issues tickets `0..limit` at `rate` per second from the ledger's start until `stop`,
/// each to the first of `workers` (round-robin) with room; spawns the workers with
/// `work(ticket)`. Ends when the tickets are issued and every worker has finished.
fn paced<W, F>(
    ledger: &Ledger,
    stream: Arc<Stream>,
    rate: f64,
    limit: usize,
    mut stop: watch::Receiver<bool>,
    work: W,
) -> JoinHandle<()>
where
    W: Fn(reqwest::Client, usize) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let work = Arc::new(work);
    let mut queues = Vec::with_capacity(WORKERS);
    let mut workers = Vec::with_capacity(WORKERS);
    for _ in 0..WORKERS {
        let (tx, mut rx) = mpsc::channel::<usize>(WORKER_QUEUE);
        queues.push(tx);
        // One connection per worker: a client of its own, one idle connection kept.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("an HTTP client");
        let work = work.clone();
        workers.push(tokio::spawn(async move {
            while let Some(ticket) = rx.recv().await {
                work(client.clone(), ticket).await;
            }
        }));
    }
    let start = ledger.start;
    tokio::spawn(async move {
        let period = Duration::from_secs_f64(1.0 / rate);
        for n in 0..limit {
            let due = tokio::time::Instant::from_std(start + period.mul_f64(n as f64));
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            let free = (0..WORKERS).find_map(|i| queues[(n + i) % WORKERS].try_send(n).ok());
            if free.is_none() {
                stream.error(format!("not sent: all {WORKERS} workers busy"));
            }
        }
        drop(queues);
        for w in workers {
            let _ = w.await;
        }
    })
}

/// The webhook body of ticket `seq`: a 1 KiB GitHub `issues.opened` body carrying
/// [`SEQ_FIELD`], and its `X-Hub-Signature-256`.
fn signed(template: &str, seq: usize) -> (String, String) {
    let body = format!("{{\"{SEQ_FIELD}\":{seq},{}", &template[1..]);
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
    mac.update(body.as_bytes());
    let signature = format!("sha256={}", hex(&mac.finalize().into_bytes()));
    (body, signature)
}

/// Posts ticket `n` as webhook `n` (`X-GitHub-Delivery: <tag>-<n>`) to `url`,
/// recording in the ledger whether it was accepted.
pub fn webhooks(
    ledger: &Ledger,
    url: String,
    template: String,
    tag: String,
    rate: f64,
    stop: watch::Receiver<bool>,
) -> (Arc<Stream>, JoinHandle<()>) {
    let stream = Arc::new(Stream::default());
    let (s, l) = (stream.clone(), ledger.clone());
    let (url, template) = (Arc::new(url), Arc::new(template));
    let work = move |client: reqwest::Client, seq: usize| {
        let (s, l, url, template, tag) = (
            s.clone(),
            l.clone(),
            url.clone(),
            template.clone(),
            tag.clone(),
        );
        async move {
            let (body, signature) = signed(&template, seq);
            s.sent.fetch_add(1, Ordering::Relaxed);
            l.posting(seq);
            let t = Instant::now();
            let sent = client
                .post(url.as_str())
                .header("content-type", "application/json")
                .header("user-agent", "GitHub-Hookshot/soak")
                .header("x-github-event", "issues")
                .header("x-github-delivery", format!("{tag}-{seq}"))
                .header("x-hub-signature-256", signature)
                .body(body)
                .send()
                .await;
            match sent {
                Ok(resp) if resp.status().is_success() => {
                    let latency = t.elapsed();
                    let _ = resp.bytes().await;
                    s.ok.fetch_add(1, Ordering::Relaxed);
                    l.answered(seq, Some(latency));
                }
                Ok(resp) => {
                    s.error(status_kind(resp).await);
                    l.answered(seq, None);
                }
                Err(e) => {
                    s.error(kind(&e));
                    l.answered(seq, None);
                }
            }
        }
    };
    let limit = ledger.capacity();
    let task = paced(ledger, stream.clone(), rate, limit, stop, work);
    (stream, task)
}

/// Executes `{"n": n}` on `arn` through the gateway's HTTP API at `base`, checking
/// the echo.
pub fn executes(
    ledger: &Ledger,
    base: &str,
    arn: &str,
    rate: f64,
    stop: watch::Receiver<bool>,
) -> (Arc<Stream>, JoinHandle<()>) {
    let stream = Arc::new(Stream::default());
    let (s, l) = (stream.clone(), ledger.clone());
    let url = Arc::new(format!("{base}/api/v1/connectors/{arn}/execute"));
    let work = move |client: reqwest::Client, n: usize| {
        let (s, l, url) = (s.clone(), l.clone(), url.clone());
        async move {
            let body = json!({ "payload": { "n": n }, "timeout_ms": EXECUTE_TIMEOUT_MS });
            s.sent.fetch_add(1, Ordering::Relaxed);
            let sent_at = l.start.elapsed();
            let t = Instant::now();
            match client.post(url.as_str()).json(&body).send().await {
                Ok(resp) if resp.status().is_success() => match resp.json::<Value>().await {
                    Ok(v) if v["success"] == json!(true) && v["payload"] == body["payload"] => {
                        s.ok.fetch_add(1, Ordering::Relaxed);
                        l.executed(sent_at, t.elapsed());
                    }
                    Ok(_) => s.error("200 with a wrong answer".to_owned()),
                    Err(e) => s.error(kind(&e)),
                },
                Ok(resp) => s.error(status_kind(resp).await),
                Err(e) => s.error(kind(&e)),
            }
        }
    };
    let limit = (rate * 24.0 * 3600.0) as usize;
    let task = paced(ledger, stream.clone(), rate, limit, stop, work);
    (stream, task)
}
