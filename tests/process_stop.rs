//! What an orchestrator's SIGTERM does to the real binaries: `switchboard serve` with
//! `http` and `invoke` deliveries in flight stops taking requests (503 with
//! `Retry-After`, `/readyz` 503), lets the attempts that end within the shutdown grace
//! finish, releases the rest and exits 0, so a restart delivers them at once although
//! their lease is ten minutes; a second signal during the stop ends the process at once;
//! `switchboard gateway` answers an execute in flight, tells its connectors to
//! reconnect, exits 0, and the connectors register again with a restarted gateway.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::extract::{Path, State};
use axum::routing::post;
use serde_json::{json, Value};
use switchboard::gateway::TestGateway;
use switchboard::{
    BaseConnector, ConnectorConfig, EchoConnector, ExecuteContext, MultiConnectorRunner, Payload,
    Registration, RunnerOptions,
};
use tokio::sync::watch;

use common::eventually;
use common::process::{exited, signal};
use common::serve::{free_port, Serve};

/// How a test's handlers answer: each call is counted by name on arrival; `…quick`
/// calls answer once the gate opens, `…stuck` calls never do.
#[derive(Clone)]
struct Handlers {
    arrived: Arc<Mutex<HashMap<String, usize>>>,
    gate: Arc<watch::Sender<bool>>,
}

impl Handlers {
    fn new() -> Handlers {
        Handlers {
            arrived: Arc::default(),
            gate: Arc::new(watch::Sender::new(false)),
        }
    }

    fn arrived(&self, name: &str) -> usize {
        self.arrived.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    async fn answer(&self, name: &str) {
        *self
            .arrived
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default() += 1;
        if name.ends_with("stuck") {
            std::future::pending::<()>().await;
        }
        let mut open = self.gate.subscribe();
        let _ = open.wait_for(|o| *o).await;
    }

    /// Starts an HTTP receiver at `/{name}` on a free loopback port; returns its base.
    async fn serve_http(&self) -> String {
        async fn hit(State(h): State<Handlers>, Path(name): Path<String>) -> &'static str {
            h.answer(&format!("http-{name}")).await;
            "ok"
        }
        let app = axum::Router::new()
            .route("/{name}", post(hit))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }
}

#[async_trait]
impl BaseConnector for Handlers {
    fn connector_type(&self) -> &str {
        "holder"
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        unreachable!("executes come with a context")
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        capability: Option<&str>,
        _: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        self.answer(&format!("invoke-{}", capability.unwrap_or("")))
            .await;
        Ok(payload)
    }
}

/// A runtime config with four bindings, http and invoke, quick and stuck, a ten-minute
/// lease (so only a release makes a row claimable again soon) and `grace`.
fn config(port: u16, store: &str, gw: &str, http: &str, grace: &str) -> String {
    let mut text = format!(
        r#"listen = "127.0.0.1:{port}"
store = "{store}"

[gateway]
url = "{gw}"
tenant = "acme"
instance_id = "rt"

[dispatcher]
lease = "10m"
poll_interval = "100ms"
shutdown_grace = "{grace}"

[outbound]
allow = ["127.0.0.0/8"]
"#
    );
    for speed in ["quick", "stuck"] {
        text.push_str(&format!(
            "\n[[triggers]]\nid = \"http-{speed}\"\nhandler = {{ http = \"{http}/{speed}\", secret_env = \"STOP_TEST_SECRET\" }}\ntimeout = \"10m\"\n\n[[triggers]]\nid = \"invoke-{speed}\"\nhandler = {{ invoke = \"acme.holder.h\", capability = \"{speed}\" }}\ntimeout = \"10m\"\n"
        ));
    }
    text
}

/// The `http` bindings' signing secret, in the runtime's environment.
fn secret() -> [(&'static str, String); 1] {
    [(
        "STOP_TEST_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
    )]
}

/// Starts the connector that answers the invoke bindings, on `gw`.
async fn start_connector(gw: &TestGateway, h: &Handlers) -> switchboard::RegistrationHandle {
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("h")
        .build()
        .unwrap();
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), []).unwrap();
    let handle = runner.add(Registration::new(cfg, h.clone())).await.unwrap();
    tokio::spawn(async move { runner.run().await });
    handle.wait_registered(common::DEADLINE).await.unwrap();
    handle
}

async fn post_json(url: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// Rows in the SQLite outbox: (all, leased).
fn outbox_rows(store: &str) -> (i64, i64) {
    let db = rusqlite::Connection::open(store).unwrap();
    db.query_row("SELECT count(*), count(lease_token) FROM outbox", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_attempts_within_the_grace_releases_the_rest_and_exits_zero() {
    let gw = TestGateway::start().await;
    let h = Handlers::new();
    let _conn = start_connector(&gw, &h).await;
    let http = h.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("sb.db").display().to_string();
    let port = free_port();
    let text = config(port, &store, &gw.ws_url(), &http, "3s");
    let mut rt = Serve::started(dir.path(), "rt", port, &text, &secret()).await;
    for binding in ["http-quick", "http-stuck", "invoke-quick", "invoke-stuck"] {
        for n in 0..2 {
            let url = format!("{}/api/v1/triggers/{binding}/invoke", rt.base);
            assert_eq!(post_json(&url, json!({"n": n})).await.status(), 202);
        }
    }
    eventually("every delivery in flight at its handler", || async {
        ["http-quick", "http-stuck", "invoke-quick", "invoke-stuck"]
            .iter()
            .all(|b| h.arrived(b) == 2)
    })
    .await;

    let child = rt.child.as_mut().unwrap();
    signal(child, libc::SIGTERM);
    // The stop has begun: not ready, and a new request is refused with a retry hint,
    // while the attempts in flight are still running.
    let http_client = reqwest::Client::new();
    eventually("/readyz to say the runtime is stopping", || async {
        let Ok(resp) = http_client.get(format!("{}/readyz", rt.base)).send().await else {
            return false;
        };
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or_default();
        status == 503 && body["checks"]["stopping"]["ok"] == json!(false)
    })
    .await;
    let refused = post_json(
        &format!("{}/api/v1/triggers/http-quick/invoke", rt.base),
        json!({"n": "late"}),
    )
    .await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_eq!(
        http_client
            .get(format!("{}/healthz", rt.base))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "alive while stopping"
    );

    h.gate.send_replace(true);
    let status = exited(rt.child.as_mut().unwrap()).await;
    let log = rt.log();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("runtime stopped")
            && log.contains("attempts_finished=4")
            && log.contains("attempts_abandoned=4")
            && log.contains("rows_released=4"),
        "one line says what the stop finished and released: {log}"
    );
    assert_eq!(
        outbox_rows(&store),
        (4, 0),
        "the stuck rows are back in the outbox, none leased"
    );

    // A restart delivers the released rows at once, not after their 10-minute lease;
    // now every handler answers.
    rt.child = None;
    let rt = Serve::started(dir.path(), "rt", port, &text, &secret()).await;
    eventually("the released rows delivered again", || async {
        h.arrived("http-stuck") == 4 && h.arrived("invoke-stuck") == 4
    })
    .await;
    drop(rt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_during_the_stop_ends_the_process_at_once() {
    let gw = TestGateway::start().await;
    let h = Handlers::new();
    let _conn = start_connector(&gw, &h).await;
    let http = h.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("sb.db").display().to_string();
    let port = free_port();
    let text = config(port, &store, &gw.ws_url(), &http, "10m");
    let mut rt = Serve::started(dir.path(), "rt", port, &text, &secret()).await;
    let url = format!("{}/api/v1/triggers/http-stuck/invoke", rt.base);
    assert_eq!(post_json(&url, json!({})).await.status(), 202);
    eventually("the delivery in flight", || async {
        h.arrived("http-stuck") == 1
    })
    .await;
    signal(rt.child.as_ref().unwrap(), libc::SIGTERM);
    eventually("the stop to begin", || async {
        reqwest::get(format!("{}/readyz", rt.base))
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    // The grace is ten minutes; a second signal does not wait for it.
    signal(rt.child.as_ref().unwrap(), libc::SIGINT);
    let status = exited(rt.child.as_mut().unwrap()).await;
    let log = rt.log();
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("SIGINT during a graceful stop"), "{log}");
    rt.child = None;
}

/// `switchboard gateway` as a child process.
fn start_gateway(port: u16, dir: &std::path::Path, grace: &str) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("gateway.log"))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args([
            "gateway",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--grpc-listen",
            "off",
            "--shutdown-grace",
            grace,
        ])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("switchboard gateway starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_gateway_answers_the_execute_in_flight_and_tells_connectors_to_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut gateway = start_gateway(port, dir.path(), "20");
    let http = reqwest::Client::new();
    eventually("the gateway to be ready", || async {
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let h = Handlers::new();
    let url = format!("ws://127.0.0.1:{port}");
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), []).unwrap();
    let held = runner
        .add(Registration::new(
            ConnectorConfig::builder(url.clone(), "acme")
                .instance_id("h")
                .build()
                .unwrap(),
            h.clone(),
        ))
        .await
        .unwrap();
    let echo = runner
        .add(Registration::new(
            ConnectorConfig::builder(url, "acme")
                .instance_id("echo")
                .build()
                .unwrap(),
            EchoConnector,
        ))
        .await
        .unwrap();
    tokio::spawn(async move { runner.run().await });
    let arn = held.wait_registered(common::DEADLINE).await.unwrap();
    echo.wait_registered(common::DEADLINE).await.unwrap();

    // An execute in flight when the signal comes is answered within the grace.
    let call = tokio::spawn({
        let url = format!("{base}/api/v1/connectors/{arn}/execute");
        async move {
            reqwest::Client::new()
                .post(url)
                .json(&json!({"payload": {"x": 1}, "capability_id": "quick"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    eventually("the execute at its connector", || async {
        h.arrived("invoke-quick") == 1
    })
    .await;
    signal(&gateway, libc::SIGTERM);
    eventually("the gateway to stop being ready", || async {
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    h.gate.send_replace(true);
    assert_eq!(
        call.await.unwrap(),
        200,
        "the execute in flight is answered"
    );
    let status = exited(&mut gateway).await;
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    eventually("the connectors to notice they are unregistered", || async {
        held.arn().is_none() && echo.arn().is_none()
    })
    .await;
    // Told, not left to find a dead socket: the reason is the gateway's going-away
    // close, on which they redial at once rather than after a backoff step.
    let reason = held.metrics().last_disconnect_reason.unwrap_or_default();
    assert!(
        reason.starts_with("the gateway is going away (close 1001"),
        "{reason}"
    );

    // A gateway back on the same port sees both registrations again.
    let mut again = start_gateway(port, dir.path(), "0");
    held.wait_registered(common::DEADLINE).await.unwrap();
    echo.wait_registered(common::DEADLINE).await.unwrap();
    let _ = again.kill();
    let _ = again.wait();
}
