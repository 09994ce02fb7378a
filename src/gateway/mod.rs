//! The reference gateway: the other side of the wire, for tests, laptops and the demo.
//!
//! One port serves the Phoenix socket at `/socket/connector/websocket` and an HTTP API;
//! with [`GatewayConfig::grpc_listen`] another serves gRPC (`ConnectorService.Connect`,
//! one stream per registration, `grpc.rs`). Registrations of both transports share the
//! registry, the execute and invoke paths and the limits (`link.rs`, `connector_messages.rs`), and
//! are counted by transport. The HTTP API:
//! `GET /api/v1/connectors`, `POST /api/v1/connectors/{arn}/execute`,
//! `GET /api/v1/stats` and `GET /metrics` (Prometheus text), and the operator console's
//! views (`views.rs`: paged registrations with live figures, tenants, connections,
//! a per-second series; listed in `http_api.rs`). Server behaviour follows
//! real Phoenix: `unmatched topic` replies for pushes on unjoined topics, a duplicate
//! join closes the old channel with `phx_close` before answering the new one, a leave
//! is answered and then closed, idle sockets are closed. A closed channel takes its
//! state with it, as a Phoenix channel process does: its registrations are removed and
//! its pending executes fail at once (the client re-registers after rejoining).
//!
//! Executes are correlated per socket (`pending.rs`): each socket has its own pending
//! map, pruned on answer, timeout, caller cancellation and disconnect. A socket's task
//! writes its frames itself while its queue is short and hands them to a helper task
//! while a backlog lasts (`socket_writes.rs`); either feeds every queued frame and
//! flushes once the queue is empty.
//!
//! Every `execute_request` the gateway sends carries, besides `context["connector_arn"]`
//! naming the addressee, its deadline as `context["timeout_ms"]` (decimal
//! milliseconds): the request's own deadline if it named one, else
//! `default_execute_timeout`, capped at `max_execute_timeout`. Past it the gateway has
//! answered its caller with a timeout and drops a late answer, so a connector may stop
//! work on the request then.
//!
//! Invokes (`invoke.rs`) address their target by ARN or dot key; a target in another
//! tenant is refused unless it registered with `CONNECTOR_SCOPE_GLOBAL`, and refusals
//! are answered at once with `error_details["code"]` (`not_found`, `forbidden`,
//! `overloaded`; `timeout` and `connection_closed` when delivery fails). The answer
//! carries the request's context plus `context["target_arn"]`.
//!
//! Untrusted input is bounded by [`GatewayConfig`]: the WebSocket message size (an
//! oversized message closes its socket), the executes and invokes in flight per socket,
//! and the longest deadline. A connector's `metrics_report` is kept per registration
//! and shown with it, if the reporting socket carries that registration.
//!
//! Clients may send a `StreamMessage` as a binary WebSocket frame instead of a `proto`
//! text frame. Test hooks (`hooks.rs`) make the server say what it would not on its
//! own: raw text or binary frames, arbitrary pushes, `phx_error` / `phx_close`.
//!
//! Registration assigns `matrix:{tenant}:{type}:{instance}`. In the default
//! [`ApprovalMode::Auto`] it approves at once with a session token. In
//! [`ApprovalMode::Manual`] (PROTOCOL.md §4) a register
//! needs a session token or a JWT from the gateway's token endpoint; one without is
//! PENDING (listed at `GET /api/v1/approvals`, not executable: `pending_approval`,
//! HTTP 409) until the operator approves it (`POST /api/v1/connectors/{arn}/approve`),
//! which sends the connector `approval_notification` and `credentials_issued` with a
//! one-time token; or rejects it (`/reject`), which it remembers. The connector then
//! registers a P-256 public key (`POST /api/v1/auth/register`), obtains an ES256
//! access token with a private-key JWT assertion (`POST /oauth/token`; keys at
//! `/.well-known/jwks.json`) and registers with it. With
//! [`GatewayConfig::data_dir`] the signing key, approved keys, session tokens and
//! rejections survive restarts (`persist.rs`). A JWT of an external OIDC issuer in
//! [`GatewayConfig::trusted_issuers`] (a Keycloak realm, say) approves too, verified
//! against that issuer's JWKS, fetched within [`GatewayConfig::jwks_fetch_timeout`]
//! by the registering link only and cached per issuer (`issuers.rs`). A socket is bound to
//! the tenant of its first registration. A refused register still carries the ARN the
//! registration would have had, so that the client's demux can route the refusal on a
//! shared socket (PROTOCOL.md §5 routes register responses by ARN).

mod approvals;
mod auth_api;
mod check;
mod config;
mod connector_messages;
mod console;
mod credentials;
mod execute;
mod faults;
mod figures;
mod grpc;
mod hooks;
mod http_api;
mod invoke;
mod issuers;
mod link;
mod operator;
mod pending;
mod persist;
mod rates;
mod registration_info;
mod registry;
mod report;
mod schemas;
mod series;
mod server;
mod socket;
mod socket_writes;
mod state;
mod stats;
mod testkit;
mod tokens;
mod views;

pub use config::{ApprovalMode, GatewayConfig, TrustedIssuer};
pub use execute::ExecuteOutcome;
pub use hooks::LobbyEvent;
pub use registration_info::{RegistrationInfo, RegistrationState, MAX_LISTED_METADATA_BYTES};
pub use report::ReportedMetrics;
pub use server::Gateway;
pub use stats::GatewayStats;
pub use testkit::{TestGateway, TEST_EXECUTE_TIMEOUT};

use std::net::SocketAddr;

pub use crate::context_keys::{
    CONNECTOR_ARN_CONTEXT_KEY, TARGET_ARN_CONTEXT_KEY, TIMEOUT_MS_CONTEXT_KEY,
};

/// Runs a gateway with `config` on `listen` until SIGTERM or SIGINT, then stops
/// gracefully ([`Gateway::shutdown`]); the `switchboard gateway` command.
pub async fn serve(config: GatewayConfig, listen: SocketAddr) -> crate::Result<()> {
    // Before the listeners open: a signal as soon as the port answers is heard.
    let signal = crate::signals::shutdown_signal();
    let manual = config.approval == ApprovalMode::Manual;
    let gateway = Gateway::start(config, listen).await?;
    eprintln!("switchboard gateway listening on {}", gateway.local_addr());
    eprintln!("  connectors dial  {}", gateway.ws_url());
    if let Some(grpc) = gateway.grpc_url() {
        eprintln!("  or over gRPC     {grpc}");
    }
    eprintln!(
        "  HTTP API         {}/api/v1/connectors",
        gateway.http_url()
    );
    if manual {
        eprintln!(
            "  approvals        {}/api/v1/approvals (manual mode)",
            gateway.http_url()
        );
    }
    signal.await;
    gateway.shutdown().await;
    Ok(())
}
