//! `switchboard demo`: the whole loop on one machine, with no setup and one command.
//!
//! One in-process reference gateway on an ephemeral loopback port serves two sections:
//!
//! 1. **Execute** ([`execute`]): echo connectors for several tenants through one
//!    `MultiConnectorRunner` (one socket per tenant); concurrent HTTP clients send
//!    execute requests through the gateway's HTTP API and every answer is checked.
//! 2. **Deliver** ([`deliver`], feature `runtime`): a [`switchboard::Runtime`] on an
//!    embedded SQLite store in a temp dir. Signed GitHub webhooks are posted to its
//!    ingress; its trigger bindings match them, the outbox takes the rows in the
//!    webhook's own transaction, and the dispatcher delivers them by `invoke` through
//!    the gateway to target connectors that share one socket. One binding always fails:
//!    it is retried, dead-lettered, and its dead-letter handler runs.
//!
//! The deliver loop is the main part (the "whole loop"), but the execute section
//! stays and runs first: it is the multiplexer alone, the layer every delivery rides on,
//! so if the loop ever fails the first table already says whether the sockets work. It
//! is also the only section in a build without the `runtime` feature.
//!
//! The deliver section prints both consoles' URLs (the gateway's and the runtime's
//! `/console`); `--keep-running` keeps everything up after the tables until Ctrl-C.
//!
//! Each section prints a table; any failed expectation (a wrong answer, a delivery
//! missing, a count that disagrees) ends the demo with a message and a non-zero exit.

mod args;
mod execute;

#[cfg(feature = "runtime")]
mod connectors;
#[cfg(feature = "runtime")]
mod deliver;
#[cfg(feature = "runtime")]
mod histogram;
mod latency;
#[cfg(feature = "runtime")]
mod observed;
#[cfg(feature = "runtime")]
mod report;
#[cfg(feature = "runtime")]
mod webhooks;

pub(crate) use args::DemoArgs;

use switchboard::gateway::{Gateway, GatewayConfig};

pub(crate) async fn run(args: DemoArgs) -> switchboard::Result<()> {
    let gateway = Gateway::start(
        GatewayConfig::default(),
        "127.0.0.1:0".parse().expect("literal"),
    )
    .await?;
    let result = sections(&args, &gateway).await;
    gateway.shutdown().await;
    result
}

async fn sections(args: &DemoArgs, gateway: &Gateway) -> switchboard::Result<()> {
    println!("switchboard demo");
    println!();
    let failed_executes = execute::run(args, gateway).await?;
    #[cfg(feature = "runtime")]
    {
        println!();
        // The execute section's sockets are closed by now; count the deliver section's
        // from here.
        let sockets_before = gateway.stats().sockets_accepted;
        let sizing = observed::Sizing {
            webhooks: args.webhooks,
            concurrency: args.webhook_concurrency.max(1),
            deadline: std::time::Duration::from_secs(args.deadline_secs),
            keep_running: args.keep_running,
        };
        deliver::run(sizing, gateway, sockets_before).await?;
    }
    #[cfg(not(feature = "runtime"))]
    {
        println!();
        println!("(the deliver section, webhooks through the outbox to connectors, needs the `runtime` feature: cargo run --release --features gateway,runtime -- demo)");
    }
    if failed_executes > 0 {
        return Err(switchboard::Error::Connector(format!(
            "demo: {failed_executes} execute(s) failed or came back with another request's payload"
        )));
    }
    Ok(())
}
