//! Interop: the official `phoenix` npm client against the reference gateway (join,
//! heartbeats, `unmatched topic`, duplicate join, a register over the `proto` event).
//! The first run installs the Node packages (`tests/interop/packages.rs`).
#![cfg(feature = "gateway")]

#[path = "interop/packages.rs"]
mod node_packages;
use std::time::Duration;

use switchboard::gateway::TestGateway;

#[tokio::test]
async fn official_phoenix_js_client_interoperates_with_the_gateway() {
    let dir = node_packages::installed(&["phoenix", "ws"]);
    let gw = TestGateway::start().await;
    let endpoint = format!("ws://{}/socket/connector", gw.local_addr());
    let run = tokio::process::Command::new("node")
        .arg(dir.join("client.js"))
        .arg(&endpoint)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("node finished")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| {
            panic!(
                "bad output ({e}): {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(out.status.success(), "client failed: {v}");
    assert_eq!(v["join"], "ok");
    assert!(
        v["register_response"]
            .as_str()
            .unwrap()
            .contains("matrix:js:echo:n1"),
        "{v}"
    );
    assert_eq!(v["unknown_join"]["reason"], "unmatched topic", "{v}");
    assert_eq!(v["raw_unjoined_push"]["status"], "error", "{v}");
    assert_eq!(
        v["raw_unjoined_push"]["response"]["reason"], "unmatched topic",
        "{v}"
    );
    assert_eq!(v["duplicate_join_reply"], "ok");
    assert_eq!(v["old_channel_closed"], true);
    assert!(v["heartbeat_replies"].as_u64().unwrap() >= 3, "{v}");
    assert!(gw.stats().sockets_accepted >= 1);
}
