//! [`TestGateway`]: the reference gateway on an ephemeral loopback port, for your own
//! integration tests, with a restart that keeps the port.

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use super::config::GatewayConfig;
use super::server::Gateway;

/// The default execute deadline of [`TestGateway::start`]: long enough for a loaded CI
/// machine, short enough that a lost answer fails the test quickly.
pub const TEST_EXECUTE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `restart` keeps retrying to bind the old port.
const REBIND_DEADLINE: Duration = Duration::from_secs(10);

/// A gateway for tests: `TestGateway::start().await`, then use it as a [`Gateway`]
/// (it derefs to one): `ws_url()`, `grpc_url()`, `execute(arn, payload)`, `stats()`,
/// the hooks.
pub struct TestGateway {
    gateway: Option<Gateway>,
    config: GatewayConfig,
    addr: SocketAddr,
}

impl TestGateway {
    /// Starts on `127.0.0.1:0` with the test defaults: the production configuration
    /// except a [`TEST_EXECUTE_TIMEOUT`] execute deadline, so a test whose connector
    /// never answers fails in seconds rather than half a minute, and no shutdown
    /// grace, so a stop or restart fails executes in flight at once as a crash would
    /// (start with [`TestGateway::start_with`] to test the grace). The idle timeout stays
    /// at its production value because it must exceed the clients' heartbeat interval.
    pub async fn start() -> TestGateway {
        Self::start_with(
            GatewayConfig::default()
                .with_default_execute_timeout(TEST_EXECUTE_TIMEOUT)
                .with_shutdown_grace(std::time::Duration::ZERO),
        )
        .await
    }

    /// Starts on `127.0.0.1:0` with `config`, serving gRPC too: on
    /// [`GatewayConfig::grpc_listen`] when set, else on another ephemeral loopback port
    /// ([`Gateway::grpc_url`]). Panics when it cannot bind: this is a test fixture, and
    /// a test cannot proceed without it.
    pub async fn start_with(mut config: GatewayConfig) -> TestGateway {
        let loopback: SocketAddr = "127.0.0.1:0".parse().expect("literal");
        if config.grpc_listen.is_none() {
            config.grpc_listen = Some(loopback);
        }
        let gateway = Gateway::start(config.clone(), loopback)
            .await
            .expect("bind an ephemeral loopback port");
        let addr = gateway.local_addr();
        // A restart keeps the gRPC port as well as the WebSocket one.
        config.grpc_listen = gateway.grpc_addr();
        TestGateway {
            gateway: Some(gateway),
            config,
            addr,
        }
    }

    /// Shuts the gateway down as [`Gateway::shutdown`] does and returns its count of
    /// tasks left running (0 on a clean stop), for tests that check nothing leaks.
    pub async fn shutdown(mut self) -> usize {
        match self.gateway.take() {
            Some(gateway) => gateway.shutdown().await,
            None => 0,
        }
    }

    /// Shuts the gateway down (every socket drops) and starts a fresh one on the same
    /// port, as a gateway restart looks to clients: registrations and counters are gone.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.resume().await;
    }

    /// Shuts the gateway down and keeps its port number, for tests of what clients do
    /// while it is away; [`TestGateway::resume`] brings it back. Using the gateway
    /// (through `Deref`) while it is stopped panics.
    pub async fn stop(&mut self) {
        if let Some(old) = self.gateway.take() {
            old.shutdown().await;
        }
    }

    /// Starts a fresh gateway on the port of the stopped one (nothing if it runs).
    pub async fn resume(&mut self) {
        if self.gateway.is_some() {
            return;
        }
        let deadline = tokio::time::Instant::now() + REBIND_DEADLINE;
        loop {
            match Gateway::start(self.config.clone(), self.addr).await {
                Ok(g) => {
                    self.gateway = Some(g);
                    return;
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "port not free yet; retrying");
                    tokio::task::yield_now().await;
                }
                Err(e) => panic!("could not rebind {} after restart: {e}", self.addr),
            }
        }
    }
}

impl Deref for TestGateway {
    type Target = Gateway;

    fn deref(&self) -> &Gateway {
        self.gateway
            .as_ref()
            .expect("a TestGateway holds a gateway unless it was stopped")
    }
}
