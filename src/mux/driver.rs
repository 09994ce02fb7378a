//! The one task per socket: it drives the connection core.
//!
//! A "socket" is a Phoenix WebSocket or one gRPC stream (`wire.rs`); the task is the
//! same for both. The task owns the connection (dialling, reading, writing), the connectors' execute
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
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::{AbortHandle, Abortable, BoxFuture};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::approval::{self, Agents, AuthCtx};
use super::core::{Connection, Event, ExecId, InvokeSpec, Now, RegistrationSpec};
use super::handle::HandleState;
use super::invoker::{Invoker, SocketLink};
use super::routing::HandleId;
use super::wire::{Target, Wire};
use crate::backoff::{Backoff, BackoffPolicy};
use crate::connector::{run_execute, BaseConnector, ExecuteContext};
use crate::error::Result;
use crate::proto::{
    stream_message::Message, ExecuteResponse, InvokeCapabilityResponse, WebSocketOpenResponse,
};
use crate::transport::dial::Dialer;

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
    pub(crate) target: Target,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect: BackoffPolicy,
    pub(crate) max_frame_bytes: usize,
    pub(crate) dialer: Dialer,
}

/// The present, from the runtime's clock (paused in tests) and the wall clock.
pub(crate) fn now() -> Now {
    Now {
        instant: Instant::now().into_std(),
        unix_ms: crate::clock::now_ms(),
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
    conn: Option<Wire>,
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
        conn: None,
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
        let mut dial: Option<BoxFuture<'static, Result<Wire>>> = Some(self.dial());
        let mut retry_at: Option<Instant> = None;
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        loop {
            if let Some(exit) = self.drain_events() {
                return exit;
            }
            if self.conn.is_none() && dial.is_none() && retry_at.is_none() {
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
                lost = poll_fn(|cx| match self.conn.as_mut() {
                    Some(conn) => conn.poll_io(&mut self.core, &self.link.metrics, cx),
                    None => Poll::Pending,
                }), if self.conn.is_some() => {
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
                        Ok(conn) => {
                            self.conn = Some(conn);
                            self.core.handle_connected(now());
                        }
                        Err(e) => {
                            tracing::warn!(tenant = %self.core.tenant(), error = %e, "connect failed");
                            // Each handle's last_error says why it is not registered.
                            let why = format!("connect failed: {e}");
                            for u in self.core.users() {
                                u.state.register_failed(why.clone());
                            }
                        }
                    }
                }
                _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    retry_at = None;
                    dial = Some(self.dial());
                }
            }
        }
    }

    fn dial(&self) -> BoxFuture<'static, Result<Wire>> {
        let (target, timeout, max, dialer) = (
            self.opts.target.clone(),
            self.opts.connect_timeout,
            self.opts.max_frame_bytes,
            self.opts.dialer.clone(),
        );
        async move {
            match tokio::time::timeout(timeout, Wire::dial(target, &dialer, timeout, max)).await {
                Ok(r) => r,
                Err(_) => Err(crate::error::Error::timeout(
                    "connection to the gateway",
                    timeout,
                )),
            }
        }
        .boxed()
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
        if self.conn.take().is_none() {
            return;
        }
        if self.core.registered_since_connect() {
            self.backoff.reset();
        }
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

    /// Closes the connection cleanly: what is queued is written, then a close.
    async fn close(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        conn.close(&mut self.core).await;
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
