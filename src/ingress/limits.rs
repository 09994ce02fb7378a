//! The listener's bounds on untrusted clients: how many ingress requests run at once,
//! how long a client may take to send its headers and its body, and how many bytes of
//! writes may wait for the group commit. Each is a top-level option of
//! switchboard.toml with the default named here; the Limits table of docs/guide/sources.md lists them
//! with the per-source ones (`max_body_bytes`, `rate_limit`, `notion_recheck_limit`),
//! which live with the rest of a source's options in [`super::source`].
//!
//! Beside the settings, the two pieces of their enforcement that the ingress endpoint
//! reads: the body deadline ([`body_deadline`], failing a late read with
//! [`BodyTimeout`]) and the peer's address ([`PeerAddr`]). The runtime's listener
//! (`runtime::http::listener`) installs both on every connection; they live here so
//! that the endpoint, a layer below the listener, can recognise them.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt as _;

use crate::duration::{duration_or, DurationSetting};
use crate::error::{Error, Result};

/// Default `max_concurrent_requests`: 1024 ingress requests at once. A request holds
/// its body (up to `max_body_bytes`) while it is judged and committed; 1024 is far
/// more than a commit-bound SQLite store serves at once (a batch is 512 writes), and
/// far fewer than the file descriptors and memory a flood would otherwise take.
pub(crate) const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 1024;
/// Default `header_read_timeout`: 10 s from the first byte of a request to the end of
/// its headers. Providers send their headers in one packet; a client that dribbles
/// them is holding a connection, not delivering.
pub(crate) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `body_read_timeout`: 30 s from the end of the headers to the end of the
/// body, time for a 10 MiB body over a slow link, and a bound on how long a client
/// sending one byte every few seconds holds a concurrency slot.
pub(crate) const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The listener's limits, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IngressLimits {
    /// Ingress requests (`POST /hooks/*`) served at once; beyond, 503 + `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Time allowed for a request's headers; beyond, the connection is closed.
    pub header_read_timeout: Duration,
    /// Time allowed for a request's body after its headers; beyond, 408 and close.
    pub body_read_timeout: Duration,
}

impl Default for IngressLimits {
    fn default() -> Self {
        IngressLimits {
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
        }
    }
}

/// Resolves the top-level options; every bound must be positive, since a zero would
/// refuse every request.
pub(crate) fn resolve(
    max_concurrent_requests: Option<usize>,
    header_read_timeout: Option<&DurationSetting>,
    body_read_timeout: Option<&DurationSetting>,
) -> Result<IngressLimits> {
    let max = max_concurrent_requests.unwrap_or(DEFAULT_MAX_CONCURRENT_REQUESTS);
    if max == 0 {
        return Err(Error::Config(
            "max_concurrent_requests must be at least 1".into(),
        ));
    }
    let timeout = |name: &str, s, default| {
        duration_or(s, default, true).map_err(|e| Error::Config(format!("{name}: {e}")))
    };
    Ok(IngressLimits {
        max_concurrent_requests: max,
        header_read_timeout: timeout(
            "header_read_timeout",
            header_read_timeout,
            DEFAULT_HEADER_READ_TIMEOUT,
        )?,
        body_read_timeout: timeout(
            "body_read_timeout",
            body_read_timeout,
            DEFAULT_BODY_READ_TIMEOUT,
        )?,
    })
}

/// A request body not received within `body_read_timeout`.
#[derive(Debug)]
pub(crate) struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive within body_read_timeout")
    }
}

impl std::error::Error for BodyTimeout {}

/// Whether `e` (a body-reading error, however wrapped) is a [`BodyTimeout`].
pub(crate) fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyTimeout>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Middleware: gives the request body a deadline `timeout` from now (the headers are
/// in when a handler's middleware runs). The deadline covers the whole body, not each
/// read, so steady dribbling does not extend it.
pub(crate) async fn body_deadline(
    State(timeout): State<Duration>,
    req: Request,
    next: Next,
) -> Response {
    let deadline = tokio::time::Instant::now() + timeout;
    let (parts, body) = req.into_parts();
    let chunks =
        futures_util::stream::unfold(Some(body.into_data_stream()), move |state| async move {
            let mut data = state?;
            match tokio::time::timeout_at(deadline, data.next()).await {
                Ok(Some(Ok(bytes))) => Some((Ok::<Bytes, axum::BoxError>(bytes), Some(data))),
                Ok(Some(Err(e))) => Some((Err(e.into()), None)),
                Ok(None) => None,
                Err(_) => Some((Err(BodyTimeout.into()), None)),
            }
        });
    next.run(Request::from_parts(parts, Body::from_stream(chunks)))
        .await
}

/// The address of the peer a request came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub(crate) std::net::SocketAddr);
