//! CPU time of the CLIENT process per execute, with the reference gateway (and the load
//! generator driving it) in a CHILD process, so the client's cost is measured apart
//! from the gateway's.
//!
//! The bench binary re-executes itself with `SWITCHBOARD_BENCH_ROLE=gateway` to become
//! the child: it starts a gateway on 127.0.0.1:0, prints its `ws_url()`, and obeys line
//! commands on stdin:
//!
//! * `wait <tenant> <n>`: answers `ok` once `<tenant>` has at least n registrations;
//! * `load <tenant> <in_flight> <millis>`: keeps `in_flight` executes outstanding with
//!   `Gateway::execute_with` over that tenant's registrations, round-robin, for that
//!   long; answers `done <ops> <errors> <elapsed_us>` once every execute has ended;
//! * `quit`, or end of stdin.
//!
//! The parent measures two clients against the same child and the same load, with
//! `getrusage(RUSAGE_SELF)` (user + system) around each `load`; each client's time per
//! configuration is split into slices that alternate between the two clients:
//!
//! * switchboard: a `MultiConnectorRunner` with N `EchoConnector` registrations of one
//!   tenant;
//! * codec-only: a raw tokio-tungstenite client that joins `connector:lobby`, registers N
//!   instances of another tenant, and answers every `execute_request` by decoding it
//!   (Phoenix JSON, base64, protobuf) and encoding an `execute_response` with the same
//!   request id and payload; no routing, no payload decoding, and the same writer
//!   discipline as switchboard (feed every queued frame, flush when the queue is empty).
//!
//! Each registration count gets tenants of its own (`sb-<n>`, `codec-<n>`) on the one
//! child gateway, and the child loads only the tenant named, so a client's
//! registrations never receive the other's load; the idle client's tasks sleep. Both
//! clients run on one multi-thread tokio runtime with 2 workers. The rate is ops over
//! the child's own elapsed time of the load; the CPU figure includes the two short
//! command lines exchanged with the child per slice.
//!
//! The child is killed when its handle drops (also on a panic), and exits by itself at
//! the end of its stdin, so a parent killed outright leaves no gateway behind. Every
//! figure requires zero failed executes; the errors are counted and printed.
//!
//! The child gateway sends binary frames, so switchboard's client answers in binary;
//! the codec-only client speaks text frames, as a client that never asks for binary
//! does. `SWITCHBOARD_BENCH_FRAMES=text` starts the child with binary frames off, for
//! switchboard's figure on text frames.
//!
//! `cargo bench --bench client_cpu --all-features` (SWITCHBOARD_BENCH_SECS sets the
//! seconds per client and configuration, default 3).

mod support;

use std::io::Write as _;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use switchboard::gateway::{Gateway, GatewayConfig};
use switchboard::phoenix::{encode_proto, Frame, EVENT_PROTO, EVENT_REPLY, LOBBY_TOPIC};
use switchboard::proto::{
    stream_message::Message, ConnectorCapabilities, ExecuteResponse, RegisterConnectorRequest,
    StreamMessage,
};
use switchboard::MultiConnectorRunner;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Ws;

const ROLE_ENV: &str = "SWITCHBOARD_BENCH_ROLE";
const REGISTRATIONS: [usize; 2] = [4, 200];
const IN_FLIGHT: [usize; 2] = [64, 256];
const PAYLOAD: &str = r#"{"n":12345,"text":"switchboard benchmark payload"}"#;
const WARM_UP: Duration = Duration::from_millis(250);
/// Each client's measured time per configuration is split into this many slices,
/// alternating between the clients, so that drift in the machine's background load
/// falls on both alike.
const SLICES: u32 = 3;
/// The codec-only client's join ref (it joins once).
const JOIN_REF: &str = "1";

fn main() {
    let child = std::env::var(ROLE_ENV).is_ok_and(|r| r == "gateway");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if child {
        runtime.block_on(gateway_child());
    } else {
        runtime.block_on(parent());
    }
}

// ---------------------------------------------------------------------------------
// Child: the gateway and its load generator.

fn answer(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

async fn gateway_child() {
    // `SWITCHBOARD_BENCH_FRAMES=text`: a gateway that never sends binary frames, so
    // switchboard's client keeps to `proto` text frames as the codec-only client does.
    let binary = std::env::var("SWITCHBOARD_BENCH_FRAMES").map_or(true, |f| f != "text");
    let config = GatewayConfig::default().with_binary_frames(binary);
    let gateway = Arc::new(
        Gateway::start(config, "127.0.0.1:0".parse().unwrap())
            .await
            .expect("gateway starts"),
    );
    answer(&gateway.ws_url());
    // Stdin is read on a thread of its own, which ends the process at end of input: a
    // parent that died, even mid-load, leaves no gateway behind.
    let (tx, mut commands) = mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
        std::process::exit(0);
    });
    while let Some(line) = commands.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["wait", tenant, n] => {
                let n: usize = n.parse().expect("wait <tenant> <n>");
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let have = arns_of(&gateway, tenant).len();
                    if have >= n {
                        answer("ok");
                        break;
                    }
                    if Instant::now() >= deadline {
                        answer(&format!("timeout {have}"));
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            ["load", tenant, in_flight, millis] => {
                let in_flight: usize = in_flight.parse().expect("in_flight");
                let dur = Duration::from_millis(millis.parse().expect("millis"));
                let (ops, errors, elapsed) = load(&gateway, tenant, in_flight, dur).await;
                answer(&format!("done {ops} {errors} {}", elapsed.as_micros()));
            }
            ["quit"] => break,
            _ => answer(&format!("error unknown command {line:?}")),
        }
    }
}

fn arns_of(gateway: &Gateway, tenant: &str) -> Vec<String> {
    gateway
        .registrations()
        .into_iter()
        .filter(|r| r.tenant_id == tenant)
        .map(|r| r.arn)
        .collect()
}

/// Keeps `in_flight` executes outstanding over `tenant`'s registrations for `dur`;
/// returns (successful executes, failed executes, time until the last one ended).
async fn load(
    gateway: &Arc<Gateway>,
    tenant: &str,
    in_flight: usize,
    dur: Duration,
) -> (u64, u64, Duration) {
    let arns = Arc::new(arns_of(gateway, tenant));
    if arns.is_empty() {
        return (0, 0, Duration::ZERO);
    }
    let payload: serde_json::Value = serde_json::from_str(PAYLOAD).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|w| {
            let (gateway, arns, stop) = (gateway.clone(), arns.clone(), stop.clone());
            let (ops, errors, payload) = (ops.clone(), errors.clone(), payload.clone());
            tokio::spawn(async move {
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let arn = &arns[i % arns.len()];
                    let out = gateway
                        .execute_with(arn, payload.clone(), None, Duration::from_secs(10))
                        .await;
                    let error = match out {
                        Ok(o) if o.success => {
                            ops.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Ok(o) => Some(o.error.unwrap_or_default()),
                        Err(e) => Some(e.to_string()),
                    };
                    if let Some(error) = error {
                        // Only the first error of a load is printed. A failing execute
                        // (an unknown ARN) may return without awaiting anything, so
                        // pause, or the loop would never yield its worker.
                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("execute on {arn} failed: {error}");
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    i += in_flight;
                }
            })
        })
        .collect();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("load task");
    }
    (
        ops.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        start.elapsed(),
    )
}

// ---------------------------------------------------------------------------------
// Parent: the clients under measurement.

/// The child gateway process; killed when dropped (also on panic).
struct GatewayChild {
    process: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    ws_url: String,
}

impl GatewayChild {
    async fn spawn() -> GatewayChild {
        let exe = std::env::current_exe().expect("current exe");
        let mut process = Command::new(exe)
            .env(ROLE_ENV, "gateway")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the gateway child");
        let stdin = process.stdin.take().expect("child stdin");
        let mut stdout = BufReader::new(process.stdout.take().expect("child stdout")).lines();
        let ws_url = stdout
            .next_line()
            .await
            .expect("child stdout")
            .expect("the child prints its ws url");
        GatewayChild {
            process,
            stdin,
            stdout,
            ws_url,
        }
    }

    async fn ask(&mut self, command: &str) -> String {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("child stdin");
        self.stdin.flush().await.expect("child stdin");
        self.stdout
            .next_line()
            .await
            .expect("child stdout")
            .unwrap_or_else(|| panic!("the child exited while answering {command:?}"))
    }

    async fn wait(&mut self, tenant: &str, n: usize) {
        let reply = self.ask(&format!("wait {tenant} {n}")).await;
        assert_eq!(reply, "ok", "waiting for {n} registrations of {tenant}");
    }

    async fn load(&mut self, tenant: &str, in_flight: usize, dur: Duration) -> Load {
        let reply = self
            .ask(&format!("load {tenant} {in_flight} {}", dur.as_millis()))
            .await;
        let fields: Vec<u64> = reply
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("unexpected answer to load: {reply:?}"))
            .split(' ')
            .map(|f| f.parse().expect("numeric field"))
            .collect();
        let [ops, errors, elapsed_us] = fields[..] else {
            panic!("unexpected answer to load: {reply:?}")
        };
        Load {
            ops,
            errors,
            elapsed: Duration::from_micros(elapsed_us),
        }
    }

    async fn quit(mut self) {
        let _ = self.stdin.write_all(b"quit\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(10), self.process.wait())
            .await
            .is_err()
        {
            let _ = self.process.kill().await;
        }
    }
}

struct Load {
    ops: u64,
    errors: u64,
    elapsed: Duration,
}

/// One client's sum over the slices of one configuration.
#[derive(Default)]
struct Measured {
    ops: u64,
    errors: u64,
    elapsed: Duration,
    cpu: Duration,
}

impl Measured {
    fn add(&mut self, load: Load, cpu: Duration) {
        self.ops += load.ops;
        self.errors += load.errors;
        self.elapsed += load.elapsed;
        self.cpu += cpu;
    }

    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn cpu_us_per_execute(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }
}

/// Measures this process's CPU time over one `load` of `tenant`.
async fn measure_slice(
    child: &mut GatewayChild,
    tenant: &str,
    in_flight: usize,
    dur: Duration,
    into: &mut Measured,
) {
    let before = support::process_cpu();
    let load = child.load(tenant, in_flight, dur).await;
    into.add(load, support::process_cpu() - before);
}

async fn warm_up(child: &mut GatewayChild, tenant: &str, in_flight: usize) {
    let warm = child.load(tenant, in_flight, WARM_UP).await;
    assert!(
        warm.ops > 0,
        "no execute succeeded during warm-up of {tenant}"
    );
}

/// The client under test: N registrations of one tenant on a `MultiConnectorRunner`.
struct SwitchboardClient {
    tenant: String,
    runner: Arc<MultiConnectorRunner>,
    run: tokio::task::JoinHandle<switchboard::Result<()>>,
}

impl SwitchboardClient {
    async fn start(child: &mut GatewayChild, regs: usize) -> SwitchboardClient {
        let tenant = format!("sb-{regs}");
        let max_in_flight = *IN_FLIGHT.iter().max().unwrap();
        let names = (0..regs).map(|i| format!("echo-{i}"));
        let (runner, run) =
            support::echo_runner(&child.ws_url, &tenant, names, max_in_flight).await;
        child.wait(&tenant, regs).await;
        SwitchboardClient {
            tenant,
            runner,
            run,
        }
    }

    /// Executes the runner answered with an error or refused as overloaded.
    fn refused(&self) -> u64 {
        self.runner
            .metrics_snapshot()
            .values()
            .map(|m| m.requests_failed + m.requests_rejected_overloaded)
            .sum()
    }

    async fn stop(self) {
        self.runner.shutdown_handle().shutdown();
        self.run.await.unwrap().unwrap();
    }
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

type WsStream = futures_util::stream::SplitStream<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
>;

async fn next_frame(stream: &mut WsStream) -> Frame {
    loop {
        match stream.next().await {
            Some(Ok(Ws::Text(t))) => return Frame::decode(t.as_str()).expect("valid frame"),
            Some(Ok(_)) => continue,
            other => panic!("the gateway closed the codec-only client's socket: {other:?}"),
        }
    }
}

/// Phoenix refs of the codec-only client: decimal strings from one per-socket counter.
#[derive(Clone, Default)]
struct Refs(Arc<AtomicU64>);

impl Refs {
    fn next(&self) -> String {
        (self.0.fetch_add(1, Ordering::Relaxed) + 1).to_string()
    }
}

/// The baseline: joins, registers N instances of its tenant, then answers executes
/// (decode, encode, queue) until stopped. It sends a Phoenix heartbeat every 25 s so
/// that its socket outlives the gateway's idle timeout while the other client is loaded.
struct CodecClient {
    tenant: String,
    reader: tokio::task::JoinHandle<()>,
    heartbeat: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

impl CodecClient {
    async fn start(child: &mut GatewayChild, regs: usize) -> CodecClient {
        let tenant = format!("codec-{regs}");
        let url = format!("{}?vsn=2.0.0", child.ws_url);
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
            .await
            .expect("codec-only client connects");
        let (sink, mut stream) = ws.split();
        let (tx, rx) = mpsc::channel::<Ws>(1024);
        let writer = tokio::spawn(batching_writer(sink, rx));
        let refs = Refs::default();
        let join_push = refs.next();
        assert_eq!(join_push, JOIN_REF);
        let join = format!(r#"["{JOIN_REF}","{join_push}","{LOBBY_TOPIC}","phx_join",{{}}]"#);
        tx.send(Ws::text(join)).await.unwrap();
        loop {
            let f = next_frame(&mut stream).await;
            if f.event == EVENT_REPLY && f.msg_ref.as_deref() == Some(join_push.as_str()) {
                assert_eq!(f.reply_status(), Some("ok"), "join refused: {f:?}");
                break;
            }
        }
        for i in 0..regs {
            let msg = StreamMessage {
                message: Some(Message::RegisterRequest(RegisterConnectorRequest {
                    tenant_id: tenant.clone(),
                    connector_type: "echo".into(),
                    instance_id: format!("codec-{i}"),
                    capabilities: Some(ConnectorCapabilities {
                        connector_type: "echo".into(),
                        version: "0.1.0".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
            };
            let text = encode_proto(Some(JOIN_REF), Some(&refs.next()), LOBBY_TOPIC, &msg);
            tx.send(Ws::text(text)).await.unwrap();
        }
        let mut registered = 0;
        while registered < regs {
            let f = next_frame(&mut stream).await;
            if f.event != EVENT_PROTO {
                continue;
            }
            if let Some(Message::RegisterResponse(r)) = f.proto().expect("valid proto").message {
                assert!(r.success, "register refused: {}", r.error);
                registered += 1;
            }
        }
        let heartbeat = tokio::spawn({
            let (tx, refs) = (tx.clone(), refs.clone());
            async move {
                let mut every = tokio::time::interval(Duration::from_secs(25));
                every.tick().await;
                loop {
                    every.tick().await;
                    let hb = format!(r#"[null,"{}","phoenix","heartbeat",{{}}]"#, refs.next());
                    if tx.send(Ws::text(hb)).await.is_err() {
                        return;
                    }
                }
            }
        });
        let reader = tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let Ws::Text(text) = msg else { continue };
                let Ok(frame) = Frame::decode(text.as_str()) else {
                    continue;
                };
                if frame.event != EVENT_PROTO {
                    continue;
                }
                let Ok(StreamMessage {
                    message: Some(Message::ExecuteRequest(req)),
                }) = frame.proto()
                else {
                    continue;
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
                let text = encode_proto(Some(JOIN_REF), Some(&refs.next()), LOBBY_TOPIC, &resp);
                if tx.send(Ws::text(text)).await.is_err() {
                    break;
                }
            }
        });
        child.wait(&tenant, regs).await;
        CodecClient {
            tenant,
            reader,
            heartbeat,
            writer,
        }
    }

    async fn stop(self) {
        // Ending the reader and the heartbeat drops the queue's senders, which ends the
        // writer; both socket halves gone closes the socket, and the gateway forgets
        // the registrations.
        self.reader.abort();
        self.heartbeat.abort();
        let _ = self.reader.await;
        let _ = self.heartbeat.await;
        let _ = self.writer.await;
    }
}

async fn parent() {
    let dur = support::run_for_or(3.0);
    let slice = dur / SLICES;
    let mut child = GatewayChild::spawn().await;
    println!(
        "client CPU (getrusage RUSAGE_SELF, user + system) per execute; gateway and load generator in a child process; {dur:?} per client and configuration, in {SLICES} slices alternating between the two clients"
    );
    println!();
    println!("| registrations | in flight | switchboard rt/s | switchboard CPU µs/execute | codec-only CPU µs/execute | ratio (switchboard / codec) | codec-only rt/s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let (mut sb_errors, mut sb_refused, mut codec_errors) = (0, 0, 0);
    for regs in REGISTRATIONS {
        // Both clients stay connected; the child loads one tenant at a time, and the
        // idle client's tasks sleep, so each slice's CPU is the loaded client's.
        let sb = SwitchboardClient::start(&mut child, regs).await;
        let codec = CodecClient::start(&mut child, regs).await;
        for in_flight in IN_FLIGHT {
            warm_up(&mut child, &sb.tenant, in_flight).await;
            warm_up(&mut child, &codec.tenant, in_flight).await;
            let (mut s, mut c) = (Measured::default(), Measured::default());
            for _ in 0..SLICES {
                measure_slice(&mut child, &sb.tenant, in_flight, slice, &mut s).await;
                measure_slice(&mut child, &codec.tenant, in_flight, slice, &mut c).await;
            }
            sb_errors += s.errors;
            codec_errors += c.errors;
            println!(
                "| {regs} | {in_flight} | {:.0} | {:.1} | {:.1} | {:.2} | {:.0} |",
                s.rate(),
                s.cpu_us_per_execute(),
                c.cpu_us_per_execute(),
                s.cpu_us_per_execute() / c.cpu_us_per_execute(),
                c.rate(),
            );
        }
        sb_refused += sb.refused();
        sb.stop().await;
        codec.stop().await;
    }
    println!();
    println!(
        "errors: switchboard {sb_errors} failed executes at the gateway, {sb_refused} failed or refused as overloaded by the runner; codec-only {codec_errors}"
    );
    child.quit().await;
}
