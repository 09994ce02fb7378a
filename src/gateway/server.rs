//! The running gateway: its accept loop, lifecycle and shutdown (the state its tasks
//! share is in `state.rs`, the execute path in `execute.rs`).
//!
//! One [`Gateway`] serves the Phoenix socket and the HTTP API on one port (axum). Each
//! accepted socket gets a task (`socket.rs`); registrations point at their socket's
//! [`ConnectorLink`], through which executes are written and their responses correlated.
//! Every task the gateway starts is tracked, so that [`Gateway::shutdown`] returns only
//! once none is left.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::serve::ListenerExt as _;
use bytes::Bytes;

use super::approvals::Approvals;
use super::config::GatewayConfig;
use super::execute::{outcome, ExecuteCall, ExecuteOutcome};
use super::link::ConnectorLink;
use super::registration_info::RegistrationInfo;
use super::state::GatewayState;
use super::stats::GatewayStats;
use crate::error::{Error, Result};
use crate::proto::PayloadEncoding;

/// How long [`Gateway::shutdown`] waits for in-flight HTTP requests and for the
/// gateway's tasks to finish. Closing the sockets fails their executes at once and
/// every task watches the gateway's cancellation, so this is only reached by a stuck
/// HTTP client or a bug; it keeps such a thing from hanging the caller's shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A running reference gateway.
///
/// Dropping it stops it as [`Gateway::shutdown`] does, without waiting for the port to
/// be released; call `shutdown` to rebind the same address afterwards.
pub struct Gateway {
    pub(crate) state: Arc<GatewayState>,
    addr: SocketAddr,
    grpc_addr: Option<SocketAddr>,
    server: Option<tokio::task::JoinHandle<()>>,
    /// The gRPC accept loop, when serving gRPC; like `server`, not among the tracked
    /// tasks, which count per-connection work.
    grpc_server: Option<tokio::task::JoinHandle<()>>,
    /// The live chart's sampler (`views.rs`): gateway-wide like the accept loops, so
    /// also not among the tracked tasks; it stops on the gateway's cancellation.
    sampler: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A gateway nobody holds must not keep serving sockets in the background.
        self.state.cancel.cancel();
    }
}

impl Gateway {
    /// Binds `addr` (Phoenix socket and HTTP API) and, when
    /// [`GatewayConfig::grpc_listen`] is set, the gRPC port; returns once both accept
    /// connections. With [`GatewayConfig::data_dir`] set it first reads the approval
    /// state there: an unreadable file is an [`Error::Config`] naming it.
    pub async fn start(config: GatewayConfig, addr: SocketAddr) -> Result<Gateway> {
        if let Some(problem) = config.open_approval(addr) {
            return Err(Error::Config(problem));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let approvals = Approvals::open(&config, addr)?;
        let grpc_listener = match config.grpc_listen {
            Some(at) => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .map_err(|e| Error::Config(format!("cannot listen for gRPC on {at}: {e}")))?,
            ),
            None => None,
        };
        let grpc_addr = match &grpc_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let state = Arc::new(GatewayState::new(config, approvals));
        let sampler = super::views::spawn_sampler(&state);
        let grpc_server =
            grpc_listener.map(|listener| tokio::spawn(super::grpc::serve(state.clone(), listener)));
        let app = super::http_api::router(state.clone());
        // Nagle off on every accepted socket, as the client already has it: the writer
        // task sends small frames (an execute_request, an invoke_response) that must
        // leave at once, and with Nagle a frame written while an earlier one is still
        // unacknowledged waits for the peer's delayed ACK (40 ms on Linux).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted socket");
            }
        });
        let cancel = state.cancel.clone();
        let server = tokio::spawn(async move {
            // With each connection's peer address, which the socket upgrade records
            // on its link (`GET /api/v1/connections`).
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            let serve = axum::serve(listener, app)
                .with_graceful_shutdown(async move { cancel.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "gateway server failed");
            }
        });
        Ok(Gateway {
            state,
            addr,
            grpc_addr,
            server: Some(server),
            grpc_server,
            sampler: Some(sampler),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Phoenix socket URL connectors dial.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/socket/connector/websocket", self.addr)
    }

    /// The bound gRPC address, when the gateway serves gRPC.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// The `grpc://` address connectors dial, when the gateway serves gRPC.
    pub fn grpc_url(&self) -> Option<String> {
        self.grpc_addr.map(|a| format!("grpc://{a}"))
    }

    /// The base URL of the HTTP API.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Executes `payload` (JSON) on `arn` with the default deadline.
    pub async fn execute(&self, arn: &str, payload: serde_json::Value) -> Result<ExecuteOutcome> {
        self.execute_call(arn, payload, None, None).await
    }

    /// Executes `payload` (JSON) on `arn` for `capability_id` within `timeout`
    /// (capped at [`GatewayConfig::max_execute_timeout`]).
    /// Errors: [`Error::NotFound`] for an unknown ARN, [`Error::Timeout`],
    /// [`Error::ConnectionClosed`] when the socket went away first,
    /// [`Error::Overloaded`] when its socket is at
    /// [`GatewayConfig::max_in_flight_per_socket`].
    pub async fn execute_with(
        &self,
        arn: &str,
        payload: serde_json::Value,
        capability_id: Option<&str>,
        timeout: Duration,
    ) -> Result<ExecuteOutcome> {
        self.execute_call(arn, payload, capability_id, Some(timeout))
            .await
    }

    async fn execute_call(
        &self,
        arn: &str,
        payload: serde_json::Value,
        capability_id: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOutcome> {
        let payload: Bytes = serde_json::to_vec(&payload)
            .map_err(|e| Error::Payload(e.to_string()))?
            .into();
        let started = Instant::now();
        let call = ExecuteCall {
            payload,
            encoding: PayloadEncoding::Json,
            capability_id: capability_id.unwrap_or_default().to_owned(),
            context: HashMap::new(),
            timeout,
        };
        let resp = self.state.execute(arn, call).await?;
        tracing::trace!(
            arn,
            elapsed_us = started.elapsed().as_micros() as u64,
            "execute answered"
        );
        Ok(outcome(resp))
    }

    /// Every registration, ordered by ARN, with its scope and latest metrics report.
    pub fn registrations(&self) -> Vec<RegistrationInfo> {
        self.state.registry().list()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> GatewayStats {
        self.state.stats()
    }

    /// Waits until at least `n` registrations exist, at most `deadline`; false on timeout.
    /// A registration counts only once its `register_response` is queued to its
    /// connector, so an execute issued right after this returns reaches a connector
    /// that knows its ARN.
    pub async fn wait_for_registrations(&self, n: usize, deadline: Duration) -> bool {
        let mut rx = self.state.registration_count.subscribe();
        tokio::time::timeout(deadline, rx.wait_for(|c| *c >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Ids of the open sockets.
    pub fn socket_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .state
            .sockets
            .lock()
            .expect("sockets lock")
            .keys()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    pub(crate) fn socket(&self, socket_id: u64) -> Option<Arc<ConnectorLink>> {
        let sockets = self.state.sockets.lock().expect("sockets lock");
        sockets.get(&socket_id).cloned()
    }

    /// How many tasks the gateway started are still running: a reader and a writer per
    /// socket, a reader per gRPC stream, and one per invoke in flight. A leak of any of them shows here first.
    pub fn tracked_tasks(&self) -> usize {
        self.state.tasks.len()
    }

    /// The graceful stop: `/readyz` turns 503 and new sockets and executes are
    /// refused; executes in flight get [`GatewayConfig::shutdown_grace`] to be
    /// answered; then every Phoenix socket is told (`phx_close` on its lobby, a close
    /// frame with code 1001) and every gRPC stream ends with UNAVAILABLE, so
    /// connectors reconnect at once, and executes still unanswered fail with a clear
    /// error. Approval state needs no flush: it is written to the data dir as it
    /// changes. Returns once the port is released, with the number of tasks still
    /// running when the wait gave up: 0 on a clean stop.
    pub async fn shutdown(mut self) -> usize {
        let started = Instant::now();
        self.state.begin_stop();
        let grace = self.state.config.shutdown_grace;
        let unanswered = match tokio::time::timeout(grace, self.state.executing.wait()).await {
            Ok(()) => 0,
            Err(_) => self.state.executing.len(),
        };
        let sockets = self.drop_all_sockets();
        self.state.cancel.cancel();
        self.state.tasks.close();
        let servers = [
            self.server.take(),
            self.grpc_server.take(),
            self.sampler.take(),
        ];
        let tasks = self.state.tasks.clone();
        let stopped = tokio::time::timeout(SHUTDOWN_GRACE, async move {
            for server in servers.into_iter().flatten() {
                let _ = server.await;
            }
            tasks.wait().await;
        })
        .await;
        let left = self.state.tasks.len();
        if stopped.is_err() {
            tracing::warn!(?SHUTDOWN_GRACE, left, "gateway did not stop in time");
        }
        tracing::info!(
            target: crate::signals::STOP_LOG_TARGET,
            elapsed_ms = started.elapsed().as_millis() as u64,
            sockets_told = sockets,
            executes_failed = unanswered,
            tasks_left = left,
            "gateway stopped: executes in flight answered or failed, every connector told to reconnect"
        );
        left
    }
}
