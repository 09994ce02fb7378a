//! The one task per socket: it drives the connection core.
//!
//! The task owns the WebSocket (dialling, reading, writing), the connectors' execute
//! futures (polled here in a `FuturesUnordered`, never spawned), the reconnect backoff,
//! and the receiving end of the socket's one bounded command queue. Everything it
//! learns goes into the core (`handle_*`), and everything the core decides comes back
//! out as transmits, events and a deadline; so a round trip crosses the gateway's
//! tasks and this one, and nothing a registration does (a slow connector, a full
//! queue) can stop this task from reading, answering heartbeats or serving the other
//! registrations.
//!
//! Writes: the task feeds every transmit the core has and flushes once it has none,
//! so a burst of responses costs one flush. An execute whose connector answers without
//! waiting (the future is ready at its first poll) is answered in the same pass,
//! without ever entering the `FuturesUnordered`.

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::{AbortHandle, Abortable, BoxFuture};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, Sink, SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_util::sync::CancellationToken;

use super::approval::{self, Agents, AuthCtx};
use super::backoff::{Backoff, BackoffPolicy};
use super::core::{Connection, Event, ExecId, Inbound, InvokeSpec, Now, RegistrationSpec};
use super::handle::HandleState;
use super::invoker::{Invoker, SocketLink};
use super::metrics::SocketMetrics;
use super::routing::HandleId;
use crate::connector::{run_execute, BaseConnector, ExecuteContext};
use crate::error::Result;
use crate::proto::{
    stream_message::Message, ExecuteResponse, InvokeCapabilityResponse, WebSocketOpenResponse,
};
use crate::transport::websocket::{self, WsStream};

/// How many inbound messages one pass reads before it lets the other branches
/// (finished executes, commands, timers) run, so a flood of requests cannot starve
/// them.
const READ_BATCH: usize = 64;

/// How long a clean close waits for the close frame to be written.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The waiter of an invoke.
pub(crate) type Waiter = oneshot::Sender<Result<Option<InvokeCapabilityResponse>>>;

/// What the driver keeps per registration: its connector and its published state.
pub(crate) struct RegUser {
    pub(crate) connector: Arc<dyn BaseConnector>,
    pub(crate) state: Arc<HandleState>,
    /// The approval flow's credential store and stored keys (`mux::approval`).
    pub(crate) auth: Option<Arc<AuthCtx>>,
}

/// The core as the driver holds it.
pub(crate) type Core = Connection<Waiter, RegUser>;

/// What handles and the runner ask of a socket's driver. The queue is bounded
/// (`RunnerOptions::command_queue_capacity`); senders await when it is full.
pub(crate) enum Command {
    /// Admit a registration; the reply carries its handle id or the admission error.
    Add {
        spec: Box<RegistrationSpec>,
        user: RegUser,
        reply: oneshot::Sender<Result<HandleId>>,
    },
    /// Remove a registration; the reply comes once it is gone.
    Remove {
        handle: HandleId,
        reply: oneshot::Sender<()>,
    },
    /// Send an invoke.
    Invoke {
        handle: HandleId,
        spec: InvokeSpec,
        reply: Waiter,
    },
    /// The caller of an invoke stopped waiting.
    CancelInvoke(String),
    /// A message a connector sends outside an execute (WebSocket proxy traffic).
    Send(Box<Message>),
    /// The approval task's JWT for a registration (`None`: it could not mint one
    /// from stored keys); the core re-registers in-stream with it.
    Credentials {
        handle: HandleId,
        jwt: Option<String>,
    },
}

/// Settings of one socket's connection.
#[derive(Debug, Clone)]
pub(crate) struct SocketOptions {
    pub(crate) url: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect: BackoffPolicy,
    pub(crate) max_frame_bytes: usize,
}

/// The present, from the runtime's clock (paused in tests) and the wall clock.
pub(crate) fn now() -> Now {
    Now {
        instant: Instant::now().into_std(),
        unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    }
}

type ExecFuture = BoxFuture<'static, (ExecId, ExecuteResponse)>;

/// Why the socket task ended.
#[derive(Debug, PartialEq)]
enum Exit {
    Cancelled,
    Closed,
}

/// One socket's task state.
struct Driver {
    core: Core,
    link: Arc<SocketLink>,
    opts: SocketOptions,
    ws: Option<WsStream>,
    /// A frame the sink was not ready for yet.
    unsent: Option<WsMessage>,
    /// Whether frames were fed since the last flush.
    dirty: bool,
    executes: FuturesUnordered<Abortable<ExecFuture>>,
    aborts: HashMap<ExecId, AbortHandle>,
    backoff: Backoff,
    /// The approval tasks of the socket's registrations; cancelled when dropped.
    agents: Agents,
}

/// Runs one socket until `cancel` fires or its last registration is removed;
/// `on_exit` runs after, so the runner can forget the socket.
pub(crate) async fn run(
    core: Core,
    link: Arc<SocketLink>,
    commands: mpsc::Receiver<Command>,
    opts: SocketOptions,
    cancel: CancellationToken,
    on_exit: impl FnOnce(),
) {
    let backoff = Backoff::new(opts.reconnect.clone());
    let mut d = Driver {
        core,
        link,
        opts,
        ws: None,
        unsent: None,
        dirty: false,
        executes: FuturesUnordered::new(),
        aborts: HashMap::new(),
        backoff,
        agents: Agents::default(),
    };
    for (handle, user) in d.core.handles() {
        approval::glue::admitted(&mut d.agents, handle, user, &d.link.commands);
    }
    let exit = d.run(commands, &cancel).await;
    d.close().await;
    // Whatever registrations remain go with the socket: their handles see it.
    tracing::debug!(tenant = %d.core.tenant(), ?exit, "socket task ends");
    d.mark_all_removed();
    on_exit();
}

impl Driver {
    async fn run(
        &mut self,
        mut commands: mpsc::Receiver<Command>,
        cancel: &CancellationToken,
    ) -> Exit {
        let mut dial: Option<BoxFuture<'static, Result<WsStream>>> = Some(self.dial());
        let mut retry_at: Option<Instant> = None;
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        loop {
            if let Some(exit) = self.drain_events() {
                return exit;
            }
            if self.ws.is_none() && dial.is_none() && retry_at.is_none() {
                retry_at = Some(self.schedule_reconnect());
            }
            let deadline = self.core.poll_timeout().map(Instant::from_std);
            if let Some(at) = deadline {
                if timer.deadline() != at {
                    timer.as_mut().reset(at);
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return Exit::Cancelled,
                lost = poll_fn(|cx| poll_io(&mut self.ws, &mut self.core, &mut self.unsent, &mut self.dirty, &self.link.metrics, cx)), if self.ws.is_some() => {
                    if let Some(why) = lost {
                        self.lost(why);
                    }
                }
                Some(done) = self.executes.next(), if !self.executes.is_empty() => {
                    if let Ok((exec, resp)) = done {
                        self.aborts.remove(&exec);
                        self.core.handle_execute_done(now(), exec, resp);
                    }
                }
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.command(cmd),
                    None => return Exit::Cancelled,
                },
                _ = &mut timer, if deadline.is_some() => self.core.handle_timeout(now()),
                r = async { dial.as_mut().expect("guarded").await }, if dial.is_some() => {
                    dial = None;
                    match r {
                        Ok(ws) => {
                            self.ws = Some(ws);
                            self.core.handle_connected(now());
                        }
                        Err(e) => tracing::warn!(tenant = %self.core.tenant(), error = %e, "connect failed"),
                    }
                }
                _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    retry_at = None;
                    dial = Some(self.dial());
                }
            }
        }
    }

    fn dial(&self) -> BoxFuture<'static, Result<WsStream>> {
        let (url, timeout, max) = (
            self.opts.url.clone(),
            self.opts.connect_timeout,
            self.opts.max_frame_bytes,
        );
        async move { websocket::connect(&url, timeout, max).await }.boxed()
    }

    /// Picks the reconnect delay; the backoff was reset only if a register succeeded
    /// on the connection that just ended, so a gateway that accepts sockets but
    /// refuses every register sees ever longer pauses.
    fn schedule_reconnect(&mut self) -> Instant {
        let delay = self.backoff.next_delay(rand::random::<f64>());
        let m = &self.link.metrics;
        // Backoff first: a reader that sees the new attempt count also sees its delay.
        m.current_backoff_ms
            .store(delay.as_millis() as u64, Relaxed);
        m.reconnect_attempts
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        tracing::info!(tenant = %self.core.tenant(), delay_ms = delay.as_millis() as u64, "reconnecting after backoff");
        Instant::now() + delay
    }

    /// The connection is gone (read or write failed, or the core asked).
    fn lost(&mut self, why: String) {
        if self.ws.take().is_none() {
            return;
        }
        if self.core.registered_since_connect() {
            self.backoff.reset();
        }
        self.unsent = None;
        self.dirty = false;
        self.link.metrics.disconnects.fetch_add(1, Relaxed);
        tracing::warn!(tenant = %self.core.tenant(), reason = %why, "connection lost");
        self.core.handle_disconnected(now());
    }

    fn command(&mut self, cmd: Command) {
        let now = now();
        match cmd {
            Command::Add { spec, user, reply } => {
                let added = self.core.add(now, *spec, user);
                if let Some((h, u)) = added
                    .as_ref()
                    .ok()
                    .and_then(|h| Some((*h, self.core.user(*h)?)))
                {
                    approval::glue::admitted(&mut self.agents, h, u, &self.link.commands);
                }
                let _ = reply.send(added);
            }
            Command::Remove { handle, reply } => {
                self.agents.stop(handle);
                if let Some(user) = self.core.remove(now, handle) {
                    user.state.mark_removed();
                }
                let _ = reply.send(());
            }
            Command::Invoke {
                handle,
                spec,
                reply,
            } => {
                if let Err((reply, e)) = self.core.invoke(now, handle, spec, reply) {
                    let _ = reply.send(Err(e));
                }
            }
            Command::CancelInvoke(id) => self.core.cancel_invoke(&id),
            Command::Send(message) => self.core.send(*message),
            Command::Credentials { handle, jwt } => self.core.set_credentials(now, handle, jwt),
        }
    }

    /// Acts on every event the core produced; returns when the socket must end.
    fn drain_events(&mut self) -> Option<Exit> {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::StartExecute {
                    exec,
                    handle,
                    request,
                } => self.start_execute(exec, handle, request),
                Event::CancelExecute(exec) => {
                    if let Some(abort) = self.aborts.remove(&exec) {
                        abort.abort();
                    }
                }
                Event::InvokeDone { waiter, result } => {
                    let _ = waiter.send(result);
                }
                Event::Registered {
                    handle,
                    arn,
                    status,
                    session_token,
                } => {
                    if let Some(u) = self.core.user(handle) {
                        u.state.registered(arn, status);
                        if let (Some(auth), Some(token)) = (&u.auth, session_token) {
                            auth.store_session_token(token);
                        }
                    }
                }
                ev @ (Event::Pending { .. }
                | Event::Rejected { .. }
                | Event::CredentialRefused { .. }) => {
                    approval::glue::event(&mut self.agents, &self.core, ev)
                }
                Event::RegisterFailed { handle, error } => {
                    if let Some(u) = self.core.user(handle) {
                        u.state.register_failed(error);
                    }
                }
                Event::Unregistered(handle) => {
                    if let Some(u) = self.core.user(handle) {
                        u.state.unregistered();
                    }
                }
                Event::Approval {
                    handle,
                    status,
                    message,
                } => {
                    if let Some(u) = self.core.user(handle) {
                        tracing::info!(key = ?self.core.key(handle), status, message = %message, "approval notification");
                        u.state.approval(status);
                    }
                }
                Event::Deliver { handle, message } => self.deliver(handle, *message),
                Event::MetricsDue(handle) => {
                    let custom = self
                        .core
                        .user(handle)
                        .map(|u| u.connector.custom_metrics())
                        .unwrap_or_default();
                    self.core.send_metrics_report(now(), handle, custom);
                }
                Event::Reconnect(why) => self.lost(why),
                Event::Close => return Some(Exit::Closed),
            }
        }
        None
    }

    /// Starts a connector's execute: polled once here, and only if it is not ready at
    /// once does it join the set of futures this task polls.
    fn start_execute(
        &mut self,
        exec: ExecId,
        handle: HandleId,
        request: crate::proto::ExecuteRequest,
    ) {
        let Some(user) = self.core.user(handle) else {
            return;
        };
        let connector = user.connector.clone();
        let invoker = Invoker {
            handle,
            link: self.link.clone(),
            metrics: user.state.metrics.clone(),
        };
        let mut fut: ExecFuture = async move {
            let ctx = ExecuteContext::attached(
                request.request_id.clone(),
                request.context.clone(),
                invoker,
            );
            (exec, run_execute(connector.as_ref(), request, &ctx).await)
        }
        .boxed();
        if let Some((exec, resp)) = (&mut fut).now_or_never() {
            self.core.handle_execute_done(now(), exec, resp);
            return;
        }
        let (handle, registration) = AbortHandle::new_pair();
        self.aborts.insert(exec, handle);
        self.executes.push(Abortable::new(fut, registration));
    }

    /// Hands a proxy message to the registration's connector hooks.
    fn deliver(&mut self, handle: HandleId, message: Message) {
        let Some(user) = self.core.user(handle) else {
            return;
        };
        let connector = user.connector.clone();
        match message {
            Message::WsOpenRequest(req) => {
                let answer = match connector.ws_open(&req) {
                    Ok(()) => WebSocketOpenResponse {
                        connection_id: req.connection_id,
                        success: true,
                        error: String::new(),
                    },
                    Err(e) => WebSocketOpenResponse {
                        connection_id: req.connection_id,
                        success: false,
                        error: format!("{}: {e}", e.code()),
                    },
                };
                self.core.send(Message::WsOpenResponse(answer));
            }
            Message::WsFrame(frame) => connector.ws_frame(&frame),
            Message::WsCloseRequest(req) => connector.ws_close(&req),
            Message::CredentialsIssued(issued) => approval::glue::credentials_issued(
                &mut self.agents,
                &self.core,
                handle,
                issued,
                &self.link.commands,
            ),
            _ => {}
        }
    }

    /// Closes the socket cleanly: what is queued is written, then a close frame.
    async fn close(&mut self) {
        let Some(mut ws) = self.ws.take() else {
            return;
        };
        let flush = async {
            while let Some(text) = self.core.poll_transmit() {
                ws.feed(WsMessage::text(text)).await?;
            }
            ws.close(None).await
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, flush).await;
        self.core.handle_disconnected(now());
    }

    /// The socket is ending: fail what is still pending and tell every remaining
    /// handle that its registration is gone.
    fn mark_all_removed(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            if let Event::InvokeDone { waiter, result } = ev {
                let _ = waiter.send(result);
            }
        }
        for user in self.core.users() {
            user.state.mark_removed();
        }
    }
}

/// Writes what the core has, flushes, and reads up to a batch of inbound messages
/// into the core. Ready with `Some(reason)` when the connection failed, `None`
/// after some progress; pending while there is nothing to read.
fn poll_io(
    ws: &mut Option<WsStream>,
    core: &mut Core,
    unsent: &mut Option<WsMessage>,
    dirty: &mut bool,
    metrics: &SocketMetrics,
    cx: &mut Context<'_>,
) -> Poll<Option<String>> {
    let Some(ws) = ws.as_mut() else {
        return Poll::Pending;
    };
    if let Err(e) = poll_write(ws, core, unsent, dirty, cx) {
        return Poll::Ready(Some(format!("write failed: {e}")));
    }
    let mut progress = false;
    for _ in 0..READ_BATCH {
        let msg = match ws.poll_next_unpin(cx) {
            Poll::Pending => break,
            Poll::Ready(None) => return Poll::Ready(Some("socket closed".into())),
            Poll::Ready(Some(Err(tungstenite::Error::Capacity(e)))) => {
                metrics.drop_frame("too_large");
                return Poll::Ready(Some(format!("inbound message over max_frame_bytes: {e}")));
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(format!("read failed: {e}"))),
            Poll::Ready(Some(Ok(msg))) => msg,
        };
        progress = true;
        let now = now();
        match msg {
            WsMessage::Text(text) => core.handle_frame(now, Inbound::Text(text.as_str())),
            WsMessage::Binary(bytes) => core.handle_frame(now, Inbound::Binary(bytes)),
            WsMessage::Close(frame) => {
                return Poll::Ready(Some(format!("server closed the socket: {frame:?}")))
            }
            // Pings are answered by tungstenite itself.
            _ => core.handle_frame(now, Inbound::Activity),
        }
    }
    if progress {
        Poll::Ready(None)
    } else {
        Poll::Pending
    }
}

/// Feeds the core's transmits to the sink while it is ready, then flushes once
/// nothing is left; a frame the sink cannot take yet waits in `unsent`.
fn poll_write(
    ws: &mut WsStream,
    core: &mut Core,
    unsent: &mut Option<WsMessage>,
    dirty: &mut bool,
    cx: &mut Context<'_>,
) -> std::result::Result<(), tungstenite::Error> {
    loop {
        let Some(msg) = unsent
            .take()
            .or_else(|| core.poll_transmit().map(WsMessage::text))
        else {
            break;
        };
        match Pin::new(&mut *ws).poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                Pin::new(&mut *ws).start_send(msg)?;
                *dirty = true;
            }
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => {
                *unsent = Some(msg);
                return Ok(());
            }
        }
    }
    if *dirty {
        match Pin::new(&mut *ws).poll_flush(cx) {
            Poll::Ready(Ok(())) => *dirty = false,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => {}
        }
    }
    Ok(())
}
