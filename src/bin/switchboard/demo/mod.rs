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

mod execute;

#[cfg(feature = "runtime")]
mod connectors;
#[cfg(feature = "runtime")]
mod deliver;
#[cfg(feature = "runtime")]
mod histogram;
#[cfg(feature = "runtime")]
mod report;
#[cfg(feature = "runtime")]
mod webhooks;

use std::time::Duration;

use switchboard::gateway::{Gateway, GatewayConfig};

/// Demo sizing. The defaults run in a few seconds in a release build.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Execute section: tenants (one socket each).
    #[arg(long, default_value_t = 2)]
    tenants: usize,
    /// Execute section: echo registrations per tenant.
    #[arg(long, default_value_t = 4)]
    per_tenant: usize,
    /// Execute section: execute requests to send in total.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Execute section: concurrent HTTP clients.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Deliver section: distinct signed webhooks to post (every fourth is an
    /// `issues.closed`, the rest `issues.opened`; one more is a redelivery). At least 2,
    /// so that both kinds occur.
    #[cfg(feature = "runtime")]
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(2..))]
    webhooks: u32,
    /// Deliver section: concurrent webhook senders.
    #[cfg(feature = "runtime")]
    #[arg(long, default_value_t = 8)]
    webhook_concurrency: usize,
    /// Deliver section: how long to wait for the outbox to drain and the dead-letter
    /// handler to run before giving up, in seconds.
    #[cfg(feature = "runtime")]
    #[arg(long, default_value_t = 30)]
    deadline_secs: u64,
    /// After the deliver section, keep the gateway, the runtime and the connectors
    /// running until Ctrl-C, so their consoles (URLs printed) can be looked at.
    #[cfg(feature = "runtime")]
    #[arg(long)]
    keep_running: bool,
}

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
        let sizing = deliver::Sizing {
            webhooks: args.webhooks,
            concurrency: args.webhook_concurrency.max(1),
            deadline: Duration::from_secs(args.deadline_secs),
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

/// The value at quantile `q` of `sorted` (nearest rank), zero when empty.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// A latency for the tables: microseconds below 10 ms, milliseconds above.
fn fmt_latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}
