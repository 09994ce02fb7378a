//! A registration becomes visible only once its `register_response` is queued, ahead
//! of anything addressed to it: while the test hook holds a decided register before
//! its response is queued, nobody can see, count or execute the registration; once
//! released, the response is the first thing the connector reads, and an execute
//! issued the moment the registration is visible reaches a connector that knows its
//! ARN. (Before, the registry was updated first, and an execute queued in between was
//! dropped by the connector, which did not know the ARN yet.)

use serde_json::{json, Value};
use switchboard::gateway::TestGateway;
use switchboard::{ConnectorConfig, EchoConnector, Error};

use crate::common::DEADLINE;
use crate::raw::{answer, next_execute, raw_client, register, register_response, send_proto};

/// What `gw` shows of its registrations: the test kit, the stats and the HTTP API.
async fn assert_nothing_visible(gw: &TestGateway, arn: &str) {
    assert!(gw.registrations().is_empty(), "{:?}", gw.registrations());
    assert_eq!(gw.stats().registrations, 0);
    let listed: Vec<Value> = reqwest::get(format!("{}/api/v1/connectors", gw.http_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    let refused = gw.execute(arn, json!({})).await;
    assert!(matches!(refused, Err(Error::NotFound(_))), "{refused:?}");
}

#[tokio::test]
async fn a_held_register_is_invisible_and_its_response_precedes_the_first_execute() {
    let gw = TestGateway::start().await;
    let arn = "matrix:acme:raw:held";
    gw.set_hold_registers(true);
    let mut ws = raw_client(&gw).await;
    send_proto(&mut ws, 2, register("acme", "held")).await;
    assert!(gw.wait_for_held_registers(1, DEADLINE).await);
    assert_nothing_visible(&gw, arn).await;

    let execute = async {
        assert!(gw.wait_for_registrations(1, DEADLINE).await);
        gw.execute(arn, json!({"q": 1})).await
    };
    let connector = async {
        gw.set_hold_registers(false);
        let resp = register_response(&mut ws).await;
        assert!(resp.success, "{}", resp.error);
        assert_eq!(resp.connector_arn, arn);
        let req = next_execute(&mut ws).await;
        answer(&mut ws, &req, br#"{"answered":true}"#).await;
    };
    let (out, ()) = tokio::join!(execute, connector);
    assert_eq!(out.unwrap().payload, json!({"answered": true}));
}

/// The guide's "Testing your connector against a gateway" (docs/guide/connector-authors.md), with the register held
/// so that the execute follows visibility as closely as it can, on both transports.
#[tokio::test]
async fn an_execute_right_after_wait_for_registrations_is_answered_on_both_transports() {
    for transport in ["websocket", "grpc"] {
        let gw = TestGateway::start().await;
        let url = match transport {
            "grpc" => gw.grpc_url().expect("the test gateway serves gRPC"),
            _ => gw.ws_url(),
        };
        let arn = "matrix:acme:echo:t";
        gw.set_hold_registers(true);
        let config = ConnectorConfig::builder(url, "acme")
            .instance_id("t")
            .build()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(switchboard::run_until(config, EchoConnector, async {
            stopped.await.ok();
        }));
        assert!(gw.wait_for_held_registers(1, DEADLINE).await, "{transport}");
        assert_nothing_visible(&gw, arn).await;
        gw.set_hold_registers(false);
        assert!(gw.wait_for_registrations(1, DEADLINE).await, "{transport}");
        let out = gw.execute(arn, json!({"name": "Ada"})).await.unwrap();
        assert_eq!(out.payload["name"], "Ada", "{transport}");
        assert_eq!(gw.registrations()[0].transport, transport);
        stop.send(()).ok();
        running.await.unwrap().unwrap();
    }
}
