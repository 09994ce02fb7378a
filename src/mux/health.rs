//! The health listener of an SDK process: `/healthz`, `/readyz` and `/metrics` over
//! plain HTTP/1, for an orchestrator's probes and a Prometheus scraper.
//!
//! A tiny responder over a Tokio `TcpListener` rather than axum or hyper: those are
//! optional dependencies of the runtime and the gateway, and a connector author's
//! build (the `websocket` feature) should not grow a web framework for three fixed
//! GET paths. It is written to be safe on a port anyone may reach: a request head is
//! read up to [`MAX_HEAD`] bytes and within [`READ_TIMEOUT`], the body (if any) is
//! never read, every answer closes the connection, and at most
//! [`MAX_CONNECTIONS`] are served at once (more are closed unanswered). It answers
//! `GET` and `HEAD`; anything else gets a 405, an unknown path a 404 naming the three
//! it serves.
//!
//! What the answers say comes from a [`Probe`] (the runner), so this module knows
//! nothing of registrations.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Longest request head read (request line and headers); a probe's is a few hundred
/// bytes.
const MAX_HEAD: usize = 8 * 1024;

/// How long a client may take to send its request head, and to take the answer.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Most connections served at once.
const MAX_CONNECTIONS: usize = 64;

/// What the listener asks of whoever runs it.
pub(crate) trait Probe: Send + Sync + 'static {
    /// `Ok` when ready to take work; else why not (one line per reason).
    fn ready(&self) -> std::result::Result<(), String>;
    /// The metrics in the Prometheus text format.
    fn metrics(&self) -> String;
}

/// Binds the listener (before anything connects, so a taken port is a clear error at
/// once); returns it and the address it got.
pub(crate) fn bind(addr: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr)> {
    let fail = |e: std::io::Error| {
        Error::Config(format!(
            "cannot open the health listener on {addr} ({e}); pick a free address in RunnerOptions::health_listen or SWITCHBOARD_HEALTH_LISTEN"
        ))
    };
    let listener = std::net::TcpListener::bind(addr).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    Ok((listener, local))
}

/// Serves until `stop` fires; connections in progress are dropped then.
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    probe: Arc<dyn Probe>,
    stop: CancellationToken,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "the health listener cannot run");
            return;
        }
    };
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    continue;
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::debug!("health listener busy; closing a connection unanswered");
                    continue;
                };
                let probe = probe.clone();
                connections.spawn(async move {
                    let _ = tokio::time::timeout(READ_TIMEOUT, answer(stream, probe.as_ref())).await;
                    drop(permit);
                });
            }
        }
    }
}

/// Reads one request head and writes its answer.
async fn answer(mut stream: TcpStream, probe: &dyn Probe) -> std::io::Result<()> {
    let response = match read_head(&mut stream).await? {
        Some(head) => respond(&head, probe),
        None => Response::new(431, "request head too large\n".into()),
    };
    stream.write_all(&response.encode()).await?;
    stream.shutdown().await
}

/// Reads up to the blank line that ends the head; `None` when it is over
/// [`MAX_HEAD`]. A client that closes early gets whatever it sent parsed (and most
/// likely a 400).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find_end(&buf) {
            buf.truncate(end);
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Where the head ends (before `\r\n\r\n`, or `\n\n` from a lenient client).
fn find_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One answer: status, content type, body, and whether to send the body (not for
/// `HEAD`).
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    head_only: bool,
    allow: bool,
}

impl Response {
    fn new(status: u16, body: String) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
            head_only: false,
            allow: false,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            _ => "Service Unavailable",
        };
        let allow = if self.allow {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The answer to a request head.
fn respond(head: &str, probe: &dyn Probe) -> Response {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Response::new(
            400,
            "malformed request line; expected e.g. GET /readyz HTTP/1.1\n".into(),
        );
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Response::new(
            400,
            "malformed request line; expected e.g. GET /readyz HTTP/1.1\n".into(),
        );
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            let mut r = Response::new(
                405,
                format!("{method} is not served here; use GET or HEAD\n"),
            );
            r.allow = true;
            return r;
        }
    };
    let path = target.split('?').next().unwrap_or(target);
    let mut response = match path {
        "/healthz" => Response::new(200, "ok\n".into()),
        "/readyz" => match probe.ready() {
            Ok(()) => Response::new(200, "ready\n".into()),
            Err(why) => Response::new(503, format!("not ready:\n{why}\n")),
        },
        "/metrics" => {
            let mut r = Response::new(200, probe.metrics());
            r.content_type = "text/plain; version=0.0.4; charset=utf-8";
            r
        }
        _ => Response::new(
            404,
            format!("no {path} here; this listener serves /healthz, /readyz and /metrics\n"),
        ),
    };
    response.head_only = head_only;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(std::result::Result<(), String>);

    impl Probe for Fixed {
        fn ready(&self) -> std::result::Result<(), String> {
            self.0.clone()
        }
        fn metrics(&self) -> String {
            "# TYPE x gauge\nx 1\n".into()
        }
    }

    fn status(head: &str, probe: &dyn Probe) -> (u16, String) {
        let r = respond(head, probe);
        (r.status, r.body)
    }

    #[test]
    fn the_three_paths_answer_and_readiness_says_why_not() {
        let ready = Fixed(Ok(()));
        assert_eq!(status("GET /healthz HTTP/1.1\r\nHost: x", &ready).0, 200);
        assert_eq!(status("GET /readyz?verbose HTTP/1.1", &ready).0, 200);
        let (code, body) = status(
            "GET /readyz HTTP/1.0",
            &Fixed(Err("a.b.c is registering".into())),
        );
        assert_eq!(code, 503);
        assert!(body.contains("a.b.c is registering"), "{body}");
        let r = respond("GET /metrics HTTP/1.1", &ready);
        assert!(r.content_type.contains("version=0.0.4"));
        assert_eq!(r.body, "# TYPE x gauge\nx 1\n");
    }

    #[test]
    fn other_methods_paths_and_garbage_get_clear_errors() {
        let p = Fixed(Ok(()));
        let r = respond("POST /readyz HTTP/1.1", &p);
        assert_eq!(r.status, 405);
        assert!(String::from_utf8(r.encode())
            .unwrap()
            .contains("Allow: GET, HEAD\r\n"));
        let (code, body) = status("GET /nope HTTP/1.1", &p);
        assert_eq!(code, 404);
        assert!(body.contains("/healthz, /readyz and /metrics"), "{body}");
        assert_eq!(status("hello", &p).0, 400);
        assert_eq!(status("GET /healthz SPDY/3", &p).0, 400);
    }

    #[test]
    fn head_sends_the_length_without_the_body() {
        let r = respond("HEAD /healthz HTTP/1.1", &Fixed(Ok(())));
        let wire = String::from_utf8(r.encode()).unwrap();
        assert!(wire.contains("Content-Length: 3\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\n"), "{wire}");
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(20));
        assert_eq!(find_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
