//! [`MultiConnectorRunner`]: runs any number of registrations, one socket per tenant.
//!
//! WebSocket registrations are grouped by sanitised tenant and gateway URL; each
//! group shares one socket, driven by one task that owns the socket's connection
//! core. A gRPC registration has a stream of its own, driven the same way by a task of
//! its own, and the streams to one gateway share HTTP/2 connections
//! ([`RunnerOptions::max_streams_per_channel`] each). A runner may mix both. Sockets are
//! never shared across tenants: the gateway binds a socket to the tenant of its first
//! registration. The socket's connection settings (timeouts, heartbeats, backoff, proxy
//! and CA bundle) come from the first registration of the group. A socket whose last
//! registration is removed closes, and the next registration of its tenant opens a new
//! one.
//!
//! An orchestrator can watch a runner: [`RunnerOptions::health_listen`] opens a small
//! HTTP listener (`health`) answering `/healthz`, `/readyz` (every registration
//! registered or pending approval) and `/metrics` (the snapshot in the Prometheus
//! text format, `exposition`). A stop (`ShutdownHandle::shutdown`, or the first
//! SIGTERM/SIGINT under [`MultiConnectorRunner::run_until_signal`]) turns readiness
//! off, lets running executes finish within [`RunnerOptions::stop_grace`], answers
//! the rest with an error, leaves the channel and closes each socket.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::auth_context;
use super::core::{CoreOptions, Framing, RegistrationSpec};
use super::driver::{self, SocketOptions};
use super::exposition::{self, RegistrationSeries, SocketSeries};
use super::handle::RegistrationHandle;
use super::handle_state::HandleState;
use super::health::{self, Probe};
use super::metrics::{socket_snapshot, ConnectorMetrics, HandleMetrics, SocketMetrics};
use super::options::RunnerOptions;
use super::socket::{now, Command, Core, RegUser, SocketHandle};
use super::socket_io::Upstream;
use crate::connector::config::ConnectorConfig;
use crate::connector::{register_request, BaseConnector};
use crate::error::{Error, Result};
use crate::identity::sanitize;
use crate::transport::address::{GatewayAddress, Transport};
use crate::transport::dial::Dialer;
#[cfg(feature = "grpc")]
use crate::transport::grpc::{ChannelPool, GrpcTarget};

/// How long `run` waits, beyond the stop grace, for tasks to finish after shutdown
/// before returning anyway (closing each socket takes at most about a second).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// One connector registration: its configuration and the connector that answers.
#[derive(Clone)]
pub struct Registration {
    /// Where and as whom to register.
    pub config: ConnectorConfig,
    /// The connector implementation.
    pub connector: Arc<dyn BaseConnector>,
}

impl Registration {
    /// Pairs a configuration with a connector.
    pub fn new(config: ConnectorConfig, connector: impl BaseConnector) -> Self {
        Registration {
            config,
            connector: Arc::new(connector),
        }
    }

    /// Pairs a configuration with a shared connector (one implementation may serve
    /// many registrations).
    pub fn shared(config: ConnectorConfig, connector: Arc<dyn BaseConnector>) -> Self {
        Registration { config, connector }
    }
}

/// Stops a running [`MultiConnectorRunner`] (or, with the `runtime` feature, a
/// `Runtime`) from anywhere: cloneable, so a signal handler and a supervisor may each
/// hold one.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(CancellationToken);

impl ShutdownHandle {
    #[cfg(feature = "runtime")]
    pub(crate) fn new(token: CancellationToken) -> Self {
        ShutdownHandle(token)
    }

    /// Asks every socket and registration to stop; `run` returns once they have.
    pub fn shutdown(&self) {
        self.0.cancel();
    }
}

struct SocketEntry {
    /// Unique per runner, so an ending socket task forgets only its own entry.
    id: u64,
    socket: Arc<SocketHandle>,
    /// Until the runner runs (or, for a socket opened later, until it is spawned).
    unstarted: Option<Unstarted>,
}

struct Unstarted {
    core: Core,
    commands: mpsc::Receiver<Command>,
    opts: SocketOptions,
}

/// Tenant, gateway URL and, for a gRPC stream, the registration's dot key (a stream
/// per registration); empty for a WebSocket, which the tenant's registrations share.
type SocketKey = (String, String, String);

#[derive(Default)]
struct State {
    sockets: HashMap<SocketKey, SocketEntry>,
    handles: Vec<RegistrationHandle>,
    running: bool,
    next_socket: u64,
    /// The HTTP/2 connection pool of each gRPC gateway, by URL.
    #[cfg(feature = "grpc")]
    pools: HashMap<String, Arc<ChannelPool>>,
}

struct Inner {
    options: RunnerOptions,
    cancel: CancellationToken,
    tracker: TaskTracker,
    state: Mutex<State>,
    /// The health listener, bound by `new` and served by `run`.
    health: Mutex<Option<std::net::TcpListener>>,
    health_addr: Option<SocketAddr>,
    /// Why the runner stopped by itself (a socket ended with reconnects off).
    failure: Mutex<Option<Error>>,
}

/// Runs many registrations over one WebSocket per tenant.
///
/// ```no_run
/// # async fn demo() -> switchboard::Result<()> {
/// use switchboard::{ConnectorConfig, EchoConnector, MultiConnectorRunner, Registration, RunnerOptions};
/// let regs = (0..3).map(|i| {
///     let cfg = ConnectorConfig::builder("ws://127.0.0.1:4000", "acme").instance_id(format!("echo-{i}")).build()?;
///     Ok(Registration::new(cfg, EchoConnector))
/// }).collect::<switchboard::Result<Vec<_>>>()?;
/// let runner = MultiConnectorRunner::new(RunnerOptions::from_env()?, regs)?;
/// runner.run_until_signal().await // SIGTERM or Ctrl-C: a graceful stop
/// # }
/// ```
pub struct MultiConnectorRunner {
    inner: Arc<Inner>,
}

/// A registration made ready for a core: its spec, the driver's data, and the parts
/// of its handle.
struct Prepared {
    spec: RegistrationSpec,
    user: RegUser,
    tenant: String,
    url: String,
    /// The dot key for a gRPC registration (its own stream), empty for a WebSocket.
    stream_of: String,
    grpc: Option<GrpcTarget>,
    config: ConnectorConfig,
}

impl Prepared {
    fn socket_key(&self) -> SocketKey {
        (
            self.tenant.clone(),
            self.url.clone(),
            self.stream_of.clone(),
        )
    }
}

#[cfg(not(feature = "grpc"))]
type GrpcTarget = std::convert::Infallible;

fn prepare(registration: Registration) -> Result<Prepared> {
    let Registration { config, connector } = registration;
    let address = config.address()?;
    let (url, grpc) = match address.transport {
        Transport::WebSocket => (address.websocket_url()?, None),
        Transport::Grpc => grpc_target(&address)?,
    };
    let metrics = Arc::new(HandleMetrics::default());
    let key = config.key(connector.connector_type());
    let creds = auth_context::load(&config, &key);
    let spec = RegistrationSpec {
        key,
        register: register_request(&config, connector.as_ref(), None, None),
        session_token: creds.session_token,
        jwt: creds.jwt,
        await_jwt: creds.await_jwt,
        register_timeout: config.register_timeout,
        retry: config.reconnect.clone(),
        max_concurrent: config.max_concurrent_requests,
        max_queued: config.max_queued_requests,
        execute_timeout: config.execute_timeout,
        metrics_interval: config.metrics_interval,
        metrics: metrics.clone(),
    };
    let user = RegUser {
        connector,
        state: HandleState::new(metrics),
        auth: creds.auth,
        invoker: OnceLock::new(),
    };
    Ok(Prepared {
        stream_of: if grpc.is_some() {
            spec.key.dot_key().to_owned()
        } else {
            String::new()
        },
        spec,
        user,
        tenant: sanitize(&config.tenant_id),
        url,
        grpc,
        config,
    })
}

#[cfg(feature = "grpc")]
fn grpc_target(address: &GatewayAddress) -> Result<(String, Option<GrpcTarget>)> {
    let target = GrpcTarget {
        host: address.host.clone(),
        port: address.port,
        tls: address.tls,
    };
    Ok((address.to_string(), Some(target)))
}

#[cfg(not(feature = "grpc"))]
fn grpc_target(address: &GatewayAddress) -> Result<(String, Option<GrpcTarget>)> {
    Err(Error::InvalidAddress {
        address: address.to_string(),
        reason: "this build has no gRPC transport (enable the `grpc` feature) ; use a ws:// or wss:// address".into(),
    })
}

impl MultiConnectorRunner {
    /// Admits every registration; fails with a typed error (handler cap, duplicate key,
    /// bad address, unreadable CA bundle) before anything connects.
    pub fn new(
        options: RunnerOptions,
        registrations: impl IntoIterator<Item = Registration>,
    ) -> Result<Self> {
        let health = options.health_listen.map(health::bind).transpose()?;
        let health_addr = health.as_ref().map(|(_, addr)| *addr);
        let runner = MultiConnectorRunner {
            inner: Arc::new(Inner {
                options,
                cancel: CancellationToken::new(),
                tracker: TaskTracker::new(),
                state: Mutex::default(),
                health: Mutex::new(health.map(|(listener, _)| listener)),
                health_addr,
                failure: Mutex::default(),
            }),
        };
        for r in registrations {
            let p = prepare(r)?;
            let mut state = runner.inner.state();
            runner.inner.admit_unstarted(&mut state, p)?;
        }
        Ok(runner)
    }

    /// Admits one more registration. Before `run` it waits to start; while running it
    /// starts at once (opening its tenant's socket if it is the first). Admission
    /// errors (handler cap, duplicate key, bad address, unreadable CA bundle) are typed.
    pub async fn add(&self, registration: Registration) -> Result<RegistrationHandle> {
        // A socket whose task is ending (its last registration was just removed) can
        // refuse the command; then a fresh socket is opened for this registration.
        for _ in 0..2 {
            let p = prepare(registration.clone())?;
            let (socket, id, key, spec, user) = {
                let mut state = self.inner.state();
                let key = p.socket_key();
                match state.sockets.get(&key) {
                    Some(entry) if entry.unstarted.is_none() => {
                        let (socket, id) = (entry.socket.clone(), entry.id);
                        (socket, id, key, p.spec, p.user)
                    }
                    _ => return self.inner.admit_unstarted(&mut state, p),
                }
            };
            let state_arc = user.state.clone();
            let handle_key = spec.key.clone();
            let (reply, answer) = oneshot::channel();
            let sent = socket
                .commands
                .send(Command::Add {
                    spec: Box::new(spec),
                    user,
                    reply,
                })
                .await;
            if sent.is_ok() {
                if let Ok(admitted) = answer.await {
                    let hid = admitted?;
                    let handle = RegistrationHandle::new(handle_key, state_arc, hid, socket);
                    self.inner.state().handles.push(handle.clone());
                    return Ok(handle);
                }
            }
            self.inner.forget_socket(&key, id);
        }
        Err(Error::Shutdown)
    }

    /// Connects every socket and serves until [`ShutdownHandle::shutdown`]; then stops
    /// gracefully ([`RunnerOptions::stop_grace`]) and returns once every task has
    /// stopped (at most the grace and a few seconds). Fails with the error that ended
    /// a socket whose registrations set `reconnect_enabled` to false, once the others
    /// have stopped too.
    pub async fn run(&self) -> Result<()> {
        let listener = {
            let mut state = self.inner.state();
            if state.running {
                return Err(Error::Config(
                    "MultiConnectorRunner::run called twice".into(),
                ));
            }
            state.running = true;
            self.inner.start_sockets(&mut state);
            self.inner
                .health
                .lock()
                .expect("runner lock poisoned")
                .take()
        };
        let served = CancellationToken::new();
        let server = match listener {
            Some(l) => {
                let probe: Arc<dyn Probe> = Arc::new(RunnerProbe(Arc::downgrade(&self.inner)));
                Some(tokio::spawn(health::serve(l, probe, served.clone())))
            }
            None => None,
        };
        self.inner.cancel.cancelled().await;
        self.inner.tracker.close();
        let wait = self.inner.options.stop_grace + SHUTDOWN_GRACE;
        if tokio::time::timeout(wait, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some tasks did not stop within {wait:?} of shutdown");
        }
        served.cancel();
        if let Some(server) = server {
            let _ = server.await;
        }
        match self
            .inner
            .failure
            .lock()
            .expect("runner lock poisoned")
            .take()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`MultiConnectorRunner::run`] until the process receives SIGTERM (what Docker,
    /// Kubernetes and systemd send) or SIGINT (Ctrl-C), then a graceful stop; a second
    /// signal during the stop ends the process at once (see
    /// [`crate::shutdown_signal`]). The one line a runner binary needs.
    pub async fn run_until_signal(self) -> Result<()> {
        let signal = crate::signals::shutdown_signal();
        let stop = self.shutdown_handle();
        let watcher = tokio::spawn(async move {
            signal.await;
            stop.shutdown();
        });
        let result = self.run().await;
        watcher.abort();
        result
    }

    /// Where the health listener ([`RunnerOptions::health_listen`]) is bound, if one
    /// was asked for: the actual port when port 0 was given.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.inner.health_addr
    }

    /// A handle that stops the runner.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.inner.cancel.clone())
    }

    /// Every admitted registration, removed ones excluded.
    pub fn registrations(&self) -> Vec<RegistrationHandle> {
        self.inner.live_handles()
    }

    /// Number of open sockets: one per tenant and WebSocket gateway URL that has
    /// registrations, plus one per gRPC registration (its stream).
    pub fn socket_count(&self) -> usize {
        self.inner.state().sockets.len()
    }

    /// Metrics of every registration, keyed by dot key.
    pub fn metrics_snapshot(&self) -> BTreeMap<String, ConnectorMetrics> {
        self.registrations()
            .iter()
            .map(|h| (h.key().dot_key().to_owned(), h.metrics()))
            .collect()
    }

    /// Waits until every current registration is registered, at most `timeout`.
    pub async fn wait_registered(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        for h in self.registrations() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            h.wait_registered(left).await?;
        }
        Ok(())
    }
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("runner lock poisoned")
    }

    /// Every admitted registration, removed ones excluded.
    fn live_handles(&self) -> Vec<RegistrationHandle> {
        let mut state = self.state();
        state.handles.retain(|h| !h.state.is_removed());
        state.handles.clone()
    }

    /// Admits into a socket whose core this thread can reach: one not started yet, or
    /// a new one (started at once when the runner runs).
    fn admit_unstarted(
        self: &Arc<Self>,
        state: &mut State,
        p: Prepared,
    ) -> Result<RegistrationHandle> {
        let key = p.socket_key();
        if !state.sockets.contains_key(&key) {
            let entry = self.new_socket(state, &p)?;
            state.sockets.insert(key.clone(), entry);
        }
        let entry = state.sockets.get_mut(&key).expect("inserted above");
        let unstarted = entry
            .unstarted
            .as_mut()
            .expect("only unstarted sockets are admitted into here");
        let (handle_key, hstate) = (p.spec.key.clone(), p.user.state.clone());
        let admitted = unstarted.core.add(now(), p.spec, p.user);
        let hid = match admitted {
            Ok(hid) => hid,
            Err(e) => {
                if unstarted.core.len() == 0 {
                    state.sockets.remove(&key);
                }
                return Err(e);
            }
        };
        let handle = RegistrationHandle::new(handle_key, hstate, hid, entry.socket.clone());
        state.handles.push(handle.clone());
        if state.running {
            self.start_sockets(state);
        }
        Ok(handle)
    }

    fn new_socket(&self, state: &mut State, p: &Prepared) -> Result<SocketEntry> {
        // Fails on an unreadable CA bundle or a bad proxy variable, before anything
        // connects.
        let dialer = p.config.dialer()?;
        let metrics = Arc::new(SocketMetrics::default());
        let (tx, commands) = mpsc::channel(self.options.command_queue_capacity);
        let (target, framing, max_handlers) = self.target(state, p, &dialer);
        let core_opts = CoreOptions {
            tenant: p.tenant.clone(),
            heartbeat: p.config.heartbeat.clone(),
            join_timeout: p.config.connect_timeout,
            max_handlers,
            max_frame_bytes: self.options.max_frame_bytes,
            seed: rand::random(),
            framing,
        };
        let opts = SocketOptions {
            target,
            connect_timeout: p.config.connect_timeout,
            reconnect: p.config.reconnect.clone(),
            max_frame_bytes: self.options.max_frame_bytes,
            dialer,
            stop_grace: self.options.stop_grace,
            reconnect_enabled: p.config.reconnect_enabled,
        };
        state.next_socket += 1;
        Ok(SocketEntry {
            id: state.next_socket,
            socket: Arc::new(SocketHandle::new(tx, metrics.clone())),
            unstarted: Some(Unstarted {
                core: Core::new(core_opts, metrics),
                commands,
                opts,
            }),
        })
    }

    /// Where a new socket for `p` connects, how it frames, and how many registrations
    /// it takes: a shared Phoenix socket, or a gRPC stream of its own on the gateway's
    /// pool (created with the first registration that needs it; its connection
    /// settings come from that registration, like a socket's).
    #[cfg_attr(
        not(feature = "grpc"),
        allow(
            unused_variables,
            reason = "the pool state and the dialer serve gRPC only"
        )
    )]
    fn target(
        &self,
        state: &mut State,
        p: &Prepared,
        dialer: &Dialer,
    ) -> (Upstream, Framing, usize) {
        match &p.grpc {
            None => (
                Upstream::WebSocket(p.url.clone()),
                Framing::Phoenix,
                self.options.max_handlers_per_socket,
            ),
            #[cfg(feature = "grpc")]
            Some(grpc) => {
                let pool = state
                    .pools
                    .entry(p.url.clone())
                    .or_insert_with(|| {
                        Arc::new(ChannelPool::new(
                            grpc.clone(),
                            dialer.clone(),
                            self.options.max_streams_per_channel,
                            p.config.connect_timeout,
                        ))
                    })
                    .clone();
                (Upstream::Grpc(pool), Framing::Stream, 1)
            }
            #[cfg(not(feature = "grpc"))]
            Some(never) => match *never {},
        }
    }

    fn start_sockets(self: &Arc<Self>, state: &mut State) {
        for (key, entry) in state.sockets.iter_mut() {
            let Some(u) = entry.unstarted.take() else {
                continue;
            };
            let weak: Weak<Inner> = Arc::downgrade(self);
            let (key, id) = (key.clone(), entry.id);
            let on_exit = move |error: Option<Error>| {
                if let Some(inner) = weak.upgrade() {
                    inner.forget_socket(&key, id);
                    if let Some(e) = error {
                        tracing::error!(error = %e, "a socket ended; stopping the runner");
                        inner
                            .failure
                            .lock()
                            .expect("runner lock poisoned")
                            .get_or_insert(e);
                        inner.cancel.cancel();
                    }
                }
            };
            let fut = driver::run(
                u.core,
                entry.socket.clone(),
                u.commands,
                u.opts,
                self.cancel.child_token(),
                on_exit,
            );
            self.tracker.spawn(fut);
        }
    }

    /// Forgets a socket whose task ended, unless a newer socket took its key.
    fn forget_socket(&self, key: &SocketKey, id: u64) {
        let mut state = self.state();
        if state.sockets.get(key).is_some_and(|e| e.id == id) {
            state.sockets.remove(key);
        }
    }
}

/// What the health listener asks of a runner; weak, so a listener outliving its
/// runner answers "not ready" instead of keeping it alive.
struct RunnerProbe(Weak<Inner>);

impl Probe for RunnerProbe {
    fn ready(&self) -> std::result::Result<(), String> {
        let Some(inner) = self.0.upgrade() else {
            return Err("the runner has stopped".into());
        };
        if inner.cancel.is_cancelled() {
            return Err("stopping".into());
        }
        let handles = inner.live_handles();
        if handles.is_empty() {
            return Err("no registrations".into());
        }
        let waiting: Vec<String> = handles
            .iter()
            .filter_map(|h| {
                let state = registration_state(h);
                if matches!(state, "registered" | "pending_approval") {
                    return None;
                }
                let why = h.last_error().map(|e| format!(": {e}")).unwrap_or_default();
                Some(format!("{} is {state}{why}", h.key()))
            })
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(waiting.join("\n"))
        }
    }

    fn metrics(&self) -> String {
        let Some(inner) = self.0.upgrade() else {
            return String::new();
        };
        let registrations: Vec<RegistrationSeries> = inner
            .live_handles()
            .iter()
            .map(|h| RegistrationSeries {
                key: h.key().dot_key().to_owned(),
                tenant: h.key().tenant().to_owned(),
                state: registration_state(h),
                metrics: h.metrics(),
            })
            .collect();
        let sockets: Vec<SocketSeries> = inner
            .state()
            .sockets
            .iter()
            .map(|((tenant, gateway, stream), entry)| SocketSeries {
                tenant: tenant.clone(),
                gateway: gateway.clone(),
                stream: stream.clone(),
                metrics: socket_snapshot(&entry.socket.metrics),
            })
            .collect();
        let ready = self.ready().is_ok();
        exposition::render(ready, &registrations, &sockets)
    }
}

/// A registration's state as the probes name it: `registered`, `pending_approval`,
/// `rejected`, `removed` or `registering` (not registered yet, or again).
fn registration_state(h: &RegistrationHandle) -> &'static str {
    use crate::proto::RegistrationStatus;
    if h.state.is_removed() {
        "removed"
    } else if h.arn().is_some() {
        "registered"
    } else {
        match h.status() {
            Some(RegistrationStatus::Pending) if h.pending_arn().is_some() => "pending_approval",
            Some(RegistrationStatus::Rejected) => "rejected",
            _ => "registering",
        }
    }
}
