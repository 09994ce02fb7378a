//! Execute round trips through the reference gateway over ONE shared socket, beside two
//! loopback baselines measured in the same run:
//!
//! * (a) raw: a tokio-tungstenite echo of frames of the same size, nothing decoded;
//! * (b) codec: the same echo whose far end decodes every frame (Phoenix JSON, base64,
//!   protobuf) and re-encodes an `execute_response`, routing nothing.
//!
//! switchboard's figure is driven in-process with `Gateway::execute_with` (not through
//! the HTTP API, which would measure HTTP). Both echo servers use the same writer
//! discipline as switchboard: feed every queued frame, flush when the queue is empty.
//!
//! Then the same executes with the registrations over gRPC (`grpc_url()`, one
//! `Connect` stream each, 64 of them sharing one HTTP/2 connection), beside
//!
//! * (c) gRPC echo: a tonic `ConnectorService` answering each `execute_request` with
//!   an `execute_response` of the same payload on the same stream, driven with the
//!   same number of streams on one connection and the same requests in flight, spread
//!   over the streams as the executes are (`support/grpc.rs`).
//!
//! Last, invoke round trips (connector -> gateway -> connector and back) between a
//! caller and a target registration, over each transport, beside executes to the
//! target and that transport's one-connection echo ((a), or (c)).
//!
//! switchboard's WebSocket rows run twice: on a gateway that sends binary frames (the
//! default; the connector then answers in binary) and on one that never does, so the
//! client keeps to `proto` text frames. Baseline (b) stays the text codec either way.
//!
//! `cargo bench --bench throughput --all-features` (SWITCHBOARD_BENCH_SECS sets the
//! seconds per configuration).
//!
//! `SWITCHBOARD_BENCH_ONLY=socket` runs only the gateway socket's comparison: executes
//! and WebSocket invokes on a default gateway (the socket task writes while its queue
//! is short, a helper while a backlog lasts) and on one whose sockets always write
//! from a second task (`socket_writer_apart`, the socket before issue 36), alternating
//! for `SWITCHBOARD_BENCH_ROUNDS` rounds (default 3), so each figure has its baseline
//! from the same run.

mod support;

#[path = "support/grpc.rs"]
mod grpc_echo;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use prost::Message as _;
use support::{echo_runner, run_for, us, Sample};
use switchboard::gateway::{Gateway, GatewayConfig};
use switchboard::phoenix::{encode_proto, Frame, LOBBY_TOPIC};
use switchboard::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, PayloadEncoding, StreamMessage,
};
use switchboard::{InvokeOptions, Payload, RegistrationHandle};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Ws;

/// Requests kept in flight, per configuration.
const IN_FLIGHT: [usize; 3] = [1, 64, 256];

const PAYLOAD: &str = r#"{"n":12345,"text":"switchboard benchmark payload"}"#;

#[derive(Clone, Copy)]
enum EchoKind {
    Raw,
    Codec,
}

/// An execute_request frame as the gateway would send it, to size the baseline frames.
fn sample_request(id: u64) -> String {
    let mut context = HashMap::new();
    context.insert(
        "connector_arn".to_owned(),
        "matrix:bench:echo:echo-0".to_owned(),
    );
    let msg = StreamMessage {
        message: Some(Message::ExecuteRequest(ExecuteRequest {
            request_id: format!("{id:016x}"),
            payload: PAYLOAD.as_bytes().to_vec().into(),
            payload_encoding: PayloadEncoding::Json as i32,
            context,
            capability_id: String::new(),
        })),
    };
    encode_proto(Some("1"), Some(&id.to_string()), LOBBY_TOPIC, &msg)
}

fn codec_answer(text: &str) -> String {
    let frame = Frame::decode(text).expect("valid frame");
    let Some(Message::ExecuteRequest(req)) = frame.proto().expect("valid proto").message else {
        panic!("not an execute request")
    };
    let resp = StreamMessage {
        message: Some(Message::ExecuteResponse(ExecuteResponse {
            request_id: req.request_id,
            success: true,
            payload: req.payload,
            payload_encoding: req.payload_encoding,
            error: String::new(),
            duration_ms: 0,
        })),
    };
    encode_proto(
        frame.join_ref.as_deref(),
        frame.msg_ref.as_deref(),
        &frame.topic,
        &resp,
    )
}

async fn echo_server(kind: EchoKind) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tcp.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let (sink, mut stream) = ws.split();
                let (tx, rx) = mpsc::channel::<Ws>(1024);
                tokio::spawn(batching_writer(sink, rx));
                while let Some(Ok(Ws::Text(t))) = stream.next().await {
                    let out = match kind {
                        EchoKind::Raw => Ws::Text(t),
                        EchoKind::Codec => Ws::text(codec_answer(t.as_str())),
                    };
                    if tx.send(out).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn batching_writer<S: futures_util::Sink<Ws> + Unpin>(
    mut sink: S,
    mut rx: mpsc::Receiver<Ws>,
) {
    while let Some(m) = rx.recv().await {
        if sink.feed(m).await.is_err() {
            return;
        }
        while let Ok(m) = rx.try_recv() {
            if sink.feed(m).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}

/// Keeps `in_flight` frames outstanding on one connection for `dur`.
async fn drive_echo(addr: std::net::SocketAddr, in_flight: usize, dur: Duration) -> Sample {
    let (ws, _) = tokio_tungstenite::connect_async_with_config(format!("ws://{addr}/"), None, true)
        .await
        .unwrap();
    let (sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::channel::<Ws>(4096);
    tokio::spawn(batching_writer(sink, rx));
    let mut sent_at = vec![Instant::now(); in_flight];
    let frames: Vec<String> = (0..in_flight as u64).map(sample_request).collect();
    for f in &frames {
        tx.send(Ws::text(f.clone())).await.unwrap();
    }
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut ops = 0;
    while let Some(Ok(Ws::Text(t))) = stream.next().await {
        // The msg ref (second element) is the slot number in both echo kinds.
        let slot: usize = t
            .as_str()
            .split('"')
            .nth(3)
            .and_then(|s| s.parse().ok())
            .expect("slot ref");
        let now = Instant::now();
        latencies.push(now - sent_at[slot]);
        ops += 1;
        if now - start >= dur {
            break;
        }
        sent_at[slot] = now;
        tx.send(Ws::text(frames[slot].clone())).await.unwrap();
    }
    Sample {
        ops,
        elapsed: start.elapsed(),
        latencies,
    }
}

/// Keeps `in_flight` operations outstanding for `dur`; `op(i)` runs the i-th one.
async fn drive<F, Fut>(in_flight: usize, dur: Duration, op: F) -> Sample
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..in_flight {
        let (op, stop) = (op.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                op(i).await;
                lat.push(t0.elapsed());
                i += in_flight;
            }
            lat
        }));
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Sample {
        ops: latencies.len() as u64,
        elapsed: start.elapsed(),
        latencies,
    }
}

/// Executes from the gateway over the registrations `arns`, round-robin.
async fn drive_switchboard(
    gateway: Arc<Gateway>,
    arns: Arc<Vec<String>>,
    in_flight: usize,
    dur: Duration,
) -> Sample {
    let payload: serde_json::Value = serde_json::from_str(PAYLOAD).unwrap();
    drive(in_flight, dur, move |i| {
        let (gateway, arn, payload) = (
            gateway.clone(),
            arns[i % arns.len()].clone(),
            payload.clone(),
        );
        async move {
            let out = gateway
                .execute_with(&arn, payload, None, Duration::from_secs(10))
                .await
                .expect("execute");
            assert!(out.success);
        }
    })
    .await
}

/// Invokes from `caller` to `target` (connector -> gateway -> connector and back).
async fn drive_invoke(
    caller: RegistrationHandle,
    target: String,
    in_flight: usize,
    dur: Duration,
) -> Sample {
    let payload: serde_json::Value = serde_json::from_str(PAYLOAD).unwrap();
    drive(in_flight, dur, move |_| {
        let (caller, target, payload) = (caller.clone(), target.clone(), payload.clone());
        async move {
            caller
                .invoke(
                    &target,
                    "echo",
                    Payload::Json(payload),
                    InvokeOptions::default(),
                )
                .await
                .expect("invoke");
        }
    })
    .await
}

/// The rates of one execute configuration (registrations, in flight) over WebSocket,
/// for the gRPC table's comparison column.
type WsRates = HashMap<(usize, usize), f64>;

/// gRPC rows: the same executes with the registrations on `grpc_url()`, beside the
/// tonic echo baseline of the same number of streams and requests in flight, measured
/// right before each row. Returns the echo baseline per in flight on one stream.
async fn grpc_table(gateway: Arc<Gateway>, ws: &WsRates, dur: Duration) -> HashMap<usize, f64> {
    let echo = grpc_echo::echo_server().await;
    let url = gateway.grpc_url().expect("the bench gateway serves gRPC");
    let payload: bytes::Bytes =
        serde_json::to_vec(&serde_json::from_str::<serde_json::Value>(PAYLOAD).unwrap())
            .unwrap()
            .into();
    let mut one_stream = HashMap::new();
    let msg = grpc_echo::request("matrix:grpc1:echo:echo-0", &payload, 0x10000);
    println!();
    println!("gRPC execute_request message: {} bytes", msg.encoded_len());
    println!("| registrations | in flight | switchboard gRPC rt/s | p50 µs | p99 µs | (c) gRPC echo rt/s | echo p50 µs | echo p99 µs | ratio to (c) | gRPC / WebSocket |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for regs in [1usize, 64] {
        let names = (0..regs).map(|i| format!("echo-{i}"));
        let (runner, run) = echo_runner(&url, &format!("grpc{regs}"), names, 256).await;
        let arns: Arc<Vec<String>> = Arc::new(
            runner
                .registrations()
                .iter()
                .filter_map(|h| h.arn())
                .collect(),
        );
        let _ = drive_switchboard(
            gateway.clone(),
            arns.clone(),
            16,
            Duration::from_millis(200),
        )
        .await;
        let _ = grpc_echo::drive_echo(echo, &arns, &payload, 16, Duration::from_millis(200)).await;
        for in_flight in IN_FLIGHT {
            let mut c = grpc_echo::drive_echo(echo, &arns, &payload, in_flight, dur).await;
            let mut sb = drive_switchboard(gateway.clone(), arns.clone(), in_flight, dur).await;
            if regs == 1 {
                one_stream.insert(in_flight, c.rate());
            }
            println!(
                "| {regs} | {in_flight} | {:.0} | {} | {} | {:.0} | {} | {} | {:.2} | {:.2} |",
                sb.rate(),
                us(sb.p(0.50)),
                us(sb.p(0.99)),
                c.rate(),
                us(c.p(0.50)),
                us(c.p(0.99)),
                sb.rate() / c.rate(),
                sb.rate() / ws.get(&(regs, in_flight)).unwrap_or(&f64::NAN),
            );
        }
        runner.shutdown_handle().shutdown();
        let _ = run.await;
    }
    one_stream
}

/// Invoke round trips beside execute round trips on the same runner and gateway, for
/// each transport: a caller and a target registration on `url`. `baseline` is the echo
/// of that transport on one connection (raw echo for WebSocket, tonic echo for gRPC)
/// per in flight; an invoke is two hops, so half of it is par.
async fn invoke_rows(
    gateway: Arc<Gateway>,
    transport: &str,
    url: &str,
    baseline: &HashMap<usize, f64>,
    dur: Duration,
) {
    let names = ["caller", "target"].map(String::from);
    let tenant = format!("invoke{transport}");
    let (runner, run) = echo_runner(url, &tenant, names, 256).await;
    let by = |i: &str| {
        runner
            .registrations()
            .into_iter()
            .find(|h| h.key().instance_id() == i)
            .unwrap()
    };
    let (caller, target) = (by("caller"), by("target"));
    let target_arn = target.arn().unwrap();
    let _ = drive_invoke(
        caller.clone(),
        target_arn.clone(),
        16,
        Duration::from_millis(200),
    )
    .await;
    for in_flight in IN_FLIGHT {
        let exec = drive_switchboard(
            gateway.clone(),
            Arc::new(vec![target_arn.clone()]),
            in_flight,
            dur,
        )
        .await;
        let mut inv = drive_invoke(caller.clone(), target_arn.clone(), in_flight, dur).await;
        println!(
            "| {transport} | {in_flight} | {:.0} | {:.0} | {} | {} | {:.2} | {:.2} |",
            exec.rate(),
            inv.rate(),
            us(inv.p(0.50)),
            us(inv.p(0.99)),
            inv.rate() / exec.rate(),
            inv.rate() / baseline[&in_flight],
        );
    }
    runner.shutdown_handle().shutdown();
    let _ = run.await;
}

/// WebSocket execute rows on `gateway` for each number of registrations, beside the
/// echo baselines per in flight; records the rates in `ws`.
async fn ws_rows(
    gateway: &Arc<Gateway>,
    frames: &str,
    regs_list: &[usize],
    baselines: &HashMap<usize, (f64, f64)>,
    ws: &mut WsRates,
    dur: Duration,
) {
    for &regs in regs_list {
        let tenant = format!("bench{regs}");
        let names = (0..regs).map(|i| format!("echo-{i}"));
        let (runner, run) = echo_runner(&gateway.ws_url(), &tenant, names, 256).await;
        let arns: Arc<Vec<String>> = Arc::new(
            runner
                .registrations()
                .iter()
                .filter_map(|h| h.arn())
                .collect(),
        );
        // Warm up.
        let _ = drive_switchboard(
            gateway.clone(),
            arns.clone(),
            16,
            Duration::from_millis(200),
        )
        .await;
        for in_flight in IN_FLIGHT {
            let mut sb = drive_switchboard(gateway.clone(), arns.clone(), in_flight, dur).await;
            let (a, b) = baselines[&in_flight];
            ws.insert((regs, in_flight), sb.rate());
            println!(
                "| {frames} | {regs} | {in_flight} | {:.0} | {} | {} | {a:.0} | {b:.0} | {:.2} | {:.2} |",
                sb.rate(),
                us(sb.p(0.50)),
                us(sb.p(0.99)),
                sb.rate() / a,
                sb.rate() / b,
            );
        }
        runner.shutdown_handle().shutdown();
        let _ = run.await;
    }
}

/// One variant of the socket comparison: its gateway and a caller and a target
/// registration on it.
struct Variant {
    name: &'static str,
    gateway: Arc<Gateway>,
    caller: RegistrationHandle,
    target: String,
    runner: Arc<switchboard::MultiConnectorRunner>,
    run: tokio::task::JoinHandle<switchboard::Result<()>>,
}

impl Variant {
    async fn start(name: &'static str, apart: bool) -> Variant {
        let config = GatewayConfig::default().with_socket_writer_apart(apart);
        let gateway = Arc::new(
            Gateway::start(config, "127.0.0.1:0".parse().unwrap())
                .await
                .unwrap(),
        );
        let names = ["caller", "target"].map(String::from);
        let (runner, run) = echo_runner(&gateway.ws_url(), "cmp", names, 256).await;
        let by = |i: &str| {
            runner
                .registrations()
                .into_iter()
                .find(|h| h.key().instance_id() == i)
                .unwrap()
        };
        let (caller, target) = (by("caller"), by("target").arn().unwrap());
        Variant {
            name,
            gateway,
            caller,
            target,
            runner,
            run,
        }
    }

    /// Executes to the target, then invokes from the caller to the target.
    async fn measure(&self, in_flight: usize, dur: Duration) -> (Sample, Sample) {
        let arns = Arc::new(vec![self.target.clone()]);
        let exec = drive_switchboard(self.gateway.clone(), arns, in_flight, dur).await;
        let inv = drive_invoke(self.caller.clone(), self.target.clone(), in_flight, dur).await;
        (exec, inv)
    }
}

/// `SWITCHBOARD_BENCH_ONLY=socket`: the socket that writes inline while quiet against
/// the two-task socket, on a caller and a target registration each (executes go to
/// the target, invokes from the caller to the target), binary frames. The variants
/// take turns row by row (the first alternating), so that each pair of rows is
/// measured within seconds of each other on a machine whose load changes.
async fn socket_compare(dur: Duration) {
    let rounds: usize = std::env::var("SWITCHBOARD_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let variants = [
        Variant::start("two tasks", true).await,
        Variant::start("adaptive", false).await,
    ];
    for v in &variants {
        let _ = v.measure(16, Duration::from_millis(200)).await;
    }
    println!("| round | socket | in flight | execute rt/s | p50 µs | p99 µs | invoke rt/s | invoke p50 µs | invoke p99 µs | invoke / execute |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut turn = 0;
    for round in 0..rounds {
        for in_flight in IN_FLIGHT {
            turn += 1;
            let order: [usize; 2] = if turn % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let v = &variants[i];
                let (mut exec, mut inv) = v.measure(in_flight, dur).await;
                println!(
                    "| {round} | {} | {in_flight} | {:.0} | {} | {} | {:.0} | {} | {} | {:.2} |",
                    v.name,
                    exec.rate(),
                    us(exec.p(0.50)),
                    us(exec.p(0.99)),
                    inv.rate(),
                    us(inv.p(0.50)),
                    us(inv.p(0.99)),
                    inv.rate() / exec.rate(),
                );
            }
        }
    }
    for v in variants {
        v.runner.shutdown_handle().shutdown();
        let _ = v.run.await;
    }
}

#[tokio::main]
async fn main() {
    let dur = run_for();
    if std::env::var("SWITCHBOARD_BENCH_ONLY").is_ok_and(|v| v == "socket") {
        return socket_compare(dur).await;
    }
    // SWITCHBOARD_BENCH_ONLY=grpc skips the WebSocket rows (to profile the gRPC path).
    let grpc_only = std::env::var("SWITCHBOARD_BENCH_ONLY").is_ok_and(|v| v == "grpc");
    let raw = echo_server(EchoKind::Raw).await;
    let codec = echo_server(EchoKind::Codec).await;
    println!(
        "frame size: {} bytes; {:?} per configuration",
        sample_request(0).len(),
        dur
    );
    println!();
    println!("| frames | registrations | in flight | switchboard rt/s | p50 µs | p99 µs | (a) raw echo rt/s | (b) codec echo rt/s | ratio to (a) | ratio to (b) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let config = GatewayConfig::default().with_grpc_listen("127.0.0.1:0".parse().unwrap());
    let gateway = Arc::new(
        Gateway::start(config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap(),
    );
    let mut baselines = HashMap::new();
    for in_flight in IN_FLIGHT.into_iter().filter(|_| !grpc_only) {
        let a = drive_echo(raw, in_flight, dur).await;
        let b = drive_echo(codec, in_flight, dur).await;
        baselines.insert(in_flight, (a.rate(), b.rate()));
    }
    let mut ws = WsRates::new();
    let ws_regs: &[usize] = if grpc_only { &[] } else { &[1, 64, 512] };
    ws_rows(&gateway, "binary", ws_regs, &baselines, &mut ws, dur).await;
    // The same rows on a gateway that never sends binary frames, so the client keeps to
    // `proto` text frames: what binary frames save, measured in the same run.
    if !grpc_only {
        let text = Gateway::start(
            GatewayConfig::default().with_binary_frames(false),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        ws_rows(
            &Arc::new(text),
            "text",
            &[1, 64],
            &baselines,
            &mut WsRates::new(),
            dur,
        )
        .await;
    }
    let grpc_echo = grpc_table(gateway.clone(), &ws, dur).await;
    println!();
    println!("| transport | in flight | execute rt/s | invoke rt/s | invoke p50 µs | invoke p99 µs | invoke / execute | invoke / echo |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let raw_echo: HashMap<usize, f64> = baselines.iter().map(|(k, (a, _))| (*k, *a)).collect();
    if !grpc_only {
        invoke_rows(
            gateway.clone(),
            "websocket",
            &gateway.ws_url(),
            &raw_echo,
            dur,
        )
        .await;
    }
    let url = gateway.grpc_url().unwrap();
    invoke_rows(gateway.clone(), "grpc", &url, &grpc_echo, dur).await;
}
