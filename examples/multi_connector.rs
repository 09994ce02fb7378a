//! Many registrations, two tenants, one process: 50 registrations ride two sockets.
//!
//! Starts its own reference gateway so it runs with no setup:
//! `cargo run --features gateway --example multi_connector`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard::gateway::{Gateway, GatewayConfig};
use switchboard::{
    ConnectorConfig, EchoConnector, MultiConnectorRunner, Registration, RunnerOptions,
};

#[tokio::main]
async fn main() -> switchboard::Result<()> {
    let gateway = Gateway::start(GatewayConfig::default(), "127.0.0.1:0".parse().unwrap()).await?;
    let echo: Arc<dyn switchboard::BaseConnector> = Arc::new(EchoConnector);
    let mut regs = Vec::new();
    for tenant in ["north", "south"] {
        for i in 0..25 {
            let cfg = ConnectorConfig::builder(gateway.ws_url(), tenant)
                .instance_id(format!("worker-{i}"))
                .build()?;
            regs.push(Registration::shared(cfg, echo.clone()));
        }
    }
    let runner = Arc::new(MultiConnectorRunner::new(RunnerOptions::default(), regs)?);
    let run = tokio::spawn({
        let r = runner.clone();
        async move { r.run().await }
    });
    runner.wait_registered(Duration::from_secs(10)).await?;
    println!(
        "{} registrations over {} sockets",
        runner.registrations().len(),
        gateway.stats().sockets_open
    );
    for h in runner.registrations().iter().take(3) {
        let arn = h.arn().expect("registered");
        let out = gateway.execute(&arn, json!({ "to": arn })).await?;
        println!("{arn} answered {}", out.payload);
    }
    runner.shutdown_handle().shutdown();
    run.await.expect("runner task")?;
    gateway.shutdown().await;
    Ok(())
}
