//! The one-line entry point and the capability builder, driven the way the README's
//! quickstart uses them, against the in-process reference gateway.
#![cfg(feature = "gateway")]

mod common;

use common::{eventually, DEADLINE};
use serde_json::json;
use switchboard::gateway::TestGateway;
use switchboard::{BaseConnector, Capability, ConnectorConfig, Error, Payload};
use tokio::sync::oneshot;

struct Greeter;

#[async_trait::async_trait]
impl BaseConnector for Greeter {
    fn connector_type(&self) -> &str {
        "greeter"
    }

    fn capabilities(&self) -> Vec<switchboard::proto::TaskTypeSchema> {
        vec![Capability::new("greet")
            .input_schema(json!({"type": "object", "properties": {"name": {"type": "string"}}}))
            .build()]
    }

    async fn execute(
        &self,
        payload: Payload,
        capability: Option<&str>,
    ) -> switchboard::Result<Payload> {
        let name = payload
            .as_json()
            .and_then(|v| v["name"].as_str())
            .unwrap_or("world");
        Ok(Payload::Json(json!({
            "greeting": format!("hello, {name}"),
            "capability": capability,
        })))
    }
}

#[tokio::test]
async fn run_until_serves_the_connector_and_returns_when_told_to_stop() {
    let gw = TestGateway::start().await;
    let config = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("quick")
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let running = tokio::spawn(switchboard::run_until(config, Greeter, async {
        let _ = stop_rx.await;
    }));

    assert!(gw.wait_for_registrations(1, DEADLINE).await);
    let arn = gw.registrations()[0].arn.clone();
    let out = gw.execute(&arn, json!({"name": "ada"})).await.unwrap();
    assert!(out.success, "{:?}", out.error);
    assert_eq!(out.payload["greeting"], "hello, ada");

    stop_tx.send(()).unwrap();
    let result = tokio::time::timeout(DEADLINE, running)
        .await
        .expect("run_until returns after stop")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    eventually("the registration to leave the gateway", || async {
        gw.registrations().is_empty()
    })
    .await;
}

#[tokio::test]
async fn run_until_refuses_a_bad_configuration_before_connecting() {
    // A CA bundle that cannot be read fails admission: nothing is left running.
    let config = ConnectorConfig::builder("wss://127.0.0.1:1", "acme")
        .ca_bundle("/nonexistent/ca.pem")
        .build()
        .unwrap();
    let result = tokio::time::timeout(
        DEADLINE,
        switchboard::run_until(config, Greeter, std::future::pending()),
    )
    .await
    .expect("a bad configuration fails at once");
    match result {
        Err(Error::Config(msg)) => assert!(msg.contains("/nonexistent/ca.pem"), "{msg}"),
        other => panic!("expected a config error naming the bundle, got {other:?}"),
    }
}
