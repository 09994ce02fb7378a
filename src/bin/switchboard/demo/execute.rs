//! The demo's execute section: the multiplexer alone.
//!
//! Registers echo connectors for several tenants through one `MultiConnectorRunner`
//! (so one socket per tenant), sends execute requests through the gateway's HTTP API
//! from several concurrent clients, checks every answer, and prints a table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard::gateway::Gateway;
use switchboard::{
    ConnectorConfig, EchoConnector, Error, MultiConnectorRunner, Registration, RunnerOptions,
};

use super::args::DemoArgs;
use super::latency::{fmt_latency, percentile};

/// Runs the section and prints its table; the executes that failed or came back wrong.
pub(super) async fn run(args: &DemoArgs, gateway: &Gateway) -> switchboard::Result<usize> {
    let url = gateway.ws_url();
    let sockets_before = gateway.stats().sockets_accepted;
    let mut regs = Vec::new();
    for t in 0..args.tenants {
        for i in 0..args.per_tenant {
            let cfg = ConnectorConfig::builder(url.clone(), format!("tenant-{t}"))
                .instance_id(format!("echo-{i}"))
                .display_name(format!("demo echo {t}/{i}"))
                .build()?;
            regs.push(Registration::new(cfg, EchoConnector));
        }
    }
    let total = regs.len();
    let runner = Arc::new(MultiConnectorRunner::new(RunnerOptions::default(), regs)?);
    let stop = runner.shutdown_handle();
    let run = tokio::spawn({
        let runner = runner.clone();
        async move { runner.run().await }
    });
    runner.wait_registered(Duration::from_secs(10)).await?;
    let arns: Vec<String> = runner
        .registrations()
        .iter()
        .filter_map(|h| h.arn())
        .collect();

    let client = reqwest::Client::new();
    let base = gateway.http_url();
    let concurrency = args.concurrency.max(1);
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let (client, base, arns) = (client.clone(), base.clone(), arns.clone());
        let n = args.requests / concurrency + usize::from(w < args.requests % concurrency);
        workers.push(tokio::spawn(async move {
            drive(client, base, arns, w, n).await
        }));
    }
    let mut latencies = Vec::with_capacity(args.requests);
    let mut failures = 0usize;
    for w in workers {
        let (lat, failed) = w.await.map_err(|e| Error::Connector(e.to_string()))??;
        latencies.extend(lat);
        failures += failed;
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let sockets = gateway.stats().sockets_accepted - sockets_before;
    stop.shutdown();
    let _ = run.await;

    println!(
        "1. execute: {} tenants x {} echo connectors, executes through the gateway HTTP API",
        args.tenants, args.per_tenant
    );
    println!();
    println!("| tenants | sockets | registrations | requests | failed | req/s | p50 | p99 |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {:.0} | {} | {} |",
        args.tenants,
        sockets,
        total,
        latencies.len(),
        failures,
        latencies.len() as f64 / elapsed.as_secs_f64(),
        fmt_latency(percentile(&latencies, 0.50)),
        fmt_latency(percentile(&latencies, 0.99)),
    );
    Ok(failures)
}

/// Sends `n` executes round-robin over the ARNs; checks that each answer echoes its
/// own payload (a cross-routed response would carry another worker's sequence number).
async fn drive(
    client: reqwest::Client,
    base: String,
    arns: Vec<String>,
    worker: usize,
    n: usize,
) -> switchboard::Result<(Vec<Duration>, usize)> {
    let mut lat = Vec::with_capacity(n);
    let mut failed = 0;
    for seq in 0..n {
        let arn = &arns[(worker + seq) % arns.len()];
        let body = json!({ "payload": { "worker": worker, "seq": seq, "arn": arn } });
        let t0 = Instant::now();
        let resp = client
            .post(format!("{base}/api/v1/connectors/{arn}/execute"))
            .json(&body)
            .send()
            .await
            .map_err(|e| Error::Connector(format!("HTTP request failed: {e}")))?;
        let ok = resp.status().is_success();
        let v: serde_json::Value = resp.json().await.unwrap_or_default();
        lat.push(t0.elapsed());
        if !ok || v["success"] != json!(true) || v["payload"] != body["payload"] {
            failed += 1;
        }
    }
    Ok((lat, failed))
}
