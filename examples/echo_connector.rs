//! The smallest connector: echoes every payload back.
//!
//! ```sh
//! cargo run --features gateway -- gateway --listen 127.0.0.1:4000   # in one terminal
//! SWITCHBOARD_GATEWAY_URL=ws://127.0.0.1:4000 SWITCHBOARD_TENANT_ID=acme \
//!   cargo run --example echo_connector                               # in another
//! curl -s -XPOST localhost:4000/api/v1/connectors/matrix:acme:echo:$INSTANCE/execute \
//!   -H 'content-type: application/json' -d '{"payload":{"hello":"world"}}'
//! ```

use async_trait::async_trait;
use switchboard::{
    BaseConnector, ConnectorConfig, MultiConnectorRunner, Payload, Registration, RunnerOptions,
};

/// Answers every execute with its own payload.
struct Echo;

#[async_trait]
impl BaseConnector for Echo {
    fn connector_type(&self) -> &str {
        "echo"
    }

    async fn execute(
        &self,
        payload: Payload,
        _capability_id: Option<&str>,
    ) -> switchboard::Result<Payload> {
        Ok(payload)
    }
}

#[tokio::main]
async fn main() -> switchboard::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let config = ConnectorConfig::from_env()?;
    let runner =
        MultiConnectorRunner::new(RunnerOptions::default(), [Registration::new(config, Echo)])?;
    let stop = runner.shutdown_handle();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.shutdown();
    });
    runner.run().await
}
