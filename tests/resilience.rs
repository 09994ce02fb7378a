//! Bad input from the peer, slow connectors, dead peers and refused registers: each is
//! survived, counted, and leaves the other registrations working.
#![cfg(feature = "gateway")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use common::{eventually, find, start, tagged, DEADLINE};
use serde_json::json;
use switchboard::gateway::TestGateway;
use switchboard::{
    BaseConnector, ConnectorConfig, HeartbeatSettings, Payload, Registration, RunnerOptions,
};
use tokio::sync::Semaphore;

async fn assert_both_answer(gw: &TestGateway, runner: &switchboard::MultiConnectorRunner) {
    for h in runner.registrations() {
        let out = gw
            .execute(&h.arn().unwrap(), json!({"still": "alive"}))
            .await
            .unwrap();
        assert_eq!(out.payload["instance"], json!(h.key().instance_id()));
    }
}

#[tokio::test]
async fn malformed_frames_from_the_gateway_are_dropped_counted_and_survived() {
    let gw = TestGateway::start().await;
    let regs = vec![
        tagged(&gw.ws_url(), "acme", "a"),
        tagged(&gw.ws_url(), "acme", "b"),
    ];
    let options = RunnerOptions::default().with_max_frame_bytes(64 * 1024);
    let (runner, _join) = start(options, regs).await;
    let socket = gw.socket_ids()[0];
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let cases = [
        ("not_json", "this is not json".to_owned()),
        ("bad_shape", r#"[null,null,"connector:lobby"]"#.to_owned()),
        (
            "unknown_event",
            r#"[null,null,"connector:lobby","surprise",{}]"#.to_owned(),
        ),
        (
            "bad_base64",
            r#"[null,null,"connector:lobby","proto",{"data":"@@@"}]"#.to_owned(),
        ),
        (
            "bad_protobuf",
            format!(
                r#"[null,null,"connector:lobby","proto",{{"data":"{}"}}]"#,
                b64(&[0x0a, 0x05])
            ),
        ),
    ];
    for (_, text) in &cases {
        assert!(gw.send_raw(socket, text.clone()));
    }
    let h = runner.registrations()[0].clone();
    for (reason, _) in &cases {
        eventually(&format!("a {reason} drop"), || async {
            h.metrics().frames_dropped.get(*reason) == Some(&1)
        })
        .await;
    }
    assert_eq!(
        h.metrics().disconnects,
        0,
        "malformed input must not cost the connection"
    );
    assert_both_answer(&gw, &runner).await;
}

#[tokio::test]
async fn an_oversized_message_is_refused_unread_counted_and_the_socket_reconnects() {
    let gw = TestGateway::start().await;
    let regs = vec![tagged(&gw.ws_url(), "acme", "a")];
    let options = RunnerOptions::default().with_max_frame_bytes(64 * 1024);
    let (runner, _join) = start(options, regs).await;
    let h = runner.registrations()[0].clone();
    let socket = gw.socket_ids()[0];
    let oversized = format!(
        r#"[null,null,"connector:lobby","proto",{{"data":"{}"}}]"#,
        "A".repeat(100 * 1024)
    );
    assert!(gw.send_raw(socket, oversized));
    eventually("a too_large drop and a reconnect", || async {
        let m = h.metrics();
        m.frames_dropped.get("too_large") == Some(&1) && m.disconnects == 1
    })
    .await;
    eventually("re-registration", || async {
        h.metrics().registrations >= 2 && h.arn().is_some()
    })
    .await;
    let out = gw
        .execute(&h.arn().unwrap(), json!({"after": "reconnect"}))
        .await
        .unwrap();
    assert_eq!(out.payload["echo"], json!({"after": "reconnect"}));
}

/// Blocks every execute until the test releases permits.
struct Stuck(Arc<Semaphore>);

#[async_trait]
impl BaseConnector for Stuck {
    fn connector_type(&self) -> &str {
        "stuck"
    }
    async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        let _permit = self.0.acquire().await.expect("open");
        Ok(payload)
    }
}

#[tokio::test]
async fn a_slow_connector_does_not_stall_the_others_on_its_socket() {
    let gw = TestGateway::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let slow_cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("slow")
        .max_concurrent_requests(1)
        .max_queued_requests(2)
        .build()
        .unwrap();
    let regs = vec![
        Registration::new(slow_cfg, Stuck(gate.clone())),
        tagged(&gw.ws_url(), "acme", "fast"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let slow = find(&runner, "slow");
    let fast = find(&runner, "fast");
    let slow_arn = slow.arn().unwrap();

    // Flood the slow registration: one executes, two wait in its inbox, the rest are
    // refused at once as overloaded.
    let gw = Arc::new(gw);
    let mut flood = Vec::new();
    for n in 0..10 {
        let (gw, arn) = (gw.clone(), slow_arn.clone());
        flood.push(tokio::spawn(async move {
            gw.execute_with(&arn, json!({"n": n}), None, DEADLINE).await
        }));
    }
    eventually("every flooded execute to arrive", || async {
        slow.metrics().requests_received == 10
    })
    .await;
    assert_eq!(slow.metrics().requests_rejected_overloaded, 7);
    // Meanwhile the fast one answers.
    for n in 0..20 {
        let out = gw
            .execute(&fast.arn().unwrap(), json!({"n": n}))
            .await
            .unwrap();
        assert!(out.success);
    }
    gate.add_permits(100);
    let mut ok = 0;
    let mut refused = 0;
    for f in flood {
        let out = f.await.unwrap().unwrap();
        if out.success {
            ok += 1;
        } else {
            assert!(out.error.unwrap_or_default().contains("overloaded"));
            refused += 1;
        }
    }
    assert_eq!(
        (ok, refused),
        (3, 7),
        "the one running and the two waiting answer"
    );
}

fn fast_heartbeats(url: &str, instance: &str) -> Registration {
    let mut r = tagged(url, "acme", instance);
    r.config.heartbeat = HeartbeatSettings::default()
        .with_phoenix_interval(Duration::from_millis(100))
        .with_app_interval(Duration::from_millis(50))
        .with_inbound_idle_timeout(Duration::from_secs(30));
    r.config.reconnect =
        switchboard::BackoffPolicy::new(Duration::from_millis(10), Duration::from_millis(50));
    r
}

#[tokio::test]
async fn a_peer_that_stops_answering_phoenix_heartbeats_is_declared_dead_and_reconnected() {
    let gw = TestGateway::start().await;
    let (runner, _join) = start(
        RunnerOptions::default(),
        vec![fast_heartbeats(&gw.ws_url(), "a")],
    )
    .await;
    let h = runner.registrations()[0].clone();
    gw.set_answer_phoenix_heartbeats(false);
    eventually("a disconnect for the missed heartbeat", || async {
        h.metrics().disconnects >= 1
    })
    .await;
    gw.set_answer_phoenix_heartbeats(true);
    eventually("re-registration", || async {
        h.metrics().registrations >= 2 && h.arn().is_some()
    })
    .await;
    let out = gw.execute(&h.arn().unwrap(), json!({})).await.unwrap();
    assert!(out.success);
}

#[tokio::test]
async fn a_peer_that_answers_phoenix_but_never_app_heartbeats_is_healthy() {
    let gw = TestGateway::start().await;
    gw.set_answer_app_heartbeats(false);
    let mut r = fast_heartbeats(&gw.ws_url(), "a");
    // Phoenix heartbeats a second apart: an answer must come before the next one, and
    // no stall of a loaded machine is that long, so only the unanswered app heartbeats
    // could cost this connection.
    r.config.heartbeat = r
        .config
        .heartbeat
        .with_phoenix_interval(Duration::from_secs(1));
    let (runner, _join) = start(RunnerOptions::default(), vec![r]).await;
    let h = runner.registrations()[0].clone();
    // Thirty app-heartbeat intervals (and a Phoenix one) pass.
    let before = gw.stats().frames_in;
    eventually("many heartbeats", || async {
        gw.stats().frames_in >= before + 30
    })
    .await;
    assert_eq!(h.metrics().disconnects, 0);
    assert_eq!(
        h.metrics().heartbeat_rtt_ms,
        0,
        "no app heartbeat was answered"
    );
}

#[tokio::test]
async fn refused_registers_are_retried_until_the_gateway_accepts() {
    let gw = TestGateway::start().await;
    gw.set_refuse_registers(true);
    let mut r = tagged(&gw.ws_url(), "acme", "a");
    r.config.reconnect =
        switchboard::BackoffPolicy::new(Duration::from_millis(10), Duration::from_millis(40));
    let (runner, _join) = common::spawn(
        switchboard::MultiConnectorRunner::new(RunnerOptions::default(), vec![r]).unwrap(),
    );
    let h = runner.registrations()[0].clone();
    eventually("two refusals", || async {
        h.metrics().register_failures >= 2
    })
    .await;
    assert!(h.arn().is_none());
    assert!(h.last_error().is_some());
    gw.set_refuse_registers(false);
    h.wait_registered(DEADLINE).await.unwrap();
    assert_eq!(
        h.metrics().disconnects,
        0,
        "a refused register is retried on the same socket"
    );
}

#[tokio::test]
async fn a_socket_whose_registers_never_succeed_keeps_growing_its_backoff() {
    let gw = TestGateway::start().await;
    gw.set_drop_sockets_on_register(true);
    let mut r = tagged(&gw.ws_url(), "acme", "a");
    // 10 ms doubling, jitter 0.5: the k-th delay lies in [5 * 2^(k-1), 10 * 2^(k-1)] ms.
    r.config.reconnect =
        switchboard::BackoffPolicy::new(Duration::from_millis(10), Duration::from_secs(60));
    let (runner, _join) = common::spawn(
        switchboard::MultiConnectorRunner::new(RunnerOptions::default(), vec![r]).unwrap(),
    );
    let h = runner.registrations()[0].clone();
    eventually("six reconnect attempts", || async {
        h.metrics().reconnect_attempts >= 6
    })
    .await;
    // Connecting succeeded every time, yet the backoff never reset: the sixth delay is
    // drawn from [160, 320] ms, far above the 10 ms a reset would give.
    assert!(h.metrics().current_backoff_ms >= 160, "{:?}", h.metrics());
    assert!(
        h.metrics().connects >= 6,
        "every attempt did connect and join"
    );
    assert_eq!(h.metrics().registrations, 0);
    gw.set_drop_sockets_on_register(false);
    h.wait_registered(DEADLINE).await.unwrap();
}
