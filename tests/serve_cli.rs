//! `switchboard serve` as an operator runs it: a real process from a config file, a
//! webhook acknowledged, the process killed (SIGKILL, no clean shutdown), and a new
//! process on the same SQLite file that still holds the event and its dedupe claim.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "ingest/support.rs"]
mod support;

use std::process::{Child, Command, Stdio};

use support::{eventually, Delivery, Kind};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(config: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--config"])
        .arg(config)
        .env("GH_SECRET", support::env("GH_SECRET").unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("switchboard serve starts")
}

async fn wait_healthy(http: &reqwest::Client, base: &str) {
    eventually("the server to answer /healthz", || async {
        let resp = http.get(format!("{base}/healthz")).send().await.ok()?;
        resp.status().is_success().then_some(())
    })
    .await;
}

async fn post(http: &reqwest::Client, base: &str, d: &Delivery) -> serde_json::Value {
    let mut req = http.post(format!("{base}/hooks/gh"));
    for (k, v) in &d.headers {
        req = req.header(k, v);
    }
    let resp = req.body(d.body.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

#[tokio::test]
async fn an_acknowledged_webhook_survives_a_killed_process() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\nstore = \"sqlite:{}\"\n[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\n",
            dir.path().join("events.db").display()
        ),
    )
    .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let delivery = Kind::Github.signed("survives-kill");

    let mut first = serve(&config);
    wait_healthy(&http, &base).await;
    let stored = post(&http, &base, &delivery).await;
    assert_eq!(stored["duplicate"], false);
    first.kill().unwrap();
    first.wait().unwrap();

    let mut second = serve(&config);
    wait_healthy(&http, &base).await;
    let again = post(&http, &base, &delivery).await;
    assert_eq!(again["duplicate"], true, "the claim survived the kill");
    assert_eq!(again["id"], stored["id"]);
    let events: serde_json::Value = http
        .get(format!("{base}/api/v1/events"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 1);
    assert_eq!(events["events"][0]["id"], stored["id"]);
    second.kill().unwrap();
    second.wait().unwrap();
}

#[test]
fn a_config_naming_an_unset_secret_fails_with_a_message_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\n[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"SWITCHBOARD_TEST_UNSET_SECRET\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("SWITCHBOARD_TEST_UNSET_SECRET")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SWITCHBOARD_TEST_UNSET_SECRET") && stderr.contains("[config]"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_shipped_example_config_starts_with_its_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/switchboard.toml"
    ))
    .unwrap()
    .replace(
        "listen = \"127.0.0.1:8787\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    )
    .replace(
        "store = \"sqlite:./switchboard-data/events.db\"",
        &format!("store = \"sqlite:{}\"", dir.path().join("e.db").display()),
    );
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, example).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("GITHUB_WEBHOOK_SECRET", "dev")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("switchboard serve starts");
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&http, &base).await;
    let triggers: serde_json::Value = http
        .get(format!("{base}/api/v1/triggers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = triggers["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"dead-letters"), "{triggers}");
    child.kill().unwrap();
    let _ = child.wait();
}
