//! What arrives on a gRPC `Connect` stream (PROTOCOL.md §3), on both sides of it.
//!
//! The input is the bytes of a stream body: 5-byte length-prefixed messages (one
//! compressed-flag byte, a big-endian u32 length, a protobuf `StreamMessage`).
//!
//! * Connector side: tonic's decoder (what `transport::grpc::GrpcStream` reads with,
//!   bounded as the runner bounds it) turns the bytes into messages, and each one goes
//!   to the sans-IO connection core with `Framing::Stream` (`mux::core`, through
//!   `__private::stream_core`), with this target playing the driver: it answers
//!   executes through the echo connector, invokes, cancels, reconnects and moves the
//!   clock as control bytes say. Beyond "never panics", it checks the core's
//!   promises: a stream core writes protocol messages only, and a register first on
//!   a fresh stream; every execute gets at most one answer (exactly one when the
//!   connector answers it while it runs); executes start once and are cancelled only
//!   while running; every invoke ends exactly once unless its caller cancelled it;
//!   and after the core handled its deadlines its next one is in the future (else
//!   the driver would spin).
//! * Gateway side: the bytes are the request body of a real HTTP/2 call to the
//!   reference gateway's gRPC server on loopback, in auto or manual approval mode, so
//!   they go through tonic's server decoder into the gateway's session handling
//!   (register and approval decisions, JWT parsing, execute correlation, invokes).
//!   The gateway's reply must be well-formed frames, at most one register answer per
//!   register, and must end once the request side ended; what it answered is then
//!   fed to a connection core as above. (The gateway's session code is private to
//!   its module, so its loopback port is the way in.)
//!
//! Layout: byte 0 bit 7 picks the gateway side (bit 6: manual approval); otherwise
//! byte 1 sets the registration's options, byte 2 is the length of the control bytes
//! that follow, and the rest is the stream.
#![no_main]

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use switchboard::__private::stream_core::{CoreEvent, StreamCore, StreamCoreOptions};
use switchboard::gateway::{ApprovalMode, GatewayConfig, TestGateway};
use switchboard::proto::stream_message::Message;
use switchboard::proto::{ExecuteRequest, ExecuteResponse, StreamMessage};
use switchboard::{BaseConnector, EchoConnector, PayloadEncoding};
use tonic::codec::Streaming;
use tower::ServiceExt;

/// The largest message either side takes: small, so the fuzzer meets the bound.
const MAX_MESSAGE: usize = 64 * 1024;

/// The clock steps a control byte picks from (its low 3 bits).
const STEPS_MS: [u64; 8] = [0, 1, 250, 1_000, 5_000, 11_000, 31_000, 61_000];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 0x80 != 0 {
        gateway_side(mode & 0x40 != 0, rest);
        return;
    }
    let [knobs, control_len, rest @ ..] = rest else {
        return;
    };
    let (control, stream) = rest.split_at((*control_len as usize).min(rest.len()));
    let mut h = Harness::new(*knobs, control);
    for item in decode(Bytes::copy_from_slice(stream)) {
        match item {
            Ok(msg) => h.message(msg),
            // The stream failed (a bad frame, one over the limit): the driver drops
            // it and redials later.
            Err(_) => {
                h.core.disconnect();
                h.drain();
                break;
            }
        }
    }
    h.finish();
});

/// The messages tonic's client-side decoder reads off a response body holding
/// `body`, until the body ends or a frame fails.
fn decode(body: Bytes) -> Vec<Result<StreamMessage, tonic::Status>> {
    let mut stream: Streaming<StreamMessage> = Streaming::new_response(
        tonic_prost::ProstDecoder::<StreamMessage>::default(),
        Full::new(body),
        http::StatusCode::OK,
        None,
        Some(MAX_MESSAGE),
    );
    let mut out = Vec::new();
    // An in-memory body is always ready, so every poll completes at once.
    while let Some(Some(item)) = stream.next().now_or_never() {
        let failed = item.is_err();
        out.push(item);
        if failed {
            break;
        }
    }
    out
}

/// A connection core and what this target, as its driver, knows about it.
struct Harness<'a> {
    core: StreamCore,
    control: std::slice::Iter<'a, u8>,
    /// Executes and invokes that arrived from the gateway, by request id.
    arrivals: HashMap<String, usize>,
    /// Answers the core wrote, by request id.
    answers: HashMap<String, usize>,
    /// Executes the core started and has not cancelled or been answered for.
    running: Vec<(u64, ExecuteRequest)>,
    /// Every execute the core ever started.
    started: Vec<u64>,
    /// Invokes the core accepted and has not ended: waiter, request id.
    invokes: Vec<(u64, String)>,
    next_waiter: u64,
    /// The core asked for a reconnect.
    reconnect: bool,
    removed: bool,
}

impl<'a> Harness<'a> {
    fn new(knobs: u8, control: &'a [u8]) -> Self {
        let core = StreamCore::new(StreamCoreOptions {
            max_concurrent: 1 + usize::from(knobs & 3),
            max_queued: usize::from((knobs >> 2) & 3),
            metrics_interval: if knobs & 0x10 != 0 {
                Duration::from_secs(30)
            } else {
                Duration::ZERO
            },
            session_token: (knobs & 0x20 != 0).then(|| "st".to_owned()),
            auth_token: if knobs & 0x40 != 0 {
                "cfg".into()
            } else {
                String::new()
            },
            await_jwt: knobs & 0x80 != 0,
        });
        let mut h = Harness {
            core,
            control: control.iter(),
            arrivals: HashMap::new(),
            answers: HashMap::new(),
            running: Vec::new(),
            started: Vec::new(),
            invokes: Vec::new(),
            next_waiter: 0,
            reconnect: false,
            removed: false,
        };
        h.connect();
        h
    }

    /// The stream opens: what the core writes first must be its register.
    fn connect(&mut self) {
        self.core.connect();
        if let Some(first) = self.core.poll_transmit() {
            let first = first.expect("a stream core writes messages, not Phoenix frames");
            assert!(
                matches!(first.message, Some(Message::RegisterRequest(_))),
                "the first message on a fresh stream is not the register: {first:?}"
            );
        }
        self.drain();
    }

    /// One message off the stream, then one control step.
    fn message(&mut self, msg: StreamMessage) {
        if let Some(Message::ExecuteRequest(r)) = &msg.message {
            *self.arrivals.entry(r.request_id.clone()).or_default() += 1;
        }
        if let Some(Message::InvokeRequest(r)) = &msg.message {
            *self.arrivals.entry(r.request_id.clone()).or_default() += 1;
        }
        self.core.message(msg);
        self.drain();
        let c = self.control.next().copied().unwrap_or(0);
        self.step(c);
    }

    /// What the driver does between two messages, as control byte `c` says.
    fn step(&mut self, c: u8) {
        self.core
            .advance(Duration::from_millis(STEPS_MS[usize::from(c & 7)]));
        self.timers();
        match (c >> 3) & 3 {
            0 => {
                while !self.running.is_empty() {
                    self.answer(0, true);
                }
            }
            1 => {}
            2 if !self.running.is_empty() => self.answer(0, true),
            3 if !self.running.is_empty() => self.answer(self.running.len() - 1, false),
            _ => {}
        }
        match c >> 5 {
            2 | 3 => {
                let waiter = self.next_waiter;
                self.next_waiter += 1;
                // Few distinct ids, so the fuzzer can answer them and reuse them.
                let id = (waiter % 4).to_string();
                let ff = c >> 5 == 3;
                let timeout = Duration::from_secs(5);
                match self
                    .core
                    .invoke(id.clone(), "t.echo.i2".into(), timeout, ff, waiter)
                {
                    Ok(()) => self.invokes.push((waiter, id)),
                    Err(w) => assert_eq!(w, waiter, "a refused invoke hands its own waiter back"),
                }
            }
            4 if !self.invokes.is_empty() => {
                let (_, id) = self.invokes.remove(0);
                self.core.cancel_invoke(&id);
            }
            5 => self.reconnect = true,
            6 => self.core.set_credentials(Some("jwt".into())),
            7 => self.core.send_metrics_report(),
            _ => {}
        }
        self.drain();
    }

    /// Handles the deadlines that have passed; afterwards the next one is later,
    /// unless the core asked for a reconnect (the driver then closes the stream at
    /// once, and the core handles what is left on the link that follows).
    fn timers(&mut self) {
        let now = self.core.elapsed();
        if self.core.poll_timeout().is_some_and(|at| at <= now) {
            self.core.handle_timeout();
            self.drain_io();
            if let Some(at) = self.core.poll_timeout().filter(|_| !self.reconnect) {
                assert!(
                    at > now,
                    "after handle_timeout at {now:?} the next deadline is {at:?}: the driver would spin"
                );
            }
        }
        self.drain();
    }

    /// The connector answers the `i`th running execute, as the driver's
    /// `run_execute` would with the echo connector (`ok`) or with a failure.
    fn answer(&mut self, i: usize, ok: bool) {
        let (exec, req) = self.running.remove(i);
        let payload = if ok {
            let encoding = PayloadEncoding::try_from(req.payload_encoding)
                .unwrap_or(PayloadEncoding::Unspecified);
            switchboard::decode_payload(&req.payload, encoding)
                .and_then(|p| {
                    EchoConnector
                        .execute(p, None)
                        .now_or_never()
                        .expect("the echo connector answers at once")
                })
                .ok()
        } else {
            None
        };
        let resp = ExecuteResponse {
            request_id: req.request_id.clone(),
            success: payload.is_some(),
            payload: payload
                .as_ref()
                .map(|p| Bytes::from(switchboard::encode_payload(p)))
                .unwrap_or_default(),
            payload_encoding: payload.as_ref().map_or(0, |p| p.encoding() as i32),
            error: if payload.is_some() {
                String::new()
            } else {
                "connector: failed".into()
            },
            duration_ms: 1,
        };
        let before = self.answers.get(&req.request_id).copied().unwrap_or(0);
        self.core.execute_done(exec, resp);
        self.drain();
        let after = self.answers.get(&req.request_id).copied().unwrap_or(0);
        assert_eq!(
            after,
            before + 1,
            "execute {exec} ({:?}) was answered while running, and wrote {} answers",
            req.request_id,
            after - before
        );
    }

    /// Writes every transmit and acts on every event, as the driver does after each
    /// input.
    fn drain(&mut self) {
        self.drain_io();
        if std::mem::take(&mut self.reconnect) && !self.removed {
            self.core.disconnect();
            self.drain();
            self.core.advance(Duration::from_millis(500));
            self.connect();
        }
    }

    /// [`Harness::drain`] without acting on a reconnect.
    fn drain_io(&mut self) {
        loop {
            let mut progress = false;
            while let Some(t) = self.core.poll_transmit() {
                progress = true;
                let msg = t.expect("a stream core writes messages, not Phoenix frames");
                self.sent(msg);
            }
            while let Some(ev) = self.core.poll_event() {
                progress = true;
                self.event(ev);
            }
            if !progress {
                break;
            }
        }
    }

    fn sent(&mut self, msg: StreamMessage) {
        assert!(msg.message.is_some(), "the core wrote an empty message");
        let id = match &msg.message {
            Some(Message::ExecuteResponse(r)) => &r.request_id,
            Some(Message::InvokeResponse(r)) => &r.request_id,
            _ => return,
        };
        let n = self.answers.entry(id.clone()).or_default();
        *n += 1;
        let arrived = self.arrivals.get(id).copied().unwrap_or(0);
        assert!(
            *n <= arrived,
            "request {id:?} arrived {arrived} times and was answered {n} times"
        );
    }

    fn event(&mut self, ev: CoreEvent) {
        match ev {
            CoreEvent::StartExecute { exec, request } => {
                assert!(
                    !self.started.contains(&exec),
                    "execute {exec} started twice"
                );
                assert!(
                    self.arrivals.contains_key(&request.request_id),
                    "an execute started that never arrived: {request:?}"
                );
                self.started.push(exec);
                self.running.push((exec, request));
            }
            CoreEvent::CancelExecute(exec) => {
                let i = self.running.iter().position(|(e, _)| *e == exec);
                let i =
                    i.unwrap_or_else(|| panic!("execute {exec} was cancelled but is not running"));
                self.running.remove(i);
            }
            CoreEvent::InvokeDone { waiter, .. } => {
                let i = self.invokes.iter().position(|(w, _)| *w == waiter);
                let i = i.unwrap_or_else(|| {
                    panic!("invoke waiter {waiter} ended but was not pending (twice, or cancelled)")
                });
                self.invokes.remove(i);
            }
            CoreEvent::MetricsDue => self.core.send_metrics_report(),
            CoreEvent::Reconnect(_) => self.reconnect = true,
            CoreEvent::Close => assert!(self.removed, "the core closed with its registration"),
            CoreEvent::Other(_) => {}
        }
    }

    /// The end: answers what runs, lets every deadline pass, removes the registration.
    /// Then nothing may be left running or waiting.
    fn finish(&mut self) {
        while !self.running.is_empty() {
            self.answer(0, true);
        }
        for _ in 0..8 {
            self.core.advance(Duration::from_secs(31));
            self.timers();
        }
        self.removed = true;
        assert!(
            self.core.remove(),
            "the registration was removed before the end"
        );
        self.drain();
        assert!(
            self.running.is_empty(),
            "executes still running after their registration was removed: {:?}",
            self.running
        );
        assert!(
            self.invokes.is_empty(),
            "invokes never ended: {:?}",
            self.invokes
        );
    }
}

/// Two reference gateways (auto and manual approval) serving gRPC on loopback, and a
/// channel to each, driven by one current-thread runtime.
struct Gateways {
    rt: tokio::runtime::Runtime,
    auto: (TestGateway, tonic::transport::Channel, String),
    manual: (TestGateway, tonic::transport::Channel, String),
}

fn gateways() -> &'static Gateways {
    static GATEWAYS: OnceLock<Gateways> = OnceLock::new();
    GATEWAYS.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let start = |mode| {
            rt.block_on(async {
                let config = GatewayConfig::default()
                    .with_max_frame_bytes(MAX_MESSAGE)
                    .with_approval(mode)
                    .with_default_execute_timeout(Duration::from_millis(200));
                let gw = TestGateway::start_with(config).await;
                let url = format!("http://{}", gw.grpc_addr().expect("serving gRPC"));
                let channel = tonic::transport::Endpoint::from_shared(url.clone())
                    .expect("a URL")
                    .connect()
                    .await
                    .expect("the gateway's gRPC port accepts");
                (gw, channel, url)
            })
        };
        let auto = start(ApprovalMode::Auto);
        let manual = start(ApprovalMode::Manual);
        Gateways { rt, auto, manual }
    })
}

/// The messages a reference decoder reads off `body` before the first bad frame:
/// what the gateway may act on.
fn frames(body: &[u8]) -> (Vec<StreamMessage>, bool) {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let Some((head, tail)) = rest.split_first_chunk::<5>() else {
            return (out, false);
        };
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if head[0] != 0 || len > MAX_MESSAGE || tail.len() < len {
            return (out, false);
        }
        match StreamMessage::decode(&tail[..len]) {
            Ok(m) => out.push(m),
            Err(_) => return (out, false),
        }
        rest = &tail[len..];
    }
    (out, true)
}

fn count(msgs: &[StreamMessage], f: impl Fn(&Message) -> bool) -> usize {
    msgs.iter()
        .filter(|m| m.message.as_ref().is_some_and(&f))
        .count()
}

fn gateway_side(manual: bool, body: &[u8]) {
    let g = gateways();
    let (_, channel, url) = if manual { &g.manual } else { &g.auto };
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "{url}/matrix.connectors.v1.ConnectorService/Connect"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(Full::new(Bytes::copy_from_slice(
            body,
        ))))
        .expect("a request");
    let reply = g.rt.block_on(async {
        let call = async {
            let resp = channel.clone().oneshot(request).await.ok()?;
            resp.into_body().collect().await.ok().map(|c| c.to_bytes())
        };
        tokio::time::timeout(Duration::from_secs(10), call).await
    });
    let Ok(reply) = reply else {
        panic!("the gateway did not end a stream whose request side ended, within 10 s");
    };
    // A transport failure (the connection reset under the call) says nothing here.
    let Some(reply) = reply else {
        return;
    };
    let (answers, whole) = frames(&reply);
    assert!(whole, "the gateway wrote a malformed frame: {reply:?}");
    let (asked, _) = frames(body);
    let registers = count(&asked, |m| matches!(m, Message::RegisterRequest(_)));
    let answered = count(&answers, |m| matches!(m, Message::RegisterResponse(_)));
    assert!(
        answered <= registers,
        "{answered} register answers to {registers} registers"
    );
    // What the gateway answered, as a connector's core would take it.
    let mut h = Harness::new(0, &[]);
    for msg in answers {
        h.message(msg);
    }
    h.finish();
}
