//! The shortest path from a [`BaseConnector`] to a running registration:
//! [`run`] reads the configuration from the environment, registers one connector and
//! serves it until SIGTERM or SIGINT ([`crate::shutdown_signal`]); [`run_until`] takes the configuration and the stop signal
//! as arguments, for a process that has its own (a supervisor, a test).
//!
//! Both are thin on purpose: they are [`MultiConnectorRunner`] with one
//! [`Registration`] and default [`RunnerOptions`], so outgrowing them (several
//! connectors, custom options, handles for `invoke`) means writing those three lines
//! yourself, not learning a second API.

use std::future::Future;

use crate::connector::config::ConnectorConfig;
use crate::connector::BaseConnector;
use crate::error::Result;
use crate::mux::{MultiConnectorRunner, Registration, RunnerOptions};

/// Runs `connector` with the configuration from the environment
/// ([`ConnectorConfig::from_env`], and [`RunnerOptions::from_env`] for the health
/// listener and the stop grace) until the process receives SIGTERM (what Docker,
/// Kubernetes and systemd send) or SIGINT (Ctrl-C), then stops gracefully: running
/// executes finish within the stop grace, it leaves the gateway and returns. A second
/// signal during the stop ends the process at once ([`crate::shutdown_signal`]).
///
/// Fails at once, before connecting, when the configuration is missing or invalid (the
/// error names the variable to set). Once running, connection failures are retried
/// with backoff rather than returned, as a long-running connector should.
///
/// ```no_run
/// use switchboard::{BaseConnector, Payload};
///
/// struct Echo;
///
/// #[async_trait::async_trait]
/// impl BaseConnector for Echo {
///     fn connector_type(&self) -> &str {
///         "echo"
///     }
///     async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
///         Ok(payload)
///     }
/// }
///
/// #[tokio::main]
/// async fn main() -> switchboard::Result<()> {
///     switchboard::run(Echo).await
/// }
/// ```
pub async fn run(connector: impl BaseConnector) -> Result<()> {
    let config = ConnectorConfig::from_env()?;
    let options = RunnerOptions::from_env()?;
    MultiConnectorRunner::new(options, [Registration::new(config, connector)])?
        .run_until_signal()
        .await
}

/// Runs `connector` under `config` until `stop` completes, then deregisters and
/// returns. Fails at once on an invalid configuration (a bad address, an unreadable CA
/// bundle), as [`MultiConnectorRunner::new`] does.
pub async fn run_until(
    config: ConnectorConfig,
    connector: impl BaseConnector,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let runner = MultiConnectorRunner::new(
        RunnerOptions::default(),
        [Registration::new(config, connector)],
    )?;
    let shutdown = runner.shutdown_handle();
    let watcher = tokio::spawn(async move {
        stop.await;
        shutdown.shutdown();
    });
    let result = runner.run().await;
    watcher.abort();
    result
}
