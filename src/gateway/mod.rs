//! The reference gateway: the other side of the wire, for tests, laptops and the demo.
//!
//! One port serves the Phoenix socket at `/socket/connector/websocket` and an HTTP API:
//! `GET /api/v1/connectors`, `POST /api/v1/connectors/{arn}/execute`,
//! `GET /api/v1/stats` and `GET /metrics` (Prometheus text). Server behaviour follows
//! real Phoenix: `unmatched topic` replies for pushes on unjoined topics, a duplicate
//! join closes the old channel with `phx_close` before answering the new one, a leave
//! is answered and then closed, idle sockets are closed. A closed channel takes its
//! state with it, as a Phoenix channel process does: its registrations are removed and
//! its pending executes fail at once (the client re-registers after rejoining).
//!
//! Executes are correlated per socket (`pending.rs`): each socket has its own pending
//! map, pruned on answer, timeout, caller cancellation and disconnect, and each socket
//! has one writer task that feeds every queued frame and flushes once the queue is
//! empty.
//!
//! Registration assigns `matrix:{tenant}:{type}:{instance}` and a session token and
//! approves at once (approval flows belong to a later version). A socket is bound to
//! the tenant of its first registration. A refused register still carries the ARN the
//! registration would have had, so that the client's demux can route the refusal on a
//! shared socket (PROTOCOL.md §5 routes register responses by ARN).

mod http_api;
mod pending;
mod registry;
mod server;
mod socket;
mod stats;
mod testkit;

pub use registry::RegistrationInfo;
pub use server::{ExecuteOutcome, Gateway, GatewayConfig};
pub use stats::GatewayStats;
pub use testkit::{TestGateway, TEST_EXECUTE_TIMEOUT};

use std::net::SocketAddr;

/// Runs a gateway on `listen` until Ctrl-C (the `switchboard gateway` command).
pub async fn serve(listen: SocketAddr) -> crate::Result<()> {
    let gateway = Gateway::start(GatewayConfig::default(), listen).await?;
    eprintln!("switchboard gateway listening on {}", gateway.local_addr());
    eprintln!("  connectors dial  {}", gateway.ws_url());
    eprintln!(
        "  HTTP API         {}/api/v1/connectors",
        gateway.http_url()
    );
    tokio::signal::ctrl_c().await?;
    gateway.shutdown().await;
    Ok(())
}
