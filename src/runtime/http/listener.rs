//! The runtime's HTTP listener: accepts connections and serves the router over HTTP/1
//! with hyper directly (not `axum::serve`), because the bounds on slow clients live
//! at the connection:
//!
//! - `header_read_timeout`: hyper's own, from the first byte of a request (or the
//!   start of an idle keep-alive wait) to the end of its headers; past it hyper closes
//!   the connection. Without it a client that dribbles its headers holds a socket
//!   and a task forever.
//! - `body_read_timeout`: a deadline set when the headers are in, carried by the
//!   request body (`ingress::limits::body_deadline`); a read past it fails with
//!   `BodyTimeout`, which ingress answers 408 with `Connection: close`. A client sending one byte every few
//!   seconds is dropped at the deadline, however steadily it sends.
//!
//! Together with the concurrency limit on ingress (in `ingress::endpoint::routes`) they
//! bound what slow clients take: at most `max_concurrent_requests` requests, each for
//! at most the two timeouts.
//!
//! Shutdown is graceful: the listener stops accepting, every connection finishes the
//! request it is serving (its write commits before it is answered), idle ones close.

use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::ingress::limits::{body_deadline, IngressLimits, PeerAddr};

/// How long the accept loop pauses after an accept error that is not one
/// connection's (out of file descriptors, say), so it does not spin while the
/// condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` fires, then drains: see the module doc.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: IngressLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = app.layer(axum::middleware::from_fn_with_state(
        limits.body_read_timeout,
        body_deadline,
    ));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed; pausing before the next");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        // Answers are small and written at once; Nagle would only delay them.
        let _ = tcp.set_nodelay(true);
        // Every request of the connection carries its peer's address, which an
        // inbound source sees as `InboundRequest::remote_addr`.
        let app = app
            .clone()
            .map_request(move |mut r: hyper::Request<Incoming>| {
                r.extensions_mut().insert(PeerAddr(peer));
                r
            });
        let conn = http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                // A timed-out or reset client: its business, not an operator's.
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Accept errors that concern one connection (it was reset before we took it), as
/// opposed to the listener's.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
