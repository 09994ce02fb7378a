//! Nothing a registration does can stall its socket: a saturated registration still
//! re-registers and its neighbours are served, a hung execute times out and frees its
//! permit, and removing the last registration closes its socket.
#![cfg(feature = "gateway")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{eventually, find, start, tagged, DEADLINE};
use serde_json::json;
use switchboard::gateway::TestGateway;
use switchboard::{BaseConnector, ConnectorConfig, Payload, Registration, RunnerOptions};
use tokio::sync::Semaphore;

/// Holds every execute until the test releases permits.
struct Gated(Arc<Semaphore>);

#[async_trait]
impl BaseConnector for Gated {
    fn connector_type(&self) -> &str {
        "gated"
    }
    async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        let _permit = self.0.acquire().await.expect("open");
        Ok(payload)
    }
}

fn gated(
    url: &str,
    instance: &str,
    gate: &Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
) -> Registration {
    let mut r = tagged(url, "acme", instance);
    r.config = ConnectorConfig::builder(url, "acme")
        .instance_id(instance)
        .max_concurrent_requests(limit)
        .max_queued_requests(limit)
        .execute_timeout(timeout)
        .reconnect(switchboard::BackoffPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(50),
        ))
        .build()
        .expect("valid config");
    r.connector = Arc::new(Gated(gate.clone()));
    r
}

#[tokio::test]
async fn a_saturated_registration_reregisters_after_a_gateway_restart_and_its_neighbours_are_served(
) {
    let mut gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let mut fast = tagged(&gw.ws_url(), "acme", "fast");
    fast.config.reconnect =
        switchboard::BackoffPolicy::new(Duration::from_millis(10), Duration::from_millis(50));
    let regs = vec![gated(&gw.ws_url(), "slow", &gate, 2, DEADLINE * 3), fast];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let slow = find(&runner, "slow");
    let fast = find(&runner, "fast");
    // Saturate: two running, two queued.
    let slow_arn = slow.arn().unwrap();
    let mut pending = Vec::new();
    for n in 0..4 {
        pending.push(gw.execute_with(&slow_arn, json!({"n": n}), None, DEADLINE));
    }
    let mut flood = Box::pin(futures_util::future::join_all(pending));
    tokio::select! {
        _ = &mut flood => panic!("the gated executes answered"),
        _ = eventually("four executes on the slow registration", || async { slow.metrics().requests_received == 4 }) => {}
    }
    // The gateway's callers give up; the registration still holds its four executes.
    drop(flood);
    gw.restart().await;
    eventually("both re-registered", || async {
        fast.metrics().registrations >= 2
            && slow.metrics().registrations >= 2
            && slow.arn().is_some()
            && fast.arn().is_some()
    })
    .await;
    for n in 0..10 {
        let out = gw
            .execute(&fast.arn().unwrap(), json!({"n": n}))
            .await
            .unwrap();
        assert_eq!(out.payload["echo"], json!({"n": n}));
    }
    // The restart voided the saturating executes; the slow registration's permits
    // are free again and it answers once released.
    gate.add_permits(100);
    let out = gw
        .execute(&slow.arn().unwrap(), json!({"after": 1}))
        .await
        .unwrap();
    assert!(out.success, "{:?}", out.error);
}

// Real time, not paused: with real sockets a paused clock auto-advances while bytes
// are in flight on loopback and fires the gateway's deadline first. The timer rules
// themselves are covered by the connection core's explicit-clock unit tests.
#[tokio::test]
async fn an_execute_that_never_returns_times_out_and_frees_its_permit() {
    let gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let regs = vec![gated(
        &gw.ws_url(),
        "slow",
        &gate,
        1,
        Duration::from_millis(500),
    )];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let h = runner.registrations()[0].clone();
    let arn = h.arn().unwrap();
    let out = gw
        .execute_with(&arn, json!({"n": 1}), None, DEADLINE)
        .await
        .unwrap();
    assert!(!out.success);
    assert!(
        out.error
            .as_deref()
            .unwrap_or_default()
            .starts_with("timeout:"),
        "{:?}",
        out.error
    );
    assert_eq!(h.metrics().requests_timed_out, 1);
    // The permit is free: with the gate open, the next execute runs and answers.
    gate.add_permits(1);
    let out = gw
        .execute_with(&arn, json!({"n": 2}), None, DEADLINE)
        .await
        .unwrap();
    assert!(out.success, "{:?}", out.error);
    assert_eq!(out.payload, json!({"n": 2}));
}

#[tokio::test]
async fn removing_the_last_registration_closes_its_socket() {
    let gw = TestGateway::start().await;
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "a"),
        tagged(&gw.ws_url(), "acme", "b"),
        tagged(&gw.ws_url(), "other", "c"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    assert_eq!(runner.socket_count(), 2);
    let (a, b) = (find(&runner, "a"), find(&runner, "b"));
    a.remove().await;
    assert_eq!(runner.socket_count(), 2, "b still holds the acme socket");
    assert!(a.arn().is_none());
    b.remove().await;
    eventually("the acme socket to close", || async {
        runner.socket_count() == 1
    })
    .await;
    eventually("the gateway to see it close", || async {
        gw.stats().sockets_open == 1
    })
    .await;
    assert_eq!(runner.registrations().len(), 1);
    // The tenant can come back: a new registration opens a new socket.
    let again = runner.add(tagged(&gw.ws_url(), "acme", "d")).await.unwrap();
    again.wait_registered(DEADLINE).await.unwrap();
    assert_eq!(runner.socket_count(), 2);
}

#[tokio::test]
async fn removing_a_registration_cancels_its_executes_without_answering_them() {
    let gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let regs = vec![
        gated(&gw.ws_url(), "slow", &gate, 4, DEADLINE * 3),
        tagged(&gw.ws_url(), "acme", "stay"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let slow = find(&runner, "slow");
    let stay = find(&runner, "stay");
    let arn = slow.arn().unwrap();
    let call = gw.execute_with(&arn, json!({}), None, DEADLINE);
    tokio::pin!(call);
    tokio::select! {
        _ = &mut call => panic!("answered while gated"),
        _ = eventually("the execute to start", || async { slow.metrics().requests_received == 1 }) => {}
    }
    slow.remove().await;
    gate.add_permits(10);
    // A round trip on the same socket after the removal: an answer to the cancelled
    // execute, had one been sent, would have reached the gateway before this one.
    let out = gw
        .execute(&stay.arn().unwrap(), json!({"after": "remove"}))
        .await
        .unwrap();
    assert_eq!(out.payload["echo"], json!({"after": "remove"}));
    // Cancelled, not answered: the gateway's caller is still waiting.
    assert!(
        futures_util::FutureExt::now_or_never(call.as_mut()).is_none(),
        "the cancelled execute was answered"
    );
    assert_eq!(slow.metrics().requests_processed, 0);
}
