//! TLS with a custom CA bundle and dialling through an HTTP CONNECT proxy, end to end:
//! a TLS terminator and a CONNECT proxy in the test process, in front of the
//! in-process reference gateway.
#![cfg(feature = "gateway")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::connect_proxy::ConnectProxy;
use common::logs::capture_logs;
use common::tls_terminator::TlsTerminator;
use common::{eventually, find, spawn, Tagged, DEADLINE};
use serde_json::json;
use switchboard::gateway::TestGateway;
use switchboard::{
    ConnectorConfig, MultiConnectorRunner, ProxySetting, Registration, RunnerOptions,
};

/// How long a test that expects no registration waits before checking that none came.
const NOT_REGISTERED_WAIT: Duration = Duration::from_millis(300);

fn wss_url(term: &TlsTerminator) -> String {
    format!("wss://localhost:{}/socket/connector/websocket", term.port())
}

fn registration(config: ConnectorConfig) -> Registration {
    let instance = config.instance_id.clone();
    Registration::new(config, Tagged(instance))
}

/// Runs one registration, waits until it is registered and checks that it answers
/// an execute through the gateway; returns the running runner.
async fn register_and_execute(
    gw: &TestGateway,
    config: ConnectorConfig,
) -> Arc<MultiConnectorRunner> {
    let instance = config.instance_id.clone();
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), vec![registration(config)])
        .expect("admission");
    let (runner, _join) = spawn(runner);
    runner.wait_registered(DEADLINE).await.expect("registered");
    let arn = find(&runner, &instance).arn().expect("an ARN");
    let out = gw.execute(&arn, json!({ "n": 1 })).await.expect("execute");
    assert!(out.success, "{:?}", out.error);
    assert_eq!(out.payload["instance"], json!(instance));
    assert_eq!(out.payload["echo"], json!({ "n": 1 }));
    runner
}

#[tokio::test]
async fn wss_gateway_with_a_private_certificate_is_reached_with_the_ca_bundle() {
    let gw = TestGateway::start().await;
    let term = TlsTerminator::start(gw.local_addr()).await;
    let config = ConnectorConfig::builder(wss_url(&term), "acme")
        .instance_id("tls-1")
        .ca_bundle(term.ca_bundle())
        .proxy(ProxySetting::Disabled)
        .build()
        .unwrap();
    let _runner = register_and_execute(&gw, config).await;
    assert_eq!(
        term.alpn_agreed(),
        vec![Some(b"http/1.1".to_vec())],
        "the WebSocket transport offers http/1.1 only"
    );
}

#[tokio::test]
async fn wss_gateway_without_the_ca_bundle_fails_saying_the_certificate_is_not_trusted() {
    let (logs, _guard) = capture_logs();
    let gw = TestGateway::start().await;
    let term = TlsTerminator::start(gw.local_addr()).await;
    let config = ConnectorConfig::builder(wss_url(&term), "acme")
        .instance_id("tls-2")
        .proxy(ProxySetting::Disabled)
        .build()
        .unwrap();
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), vec![registration(config)])
        .expect("admission");
    let (runner, _join) = spawn(runner);
    let handle = find(&runner, "tls-2");
    eventually("a connect failure naming the untrusted certificate", || {
        let e = handle.last_error().unwrap_or_default();
        async move {
            ["connect failed", "not trusted", "SWITCHBOARD_CA_BUNDLE"]
                .iter()
                .all(|w| e.contains(w))
        }
    })
    .await;
    assert!(logs.has_line_with(&["connect failed", "not trusted"]));
    assert!(term.failed_handshakes() >= 1);
    assert!(runner.wait_registered(NOT_REGISTERED_WAIT).await.is_err());
    assert_eq!(gw.stats().registrations, 0);
    assert!(find(&runner, "tls-2").arn().is_none());
}

#[tokio::test]
async fn connector_reaches_the_gateway_through_an_authenticating_connect_proxy() {
    let gw = TestGateway::start().await;
    let proxy = ConnectProxy::start(Some(("user", "pass"))).await;
    let config = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("proxied-1")
        .proxy(ProxySetting::Url(format!(
            "http://user:pass@127.0.0.1:{}",
            proxy.port()
        )))
        .build()
        .unwrap();
    let _runner = register_and_execute(&gw, config).await;
    assert_eq!(
        proxy.tunnels(),
        vec![format!("127.0.0.1:{}", gw.local_addr().port())],
        "exactly one tunnel, to the gateway"
    );
    assert_eq!(proxy.refusals(), 0);
}

#[tokio::test]
async fn wss_through_the_connect_proxy_runs_tls_inside_the_tunnel() {
    let gw = TestGateway::start().await;
    let term = TlsTerminator::start(gw.local_addr()).await;
    let proxy = ConnectProxy::start(Some(("u", "p@ss"))).await;
    let config = ConnectorConfig::builder(wss_url(&term), "acme")
        .instance_id("proxied-tls")
        .ca_bundle(term.ca_bundle())
        .proxy(ProxySetting::Url(proxy.url_with("u", "p%40ss")))
        .build()
        .unwrap();
    let _runner = register_and_execute(&gw, config).await;
    assert_eq!(proxy.tunnels(), vec![format!("localhost:{}", term.port())]);
    assert_eq!(term.alpn_agreed(), vec![Some(b"http/1.1".to_vec())]);
}

#[tokio::test]
async fn wrong_proxy_credentials_fail_with_407() {
    let (logs, _guard) = capture_logs();
    let gw = TestGateway::start().await;
    let proxy = ConnectProxy::start(Some(("user", "pass"))).await;
    let config = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("proxied-2")
        .proxy(ProxySetting::Url(proxy.url_with("user", "wrong")))
        .build()
        .unwrap();
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), vec![registration(config)])
        .expect("admission");
    let (runner, _join) = spawn(runner);
    let handle = find(&runner, "proxied-2");
    eventually("a connect failure naming the 407", || {
        let e = handle.last_error().unwrap_or_default();
        async move {
            ["connect failed", "407", "credentials"]
                .iter()
                .all(|w| e.contains(w))
        }
    })
    .await;
    assert!(
        !handle.last_error().unwrap_or_default().contains("wrong"),
        "the proxy password must not be in the error"
    );
    assert!(
        !logs.text().contains("wrong"),
        "the proxy password must not be logged"
    );
    assert!(proxy.refusals() >= 1);
    assert!(proxy.tunnels().is_empty());
    assert!(runner.wait_registered(NOT_REGISTERED_WAIT).await.is_err());
    assert_eq!(gw.stats().registrations, 0);
}

#[tokio::test]
async fn unreadable_ca_bundle_fails_admission_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.pem");
    let config = ConnectorConfig::builder("wss://gateway.invalid", "acme")
        .instance_id("bad-bundle")
        .ca_bundle(&missing)
        .build()
        .expect("the path is only read at admission");
    let err =
        MultiConnectorRunner::new(RunnerOptions::default(), vec![registration(config.clone())])
            .err()
            .expect("admission fails");
    assert_eq!(err.code(), "config");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );

    let runner = MultiConnectorRunner::new(RunnerOptions::default(), Vec::new()).unwrap();
    let err = runner.add(registration(config)).await.unwrap_err();
    assert_eq!(err.code(), "config");
    assert_eq!(runner.socket_count(), 0, "no socket is left behind");
}

#[tokio::test]
async fn grpcs_gateway_with_a_private_certificate_is_reached_with_the_ca_bundle() {
    let gw = TestGateway::start().await;
    let term = TlsTerminator::start(gw.grpc_addr().expect("gRPC")).await;
    let config = ConnectorConfig::builder(format!("grpcs://localhost:{}", term.port()), "acme")
        .instance_id("grpcs-1")
        .ca_bundle(term.ca_bundle())
        .proxy(ProxySetting::Disabled)
        .build()
        .unwrap();
    let _runner = register_and_execute(&gw, config).await;
    assert_eq!(
        term.alpn_agreed(),
        vec![Some(b"h2".to_vec())],
        "the gRPC transport negotiates HTTP/2"
    );
    assert_eq!(gw.registrations()[0].transport, "grpc");
}

#[tokio::test]
async fn grpc_reaches_the_gateway_through_an_authenticating_connect_proxy() {
    let gw = TestGateway::start().await;
    let proxy = ConnectProxy::start(Some(("user", "pass"))).await;
    let grpc = gw.grpc_addr().expect("gRPC");
    let config = ConnectorConfig::builder(format!("grpc://127.0.0.1:{}", grpc.port()), "acme")
        .instance_id("grpc-proxied")
        .proxy(ProxySetting::Url(proxy.url_with("user", "pass")))
        .build()
        .unwrap();
    let _runner = register_and_execute(&gw, config).await;
    assert_eq!(
        proxy.tunnels(),
        vec![format!("127.0.0.1:{}", grpc.port())],
        "one tunnel carries the HTTP/2 connection"
    );
}
