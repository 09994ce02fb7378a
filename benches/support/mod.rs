//! Shared by the bench binaries: percentiles, table printing, loopback echo servers.
#![allow(dead_code)]

use std::time::Duration;

/// Latency percentile of a sorted sample.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Formats microseconds.
pub fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

/// One measured configuration.
pub struct Sample {
    pub ops: u64,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl Sample {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
    pub fn p(&mut self, q: f64) -> Duration {
        self.latencies.sort_unstable();
        percentile(&self.latencies, q)
    }
}

/// The number after the flag `name` on the command line, or `default`.
pub fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The comma-separated items after the flag `name` on the command line, if given.
pub fn list(name: &str) -> Option<Vec<String>> {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.split(',').map(str::to_owned).collect())
}

/// `N cores, <CPU model>`: what every table's heading names, since figures compare
/// only within one machine and one run.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "{} cores, {cpu}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )
}

/// How long each configuration runs, from `SWITCHBOARD_BENCH_SECS` (default 2).
pub fn run_for() -> Duration {
    run_for_or(2.0)
}

/// How long each configuration runs, from `SWITCHBOARD_BENCH_SECS`, else `default_secs`.
pub fn run_for_or(default_secs: f64) -> Duration {
    let secs = std::env::var("SWITCHBOARD_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(default_secs);
    Duration::from_secs_f64(secs)
}

/// A running runner of echo registrations of `tenant` at `url`, one per instance id,
/// each running and queueing up to `limit` executes so that no request of the bench is
/// refused as overloaded; returns once all are registered.
pub async fn echo_runner(
    url: &str,
    tenant: &str,
    instances: impl IntoIterator<Item = String>,
    limit: usize,
) -> (
    std::sync::Arc<switchboard::MultiConnectorRunner>,
    tokio::task::JoinHandle<switchboard::Result<()>>,
) {
    use switchboard::{ConnectorConfig, EchoConnector, MultiConnectorRunner, Registration};
    let registrations = instances
        .into_iter()
        .map(|i| {
            let cfg = ConnectorConfig::builder(url, tenant)
                .instance_id(i)
                .max_concurrent_requests(limit)
                .max_queued_requests(limit)
                .build()
                .unwrap();
            Registration::new(cfg, EchoConnector)
        })
        .collect::<Vec<_>>();
    let options = switchboard::RunnerOptions::default();
    let runner = std::sync::Arc::new(MultiConnectorRunner::new(options, registrations).unwrap());
    let run = tokio::spawn({
        let r = runner.clone();
        async move { r.run().await }
    });
    runner
        .wait_registered(Duration::from_secs(60))
        .await
        .unwrap();
    (runner, run)
}

/// User plus system CPU time of this whole process (every thread).
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is handed, which is plain data for
    // which all-zeroes is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Bytes this process has caused to be written to storage (`write_bytes` of
/// `/proc/self/io`: page-cache pages it dirtied, each counted again when dirtied again
/// after being written back); 0 where there is no such file.
pub fn process_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `sha256=<hex HMAC-SHA256 of body>`: the signature a GitHub-style or `generic_hmac`
/// source checks, for the benches that post signed webhooks.
#[cfg(feature = "runtime")]
pub fn hmac_sha256_signature(secret: &str, body: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(body.as_bytes());
    let hex: String = m
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}
