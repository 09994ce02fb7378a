//! The gRPC transport end to end, over real HTTP/2 connections to the reference
//! gateway: streams sharing connections up to the cap, a stream the gateway closes and
//! a connection it cuts (both come back), execute admission over a stream, executes
//! and invokes across transports, and the bounds on bad input.
#![cfg(feature = "gateway")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{eventually, find, start, tagged, DEADLINE};
use serde_json::json;
use switchboard::gateway::{GatewayConfig, TestGateway};
use switchboard::proto::connector_service_client::ConnectorServiceClient;
use switchboard::proto::{stream_message::Message, RegisterConnectorRequest, StreamMessage};
use switchboard::{
    BaseConnector, ConnectorConfig, InvokeOptions, Payload, Registration, RunnerOptions,
};

fn grpc_regs(gw: &TestGateway, tenant: &str, n: usize) -> Vec<Registration> {
    let url = gw.grpc_url().expect("the test gateway serves gRPC");
    (0..n)
        .map(|i| tagged(&url, tenant, &format!("g{i}")))
        .collect()
}

async fn instance_answering(gw: &TestGateway, arn: &str) -> String {
    let out = gw.execute(arn, json!({"n": 1})).await.expect("execute");
    assert!(out.success, "{out:?}");
    out.payload["instance"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn five_registrations_share_one_http2_connection_on_five_streams() {
    let gw = TestGateway::start().await;
    let (runner, _join) = start(RunnerOptions::default(), grpc_regs(&gw, "acme", 5)).await;
    let stats = gw.stats();
    assert_eq!(stats.grpc_connections_accepted, 1, "{stats:?}");
    assert_eq!(stats.grpc_streams_open, 5, "{stats:?}");
    assert_eq!(stats.registrations_by_transport["grpc"], 5, "{stats:?}");
    for i in 0..5 {
        let instance = format!("g{i}");
        let arn = find(&runner, &instance).arn().expect("registered");
        assert_eq!(instance_answering(&gw, &arn).await, instance);
    }
    let listed = gw.registrations();
    assert!(listed.iter().all(|r| r.transport == "grpc"), "{listed:?}");
}

#[tokio::test]
async fn a_hundred_registrations_with_a_cap_of_80_streams_use_two_connections() {
    let gw = TestGateway::start().await;
    let opts = RunnerOptions::default().with_max_streams_per_channel(80);
    let (_runner, _join) = start(opts, grpc_regs(&gw, "acme", 100)).await;
    let stats = gw.stats();
    assert_eq!(stats.grpc_connections_open, 2, "{stats:?}");
    assert_eq!(stats.grpc_streams_open, 100, "{stats:?}");
    assert_eq!(stats.registrations, 100);
}

#[tokio::test]
async fn a_stream_closed_by_the_gateway_re_registers_and_spares_its_neighbours() {
    let gw = TestGateway::start().await;
    let (runner, _join) = start(RunnerOptions::default(), grpc_regs(&gw, "acme", 3)).await;
    let link_of = |arn: &str| {
        gw.registrations()
            .into_iter()
            .find(|r| r.arn == arn)
            .map(|r| r.socket_id)
    };
    let victim = find(&runner, "g0").arn().unwrap();
    let neighbour = find(&runner, "g1").arn().unwrap();
    let (old, neighbour_link) = (link_of(&victim).unwrap(), link_of(&neighbour).unwrap());
    assert!(gw.drop_socket(old));
    eventually(
        "the closed stream's registration is back on a new stream",
        || {
            let now = link_of(&victim);
            async move { now.is_some_and(|id| id != old) }
        },
    )
    .await;
    assert_eq!(instance_answering(&gw, &victim).await, "g0");
    assert_eq!(
        link_of(&neighbour),
        Some(neighbour_link),
        "the neighbour kept its stream"
    );
    assert_eq!(
        gw.stats().grpc_connections_accepted,
        1,
        "the connection survived"
    );
}

#[tokio::test]
async fn a_cut_connection_is_redialled_with_backoff_and_every_stream_returns() {
    let gw = TestGateway::start().await;
    let (runner, _join) = start(RunnerOptions::default(), grpc_regs(&gw, "acme", 4)).await;
    assert_eq!(gw.drop_grpc_connections(), 1);
    eventually("all four re-registered over a new connection", || {
        let s = gw.stats();
        async move {
            s.grpc_connections_accepted == 2 && s.registrations == 4 && s.grpc_streams_open == 4
        }
    })
    .await;
    let s = gw.stats();
    assert_eq!(
        s.grpc_connections_open, 1,
        "one new connection, not one per stream: {s:?}"
    );
    for h in runner.registrations() {
        let m = h.metrics();
        assert!(m.reconnect_attempts >= 1 && m.disconnects >= 1, "{m:?}");
        let arn = h.wait_registered(DEADLINE).await.unwrap();
        assert_eq!(instance_answering(&gw, &arn).await, h.key().instance_id());
    }
}

/// Holds each execute until the test opens the gate, and records the most it ever ran
/// at once.
struct Gauge {
    running: AtomicUsize,
    peak: AtomicUsize,
    gate: tokio::sync::Semaphore,
}

#[async_trait]
impl BaseConnector for Gauge {
    fn connector_type(&self) -> &str {
        "gauge"
    }
    async fn execute(&self, p: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        let _permit = self.gate.acquire().await.expect("open");
        self.running.fetch_sub(1, SeqCst);
        Ok(p)
    }
}

#[tokio::test]
async fn max_concurrent_requests_bounds_the_executes_running_on_a_stream() {
    let gw = TestGateway::start().await;
    let cfg = ConnectorConfig::builder(gw.grpc_url().unwrap(), "acme")
        .instance_id("gauge")
        .max_concurrent_requests(2)
        .build()
        .unwrap();
    let gauge = Arc::new(Gauge {
        running: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        gate: tokio::sync::Semaphore::new(0),
    });
    let reg = Registration::shared(cfg, gauge.clone());
    let (runner, _join) = start(RunnerOptions::default(), vec![reg]).await;
    let h = find(&runner, "gauge");
    let arn = h.arn().unwrap();
    let calls = (0..12).map(|i| gw.execute(&arn, json!({"i": i})));
    let mut calls = Box::pin(futures_util::future::join_all(calls));
    // With the gate shut, every execute that admission starts stays running: once all
    // twelve have arrived, the two allowed are running and the rest wait their turn.
    tokio::select! {
        _ = &mut calls => panic!("answered with the gate shut"),
        _ = eventually("all twelve executes to arrive and two to run", || {
            let (received, running) = (h.metrics().requests_received, gauge.running.load(SeqCst));
            async move { received == 12 && running >= 2 }
        }) => {}
    }
    assert_eq!(gauge.running.load(SeqCst), 2, "admission started only two");
    gauge.gate.add_permits(12);
    let outs = calls.await;
    assert!(
        outs.iter().all(|o| o.as_ref().is_ok_and(|o| o.success)),
        "{outs:?}"
    );
    assert_eq!(
        gauge.peak.load(SeqCst),
        2,
        "never more than 2 at once, and 2 did overlap"
    );
}

#[tokio::test]
async fn executes_and_invokes_cross_between_grpc_and_websocket_registrations() {
    let gw = TestGateway::start().await;
    let regs = vec![
        tagged(&gw.grpc_url().unwrap(), "acme", "over-grpc"),
        tagged(&gw.ws_url(), "acme", "over-ws"),
    ];
    let (runner, _join) = start(RunnerOptions::default(), regs).await;
    let by_transport: Vec<_> = gw
        .registrations()
        .into_iter()
        .map(|r| (r.instance_id, r.transport))
        .collect();
    assert!(
        by_transport.contains(&("over-grpc".into(), "grpc".into())),
        "{by_transport:?}"
    );
    assert!(
        by_transport.contains(&("over-ws".into(), "websocket".into())),
        "{by_transport:?}"
    );
    let (grpc, ws) = (find(&runner, "over-grpc"), find(&runner, "over-ws"));
    for (from, to, want) in [(&grpc, &ws, "over-ws"), (&ws, &grpc, "over-grpc")] {
        let target = to.arn().unwrap();
        let answer = from
            .invoke(
                &target,
                "echo",
                Payload::Json(json!({"x": 1})),
                InvokeOptions::default(),
            )
            .await
            .expect("invoke across transports");
        let body = answer.json().unwrap();
        assert_eq!(body["instance"], want, "{body}");
        assert_eq!(body["echo"], json!({"x": 1}));
    }
    let s = gw.stats();
    assert_eq!(
        (
            s.registrations_by_transport["grpc"],
            s.registrations_by_transport["websocket"]
        ),
        (1, 1)
    );
    let text = reqwest::get(format!("{}/metrics", gw.http_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(r#"switchboard_gateway_registrations_by_transport{transport="grpc"} 1"#),
        "{text}"
    );
}

fn register_message(instance: &str, padding: usize) -> StreamMessage {
    let mut metadata = std::collections::HashMap::new();
    metadata.insert("padding".to_owned(), "x".repeat(padding));
    StreamMessage {
        message: Some(Message::RegisterRequest(RegisterConnectorRequest {
            tenant_id: "acme".into(),
            connector_type: "raw".into(),
            instance_id: instance.into(),
            instance_metadata: Some(switchboard::proto::InstanceMetadata {
                metadata,
                ..Default::default()
            }),
            ..Default::default()
        })),
    }
}

async fn raw_client(gw: &TestGateway) -> ConnectorServiceClient<tonic::transport::Channel> {
    let addr = gw.grpc_addr().unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("dial the gateway's gRPC port");
    ConnectorServiceClient::new(channel)
}

#[tokio::test]
async fn a_message_over_the_gateways_size_limit_ends_only_its_stream() {
    let gw = TestGateway::start_with(GatewayConfig::default().with_max_frame_bytes(4 * 1024)).await;
    let mut client = raw_client(&gw).await;
    let big = futures_util::stream::iter([register_message("big", 64 * 1024)]);
    let outcome = async {
        let mut inbound = client.connect(big).await?.into_inner();
        inbound.message().await
    }
    .await;
    assert!(
        !matches!(outcome, Ok(Some(_))),
        "an oversized register is never answered: {outcome:?}"
    );
    eventually("the oversized message is counted", || {
        let n = gw.stats().frames_dropped.get("too_large").copied();
        async move { n == Some(1) }
    })
    .await;
    assert_eq!(gw.stats().registrations, 0);
    // The gateway goes on serving streams of the right size.
    let mut inbound = client
        .connect(futures_util::stream::iter([register_message("small", 10)]))
        .await
        .expect("a stream")
        .into_inner();
    let answer = tokio::time::timeout(DEADLINE, inbound.message())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(answer.and_then(|m| m.message), Some(Message::RegisterResponse(r)) if r.success),
        "a small register is answered"
    );
}

#[tokio::test]
async fn a_message_over_the_clients_size_limit_is_counted_and_the_stream_redialled() {
    let gw = TestGateway::start().await;
    let opts = RunnerOptions::default().with_max_frame_bytes(4 * 1024);
    let (runner, _join) = start(opts, grpc_regs(&gw, "acme", 1)).await;
    let h = find(&runner, "g0");
    let arn = h.arn().unwrap();
    let link = gw.registrations()[0].socket_id;
    let huge = StreamMessage {
        message: Some(Message::ExecuteRequest(
            switchboard::proto::ExecuteRequest {
                request_id: "huge".into(),
                payload: vec![b'x'; 64 * 1024].into(),
                context: [("connector_arn".to_owned(), arn.clone())].into(),
                ..Default::default()
            },
        )),
    };
    assert!(gw.push(link, huge));
    eventually(
        "the client counts the oversized message and comes back",
        || {
            let m = h.metrics();
            let listed = gw.registrations();
            async move {
                m.frames_dropped.get("too_large") == Some(&1)
                    && listed.iter().any(|r| r.socket_id != link)
            }
        },
    )
    .await;
    assert_eq!(instance_answering(&gw, &arn).await, "g0");
}

#[tokio::test]
async fn a_call_on_an_unknown_service_is_refused_as_unimplemented() {
    let gw = TestGateway::start().await;
    let addr = gw.grpc_addr().unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/matrix.connectors.v1.NoSuchService/Connect");
    let codec = tonic_prost::ProstCodec::<StreamMessage, StreamMessage>::default();
    let status = grpc
        .streaming(
            tonic::Request::new(futures_util::stream::iter([register_message("x", 0)])),
            path,
            codec,
        )
        .await
        .expect_err("no such service");
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    assert_eq!(gw.stats().registrations, 0);
}

#[tokio::test]
async fn a_stream_whose_heartbeats_go_unanswered_is_declared_dead_and_reopened() {
    let gw = TestGateway::start().await;
    let heartbeat = switchboard::HeartbeatSettings::default()
        .with_app_interval(Duration::from_millis(100))
        .with_phoenix_interval(Duration::from_millis(100))
        .with_inbound_idle_timeout(Duration::from_millis(400));
    let cfg = ConnectorConfig::builder(gw.grpc_url().unwrap(), "acme")
        .instance_id("quiet")
        .heartbeat(heartbeat)
        .build()
        .unwrap();
    let (runner, _join) = start(
        RunnerOptions::default(),
        vec![Registration::new(cfg, common::Tagged("quiet".into()))],
    )
    .await;
    let h = find(&runner, "quiet");
    gw.set_answer_app_heartbeats(false);
    eventually("the silent stream is declared dead", || {
        let m = h.metrics();
        async move { m.disconnects >= 1 }
    })
    .await;
    gw.set_answer_app_heartbeats(true);
    eventually("a new stream registers again", || {
        let s = gw.stats();
        async move { s.grpc_streams_accepted >= 2 && s.registrations == 1 }
    })
    .await;
    let arn = h.wait_registered(DEADLINE).await.unwrap();
    assert_eq!(instance_answering(&gw, &arn).await, "quiet");
}

/// The next message on a raw client's stream, before the deadline.
async fn next_message(inbound: &mut tonic::Streaming<StreamMessage>) -> Message {
    tokio::time::timeout(DEADLINE, inbound.message())
        .await
        .expect("a message before the deadline")
        .expect("the stream stays up")
        .and_then(|m| m.message)
        .expect("a message")
}

/// A register held by the test hook is invisible until its response is queued; an
/// execute issued the moment it becomes visible reaches the stream after that
/// response (`gateway_http/register_order.rs` checks the same on a Phoenix socket).
#[tokio::test]
async fn a_held_register_is_invisible_and_its_response_precedes_the_first_execute() {
    let gw = TestGateway::start().await;
    let arn = "matrix:acme:raw:held";
    gw.set_hold_registers(true);
    let mut client = raw_client(&gw).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<StreamMessage>(4);
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    tx.send(register_message("held", 0)).await.unwrap();
    let mut inbound = client
        .connect(outbound)
        .await
        .expect("a stream")
        .into_inner();
    assert!(gw.wait_for_held_registers(1, DEADLINE).await);
    assert!(gw.registrations().is_empty());
    assert_eq!(gw.stats().registrations, 0);
    assert!(matches!(
        gw.execute(arn, json!({})).await,
        Err(switchboard::Error::NotFound(_))
    ));

    let execute = async {
        assert!(gw.wait_for_registrations(1, DEADLINE).await);
        gw.execute(arn, json!({"q": 1})).await
    };
    let connector = async {
        gw.set_hold_registers(false);
        match next_message(&mut inbound).await {
            Message::RegisterResponse(r) => assert!(r.success && r.connector_arn == arn, "{r:?}"),
            other => panic!("expected the register response first, got {other:?}"),
        }
        let Message::ExecuteRequest(req) = next_message(&mut inbound).await else {
            panic!("expected an execute request next")
        };
        let resp = switchboard::proto::ExecuteResponse {
            request_id: req.request_id,
            success: true,
            payload: br#"{"answered":true}"#.to_vec().into(),
            payload_encoding: switchboard::proto::PayloadEncoding::Json as i32,
            ..Default::default()
        };
        tx.send(StreamMessage {
            message: Some(Message::ExecuteResponse(resp)),
        })
        .await
        .unwrap();
    };
    let (out, ()) = tokio::join!(execute, connector);
    assert_eq!(out.unwrap().payload, json!({"answered": true}));
}
