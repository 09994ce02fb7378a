//! The multiplexer end to end: real sockets against the in-process reference gateway.
#![cfg(feature = "gateway")]

mod common;

use std::time::Duration;

use common::{eventually, start, tagged, DEADLINE};
use serde_json::json;
use switchboard::gateway::TestGateway;
use switchboard::{Error, MultiConnectorRunner, RunnerOptions};

#[tokio::test]
async fn registrations_of_one_tenant_share_exactly_one_socket() {
    let gw = TestGateway::start().await;
    let regs = (0..8)
        .map(|i| tagged(&gw.ws_url(), "acme", &format!("i{i}")))
        .collect();
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    assert!(gw.wait_for_registrations(8, DEADLINE).await);
    let stats = gw.stats();
    assert_eq!(
        stats.sockets_open, 1,
        "8 registrations of one tenant must share one socket"
    );
    assert_eq!(stats.registrations, 8);
    assert_eq!(runner.socket_count(), 1);
    let sockets: std::collections::HashSet<u64> =
        gw.registrations().iter().map(|r| r.socket_id).collect();
    assert_eq!(sockets.len(), 1);
}

#[tokio::test]
async fn two_tenants_open_two_sockets_never_one() {
    let gw = TestGateway::start().await;
    let mut regs = Vec::new();
    for tenant in ["alpha", "beta"] {
        for i in 0..3 {
            regs.push(tagged(&gw.ws_url(), tenant, &format!("i{i}")));
        }
    }
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    assert!(gw.wait_for_registrations(6, DEADLINE).await);
    assert_eq!(gw.stats().sockets_open, 2);
    assert_eq!(runner.socket_count(), 2);
    for reg in gw.registrations() {
        let same_socket: Vec<_> = gw
            .registrations()
            .into_iter()
            .filter(|r| r.socket_id == reg.socket_id)
            .collect();
        assert!(
            same_socket.iter().all(|r| r.tenant_id == reg.tenant_id),
            "a socket carried two tenants"
        );
    }
}

#[tokio::test]
async fn concurrent_executes_on_one_socket_are_never_cross_routed() {
    let gw = std::sync::Arc::new(TestGateway::start().await);
    let regs = (0..8)
        .map(|i| tagged(&gw.ws_url(), "acme", &format!("i{i}")))
        .collect();
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let handles = runner.registrations();
    let mut calls = Vec::new();
    for n in 0..400u64 {
        let h = &handles[(n % handles.len() as u64) as usize];
        let arn = h.arn().expect("registered");
        let instance = h.key().instance_id().to_owned();
        let gw = gw.clone();
        calls.push(tokio::spawn(async move {
            let out = gw.execute(&arn, json!({ "n": n })).await.expect("execute");
            assert!(out.success, "{:?}", out.error);
            assert_eq!(
                out.payload["instance"],
                json!(instance),
                "answer came from the wrong registration"
            );
            assert_eq!(
                out.payload["echo"]["n"],
                json!(n),
                "answer belongs to another request"
            );
        }));
    }
    for c in calls {
        c.await.expect("no assertion failed");
    }
    let total: u64 = runner
        .metrics_snapshot()
        .values()
        .map(|m| m.requests_processed)
        .sum();
    assert_eq!(total, 400);
}

#[tokio::test]
async fn execute_for_departed_arn_is_dropped_not_rerouted() {
    let gw = TestGateway::start().await;
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "leaver"),
        tagged(&gw.ws_url(), "acme", "stayer"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let handles = runner.registrations();
    let (leaver, stayer) = (&handles[0], &handles[1]);
    let leaver_arn = leaver.arn().unwrap();
    leaver.remove().await;
    // The gateway still believes the ARN lives on this socket (the protocol has no
    // unregister), so it sends the execute; the demux must not hand it to the survivor,
    // which is now the only handle on the socket.
    let err = gw
        .execute_with(
            &leaver_arn,
            json!({"x": 1}),
            None,
            Duration::from_millis(300),
        )
        .await
        .expect_err("nobody may answer for a departed ARN");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    eventually("the drop to be counted", || async {
        stayer.metrics().frames_dropped.get("unknown_arn") == Some(&1)
    })
    .await;
    assert_eq!(stayer.metrics().requests_received, 0);
    // The survivor still works.
    let ok = gw
        .execute(&stayer.arn().unwrap(), json!({"y": 2}))
        .await
        .unwrap();
    assert_eq!(ok.payload["instance"], json!("stayer"));
}

#[tokio::test]
async fn gateway_restart_every_registration_reregisters_and_executes_work() {
    let mut gw = TestGateway::start().await;
    let mut regs = Vec::new();
    for tenant in ["alpha", "beta"] {
        for i in 0..10 {
            let mut r = tagged(&gw.ws_url(), tenant, &format!("i{i}"));
            r.config.reconnect = switchboard::BackoffPolicy::new(
                Duration::from_millis(20),
                Duration::from_millis(200),
            );
            regs.push(r);
        }
    }
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    gw.restart().await;
    assert!(
        gw.wait_for_registrations(20, DEADLINE).await,
        "every registration came back"
    );
    runner.wait_registered(DEADLINE).await.unwrap();
    for h in runner.registrations() {
        let out = gw
            .execute(&h.arn().unwrap(), json!({"after": "restart"}))
            .await
            .unwrap();
        assert_eq!(out.payload["instance"], json!(h.key().instance_id()));
        assert!(h.metrics().disconnects >= 1);
        assert!(h.metrics().registrations >= 2);
    }
}

#[tokio::test]
async fn handler_cap_is_a_typed_error_at_admission() {
    let url = "ws://127.0.0.1:9";
    let runner = MultiConnectorRunner::new(
        RunnerOptions::default().with_max_handlers_per_socket(2),
        vec![],
    )
    .unwrap();
    runner.add(tagged(url, "acme", "a")).await.unwrap();
    runner.add(tagged(url, "acme", "b")).await.unwrap();
    let err = runner.add(tagged(url, "acme", "c")).await.unwrap_err();
    assert!(
        matches!(err, Error::HandlerCapReached { cap: 2, .. }),
        "{err}"
    );
    // The cap is per socket: another tenant gets its own.
    runner.add(tagged(url, "other", "c")).await.unwrap();
}

#[tokio::test]
async fn duplicate_admission_is_a_typed_error() {
    let url = "ws://127.0.0.1:9";
    let err = MultiConnectorRunner::new(
        RunnerOptions::default(),
        vec![tagged(url, "acme", "same"), tagged(url, "acme", "same")],
    )
    .err()
    .expect("duplicate refused");
    assert!(
        matches!(err, Error::DuplicateRegistration { ref key } if key == "acme.tagged.same"),
        "{err}"
    );
}

#[tokio::test]
async fn shutdown_stops_run_and_closes_the_socket() {
    let gw = TestGateway::start().await;
    let (runner, join) = start(
        RunnerOptions::default(),
        vec![tagged(&gw.ws_url(), "acme", "a")],
    )
    .await;
    runner.shutdown_handle().shutdown();
    tokio::time::timeout(DEADLINE, join)
        .await
        .expect("run returned")
        .unwrap()
        .unwrap();
    eventually("the gateway to see the socket close", || async {
        gw.stats().sockets_open == 0
    })
    .await;
}
