//! An SDK-only process as an orchestrator sees it: the runner's health listener
//! (`/healthz`, `/readyz`, `/metrics`), its graceful stop (running executes finish
//! within the stop grace, the rest are answered with an error, the gateway forgets
//! the registrations at once), `reconnect_enabled = false`, and `switchboard echo`
//! under SIGTERM: exit 0, gone from the gateway, a second signal forcing the exit.
//! Real gateway, real sockets, real child processes; every wait is on an event with
//! a deadline.
#![cfg(feature = "gateway")]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::process::{exited, signal};
use common::{eventually, eventually_some, find, spawn, start, tagged, DEADLINE};
use serde_json::{json, Value};
use switchboard::gateway::{ApprovalMode, GatewayConfig, TestGateway, TEST_EXECUTE_TIMEOUT};
use switchboard::proto::RegistrationStatus;
use switchboard::{
    BackoffPolicy, BaseConnector, ConnectorConfig, Error, MultiConnectorRunner, Payload,
    Registration, RunnerOptions,
};
use tokio::sync::Semaphore;

/// A port of the loopback for the health listener, chosen by the OS.
fn any_port() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Echoes; an execute whose payload has `"hold": true` waits until the test
/// releases a permit.
struct Gated(Arc<Semaphore>);

#[async_trait]
impl BaseConnector for Gated {
    fn connector_type(&self) -> &str {
        "gated"
    }
    async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        if payload.as_json().is_some_and(|p| p["hold"] == json!(true)) {
            let _permit = self.0.acquire().await.expect("open");
        }
        Ok(Payload::Json(json!({ "echo": payload.as_json().cloned() })))
    }
}

/// A registration "a" of tenant acme, quick to reconnect.
fn quick(url: &str, instance: &str) -> Registration {
    let mut r = tagged(url, "acme", instance);
    r.config.reconnect = BackoffPolicy::new(Duration::from_millis(10), Duration::from_millis(50));
    r
}

fn gated(url: &str, gate: &Arc<Semaphore>) -> Registration {
    let mut r = quick(url, "slow");
    r.config.max_concurrent_requests = 4;
    r.connector = Arc::new(Gated(gate.clone()));
    r
}

/// `GET http://{addr}{path}`: status and body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let resp = reqwest::get(format!("http://{addr}{path}"))
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// The value of the sample `series` (name and labels as written) in an exposition.
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
}

#[tokio::test]
async fn readyz_turns_ready_only_once_registered_and_metrics_show_a_dropped_socket() {
    let mut gw = TestGateway::start().await;
    let url = gw.ws_url();
    gw.stop().await;
    let opts = RunnerOptions::default().with_health_listen(any_port());
    let runner = MultiConnectorRunner::new(opts, [quick(&url, "a")]).expect("admission");
    let addr = runner.health_addr().expect("a listener was asked for");
    let (runner, join) = spawn(runner);

    eventually("/healthz answers", || async {
        reqwest::get(format!("http://{addr}/healthz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503, "not ready while the gateway is away: {body}");
    assert!(body.contains("acme.tagged.a is registering"), "{body}");

    gw.resume().await;
    eventually("/readyz ready", || async {
        get(addr, "/readyz").await.0 == 200
    })
    .await;

    let h = find(&runner, "a");
    let out = gw
        .execute(&h.arn().unwrap(), json!({"n": 1}))
        .await
        .unwrap();
    assert!(out.success, "{:?}", out.error);
    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    let l = r#"registration="acme.tagged.a",tenant="acme""#;
    assert_eq!(
        sample(
            &text,
            &format!("switchboard_registration_state{{{l},state=\"registered\"}}")
        )
        .as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("switchboard_registration_executes_total{{{l},outcome=\"ok\"}}")
        )
        .as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("switchboard_registration_execute_duration_seconds_count{{{l}}}")
        )
        .as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("switchboard_registration_connected{{{l}}}")).as_deref(),
        Some("1"),
        "{text}"
    );
    assert!(text.contains("# TYPE switchboard_registration_execute_duration_seconds histogram"));
    assert!(
        text.contains("switchboard_socket_connected{tenant=\"acme\""),
        "{text}"
    );

    // The gateway drops the socket: the disconnect shows with its time and reason,
    // and the registration is ready again once re-registered.
    gw.restart().await;
    let text = eventually_some("a disconnect in /metrics", || async {
        let text = get(addr, "/metrics").await.1;
        text.contains(&format!(
            "switchboard_registration_last_disconnect_seconds{{{l},reason=\""
        ))
        .then_some(text)
    })
    .await;
    assert!(
        text.contains("switchboard_socket_last_disconnect_seconds{tenant=\"acme\""),
        "{text}"
    );
    let snap = h.metrics();
    assert!(snap.last_disconnect_at_ms.is_some());
    assert!(!snap.last_disconnect_reason.unwrap_or_default().is_empty());
    eventually("ready after the restart", || async {
        get(addr, "/readyz").await.0 == 200
    })
    .await;

    runner.shutdown_handle().shutdown();
    tokio::time::timeout(DEADLINE, join)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_registration_pending_approval_counts_as_ready() {
    let gw = TestGateway::start_with(
        GatewayConfig::default()
            .with_default_execute_timeout(TEST_EXECUTE_TIMEOUT)
            .with_approval(ApprovalMode::Manual),
    )
    .await;
    let creds = tempfile::tempdir().unwrap();
    let mut r = quick(&gw.ws_url(), "p");
    r.config.credentials_dir = Some(creds.path().to_owned());
    let opts = RunnerOptions::default().with_health_listen(any_port());
    let runner = MultiConnectorRunner::new(opts, [r]).expect("admission");
    let addr = runner.health_addr().unwrap();
    let (runner, join) = spawn(runner);
    let h = find(&runner, "p");
    eventually("pending", || async {
        h.status() == Some(RegistrationStatus::Pending)
    })
    .await;
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let text = get(addr, "/metrics").await.1;
    let l = r#"registration="acme.tagged.p",tenant="acme""#;
    assert_eq!(
        sample(
            &text,
            &format!("switchboard_registration_state{{{l},state=\"pending_approval\"}}")
        )
        .as_deref(),
        Some("1"),
        "{text}"
    );
    runner.shutdown_handle().shutdown();
    tokio::time::timeout(DEADLINE, join)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_stop_lets_running_executes_finish_and_refuses_new_ones() {
    let gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let opts = RunnerOptions::default().with_stop_grace(DEADLINE);
    let (runner, join) = start(opts, vec![gated(&gw.ws_url(), &gate)]).await;
    let h = runner.registrations()[0].clone();
    let arn = h.arn().unwrap();
    let gw = Arc::new(gw);
    let first = {
        let (gw, arn) = (gw.clone(), arn.clone());
        tokio::spawn(async move {
            gw.execute_with(&arn, json!({"n": 1, "hold": true}), None, DEADLINE)
                .await
        })
    };
    eventually("the first execute running", || async {
        h.metrics().requests_received == 1
    })
    .await;

    runner.shutdown_handle().shutdown();
    // Once the stop began, a new execute is refused at once (a permit is free, so
    // only the stop refuses it); until then one is answered, so it is retried.
    let refused = eventually_some("a new execute refused", || async {
        let out = gw
            .execute_with(&arn, json!({"n": 2}), None, DEADLINE)
            .await
            .ok()?;
        (!out.success).then_some(out)
    })
    .await;
    let error = refused.error.unwrap_or_default();
    assert!(
        error.starts_with("connection_closed:") && error.contains("shutting down"),
        "{error}"
    );

    // The running one still finishes with its own answer.
    gate.add_permits(10);
    let out = tokio::time::timeout(DEADLINE, first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(out.success, "{:?}", out.error);
    assert_eq!(out.payload["echo"], json!({"n": 1, "hold": true}));
    tokio::time::timeout(DEADLINE, join)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    eventually("the gateway forgot the registration", || async {
        gw.registrations().is_empty()
    })
    .await;
}

#[tokio::test]
async fn an_execute_running_past_the_stop_grace_is_answered_with_an_error() {
    let gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let opts = RunnerOptions::default().with_stop_grace(Duration::from_millis(100));
    let (runner, join) = start(opts, vec![gated(&gw.ws_url(), &gate)]).await;
    let h = runner.registrations()[0].clone();
    let arn = h.arn().unwrap();
    let gw = Arc::new(gw);
    let call = {
        let gw = gw.clone();
        tokio::spawn(async move {
            gw.execute_with(&arn, json!({"n": 1, "hold": true}), None, DEADLINE)
                .await
        })
    };
    eventually("the execute running", || async {
        h.metrics().requests_received == 1
    })
    .await;
    runner.shutdown_handle().shutdown();
    let out = tokio::time::timeout(DEADLINE, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!out.success);
    let error = out.error.unwrap_or_default();
    assert!(
        error.starts_with("connection_closed:") && error.contains("stop grace"),
        "{error}"
    );
    tokio::time::timeout(DEADLINE, join)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    eventually("the gateway forgot the registration", || async {
        gw.registrations().is_empty()
    })
    .await;
}

#[tokio::test]
async fn without_reconnects_a_dropped_socket_ends_the_runner_with_a_clear_error() {
    let mut gw = TestGateway::start().await;
    let mut r = tagged(&gw.ws_url(), "acme", "once");
    r.config = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("once")
        .reconnect_enabled(false)
        .build()
        .unwrap();
    let (runner, join) = start(RunnerOptions::default(), vec![r]).await;
    let h = find(&runner, "once");
    gw.stop().await;
    let result = tokio::time::timeout(DEADLINE, join).await.unwrap().unwrap();
    let e = result.expect_err("run fails when its socket ends");
    assert!(matches!(e, Error::ConnectionClosed(_)), "{e:?}");
    assert!(e.to_string().contains("reconnect_enabled is false"), "{e}");
    let last = h.last_error().unwrap_or_default();
    assert!(last.contains("reconnect_enabled is false"), "{last}");
}

/// `switchboard echo` against `gw`, with `env` added; stderr kept in `log`.
fn echo(gw: &TestGateway, args: &[&str], env: &[(&str, String)], log: &std::path::Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["echo", "--gateway", &gw.ws_url(), "--tenant", "acme"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .spawn()
        .expect("switchboard echo starts")
}

/// The gateway's `/api/v1/connectors` list.
async fn connectors(gw: &TestGateway) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{}/api/v1/connectors", gw.http_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v.as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn sigterm_stops_the_echo_binary_with_exit_0_and_the_gateway_forgets_it_at_once() {
    let gw = TestGateway::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("echo.log");
    let mut child = echo(&gw, &[], &[], &log);
    eventually("the echo registered", || async {
        connectors(&gw).await.len() == 1
    })
    .await;
    signal(&child, libc::SIGTERM);
    let status = exited(&mut child).await;
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "exit {status:?}\n{stderr}");
    // Gone from the gateway without waiting for its idle timeout (60 s): the runner
    // left the channel. The wait's deadline is a third of that timeout.
    let forgotten = tokio::time::timeout(DEADLINE, async {
        while !connectors(&gw).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        forgotten.is_ok(),
        "still listed: {:?}",
        connectors(&gw).await
    );
}

#[tokio::test]
async fn a_second_signal_during_a_slow_stop_ends_the_echo_binary_at_once() {
    let gw = TestGateway::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("echo.log");
    let port = common::serve::free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let env = [
        ("SWITCHBOARD_HEALTH_LISTEN", addr.to_string()),
        ("SWITCHBOARD_STOP_GRACE_SECS", "600".to_owned()),
    ];
    let mut child = echo(&gw, &["--delay-ms", "600000"], &env, &log);
    let arn = eventually_some("the echo registered", || async {
        connectors(&gw)
            .await
            .first()
            .map(|c| c["arn"].as_str().unwrap().to_owned())
    })
    .await;
    let gw = Arc::new(gw);
    let call = {
        let gw = gw.clone();
        tokio::spawn(async move {
            gw.execute_with(&arn, json!({"n": 1}), None, DEADLINE * 3)
                .await
        })
    };
    let l = r#"registration="acme.echo.echo-0",tenant="acme""#;
    eventually("the slow execute in flight", || async {
        let text = match reqwest::get(format!("http://{addr}/metrics")).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => return false,
        };
        sample(
            &text,
            &format!("switchboard_registration_executes_in_flight{{{l}}}"),
        )
        .as_deref()
            == Some("1")
    })
    .await;

    signal(&child, libc::SIGTERM);
    // The stop has begun (readiness off) and waits for the execute's grace.
    eventually("/readyz says stopping", || async {
        get(addr, "/readyz").await == (503, "not ready:\nstopping\n".to_owned())
    })
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the stop waits for the execute"
    );
    signal(&child, libc::SIGTERM);
    let status = exited(&mut child).await;
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("exiting at once"), "{stderr}");
    call.abort();
}
