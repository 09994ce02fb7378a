//! The reference gateway, driven from outside: its HTTP API with a real HTTP client
//! (here), and its server side of the Phoenix and connector protocols with a raw
//! WebSocket client speaking frames built with `switchboard::phoenix`
//! (`gateway_http/phoenix.rs`, `gateway_http/protocol.rs`), metrics reports and
//! deadlines (`gateway_http/reports.rs`), binary frames and the test hooks
//! (`gateway_http/hooks.rs`), and the order in which a registration becomes visible
//! and its response is queued (`gateway_http/register_order.rs`).
#![cfg(feature = "gateway")]

mod common;
#[path = "gateway_http/hooks.rs"]
mod hooks;
#[path = "gateway_http/phoenix.rs"]
mod phoenix;
#[path = "gateway_http/protocol.rs"]
mod protocol;
#[path = "gateway_http/raw.rs"]
mod raw;
#[path = "gateway_http/register_order.rs"]
mod register_order;
#[path = "gateway_http/reports.rs"]
mod reports;

use async_trait::async_trait;
use common::{start, tagged};
use serde_json::{json, Value};
use switchboard::gateway::TestGateway;
use switchboard::{BaseConnector, Error, Payload, Registration, RunnerOptions};

/// Fails every execute.
struct Failing;

#[async_trait]
impl BaseConnector for Failing {
    fn connector_type(&self) -> &str {
        "failing"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Err(Error::Connector("upstream said no".into()))
    }
}

/// Never answers.
struct Silent;

#[async_trait]
impl BaseConnector for Silent {
    fn connector_type(&self) -> &str {
        "silent"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        std::future::pending().await
    }
}

async fn post(url: String, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn http_api_lists_executes_and_maps_failures_to_status_codes() {
    let gw = TestGateway::start().await;
    let cfg = |i: &str| {
        switchboard::ConnectorConfig::builder(gw.ws_url(), "acme")
            .instance_id(i)
            .build()
            .unwrap()
    };
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "ok"),
        Registration::new(cfg("bad"), Failing),
        Registration::new(cfg("mute"), Silent),
    ];
    let (_runner, _join) = start(RunnerOptions::default(), regs).await;
    let base = gw.http_url();

    let list: Vec<Value> = reqwest::get(format!("{base}/api/v1/connectors"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let arns: Vec<&str> = list.iter().map(|r| r["arn"].as_str().unwrap()).collect();
    assert_eq!(
        arns,
        [
            "matrix:acme:failing:bad",
            "matrix:acme:silent:mute",
            "matrix:acme:tagged:ok"
        ]
    );
    assert_eq!(list[0]["tenant_id"], "acme");
    assert_eq!(list[0]["transport"], "websocket");
    assert!(list[0]["socket_id"].is_u64());

    let sent = std::time::Instant::now();
    let (code, v) = post(
        format!("{base}/api/v1/connectors/matrix:acme:tagged:ok/execute"),
        json!({"payload": {"a": 1}}),
    )
    .await;
    let round_trip = sent.elapsed().as_millis() as i64;
    assert_eq!(code, 200);
    assert_eq!(v["success"], true);
    assert_eq!(v["payload"]["echo"], json!({"a": 1}));
    // The connector's own measure, in milliseconds: within the round trip around it.
    let took = v["duration_ms"].as_i64().expect("duration_ms");
    assert!(
        (0..=round_trip).contains(&took),
        "{took} ms of {round_trip} ms"
    );

    let (code, v) = post(
        format!("{base}/api/v1/connectors/matrix:acme:tagged:nobody/execute"),
        json!({"payload": {}}),
    )
    .await;
    assert_eq!((code, v["code"].as_str()), (404, Some("not_found")));

    let (code, v) = post(
        format!("{base}/api/v1/connectors/matrix:acme:failing:bad/execute"),
        json!({"payload": {}}),
    )
    .await;
    assert_eq!(code, 502);
    assert_eq!(v["success"], false);
    assert!(
        v["error"].as_str().unwrap().contains("upstream said no"),
        "{v}"
    );

    let (code, _) = post(
        format!("{base}/api/v1/connectors/matrix:acme:silent:mute/execute"),
        json!({"payload": {}, "timeout_ms": 100}),
    )
    .await;
    assert_eq!(code, 504);

    let resp = reqwest::Client::new()
        .post(format!(
            "{base}/api/v1/connectors/matrix:acme:tagged:ok/execute"
        ))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("payload"), "{v}");

    let stats: Value = reqwest::get(format!("{base}/api/v1/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["registrations"], 3);
    assert_eq!(stats["sockets_open"], 1);
    assert_eq!(
        stats["executes_routed"], 3,
        "ok, failing and silent; the 404 and the 400 route nothing"
    );
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("switchboard_gateway_registrations 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchboard_gateway_executes_routed_total"),
        "{metrics}"
    );
}

/// `GET {url}` with an optional bearer token: the status and the
/// `WWW-Authenticate` header.
async fn get_with(url: String, token: Option<&str>) -> (u16, Option<String>) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status().as_u16(), challenge)
}

#[tokio::test]
async fn the_operator_token_guards_the_http_api_but_not_the_connectors_routes() {
    let config = switchboard::gateway::GatewayConfig::default().with_admin_token("op-token");
    let gw = TestGateway::start_with(config).await;
    let base = gw.http_url();
    // A connector still registers over the socket: its route is not the operator's.
    let (_runner, _join) = start(
        RunnerOptions::default(),
        vec![tagged(&gw.ws_url(), "acme", "ok")],
    )
    .await;
    for path in [
        "/api/v1/connectors",
        "/api/v1/stats",
        "/api/v1/approvals",
        "/metrics",
    ] {
        let (code, challenge) = get_with(format!("{base}{path}"), None).await;
        assert_eq!(code, 401, "{path} without a token");
        assert_eq!(challenge.as_deref(), Some("Bearer"), "{path}");
        assert_eq!(
            get_with(format!("{base}{path}"), Some("nope")).await.0,
            401,
            "{path}"
        );
        assert_eq!(
            get_with(format!("{base}{path}"), Some("op-token")).await.0,
            200,
            "{path} with the token"
        );
    }
    let execute = format!("{base}/api/v1/connectors/matrix:acme:tagged:ok/execute");
    assert_eq!(
        post(execute.clone(), json!({"payload": {"a": 1}})).await.0,
        401
    );
    let resp = reqwest::Client::new()
        .post(execute)
        .bearer_auth("op-token")
        .json(&json!({"payload": {"a": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The gateway's public keys stay public: connectors verify tokens with them.
    assert_eq!(
        get_with(format!("{base}/.well-known/jwks.json"), None)
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn manual_approval_on_a_public_address_needs_an_operator_token() {
    use switchboard::gateway::{ApprovalMode, Gateway, GatewayConfig};
    let manual = || GatewayConfig::default().with_approval(ApprovalMode::Manual);
    let public: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let err = Gateway::start(manual(), public)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("operator token"), "{err}");
    let gw = Gateway::start(manual().with_admin_token("op-token"), public)
        .await
        .expect("with a token it starts");
    gw.shutdown().await;
    let loopback: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let gw = Gateway::start(manual(), loopback)
        .await
        .expect("loopback needs no token");
    gw.shutdown().await;
}
