//! The connection core: everything one socket's frames touch, as a plain data
//! structure with no I/O, no clock and no runtime.
//!
//! [`Connection`] owns the Phoenix channel state, the routing table (PROTOCOL.md §5)
//! and its pending-request map, each registration's register phase, session token and
//! backoff, each registration's in-flight executes (its permits) and its bounded queue
//! of waiting ones, the pending invokes, and every deadline: heartbeats, the join,
//! registers, executes, invokes and metrics reports. The task that drives it
//! (`mux::driver`) only moves bytes, starts and drops the connectors' futures, and
//! hands results back; so every rule below is unit-tested with plain `#[test]`s and an
//! explicit [`Now`].
//!
//! # Call order
//!
//! 1. [`Connection::new`]; [`Connection::add`] for each registration (also later, at
//!    any time).
//! 2. When the connection opens (a WebSocket, or a gRPC stream whose request side is
//!    open), [`Connection::handle_connected`]; when it dies,
//!    [`Connection::handle_disconnected`].
//! 3. Feed every inbound message to [`Connection::handle_frame`]; when the
//!    instant from [`Connection::poll_timeout`] arrives, call
//!    [`Connection::handle_timeout`]; when an execute started by
//!    [`Event::StartExecute`] finishes, [`Connection::handle_execute_done`]. Commands:
//!    [`Connection::add`], [`Connection::remove`], [`Connection::invoke`],
//!    [`Connection::cancel_invoke`], [`Connection::send_metrics_report`],
//!    [`Connection::send`], [`Connection::set_credentials`] (the approval exchange's
//!    JWT, see `registration`).
//! 4. After every input, drain [`Connection::poll_event`] (act on each event) and
//!    [`Connection::poll_transmit`] (write each frame; flush when it returns
//!    `None`), then sleep until the new [`Connection::poll_timeout`].
//!
//! # Framing
//!
//! The same core serves both transports ([`Framing`]); only what a connection is
//! differs. A Phoenix socket carries many registrations of one tenant over the lobby
//! channel: the core joins it, sends Phoenix heartbeats and encodes every message as
//! a `proto` push. A gRPC `Connect` stream carries one registration and no channel:
//! the stream is "joined" as soon as it opens, so the register request is the first
//! message on it (PROTOCOL.md §3), and messages travel as they are. Registration,
//! execute admission and deadlines, invoke correlation, application heartbeats, the
//! idle watchdog and metrics reports are the same code for both.
//!
//! Inputs never block and never fail: what cannot be done is answered on the wire
//! (an `overloaded` or `timeout` execute response), reported as an [`Event`], or
//! dropped and counted under a stable reason.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::connector::config::HeartbeatSettings;
use crate::error::{Error, Result};
use crate::phoenix::{decode_proto_bytes, ChannelEvent, ChannelState, InboundFrame, LOBBY_TOPIC};
use crate::proto::{
    stream_message::Message, ExecuteRequest, HeartbeatRequest, HeartbeatResponse,
    InvokeCapabilityResponse, StreamMessage,
};

use super::metrics::SocketMetrics;
use super::routing::{HandleId, Route, RoutingTable};
use timers::{Timer, Timers};

mod execute;
mod invoke;
mod registration;
mod timers;

pub(crate) use execute::ExecId;
pub(crate) use invoke::InvokeSpec;
pub(crate) use registration::{Credential, RegistrationSpec};
use registration::{Phase, Reg};

#[cfg(test)]
mod tests;

/// The present, as the core sees it: a monotonic instant for deadlines and the wall
/// clock in Unix milliseconds for the timestamps the protocol carries
/// (`heartbeat_request.timestamp_ms`, `metrics_report.timestamp_ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub(crate) instant: Instant,
    pub(crate) unix_ms: i64,
}

/// Settings of one socket's core.
#[derive(Debug, Clone)]
pub(crate) struct CoreOptions {
    pub(crate) tenant: String,
    pub(crate) heartbeat: HeartbeatSettings,
    /// How long a join may wait for its reply (the connect timeout).
    pub(crate) join_timeout: Duration,
    pub(crate) max_handlers: usize,
    /// Largest inbound message accepted; the transport enforces it too.
    pub(crate) max_frame_bytes: usize,
    /// Seed of the jitter source for register retries, so tests are deterministic.
    pub(crate) seed: u64,
    /// How messages are framed on this connection.
    pub(crate) framing: Framing,
}

/// How a connection frames its messages; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Phoenix Channels v2 over a WebSocket.
    Phoenix,
    /// One gRPC `Connect` stream: `StreamMessage`s as they are, no channel.
    Stream,
}

/// One frame for the driver to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transmit {
    /// A Phoenix text frame ([`Framing::Phoenix`]).
    Text(String),
    /// A message of a gRPC stream ([`Framing::Stream`]); boxed because transmits
    /// wait in a queue, where every Phoenix text frame would otherwise take a
    /// message's size.
    Message(Box<StreamMessage>),
}

/// What the driver must do, besides writing transmits.
#[derive(Debug)]
pub(crate) enum Event<W> {
    /// Run the registration's connector on this request and report the response with
    /// [`Connection::handle_execute_done`].
    StartExecute {
        exec: ExecId,
        handle: HandleId,
        request: ExecuteRequest,
    },
    /// Drop the execute's future: it timed out, its registration was removed, or the
    /// connection died. Its answer, if one comes, is ignored.
    CancelExecute(ExecId),
    /// An invoke ended: answered (`Ok(Some(response))`), sent fire-and-forget
    /// (`Ok(None)`), or failed (timeout, disconnect, removal).
    InvokeDone {
        waiter: W,
        result: Result<Option<InvokeCapabilityResponse>>,
    },
    /// The registration is registered under `arn` (first register or a later one);
    /// `session_token` is the fresh one the gateway issued, to persist.
    Registered {
        handle: HandleId,
        arn: String,
        status: i32,
        session_token: Option<String>,
    },
    /// The gateway accepted the registration as PENDING under `arn`: it waits for the
    /// operator's approval (no retries, no timers).
    Pending { handle: HandleId, arn: String },
    /// The operator rejected the registration: terminal.
    Rejected { handle: HandleId, reason: String },
    /// The gateway called the presented credential invalid; it is dropped (forget the
    /// stored copy too) and the next register presents the next one.
    CredentialRefused {
        handle: HandleId,
        credential: Credential,
        error: String,
    },
    /// A register was refused or timed out; it is retried after a backoff.
    RegisterFailed { handle: HandleId, error: String },
    /// The registration lost its registration (the link or the channel went down).
    Unregistered(HandleId),
    /// An `approval_notification` for the registration.
    Approval {
        handle: HandleId,
        status: i32,
        message: String,
    },
    /// A message for the registration that its connector's hooks handle (WebSocket
    /// proxy messages, `credentials_issued`).
    Deliver {
        handle: HandleId,
        message: Box<Message>,
    },
    /// The registration's metrics report is due: gather the connector's custom
    /// figures and call [`Connection::send_metrics_report`].
    MetricsDue(HandleId),
    /// The connection is unusable (dead peer, refused join, the gateway asked): close
    /// it, call [`Connection::handle_disconnected`], reconnect after a backoff.
    Reconnect(String),
    /// The last registration was removed: close the socket for good.
    Close,
}

/// One socket's connection core. `W` is an invoke's waiter (a oneshot sender in the
/// driver); `U` is the driver's own per-registration data (its connector).
pub(crate) struct Connection<W, U> {
    opts: CoreOptions,
    metrics: Arc<SocketMetrics>,
    channel: ChannelState,
    routes: RoutingTable<invoke::Pending<W>>,
    regs: HashMap<HandleId, Reg<U>>,
    next_handle: HandleId,
    executes: HashMap<ExecId, execute::Exec>,
    next_exec: ExecId,
    timers: Timers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event<W>>,
    link: Link,
    rng: u64,
}

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Link {
    Down,
    /// Socket open, join sent; fail the join at the deadline.
    Joining {
        since: Connected,
        deadline: Instant,
    },
    Joined(Connected),
}

/// Liveness bookkeeping of an open socket.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Connected {
    last_inbound: Instant,
    next_phoenix_heartbeat: Instant,
    next_app_heartbeat: Instant,
    /// Whether a register succeeded since the socket opened: the driver resets its
    /// reconnect backoff only then.
    registered: bool,
}

impl<W, U> Connection<W, U> {
    /// A core with no registrations and no link.
    pub(crate) fn new(opts: CoreOptions, metrics: Arc<SocketMetrics>) -> Self {
        let routes = RoutingTable::new(opts.tenant.clone(), opts.max_handlers);
        let rng = opts.seed | 1;
        Connection {
            opts,
            metrics,
            channel: ChannelState::new(LOBBY_TOPIC),
            routes,
            regs: HashMap::new(),
            next_handle: 1,
            executes: HashMap::new(),
            next_exec: 1,
            timers: Timers::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            link: Link::Down,
            rng,
        }
    }

    /// The socket's tenant.
    pub(crate) fn tenant(&self) -> &str {
        &self.opts.tenant
    }

    /// Number of registrations.
    pub(crate) fn len(&self) -> usize {
        self.regs.len()
    }

    /// The driver's data of every registration.
    pub(crate) fn users(&self) -> impl Iterator<Item = &U> {
        self.regs.values().map(|r| &r.user)
    }

    /// Every registration's handle and driver data.
    pub(crate) fn handles(&self) -> impl Iterator<Item = (HandleId, &U)> {
        self.regs.iter().map(|(h, r)| (*h, &r.user))
    }

    /// The driver's data of a registration.
    pub(crate) fn user(&self, handle: HandleId) -> Option<&U> {
        self.regs.get(&handle).map(|r| &r.user)
    }

    /// Whether a register succeeded since the current socket opened.
    pub(crate) fn registered_since_connect(&self) -> bool {
        match self.link {
            Link::Joining { since, .. } | Link::Joined(since) => since.registered,
            Link::Down => false,
        }
    }

    /// The next frame to write; `None` means flush.
    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event to act on.
    pub(crate) fn poll_event(&mut self) -> Option<Event<W>> {
        self.events.pop_front()
    }

    /// When [`Connection::handle_timeout`] must next be called.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let link = match self.link {
            Link::Down => None,
            Link::Joining { since, deadline } => Some(deadline.min(self.liveness_due(&since))),
            Link::Joined(c) => Some(self.liveness_due(&c).min(c.next_app_heartbeat)),
        };
        match (link, self.timers.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn liveness_due(&self, c: &Connected) -> Instant {
        let idle = c.last_inbound + self.opts.heartbeat.inbound_idle_timeout;
        match self.opts.framing {
            Framing::Phoenix => c.next_phoenix_heartbeat.min(idle),
            Framing::Stream => idle,
        }
    }

    /// The connection opened: a WebSocket sends the lobby join; a gRPC stream is
    /// joined at once and sends its register first.
    pub(crate) fn handle_connected(&mut self, now: Now) {
        let t = now.instant;
        self.channel.reset();
        self.transmits.clear();
        if self.opts.framing == Framing::Phoenix {
            let join = self.channel.join().encode();
            self.transmits.push_back(Transmit::Text(join));
        }
        let hb = &self.opts.heartbeat;
        self.link = Link::Joining {
            since: Connected {
                last_inbound: t,
                next_phoenix_heartbeat: t + hb.phoenix_interval,
                next_app_heartbeat: t + hb.app_interval,
                registered: false,
            },
            deadline: t + self.opts.join_timeout,
        };
        if self.opts.framing == Framing::Stream {
            self.joined(now);
        }
    }

    /// The connection died (or the driver closed it after [`Event::Reconnect`]): every
    /// pending invoke fails at once with a recoverable error, every execute is dropped
    /// (the gateway failed them with the socket), and the registrations wait for the
    /// next join.
    pub(crate) fn handle_disconnected(&mut self, _now: Now) {
        if self.link == Link::Down {
            return;
        }
        self.link = Link::Down;
        self.channel.reset();
        let unsent = self.transmits.len();
        self.transmits.clear();
        for _ in 0..unsent {
            self.metrics.drop_frame("outbound_while_disconnected");
        }
        self.fail_pending_invokes();
        self.channel_gone();
    }

    /// The channel's registrations are void (socket closed, or the server closed the
    /// channel): drop every execute and put every registration back to `Down`.
    fn channel_gone(&mut self) {
        self.cancel_executes(|_| true);
        let handles: Vec<HandleId> = self.regs.keys().copied().collect();
        for h in handles {
            self.set_phase(h, Phase::Down);
            self.events.push_back(Event::Unregistered(h));
        }
    }

    /// Handles one inbound message.
    pub(crate) fn handle_frame(&mut self, now: Now, frame: Inbound<'_>) {
        if let Link::Joining { since: c, .. } | Link::Joined(c) = &mut self.link {
            c.last_inbound = now.instant;
        } else {
            return;
        }
        let msg = match frame {
            Inbound::Activity => return,
            Inbound::Message(msg) => {
                self.metrics.frames_in.fetch_add(1, Relaxed);
                if !matches!(self.link, Link::Joined(_)) {
                    self.metrics.drop_frame("message_before_open");
                    return;
                }
                msg
            }
            Inbound::Text(text) => {
                self.metrics.frames_in.fetch_add(1, Relaxed);
                if text.len() > self.opts.max_frame_bytes {
                    tracing::warn!(tenant = %self.opts.tenant, size = text.len(), "dropping oversized frame");
                    self.metrics.drop_frame("too_large");
                    return;
                }
                match self.handle_text(now, text) {
                    Some(msg) => msg,
                    None => return,
                }
            }
            Inbound::Binary(bytes) => {
                self.metrics.frames_in.fetch_add(1, Relaxed);
                if !matches!(self.link, Link::Joined(_)) {
                    self.metrics.drop_frame("binary_before_join");
                    return;
                }
                match decode_proto_bytes(bytes) {
                    Ok(msg) => msg,
                    Err(e) => {
                        tracing::warn!(tenant = %self.opts.tenant, error = %e, "dropping undecodable binary frame");
                        self.metrics.drop_frame(e.reason());
                        return;
                    }
                }
            }
        };
        self.handle_message(now, msg);
    }

    /// Interprets a text frame; returns the protobuf message of a data frame.
    fn handle_text(&mut self, now: Now, text: &str) -> Option<StreamMessage> {
        let frame = match InboundFrame::decode(text) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(tenant = %self.opts.tenant, error = %e, "dropping malformed frame");
                self.metrics.drop_frame(e.reason());
                return None;
            }
        };
        match self.channel.handle(&frame) {
            ChannelEvent::Data => match frame.proto() {
                Ok(msg) => return Some(msg),
                Err(e) => {
                    tracing::warn!(tenant = %self.opts.tenant, error = %e, "dropping undecodable proto frame");
                    self.metrics.drop_frame(e.reason());
                }
            },
            ChannelEvent::Joined => self.joined(now),
            ChannelEvent::JoinRefused(r) => self.reconnect(format!("join refused: {r}")),
            ChannelEvent::Lost(why) => self.channel_lost(now, why),
            ChannelEvent::HeartbeatAck => {}
            ChannelEvent::Ignored(why) => {
                tracing::debug!(tenant = %self.opts.tenant, why, "ignoring frame");
                if why == "unknown event" {
                    self.metrics.drop_frame("unknown_event");
                }
            }
        }
        None
    }

    fn joined(&mut self, now: Now) {
        let Link::Joining { since, .. } = self.link else {
            return;
        };
        self.link = Link::Joined(since);
        self.metrics.connects.fetch_add(1, Relaxed);
        match self.opts.framing {
            Framing::Phoenix => {
                tracing::info!(tenant = %self.opts.tenant, "joined connector:lobby")
            }
            Framing::Stream => tracing::debug!(tenant = %self.opts.tenant, "stream open"),
        }
        let handles: Vec<HandleId> = self.regs.keys().copied().collect();
        for h in handles {
            self.send_register(now, h);
        }
    }

    /// The server closed our channel (`phx_error`, `phx_close`, `unmatched topic`):
    /// its registrations and executes died with it; rejoin on the same socket. Pending
    /// invokes stay: the gateway may still answer them on the new join, and each has
    /// its deadline.
    ///
    /// A channel lost again before its rejoin was answered counts as a failed rejoin:
    /// the connection is torn down and redialled with backoff, so a gateway whose
    /// channel keeps crashing is not rejoined in a tight loop.
    fn channel_lost(&mut self, now: Now, why: String) {
        let since = match self.link {
            Link::Joined(since) => since,
            Link::Joining { .. } => {
                self.reconnect(format!("rejoin failed: {why}"));
                return;
            }
            Link::Down => return,
        };
        tracing::warn!(tenant = %self.opts.tenant, reason = %why, "channel lost; rejoining");
        self.metrics.drop_frame("channel_lost");
        self.channel_gone();
        let join = self.channel.join().encode();
        self.transmits.push_back(Transmit::Text(join));
        self.link = Link::Joining {
            since,
            deadline: now.instant + self.opts.join_timeout,
        };
    }

    fn reconnect(&mut self, why: String) {
        self.events.push_back(Event::Reconnect(why));
    }

    /// Routes one protobuf message (PROTOCOL.md §5) and acts on it.
    fn handle_message(&mut self, now: Now, msg: StreamMessage) {
        let route = self.routes.route(&msg);
        let Some(message) = msg.message else {
            self.drop_unroutable("empty", "empty");
            return;
        };
        let handle = match route {
            Route::Handle(h) => h,
            Route::Response(_, pending) => {
                match message {
                    Message::InvokeResponse(resp) => self.invoke_answered(pending, resp),
                    // An execute_response under an invoke's request id: the peer
                    // confused the two. The invoke will get no proper answer; fail it
                    // now rather than leave its caller to its deadline.
                    other => self.invoke_failed(
                        pending,
                        Error::Protocol(format!(
                            "the gateway answered an invoke with a {}",
                            kind(&other)
                        )),
                    ),
                }
                return;
            }
            Route::AnswerHeartbeat => {
                if let Message::HeartbeatRequest(req) = message {
                    self.push(Message::HeartbeatResponse(HeartbeatResponse {
                        gateway_id: req.gateway_id,
                        timestamp_ms: req.timestamp_ms,
                        should_reconnect: false,
                    }));
                }
                return;
            }
            Route::HeartbeatResponse => {
                if let Message::HeartbeatResponse(resp) = message {
                    let rtt = now.unix_ms.saturating_sub(resp.timestamp_ms).max(0);
                    self.metrics.heartbeat_rtt_ms.store(rtt as u64, Relaxed);
                    if resp.should_reconnect {
                        self.reconnect("the gateway asked for a reconnect".into());
                    }
                }
                return;
            }
            Route::Drop(reason) => {
                self.drop_unroutable(reason.as_str(), kind(&message));
                return;
            }
        };
        match message {
            Message::RegisterResponse(resp) => self.register_answered(now, handle, resp),
            Message::ExecuteRequest(req) => self.execute_arrived(now, handle, req, false),
            Message::InvokeRequest(req) => {
                let req = ExecuteRequest {
                    request_id: req.request_id,
                    payload: req.payload,
                    payload_encoding: req.payload_encoding,
                    context: req.context,
                    capability_id: req.capability_id,
                };
                self.execute_arrived(now, handle, req, true)
            }
            Message::ApprovalNotification(note) => {
                if note.status == crate::proto::RegistrationStatus::Rejected as i32 {
                    self.rejected(handle, note.message.clone());
                }
                self.events.push_back(Event::Approval {
                    handle,
                    status: note.status,
                    message: note.message,
                })
            }
            m @ (Message::WsOpenRequest(_)
            | Message::WsFrame(_)
            | Message::WsCloseRequest(_)
            | Message::CredentialsIssued(_)) => self.events.push_back(Event::Deliver {
                handle,
                message: Box::new(m),
            }),
            other => {
                tracing::debug!(tenant = %self.opts.tenant, kind = kind(&other), "ignoring a message a connector does not act on");
                self.metrics.drop_frame("unexpected_message");
            }
        }
    }

    fn drop_unroutable(&self, reason: &'static str, kind: &'static str) {
        tracing::warn!(tenant = %self.opts.tenant, reason, kind, "dropping unroutable frame");
        self.metrics.drop_frame(reason);
    }

    /// Deadlines that have passed: heartbeats, the join, the idle watchdog, then every
    /// due register, execute, invoke and metrics timer.
    pub(crate) fn handle_timeout(&mut self, now: Now) {
        let t = now.instant;
        let hb = self.opts.heartbeat.clone();
        match &mut self.link {
            Link::Down => {}
            Link::Joining { deadline, .. } if t >= *deadline => {
                *deadline = t + self.opts.join_timeout;
                self.reconnect("no join reply before the connect timeout".into());
                return;
            }
            Link::Joining { since: c, .. } | Link::Joined(c) => {
                if t >= c.last_inbound + hb.inbound_idle_timeout {
                    c.last_inbound = t;
                    let why = format!("no inbound data for {:?}", hb.inbound_idle_timeout);
                    self.reconnect(why);
                    return;
                }
                if self.opts.framing == Framing::Phoenix && t >= c.next_phoenix_heartbeat {
                    c.next_phoenix_heartbeat = t + hb.phoenix_interval;
                    match self.channel.heartbeat() {
                        Some(frame) => self.transmits.push_back(Transmit::Text(frame.encode())),
                        None => {
                            self.reconnect("Phoenix heartbeat not answered".into());
                            return;
                        }
                    }
                }
            }
        }
        if let Link::Joined(c) = &mut self.link {
            if t >= c.next_app_heartbeat {
                c.next_app_heartbeat = t + hb.app_interval;
                let req = HeartbeatRequest {
                    gateway_id: self.opts.tenant.clone(),
                    timestamp_ms: now.unix_ms,
                };
                self.push(Message::HeartbeatRequest(req));
            }
        }
        while let Some(timer) = self.timers.pop_due(t) {
            match timer {
                Timer::Register(h) => self.register_timer(now, h),
                Timer::Execute(exec) => self.execute_timed_out(now, exec),
                Timer::Invoke(request_id) => self.invoke_timed_out(&request_id),
                Timer::Metrics(h) => {
                    if let Some(reg) = self.regs.get_mut(&h) {
                        reg.metrics_timer = None;
                        self.events.push_back(Event::MetricsDue(h));
                    }
                }
            }
        }
    }

    /// Queues a data frame on the current join; while the channel is not joined the
    /// message is dropped and counted (a gateway does not accept data before the
    /// join, and whatever it answered is void after a disconnect).
    fn push(&mut self, message: Message) {
        if !matches!(self.link, Link::Joined(_)) {
            self.metrics.drop_frame("outbound_while_disconnected");
            return;
        }
        let msg = StreamMessage {
            message: Some(message),
        };
        self.metrics.frames_out.fetch_add(1, Relaxed);
        let frame = match self.opts.framing {
            Framing::Phoenix => Transmit::Text(self.channel.encode_data(&msg)),
            Framing::Stream => Transmit::Message(Box::new(msg)),
        };
        self.transmits.push_back(frame);
    }

    /// Sends a message for a registration that its connector produced outside an
    /// execute (a WebSocket proxy answer or frame); dropped and counted while the link
    /// is down.
    pub(crate) fn send(&mut self, message: Message) {
        self.push(message);
    }

    fn next_random(&mut self) -> f64 {
        // splitmix64: tiny, fast, and good enough for jitter.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One inbound message, as the core takes it. Passed by value once and never
/// stored, so its large variant costs nothing worth a box.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Inbound<'a> {
    /// A message of a gRPC stream, already decoded (and size-checked) by the
    /// transport.
    Message(StreamMessage),
    /// A Phoenix v2 text frame.
    Text(&'a str),
    /// A binary frame carrying a raw protobuf `StreamMessage`, as some gateways of the
    /// family send.
    Binary(bytes::Bytes),
    /// A ping, pong or other control frame: proof of life, nothing to route.
    Activity,
}

/// The oneof's name, for log lines.
pub(crate) fn kind(msg: &Message) -> &'static str {
    match msg {
        Message::RegisterRequest(_) => "register_request",
        Message::RegisterResponse(_) => "register_response",
        Message::ExecuteRequest(_) => "execute_request",
        Message::ExecuteResponse(_) => "execute_response",
        Message::ApprovalNotification(_) => "approval_notification",
        Message::HeartbeatRequest(_) => "heartbeat_request",
        Message::HeartbeatResponse(_) => "heartbeat_response",
        Message::InvokeRequest(_) => "invoke_request",
        Message::InvokeResponse(_) => "invoke_response",
        Message::CredentialsIssued(_) => "credentials_issued",
        Message::WsOpenRequest(_) => "ws_open_request",
        Message::WsOpenResponse(_) => "ws_open_response",
        Message::WsFrame(_) => "ws_frame",
        Message::WsCloseRequest(_) => "ws_close_request",
        Message::MetricsReport(_) => "metrics_report",
    }
}
