//! Test support for the core: a clock, a registration spec builder, and a harness
//! that feeds a core frames and drains what it transmits and asks for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::super::{Connection, CoreOptions, Event, ExecId, Framing, Incoming, Now, Transmit};
use super::wire::registered;
pub(super) use super::wire::{arn, TENANT, TYPE};
use crate::backoff::BackoffPolicy;
use crate::connector::config::HeartbeatSettings;
use crate::identity::RegistrationKey;
use crate::mux::core::RegistrationSpec;
use crate::mux::metrics::{HandleMetrics, SocketMetrics};
use crate::mux::routing::HandleId;
use crate::phoenix::{encode_proto, Frame, LOBBY_TOPIC};
use crate::proto::{
    stream_message::Message, ExecuteResponse, RegisterConnectorRequest, StreamMessage,
};

pub(super) const PHOENIX_INTERVAL: Duration = Duration::from_secs(25);
pub(super) const APP_INTERVAL: Duration = Duration::from_secs(30);
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub(super) const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);
/// The retry policy has no jitter, so the first retry comes exactly this late.
pub(super) const RETRY_INITIAL: Duration = Duration::from_secs(1);
pub(super) const EXECUTE_TIMEOUT: Duration = Duration::from_secs(20);

/// The waiter type of the tests' invokes: a plain number to recognise it by.
pub(super) type Conn = Connection<u32, ()>;

/// Milliseconds from `d`, for readable advances.
pub(super) fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

/// An explicit clock: it moves only when a test advances it.
pub(super) struct Clock {
    start: Instant,
    elapsed: Duration,
}

/// The wall clock at the start of every test, Unix milliseconds.
pub(super) const UNIX_START_MS: i64 = 1_700_000_000_000;

impl Clock {
    pub(super) fn new() -> Self {
        Clock {
            start: Instant::now(),
            elapsed: Duration::ZERO,
        }
    }

    pub(super) fn now(&self) -> Now {
        Now {
            instant: self.start + self.elapsed,
            unix_ms: UNIX_START_MS + self.elapsed.as_millis() as i64,
        }
    }

    pub(super) fn advance(&mut self, d: Duration) -> Now {
        self.elapsed += d;
        self.now()
    }

    /// Moves to `at`, which must not be in the past.
    pub(super) fn advance_to(&mut self, at: Instant) -> Now {
        let now = self.now().instant;
        assert!(at >= now, "poll_timeout is in the past");
        self.advance(at - now)
    }
}

/// A Phoenix core's transmit, which must be a text frame.
pub(super) fn text(t: Transmit) -> String {
    match t {
        Transmit::Text(text) => text,
        Transmit::Binary(b) => panic!("a binary frame where text was expected: {b:?}"),
        Transmit::Message(m) => panic!("a Phoenix core wrote a raw message: {m:?}"),
    }
}

/// The socket settings every test starts from.
pub(super) fn opts() -> CoreOptions {
    CoreOptions {
        tenant: TENANT.into(),
        heartbeat: HeartbeatSettings {
            phoenix_interval: PHOENIX_INTERVAL,
            app_interval: APP_INTERVAL,
            inbound_idle_timeout: IDLE_TIMEOUT,
        },
        join_timeout: JOIN_TIMEOUT,
        max_handlers: 8,
        max_frame_bytes: 1 << 20,
        seed: 7,
        framing: Framing::Phoenix,
    }
}

/// Builds a [`RegistrationSpec`]: one permit, no queue, no metrics reports.
pub(super) struct Spec(RegistrationSpec);

pub(super) fn spec(instance: &str) -> Spec {
    Spec(RegistrationSpec {
        key: RegistrationKey::new(TENANT, TYPE, instance),
        register: RegisterConnectorRequest {
            tenant_id: TENANT.into(),
            connector_type: TYPE.into(),
            instance_id: instance.into(),
            ..Default::default()
        },
        register_timeout: REGISTER_TIMEOUT,
        retry: BackoffPolicy::new(RETRY_INITIAL, Duration::from_secs(8)).with_jitter(0.0),
        max_concurrent: 1,
        max_queued: 0,
        execute_timeout: EXECUTE_TIMEOUT,
        metrics_interval: Duration::ZERO,
        metrics: Arc::new(HandleMetrics::default()),
        session_token: None,
        jwt: None,
        await_jwt: false,
    })
}

impl Spec {
    pub(super) fn max_concurrent(mut self, n: usize) -> Self {
        self.0.max_concurrent = n;
        self
    }

    pub(super) fn max_queued(mut self, n: usize) -> Self {
        self.0.max_queued = n;
        self
    }

    pub(super) fn metrics_interval(mut self, d: Duration) -> Self {
        self.0.metrics_interval = d;
        self
    }

    /// A session token and JWT from the credential store.
    pub(super) fn stored(mut self, session_token: Option<&str>, jwt: Option<&str>) -> Self {
        self.0.session_token = session_token.map(str::to_owned);
        self.0.jwt = jwt.map(str::to_owned);
        self
    }

    /// A configured `auth_token`.
    pub(super) fn auth_token(mut self, token: &str) -> Self {
        self.0.register.jwt_token = token.into();
        self
    }

    /// Stored keys without a live JWT: the first register waits for one.
    pub(super) fn await_jwt(mut self) -> Self {
        self.0.await_jwt = true;
        self
    }

    /// The registration's counters, for assertions.
    pub(super) fn counters(&self) -> Arc<HandleMetrics> {
        self.0.metrics.clone()
    }

    pub(super) fn build(self) -> RegistrationSpec {
        self.0
    }
}

/// A core, its clock and its socket counters, with helpers to drive it.
pub(super) struct Harness {
    pub(super) conn: Conn,
    pub(super) clock: Clock,
    pub(super) metrics: Arc<SocketMetrics>,
    /// Handles in the order their specs were added.
    pub(super) handles: Vec<HandleId>,
    /// The join ref of the last join the core sent.
    pub(super) join_ref: Option<String>,
}

impl Harness {
    /// A core with these registrations and no link.
    pub(super) fn new(specs: impl IntoIterator<Item = Spec>) -> Self {
        Self::with_opts(opts(), specs)
    }

    pub(super) fn with_opts(opts: CoreOptions, specs: impl IntoIterator<Item = Spec>) -> Self {
        let metrics = Arc::new(SocketMetrics::default());
        let mut h = Harness {
            conn: Connection::new(opts, metrics.clone()),
            clock: Clock::new(),
            metrics,
            handles: Vec::new(),
            join_ref: None,
        };
        for s in specs {
            h.add(s);
        }
        h
    }

    pub(super) fn add(&mut self, s: Spec) -> HandleId {
        let handle = self
            .conn
            .add(self.clock.now(), s.build(), ())
            .expect("admitted");
        self.handles.push(handle);
        handle
    }

    pub(super) fn now(&self) -> Now {
        self.clock.now()
    }

    /// Opens the socket and reads the join ref off the join frame, which must be the
    /// first transmit.
    pub(super) fn connect(&mut self) -> String {
        self.conn.handle_connected(self.clock.now());
        let join =
            Frame::decode(&text(self.conn.poll_transmit().expect("a join"))).expect("a frame");
        assert_eq!(join.event, "phx_join", "first transmit is the join");
        let jr = join.msg_ref.expect("the join has a ref");
        self.join_ref = Some(jr.clone());
        jr
    }

    /// Drains the transmits, which must hold a (re)join, and takes its join ref.
    pub(super) fn expect_rejoin(&mut self) -> String {
        let frames = self.frames();
        let join = frames
            .iter()
            .find(|f| f.event == "phx_join")
            .expect("a rejoin was sent");
        let jr = join.msg_ref.clone().expect("the join has a ref");
        self.join_ref = Some(jr.clone());
        jr
    }

    /// Answers the last join with this status.
    pub(super) fn reply_join(&mut self, status: &str) {
        let jr = self.join_ref.clone().expect("a join was sent");
        let text = format!(
            r#"["{jr}","{jr}","{LOBBY_TOPIC}","phx_reply",{{"status":"{status}","response":{{}}}}]"#
        );
        self.text(&text);
    }

    /// Connects, completes the join and answers every register with success.
    pub(super) fn join_and_register(&mut self) {
        self.connect();
        self.reply_join("ok");
        self.answer_registers();
    }

    /// Answers every register request transmitted so far with success, then drains
    /// the events.
    pub(super) fn answer_registers(&mut self) {
        for m in self.sent() {
            if let Message::RegisterRequest(req) = m {
                self.deliver(registered(&req.instance_id));
            }
        }
        self.events();
    }

    /// Feeds one text frame.
    pub(super) fn text(&mut self, text: &str) {
        self.conn
            .handle_frame(self.clock.now(), Incoming::Text(text));
    }

    /// Feeds one protobuf message as a `proto` text frame of the current join.
    pub(super) fn deliver(&mut self, message: Message) {
        let msg = StreamMessage {
            message: Some(message),
        };
        let text = encode_proto(self.join_ref.as_deref(), None, LOBBY_TOPIC, &msg);
        self.text(&text);
    }

    /// Feeds a Phoenix frame on the lobby topic for `join_ref` (`phx_error`, ...).
    pub(super) fn lobby_event(&mut self, join_ref: &str, event: &str) {
        self.text(&format!(
            r#"["{join_ref}",null,"{LOBBY_TOPIC}","{event}",{{}}]"#
        ));
    }

    /// Feeds one binary frame.
    pub(super) fn binary(&mut self, bytes: Bytes) {
        self.conn
            .handle_frame(self.clock.now(), Incoming::Binary(bytes));
    }

    /// Advances the clock by `d` and handles the timeout there.
    pub(super) fn tick(&mut self, d: Duration) {
        let now = self.clock.advance(d);
        self.conn.handle_timeout(now);
    }

    /// Jumps to the core's next deadline and handles it.
    pub(super) fn fire_next(&mut self) {
        let at = self.conn.poll_timeout().expect("a deadline");
        let now = self.clock.advance_to(at);
        self.conn.handle_timeout(now);
    }

    /// The instant `d` from now, to compare with `poll_timeout`.
    pub(super) fn in_(&self, d: Duration) -> Instant {
        self.clock.now().instant + d
    }

    /// Reports execute `exec` answered successfully.
    pub(super) fn finish(&mut self, exec: ExecId, request_id: &str) {
        let resp = ExecuteResponse {
            request_id: request_id.into(),
            success: true,
            payload: Bytes::from_static(b"done"),
            ..Default::default()
        };
        self.conn.handle_execute_done(self.clock.now(), exec, resp);
    }

    /// Drains every transmit as a decoded frame.
    pub(super) fn frames(&mut self) -> Vec<Frame> {
        std::iter::from_fn(|| self.conn.poll_transmit())
            .map(|t| Frame::decode(&text(t)).expect("the core writes valid frames"))
            .collect()
    }

    /// Drains every transmit, keeping the protobuf messages of the `proto` frames.
    pub(super) fn sent(&mut self) -> Vec<Message> {
        self.frames()
            .into_iter()
            .filter(|f| f.event == "proto")
            .map(|f| f.proto().expect("valid proto").message.expect("a message"))
            .collect()
    }

    /// Drains every event.
    pub(super) fn events(&mut self) -> Vec<Event<u32>> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    /// How many frames were dropped under `reason`.
    pub(super) fn dropped(&self, reason: &str) -> u64 {
        self.metrics.dropped().get(reason).copied().unwrap_or(0)
    }
}

/// A core whose registrations are registered on a joined channel, with nothing left
/// to transmit or act on.
pub(super) fn joined(specs: impl IntoIterator<Item = Spec>) -> Harness {
    let mut h = Harness::new(specs);
    h.join_and_register();
    assert!(h.frames().is_empty() && h.events().is_empty());
    h
}
