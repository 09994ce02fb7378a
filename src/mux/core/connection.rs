//! The connection itself: the link (socket, Phoenix channel, join, liveness and
//! heartbeats) and the orchestration of the core's tables.
//!
//! [`Connection`] owns the link state and the routing table, and hands every other
//! concern to the table that owns its state: [`Registrations`] (register phases,
//! credentials, backoff), [`Executes`] (permits, queues, execute deadlines) and the
//! pending invokes ([`pending_invokes`], in the routing table's pending map). Each
//! table answers with what must happen; only this file writes the frames to send,
//! the events for the driver, and the link. Every deadline lives in the one
//! [`Timers`] set the tables are lent.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use prost::Message as _;

use super::executes::{Admission, Ended, ExecId, Executes, Start};
use super::pending_invokes::{self, InvokeSpec, Opened, Routes};
use super::registrations::{Accepted, Answer, RegisterTimer, RegistrationSpec, Registrations};
use super::timers::{Timer, Timers};
use super::{kind, CoreOptions, Event, Framing, Incoming, Now, Transmit};
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::mux::metrics::SocketMetrics;
use crate::mux::routing::{HandleId, Route, RoutingTable};
use crate::phoenix::{decode_proto_bytes, ChannelEvent, ChannelState, InboundFrame, LOBBY_TOPIC};
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, HeartbeatRequest, HeartbeatResponse,
    RegisterConnectorResponse, StreamMessage,
};

/// One socket's connection core. `W` is an invoke's waiter (a oneshot sender in the
/// driver); `U` is the driver's own per-registration data (its connector).
pub(crate) struct Connection<W, U> {
    opts: CoreOptions,
    metrics: Arc<SocketMetrics>,
    channel: ChannelState,
    link: Link,
    /// Routes inbound messages; its pending map holds the pending invokes.
    pub(super) routes: Routes<W>,
    regs: Registrations<U>,
    executes: Executes,
    /// Every deadline of the tables.
    timers: Timers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event<W>>,
    /// Whether the gateway has sent a binary frame since the socket opened: from then
    /// on this socket's data goes out in binary frames too (raw protobuf, no JSON
    /// envelope, no base64). A gateway that never sends binary gets text frames.
    binary: bool,
    /// [`Connection::stop`] was called: new executes are refused, and no register or
    /// rejoin is sent.
    stopping: bool,
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
        Connection {
            routes: RoutingTable::new(opts.tenant.clone(), opts.max_handlers),
            regs: Registrations::new(opts.seed),
            opts,
            metrics,
            channel: ChannelState::new(LOBBY_TOPIC),
            link: Link::Down,
            executes: Executes::default(),
            timers: Timers::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            binary: false,
            stopping: false,
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
        self.regs.iter().map(|(_, u)| u)
    }

    /// Every registration's handle and driver data.
    pub(crate) fn handles(&self) -> impl Iterator<Item = (HandleId, &U)> {
        self.regs.iter()
    }

    /// The driver's data of a registration.
    pub(crate) fn user(&self, handle: HandleId) -> Option<&U> {
        self.regs.user(handle)
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
        self.binary = false;
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

    /// The connection died for `reason` (or the driver closed it after
    /// [`Event::Reconnect`], or to stop): every pending invoke fails at once with a
    /// recoverable error, every execute is dropped (the gateway failed them with the
    /// socket), and the registrations wait for the next join. The socket's counters
    /// keep when and why, so a flapping socket shows.
    pub(crate) fn handle_disconnected(&mut self, now: Now, reason: &str) {
        if self.link == Link::Down {
            return;
        }
        self.link = Link::Down;
        self.metrics.disconnected(now.unix_ms, reason);
        self.channel.reset();
        let unsent = self.transmits.len();
        self.transmits.clear();
        for _ in 0..unsent {
            self.metrics.drop_frame("outbound_while_disconnected");
        }
        let failed = pending_invokes::fail_all(&mut self.routes, &mut self.timers);
        self.events.extend(failed);
        self.channel_gone();
    }

    /// The channel's registrations are void (socket closed, or the server closed the
    /// channel): drop every execute and put every registration back to `Down`.
    fn channel_gone(&mut self) {
        let cancelled = self.executes.clear(&mut self.timers);
        self.events
            .extend(cancelled.into_iter().map(Event::CancelExecute));
        for h in self.regs.ids() {
            self.regs.down(&mut self.timers, h);
            self.events.push_back(Event::Unregistered(h));
        }
    }

    /// Handles one inbound message.
    pub(crate) fn handle_frame(&mut self, now: Now, frame: Incoming<'_>) {
        if let Link::Joining { since: c, .. } | Link::Joined(c) = &mut self.link {
            c.last_inbound = now.instant;
        } else {
            return;
        }
        let msg = match frame {
            Incoming::Activity => return,
            Incoming::Message(msg) => {
                self.metrics.frames_in.fetch_add(1, Relaxed);
                if !matches!(self.link, Link::Joined(_)) {
                    self.metrics.drop_frame("message_before_open");
                    return;
                }
                msg
            }
            Incoming::Text(text) => {
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
            Incoming::Binary(bytes) => {
                self.metrics.frames_in.fetch_add(1, Relaxed);
                if !matches!(self.link, Link::Joined(_)) {
                    self.metrics.drop_frame("binary_before_join");
                    return;
                }
                match decode_proto_bytes(bytes) {
                    Ok(msg) => {
                        self.binary = true;
                        msg
                    }
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
        self.metrics.connected(now.unix_ms);
        match self.opts.framing {
            Framing::Phoenix => {
                tracing::info!(tenant = %self.opts.tenant, "joined connector:lobby")
            }
            Framing::Stream => tracing::debug!(tenant = %self.opts.tenant, "stream open"),
        }
        for h in self.regs.ids() {
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
        if self.stopping {
            self.reconnect(format!("channel lost while stopping: {why}"));
            return;
        }
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
                let done = match message {
                    Message::InvokeResponse(resp) => pending.answered(&mut self.timers, resp),
                    // An execute_response under an invoke's request id: the peer
                    // confused the two. The invoke will get no proper answer; fail it
                    // now rather than leave its caller to its deadline.
                    other => pending.failed(
                        &mut self.timers,
                        Error::Protocol(format!(
                            "the gateway answered an invoke with a {}",
                            kind(&other)
                        )),
                    ),
                };
                self.events.push_back(done);
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
                if note.status == crate::proto::RegistrationStatus::Rejected as i32
                    && self.regs.reject(&mut self.timers, handle, &note.message)
                {
                    self.events.push_back(Event::Rejected {
                        handle,
                        reason: note.message.clone(),
                    });
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
                Timer::Register(h) => match self.regs.timer_fired(&mut self.timers, now, h) {
                    Some(RegisterTimer::Failed(error)) => self
                        .events
                        .push_back(Event::RegisterFailed { handle: h, error }),
                    Some(RegisterTimer::Register) => self.send_register(now, h),
                    None => {}
                },
                Timer::Execute(exec) => {
                    if let Some(ended) = self.executes.timed_out(exec) {
                        self.execute_ended(ended);
                    }
                }
                Timer::Invoke(request_id) => {
                    if let Some(done) = pending_invokes::timed_out(&mut self.routes, &request_id) {
                        self.metrics.invokes_timed_out.fetch_add(1, Relaxed);
                        self.events.push_back(done);
                    }
                }
                Timer::Metrics(h) => {
                    if self.regs.metrics_due(h) {
                        self.events.push_back(Event::MetricsDue(h));
                    }
                }
            }
        }
    }

    /// Sends the registration's register request with its best credential (the
    /// registrations table arms its deadline); off a joined channel the registration
    /// is put `Down` instead.
    fn send_register(&mut self, now: Now, h: HandleId) {
        if self.stopping || !matches!(self.link, Link::Joined(_)) {
            self.regs.down(&mut self.timers, h);
            return;
        }
        if let Some(req) = self.regs.register_request(&mut self.timers, now, h) {
            self.push(Message::RegisterRequest(req));
        }
    }

    /// The approval exchange produced a JWT (`Some`), or gave up on minting one from
    /// stored keys (`None`). A registration awaiting approval (or awaiting this JWT)
    /// re-registers at once, in-stream, presenting it; a registered one keeps it for
    /// its next register (a refreshed JWT needs no re-register).
    pub(crate) fn set_credentials(&mut self, now: Now, h: HandleId, jwt: Option<String>) {
        if self.regs.set_credentials(h, jwt) {
            self.send_register(now, h);
        }
    }

    /// A `register_response` routed to registration `h`.
    fn register_answered(&mut self, now: Now, h: HandleId, resp: RegisterConnectorResponse) {
        match self.regs.answered(&mut self.timers, now, h, resp) {
            Answer::Ignored => {}
            Answer::Rejected(reason) => {
                self.events.push_back(Event::Rejected { handle: h, reason })
            }
            Answer::CredentialRefused { credential, error } => {
                self.events.push_back(Event::CredentialRefused {
                    handle: h,
                    credential,
                    error,
                });
                self.send_register(now, h);
            }
            Answer::Failed(error) => self
                .events
                .push_back(Event::RegisterFailed { handle: h, error }),
            Answer::Accepted { arn, outcome } => {
                self.routes.set_arn(h, &arn);
                if let Link::Joined(c) | Link::Joining { since: c, .. } = &mut self.link {
                    c.registered = true;
                }
                match outcome {
                    Accepted::Reregister => self.send_register(now, h),
                    Accepted::Pending => self.events.push_back(Event::Pending { handle: h, arn }),
                    Accepted::Registered {
                        status,
                        session_token,
                    } => self.events.push_back(Event::Registered {
                        handle: h,
                        arn,
                        status,
                        session_token,
                    }),
                }
            }
        }
    }

    /// Admits a registration under its dot key; registers it at once when the channel
    /// is joined. Fails with a typed error at the handler cap or for a duplicate key.
    pub(crate) fn add(&mut self, now: Now, spec: RegistrationSpec, user: U) -> Result<HandleId> {
        let (routes, executes) = (&mut self.routes, &mut self.executes);
        let id = self
            .regs
            .add(&mut self.timers, now, spec, user, |id, spec| {
                routes.admit(id, spec.key.clone())?;
                executes.add(id, spec);
                Ok(())
            })?;
        if matches!(self.link, Link::Joined(_)) {
            self.send_register(now, id);
        }
        Ok(id)
    }

    /// Removes a registration: it stops routing at once (a late execute for its ARN is
    /// dropped, never handed to another registration), its executes are cancelled
    /// (dropped, not answered), its pending invokes fail with [`Error::Shutdown`], and
    /// when it was the last one, [`Event::Close`] asks the driver to close the socket.
    /// The protocol has no deregister message: the gateway forgets the registration
    /// when the socket closes. Returns the driver's data of the registration.
    pub(crate) fn remove(&mut self, _now: Now, handle: HandleId) -> Option<U> {
        let user = self.regs.remove(&mut self.timers, handle)?;
        let orphans = self.routes.remove(handle);
        let failed = pending_invokes::fail_orphans(orphans, &mut self.timers);
        self.events.extend(failed);
        let cancelled = self.executes.remove(&mut self.timers, handle);
        self.events
            .extend(cancelled.into_iter().map(Event::CancelExecute));
        if self.regs.is_empty() {
            self.events.push_back(Event::Close);
        }
        Some(user)
    }

    /// Starts a graceful stop: executes that arrive from now on and those waiting
    /// for a permit are answered at once with a recoverable `connection_closed` error
    /// (the gateway's caller may retry elsewhere); running ones may still finish
    /// ([`Connection::executes_idle`] says when none is left). No register or rejoin
    /// is sent any more. [`Connection::finish_stop`] ends the rest.
    pub(crate) fn stop(&mut self, _now: Now) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        for (_, answer) in self.executes.refuse_all(&mut self.timers, false) {
            self.push(answer);
        }
    }

    /// Whether no execute is queued or running (a stop may close now).
    pub(crate) fn executes_idle(&self) -> bool {
        self.executes.is_empty()
    }

    /// Ends a graceful stop whose grace is over (or whose executes all finished):
    /// executes still running are cancelled and answered with a `connection_closed`
    /// error naming the stop grace, then a Phoenix socket leaves the lobby channel
    /// (`phx_leave`), so the gateway forgets the registrations at once rather than
    /// at a heartbeat timeout. The driver then closes the socket.
    pub(crate) fn finish_stop(&mut self, now: Now) {
        self.stop(now);
        for (cancel, answer) in self.executes.refuse_all(&mut self.timers, true) {
            if let Some(exec) = cancel {
                self.events.push_back(Event::CancelExecute(exec));
            }
            self.push(answer);
        }
        if self.opts.framing == Framing::Phoenix && matches!(self.link, Link::Joined(_)) {
            if let Some(leave) = self.channel.leave() {
                self.transmits.push_back(Transmit::Text(leave.encode()));
            }
        }
    }

    /// The key a registration was admitted under.
    pub(crate) fn key(&self, handle: HandleId) -> Option<&RegistrationKey> {
        self.regs.key(handle)
    }

    /// Sends the registration's `metrics_report` (its counters, the socket's, and the
    /// connector's `custom` figures) if it is registered, and schedules the next one.
    pub(crate) fn send_metrics_report(
        &mut self,
        now: Now,
        handle: HandleId,
        custom: HashMap<String, f64>,
    ) {
        let arn = self.routes.arn_of(handle);
        let report =
            self.regs
                .metrics_report(&mut self.timers, now, handle, arn, &self.metrics, custom);
        if let Some(report) = report {
            self.push(Message::MetricsReport(report));
        }
    }

    /// An execute (or an invoke delivered as one) for registration `h`: started,
    /// queued, or refused as overloaded.
    fn execute_arrived(&mut self, now: Now, h: HandleId, req: ExecuteRequest, as_invoke: bool) {
        if self.stopping {
            if let Some(answer) = self.executes.refuse_stopping(now, h, req, as_invoke) {
                self.push(answer);
            }
            return;
        }
        match self
            .executes
            .arrive(&mut self.timers, now, h, req, as_invoke)
        {
            Some(Admission::Start(start)) => self.events.push_back(start_event(start)),
            Some(Admission::Refused(answer)) => self.push(*answer),
            Some(Admission::Queued) | None => {}
        }
    }

    /// The connector answered execute `exec`. Ignored when the core no longer holds it
    /// (it timed out or was cancelled and has been answered or voided already).
    pub(crate) fn handle_execute_done(&mut self, _now: Now, exec: ExecId, resp: ExecuteResponse) {
        if let Some(ended) = self.executes.done(&mut self.timers, exec, resp) {
            self.execute_ended(ended);
        }
    }

    /// An execute was answered or timed out: cancel it if it still runs, send its
    /// answer, start the waiting execute that got its permit.
    fn execute_ended(&mut self, ended: Ended) {
        if let Some(exec) = ended.cancel {
            self.events.push_back(Event::CancelExecute(exec));
        }
        self.push(ended.answer);
        if let Some(start) = ended.next {
            self.events.push_back(start_event(start));
        }
    }

    /// Sends an invoke from registration `h`. Fails at once, handing the waiter back,
    /// when the registration is not registered on a joined channel (the error is a
    /// recoverable [`Error::ConnectionClosed`]) or the request id is already pending.
    /// A fire-and-forget invoke completes as soon as it is queued.
    pub(crate) fn invoke(
        &mut self,
        now: Now,
        h: HandleId,
        spec: InvokeSpec,
        waiter: W,
    ) -> Result<(), (W, Error)> {
        if !matches!(self.link, Link::Joined(_)) || !self.regs.is_registered(h) {
            let who = self
                .key(h)
                .map(|k| k.to_string())
                .unwrap_or_else(|| format!("handle {h}"));
            return Err((
                waiter,
                Error::ConnectionClosed(format!(
                    "{who} is not registered on a live connection; retry once it is (RegistrationHandle::wait_registered)"
                )),
            ));
        }
        match pending_invokes::open(&mut self.routes, &mut self.timers, now, h, spec, waiter)? {
            Opened::Awaiting(req) => self.push(Message::InvokeRequest(req)),
            Opened::Sent(req, done) => {
                self.push(Message::InvokeRequest(req));
                self.events.push_back(done);
            }
        }
        Ok(())
    }

    /// The caller gave up on an invoke (dropped its future): forget it. A late answer
    /// is then dropped and counted as `unknown_request_id`.
    pub(crate) fn cancel_invoke(&mut self, request_id: &str) {
        pending_invokes::cancel(&mut self.routes, &mut self.timers, request_id);
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
            Framing::Phoenix if self.binary => Transmit::Binary(msg.encode_to_vec().into()),
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
}

/// The event that hands an execute to its registration's connector.
fn start_event<W>(start: Start) -> Event<W> {
    Event::StartExecute {
        exec: start.exec,
        handle: start.handle,
        request: start.request,
    }
}
