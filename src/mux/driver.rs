//! The one task per socket: it drives the connection core.
//!
//! A "socket" is a Phoenix WebSocket or one gRPC stream (`socket_io`); the task is the
//! same for both. The task owns the connection (dialling, and polling it through
//! `socket_io`, which feeds the core), the connectors' execute
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
//!
//! Stop: when the runner stops, the task stops taking executes (new and queued ones
//! are answered with a recoverable error at once), lets the running ones finish
//! within the stop grace, answers the rest with an error, leaves the channel and
//! closes the socket, so the gateway forgets the registrations at once.
//!
//! Approval: the task acts on the core's approval events itself (publishing pending,
//! rejected and refused states, forgetting refused credentials) and starts or stops
//! each registration's approval task (`approval`), which only runs the HTTP exchange
//! and hands its JWT back as a [`Command`].

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tracing::Instrument as _;

use futures_util::future::{AbortHandle, Abortable, BoxFuture};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::approval::{Agents, Start};
use super::core::{Credential, Event, ExecId};
use super::routing::HandleId;
use super::socket::{now, Command, Core, SocketHandle};
use super::socket_invoker::SocketInvoker;
use super::socket_io::{SocketIo, Upstream};
use crate::backoff::{Backoff, BackoffPolicy};
use crate::connector::{run_execute, ExecuteContext};
use crate::error::{Error, Result};
use crate::proto::{
    stream_message::Message, CredentialsIssued, ExecuteResponse, WebSocketOpenResponse,
};
use crate::transport::dial::Dialer;

/// Settings of one socket's connection.
#[derive(Debug, Clone)]
pub(crate) struct SocketOptions {
    pub(crate) target: Upstream,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect: BackoffPolicy,
    pub(crate) max_frame_bytes: usize,
    pub(crate) dialer: Dialer,
    /// How long a stop waits for running executes (`RunnerOptions::stop_grace`).
    pub(crate) stop_grace: Duration,
    /// Whether a lost connection is redialled; when not, the socket ends with an
    /// error (`ConnectorConfig::reconnect_enabled`).
    pub(crate) reconnect_enabled: bool,
}

type ExecFuture = BoxFuture<'static, (ExecId, ExecuteResponse)>;

/// Why the socket task ended.
#[derive(Debug, PartialEq)]
enum Exit {
    Cancelled,
    Closed,
    /// The connection was lost (or could not be made) and reconnecting is off.
    Lost(String),
}

/// One socket's task state.
struct Driver {
    core: Core,
    socket: Arc<SocketHandle>,
    opts: SocketOptions,
    /// The open connection, while there is one.
    io: Option<SocketIo>,
    executes: FuturesUnordered<Abortable<ExecFuture>>,
    aborts: HashMap<ExecId, AbortHandle>,
    backoff: Backoff,
    /// The approval tasks of the socket's registrations; cancelled when dropped.
    agents: Agents,
    /// Why the connection ended for good (it was lost and reconnecting is off).
    ended: Option<String>,
    /// The last connection ended because the gateway said it is going away: the next
    /// reconnect is at once ([`reconnect_delay`]).
    going_away: bool,
}

/// Most a reconnect after a gateway's "going away" waits: a spread, so that the
/// connectors of a restarting gateway do not all dial in the same millisecond, far
/// below a backoff step (250–500 ms by default).
const GOING_AWAY_SPREAD: Duration = Duration::from_millis(100);

/// The delay before the next dial: after a gateway announced it is going away (it
/// stops or restarts on purpose, and another replica or its successor takes
/// connections now), at once within [`GOING_AWAY_SPREAD`], without stepping the
/// backoff; otherwise the backoff's next step. `sample` is uniform in [0, 1).
fn reconnect_delay(going_away: bool, backoff: &mut Backoff, sample: f64) -> Duration {
    if going_away {
        GOING_AWAY_SPREAD.mul_f64(sample.clamp(0.0, 1.0))
    } else {
        backoff.next_delay(sample)
    }
}

/// Runs one socket until `cancel` fires (then stops gracefully) or its last
/// registration is removed; `on_exit` runs after, so the runner can forget the
/// socket, with the error that ended it when it did not end on purpose.
pub(crate) async fn run(
    core: Core,
    socket: Arc<SocketHandle>,
    commands: mpsc::Receiver<Command>,
    opts: SocketOptions,
    cancel: CancellationToken,
    on_exit: impl FnOnce(Option<Error>),
) {
    let backoff = Backoff::new(opts.reconnect.clone());
    let mut d = Driver {
        core,
        socket,
        opts,
        io: None,
        executes: FuturesUnordered::new(),
        aborts: HashMap::new(),
        backoff,
        agents: Agents::default(),
        ended: None,
        going_away: false,
    };
    let admitted: Vec<HandleId> = d.core.handles().map(|(h, _)| h).collect();
    for handle in admitted {
        d.start_refresh(handle);
    }
    let exit = d.run(commands, &cancel).await;
    let error = match &exit {
        Exit::Lost(why) => {
            let error = Error::ConnectionClosed(format!(
                "the connection of tenant {} ended ({why}) and reconnect_enabled is false, so its registrations have ended; restart the process or enable reconnects",
                d.core.tenant()
            ));
            for u in d.core.users() {
                u.state.register_failed(error.to_string());
            }
            Some(error)
        }
        Exit::Cancelled | Exit::Closed => {
            d.core.finish_stop(now());
            None
        }
    };
    d.close().await;
    // Whatever registrations remain go with the socket: their handles see it.
    tracing::debug!(tenant = %d.core.tenant(), ?exit, "socket task ends");
    d.mark_all_removed();
    on_exit(error);
}

impl Driver {
    async fn run(
        &mut self,
        mut commands: mpsc::Receiver<Command>,
        cancel: &CancellationToken,
    ) -> Exit {
        let mut dial: Option<BoxFuture<'static, Result<SocketIo>>> = Some(self.dial());
        let mut retry_at: Option<Instant> = None;
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        // Set once a stop began: when its grace ends.
        let mut stop_at: Option<Instant> = None;
        loop {
            if let Some(exit) = self.drain_events() {
                return exit;
            }
            if stop_at.is_some() && (self.io.is_none() || self.core.executes_idle()) {
                return Exit::Cancelled;
            }
            if let Some(why) = self.ended.take() {
                return Exit::Lost(why);
            }
            if self.io.is_none() && dial.is_none() && retry_at.is_none() {
                retry_at = Some(self.schedule_reconnect());
            }
            let deadline = self.core.poll_timeout().map(Instant::from_std);
            if let Some(at) = deadline {
                if timer.deadline() != at {
                    timer.as_mut().reset(at);
                }
            }
            tokio::select! {
                _ = cancel.cancelled(), if stop_at.is_none() => {
                    if self.io.is_none() {
                        return Exit::Cancelled;
                    }
                    tracing::info!(tenant = %self.core.tenant(), grace = ?self.opts.stop_grace, "stopping: running executes may finish within the grace");
                    stop_at = Some(Instant::now() + self.opts.stop_grace);
                    self.core.stop(now());
                }
                _ = sleep_until(stop_at.unwrap_or_else(Instant::now)), if stop_at.is_some() => {
                    return Exit::Cancelled;
                }
                lost = poll_fn(|cx| match self.io.as_mut() {
                    Some(io) => io.poll(&mut self.core, &self.socket.metrics, cx),
                    None => Poll::Pending,
                }), if self.io.is_some() => {
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
                        Ok(io) => {
                            self.io = Some(io);
                            self.core.handle_connected(now());
                        }
                        Err(e) if !self.opts.reconnect_enabled => {
                            self.ended = Some(format!("connect failed: {e}"));
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

    fn dial(&self) -> BoxFuture<'static, Result<SocketIo>> {
        let (target, timeout, max, dialer) = (
            self.opts.target.clone(),
            self.opts.connect_timeout,
            self.opts.max_frame_bytes,
            self.opts.dialer.clone(),
        );
        async move {
            match tokio::time::timeout(timeout, SocketIo::dial(target, &dialer, timeout, max)).await
            {
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
        let going_away = std::mem::take(&mut self.going_away);
        let delay = reconnect_delay(going_away, &mut self.backoff, rand::random::<f64>());
        let m = &self.socket.metrics;
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
        if self.io.take().is_none() {
            return;
        }
        if self.core.registered_since_connect() {
            self.backoff.reset();
        }
        self.socket.metrics.disconnects.fetch_add(1, Relaxed);
        self.going_away = super::socket_io::is_going_away(&why);
        tracing::warn!(tenant = %self.core.tenant(), reason = %why, "connection lost");
        self.core.handle_disconnected(now(), &why);
        if !self.opts.reconnect_enabled {
            self.ended = Some(why);
        }
    }

    fn command(&mut self, cmd: Command) {
        let now = now();
        match cmd {
            Command::Add { spec, user, reply } => {
                let added = self.core.add(now, *spec, user);
                if let Ok(handle) = added {
                    self.start_refresh(handle);
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
                Event::Pending { handle, arn } => {
                    if let Some(u) = self.core.user(handle) {
                        u.state.pending(arn);
                    }
                }
                Event::Rejected { handle, reason } => {
                    self.agents.stop(handle);
                    if let Some(u) = self.core.user(handle) {
                        u.state.rejected(reason);
                    }
                }
                Event::CredentialRefused {
                    handle,
                    credential,
                    error,
                } => self.credential_refused(handle, credential, error),
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
        let invoker = user
            .invoker
            .get_or_init(|| {
                Arc::new(SocketInvoker {
                    handle,
                    socket: self.socket.clone(),
                    metrics: user.state.metrics.clone(),
                })
            })
            .clone();
        let mut fut: ExecFuture = async move {
            let mut values = request.context.clone();
            let span = crate::telemetry::execute_span(
                &request.capability_id,
                &request.request_id,
                &mut values,
            );
            let ctx = ExecuteContext::attached(request.request_id.clone(), values, invoker);
            let resp = run_execute(connector.as_ref(), request, &ctx)
                .instrument(span)
                .await;
            (exec, resp)
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
            Message::CredentialsIssued(issued) => self.credentials_issued(handle, issued),
            _ => {}
        }
    }

    /// Starts the approval task's refresh half for a registration admitted with
    /// stored keys.
    fn start_refresh(&mut self, handle: HandleId) {
        let Some(user) = self.core.user(handle) else {
            return;
        };
        let Some(auth) = &user.auth else {
            return;
        };
        if let Some(r) = &auth.refresh {
            let start = Start::Refresh(r.clone());
            let commands = self.socket.commands.clone();
            self.agents
                .start(handle, auth.clone(), user.state.clone(), commands, start);
        }
    }

    /// `credentials_issued` for a registration: run (or restart) its approval
    /// exchange.
    fn credentials_issued(&mut self, handle: HandleId, issued: CredentialsIssued) {
        let Some(user) = self.core.user(handle) else {
            return;
        };
        let Some(auth) = &user.auth else {
            tracing::warn!(key = ?self.core.key(handle), "credentials_issued for a registration without a credential store; ignored");
            return;
        };
        tracing::info!(key = %auth.key, "credentials_issued received; starting the approval exchange");
        let start = Start::Issued(issued);
        let commands = self.socket.commands.clone();
        self.agents
            .start(handle, auth.clone(), user.state.clone(), commands, start);
    }

    /// The gateway refused the presented credential: publish why, forget the stored
    /// copy, and stop the approval task when its keys made the refused JWT.
    fn credential_refused(&mut self, handle: HandleId, credential: Credential, error: String) {
        let Some(u) = self.core.user(handle) else {
            return;
        };
        u.state.register_failed(error);
        if credential == Credential::Jwt {
            // Its keys made a JWT the gateway refuses: wait for a new approval.
            self.agents.stop(handle);
        }
        if let Some(auth) = &u.auth {
            auth.forget(credential);
        }
    }

    /// Closes the connection cleanly: what is queued is written, then a close.
    async fn close(&mut self) {
        let Some(io) = self.io.take() else {
            return;
        };
        io.close(&mut self.core).await;
        self.core.handle_disconnected(now(), "stopped");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_going_away_is_redialled_at_once_without_stepping_the_backoff() {
        let mut backoff = Backoff::new(BackoffPolicy::default());
        for sample in [0.0, 0.5, 0.999] {
            assert!(reconnect_delay(true, &mut backoff, sample) <= GOING_AWAY_SPREAD);
        }
        let mut fresh = Backoff::new(BackoffPolicy::default());
        assert_eq!(
            reconnect_delay(false, &mut backoff, 0.5),
            fresh.next_delay(0.5),
            "the backoff was not stepped by the immediate redials"
        );
        assert!(reconnect_delay(false, &mut backoff, 0.5) > GOING_AWAY_SPREAD);
    }

    #[test]
    fn only_a_going_away_reason_counts_as_one() {
        use crate::mux::socket_io::{is_going_away, GOING_AWAY};
        assert!(is_going_away(&format!(
            "{GOING_AWAY} (close 1001: gateway stopping)"
        )));
        assert!(!is_going_away("read failed: connection reset"));
        assert!(!is_going_away("server closed the socket: None"));
    }
}
