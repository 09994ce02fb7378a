//! Time for 2,000 registrations over 20 tenants to all re-register after a gateway
//! restart, beside the baseline of the same run: the time the same registrations took to
//! register from a cold start. Also prints how the reconnects spread out in time
//! (jitter), from the gateway's view.
//!
//! `cargo bench --bench reconnect_storm --all-features`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard::gateway::TestGateway;
use switchboard::{
    ConnectorConfig, EchoConnector, MultiConnectorRunner, Registration, RunnerOptions,
};

#[tokio::main]
async fn main() {
    let (tenants, per_tenant) = (20usize, 100usize);
    let n = tenants * per_tenant;
    let mut gw = TestGateway::start().await;
    let connector: Arc<dyn switchboard::BaseConnector> = Arc::new(EchoConnector);
    let mut regs = Vec::with_capacity(n);
    for t in 0..tenants {
        for i in 0..per_tenant {
            let cfg = ConnectorConfig::builder(gw.ws_url(), format!("tenant-{t}"))
                .instance_id(format!("r-{i}"))
                .build()
                .unwrap();
            regs.push(Registration::shared(cfg, connector.clone()));
        }
    }
    let cold_start = Instant::now();
    let runner = Arc::new(MultiConnectorRunner::new(RunnerOptions::default(), regs).unwrap());
    let run = tokio::spawn({
        let r = runner.clone();
        async move { r.run().await }
    });
    assert!(gw.wait_for_registrations(n, Duration::from_secs(60)).await);
    let cold = cold_start.elapsed();

    let restart = Instant::now();
    gw.restart().await;
    let mut first_socket = None;
    let mut sockets_seen = 0;
    // Record when each socket came back, to show the jitter spread.
    let mut arrivals = Vec::new();
    while sockets_seen < tenants {
        if gw.wait_for_registrations(n, Duration::from_millis(1)).await {
            break;
        }
        let accepted = gw.stats().sockets_accepted as usize;
        if accepted > sockets_seen {
            sockets_seen = accepted;
            let at = restart.elapsed();
            first_socket.get_or_insert(at);
            arrivals.push(at);
        }
        tokio::task::yield_now().await;
    }
    assert!(
        gw.wait_for_registrations(n, Duration::from_secs(60)).await,
        "all re-registered"
    );
    let storm = restart.elapsed();
    runner.shutdown_handle().shutdown();
    let _ = run.await;

    println!(
        "{n} registrations over {tenants} tenants (default backoff: 500 ms initial, jitter 0.5)"
    );
    println!();
    println!("| measure | seconds |");
    println!("|---|---:|");
    println!(
        "| cold start: all registered (baseline) | {:.3} |",
        cold.as_secs_f64()
    );
    println!(
        "| after gateway restart: all re-registered | {:.3} |",
        storm.as_secs_f64()
    );
    println!(
        "| ratio restart / cold start | {:.2} |",
        storm.as_secs_f64() / cold.as_secs_f64()
    );
    if let (Some(first), Some(last)) = (arrivals.first(), arrivals.last()) {
        println!("| first socket back | {:.3} |", first.as_secs_f64());
        println!("| last socket back | {:.3} |", last.as_secs_f64());
    }
}
