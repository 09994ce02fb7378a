//! Connector-to-connector invoke through the reference gateway, over real sockets:
//! from inside an execute and from a handle, by ARN and by dot key, across tenants,
//! and on every exit of the pending map (answer, timeout, cancellation, socket death).
#![cfg(feature = "gateway")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{eventually, find, start, tagged, DEADLINE};
use serde_json::json;
use switchboard::gateway::TestGateway;
use switchboard::proto::ConnectorScope;
use switchboard::{
    BaseConnector, ConnectorConfig, Error, ExecuteContext, InvokeOptions, MultiConnectorRunner,
    Payload, Registration, RegistrationHandle, RunnerOptions,
};
use tokio::sync::Semaphore;

/// Answers an execute by invoking the target named in its payload and returning the
/// target's answer.
struct Relay;

#[async_trait]
impl BaseConnector for Relay {
    fn connector_type(&self) -> &str {
        "relay"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        unreachable!("execute_with_context is overridden")
    }
    async fn execute_with_context(
        &self,
        payload: Payload,
        _: Option<&str>,
        ctx: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        let p = payload.into_json().unwrap_or_default();
        let target = p["target"].as_str().unwrap_or_default().to_owned();
        let answer = ctx
            .invoke(
                &target,
                "echo",
                Payload::Json(p["body"].clone()),
                InvokeOptions::default(),
            )
            .await?;
        Ok(Payload::Json(
            json!({"relayed": answer.json()?, "context": answer.context}),
        ))
    }
}

/// Never answers until the test releases it.
struct Hung(Arc<Semaphore>);

#[async_trait]
impl BaseConnector for Hung {
    fn connector_type(&self) -> &str {
        "hung"
    }
    async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        let _permit = self.0.acquire().await.expect("open");
        Ok(payload)
    }
}

fn registration(
    url: &str,
    tenant: &str,
    instance: &str,
    connector: impl BaseConnector,
) -> Registration {
    let cfg = ConnectorConfig::builder(url, tenant)
        .instance_id(instance)
        .build()
        .expect("valid config");
    Registration::new(cfg, connector)
}

/// A runner with registrations `caller` (tagged) and `hung` (never answers until the
/// returned gate is opened), both of tenant acme.
async fn caller_and_hung(
    gw: &TestGateway,
) -> (
    Arc<MultiConnectorRunner>,
    RegistrationHandle,
    RegistrationHandle,
    Arc<Semaphore>,
) {
    let gate = Arc::new(Semaphore::new(0));
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "caller"),
        registration(&gw.ws_url(), "acme", "hung", Hung(gate.clone())),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let (caller, hung) = (find(&runner, "caller"), find(&runner, "hung"));
    (runner, caller, hung, gate)
}

#[tokio::test]
async fn an_execute_invokes_another_connector_of_its_tenant_by_arn() {
    let gw = TestGateway::start().await;
    let regs = vec![
        registration(&gw.ws_url(), "acme", "relay", Relay),
        tagged(&gw.ws_url(), "acme", "target"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let target = find(&runner, "target").arn().unwrap();
    let relay = find(&runner, "relay");
    let out = gw
        .execute(
            &relay.arn().unwrap(),
            json!({"target": target, "body": {"n": 7}}),
        )
        .await
        .unwrap();
    assert!(out.success, "{:?}", out.error);
    assert_eq!(
        out.payload["relayed"],
        json!({"instance": "target", "echo": {"n": 7}})
    );
    assert_eq!(relay.metrics().invokes_sent, 1);
    assert_eq!(relay.metrics().invokes_failed, 0);
}

#[tokio::test]
async fn a_handle_invokes_by_dot_key_and_gets_the_targets_payload_and_context() {
    let gw = TestGateway::start().await;
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "caller"),
        tagged(&gw.ws_url(), "acme", "target"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let caller = find(&runner, "caller");
    let target = find(&runner, "target");
    let answer = caller
        .invoke(
            target.key().dot_key(),
            "any",
            Payload::Json(json!({"q": 1})),
            InvokeOptions::default().with_context("trace", "t-1"),
        )
        .await
        .unwrap();
    assert_eq!(
        answer.json().unwrap(),
        json!({"instance": "target", "echo": {"q": 1}})
    );
    assert_eq!(answer.context.get("target_arn"), target.arn().as_ref());
    assert_eq!(answer.context.get("trace").map(String::as_str), Some("t-1"));
}

#[tokio::test]
async fn an_unknown_target_fails_at_once_with_a_not_found_remote_error() {
    let gw = TestGateway::start().await;
    let (runner, _join) = start(
        RunnerOptions::default(),
        vec![tagged(&gw.ws_url(), "acme", "a")],
    )
    .await;
    let h = runner.registrations()[0].clone();
    let err = h
        .invoke(
            "matrix:acme:tagged:nobody",
            "x",
            Payload::Json(json!({})),
            InvokeOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Remote { code, .. } if code == "not_found"),
        "{err}"
    );
    assert!(!err.is_recoverable());
}

#[tokio::test]
async fn a_target_of_another_tenant_is_refused_unless_it_registered_global() {
    let gw = TestGateway::start().await;
    let mut global = tagged(&gw.ws_url(), "shared", "global");
    global.config.scope = ConnectorScope::Global;
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "caller"),
        tagged(&gw.ws_url(), "other", "private"),
        global,
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let caller = find(&runner, "caller");
    let private = find(&runner, "private").arn().unwrap();
    let err = caller
        .invoke(
            &private,
            "x",
            Payload::Json(json!({})),
            InvokeOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Remote { code, .. } if code == "forbidden"),
        "{err}"
    );
    let global = find(&runner, "global").arn().unwrap();
    let answer = caller
        .invoke(
            &global,
            "x",
            Payload::Json(json!({"ok": 1})),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(answer.json().unwrap()["instance"], "global");
}

#[tokio::test]
async fn an_unanswered_invoke_times_out_and_leaves_nothing_pending() {
    let gw = TestGateway::start().await;
    let (_runner, caller, hung, gate) = caller_and_hung(&gw).await;
    let hung = hung.arn().unwrap();
    let err = caller
        .invoke(
            &hung,
            "x",
            Payload::Json(json!({})),
            InvokeOptions::default().with_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    // Whichever deadline fires first (ours or the gateway's, which is the same), it
    // is a timeout, and recoverable.
    assert!(err.is_recoverable(), "{err}");
    assert!(
        err.to_string().contains("timeout") || err.to_string().contains("timed out"),
        "{err}"
    );
    assert_eq!(caller.metrics().invokes_failed, 1);
    gate.add_permits(100);
    // The caller still invokes fine afterwards.
    let target = caller.key().dot_key().to_owned();
    let ok = caller
        .invoke(
            &target,
            "x",
            Payload::Json(json!({"self": true})),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(ok.json().unwrap()["echo"], json!({"self": true}));
}

#[tokio::test]
async fn a_cancelled_invoke_leaves_no_pending_entry_and_its_late_answer_is_dropped() {
    let gw = TestGateway::start().await;
    let (_runner, caller, hung, gate) = caller_and_hung(&gw).await;
    let hung_arn = hung.arn().unwrap();
    let call = caller.invoke(
        &hung_arn,
        "x",
        Payload::Json(json!({})),
        InvokeOptions::default(),
    );
    // Give up as soon as the target has the request.
    tokio::select! {
        _ = call => panic!("the hung target answered"),
        _ = eventually("the target to receive the execute", || async { hung.metrics().requests_received == 1 }) => {}
    }
    gate.add_permits(1);
    eventually("the late answer to be dropped as unknown", || async {
        caller.metrics().frames_dropped.get("unknown_request_id") == Some(&1)
    })
    .await;
}

#[tokio::test]
async fn an_invoke_in_flight_when_the_socket_dies_fails_at_once_and_is_recoverable() {
    let gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    // Two runners, so caller and target ride different sockets of one tenant.
    let hung_reg = registration(&gw.ws_url(), "acme", "hung", Hung(gate.clone()));
    let (hung_runner, _j1) = start(RunnerOptions::default(), vec![hung_reg]).await;
    let (runner, _j2) = start(
        RunnerOptions::default(),
        vec![tagged(&gw.ws_url(), "acme", "caller")],
    )
    .await;
    let caller = runner.registrations()[0].clone();
    let hung = hung_runner.registrations()[0].clone();
    let in_flight = {
        let (caller, hung_arn) = (caller.clone(), hung.arn().unwrap());
        tokio::spawn(async move {
            let options = InvokeOptions::default().with_timeout(DEADLINE * 3);
            caller
                .invoke(&hung_arn, "x", Payload::Json(json!({})), options)
                .await
        })
    };
    eventually("the target to receive the execute", || async {
        hung.metrics().requests_received == 1
    })
    .await;
    let caller_socket = gw
        .registrations()
        .into_iter()
        .find(|r| r.instance_id == "caller")
        .unwrap()
        .socket_id;
    assert!(gw.drop_socket(caller_socket));
    let err = tokio::time::timeout(DEADLINE, in_flight)
        .await
        .expect("failed at once, not at its deadline")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionClosed(_)), "{err}");
    assert!(err.is_recoverable());
    gate.add_permits(10);
}
