//! A 32 MiB message to a connector is refused by its WebSocket layer from the frame
//! header, so the connector process does not grow by anything like 32 MiB, and the
//! socket reconnects. Alone in its own test binary, so no other test moves the
//! process's peak memory; the sender is a Node process for the same reason.
#![cfg(feature = "gateway")]

mod common;
#[path = "interop/packages.rs"]
mod node_packages;

use std::process::Stdio;

use common::{eventually, tagged, DEADLINE};
use switchboard::{MultiConnectorRunner, RunnerOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

const MESSAGE: usize = 32 * 1024 * 1024;

/// Peak resident memory of this process, KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM line")
}

#[tokio::test]
async fn a_32_mib_message_is_refused_unbuffered_and_the_socket_reconnects() {
    let dir = node_packages::installed(&["ws"]);
    let mut server = tokio::process::Command::new("node")
        .arg(dir.join("big_frame_server.js"))
        .arg(MESSAGE.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("the server printed its port")
        .unwrap()
        .unwrap();
    let port = serde_json::from_str::<serde_json::Value>(&first).unwrap()["port"]
        .as_u64()
        .unwrap();

    let before = peak_rss_kib();
    let url = format!("ws://127.0.0.1:{port}/socket/connector/websocket");
    let runner = std::sync::Arc::new(
        MultiConnectorRunner::new(RunnerOptions::default(), vec![tagged(&url, "acme", "a")])
            .unwrap(),
    );
    let r = runner.clone();
    let _run = tokio::spawn(async move { r.run().await });
    let h = runner.registrations()[0].clone();
    eventually(
        "the oversized message to be refused and the socket to reconnect",
        || async {
            let m = h.metrics();
            m.frames_dropped.get("too_large").is_some_and(|n| *n >= 1) && m.disconnects >= 1
        },
    )
    .await;
    let grown = peak_rss_kib().saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "peak RSS grew by {grown} KiB for a {} KiB message",
        MESSAGE / 1024
    );
    runner.shutdown_handle().shutdown();
}
