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
///
/// With the `otel` feature, the `OTEL_*` variables install span export
/// ([`crate::Telemetry`]) for the run: each execute is a span under the caller's
/// trace, and so are the connector's own `tracing` spans inside it (when no `tracing`
/// subscriber is installed yet, one is, carrying only the export layer; with one
/// installed, add [`crate::Telemetry::layer`] to it yourself before calling `run`).
pub async fn run(connector: impl BaseConnector) -> Result<()> {
    let config = ConnectorConfig::from_env()?;
    let options = RunnerOptions::from_env()?;
    #[cfg(feature = "otel")]
    let telemetry = crate::Telemetry::from_env()?;
    #[cfg(feature = "otel")]
    if let Some(t) = &telemetry {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        if tracing_subscriber::registry()
            .with(t.layer())
            .try_init()
            .is_err()
        {
            tracing::warn!("a tracing subscriber is already installed: add switchboard::Telemetry::layer() to it to export execute spans");
        }
    }
    let result = MultiConnectorRunner::new(options, [Registration::new(config, connector)])?
        .run_until_signal()
        .await;
    #[cfg(feature = "otel")]
    if let Some(t) = telemetry {
        t.shutdown().await;
    }
    result
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
