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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::auth_context;
use super::core::{CoreOptions, Framing, RegistrationSpec};
use super::driver::{self, SocketOptions};
use super::handle::RegistrationHandle;
use super::handle_state::HandleState;
use super::metrics::{ConnectorMetrics, HandleMetrics, SocketMetrics};
use super::socket::{now, Command, Core, RegUser, SocketHandle};
use super::socket_io::Target;
use crate::connector::config::ConnectorConfig;
use crate::connector::{register_request, BaseConnector};
use crate::error::{Error, Result};
use crate::identity::sanitize;
use crate::transport::address::{GatewayAddress, Transport};
use crate::transport::dial::Dialer;
#[cfg(feature = "grpc")]
use crate::transport::grpc::{ChannelPool, GrpcTarget};

/// How long `run` waits for tasks to finish after shutdown before returning anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Default for [`RunnerOptions::max_streams_per_channel`]: below the 100 concurrent
/// streams many HTTP/2 servers (and proxies in front of them) allow per connection,
/// with room for the occasional stream still closing.
pub(crate) const DEFAULT_MAX_STREAMS_PER_CHANNEL: usize = 80;

/// Options of the runner as a whole (per-registration settings live in
/// [`ConnectorConfig`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunnerOptions {
    /// Most registrations one socket carries (default 512). The gateway keeps per-socket
    /// state for each; past a few hundred, one slow socket affects too many
    /// registrations, so the runner refuses at admission rather than degrade silently.
    pub max_handlers_per_socket: usize,
    /// Capacity of each socket's command queue (default 1024): invokes, removals and
    /// admissions from the handles to the socket's task. When full, senders await:
    /// backpressure on callers, never loss.
    pub command_queue_capacity: usize,
    /// Largest inbound WebSocket message (default 16 MiB). The WebSocket layer refuses
    /// a larger one from its header, before buffering it, and the socket reconnects
    /// (counted as `too_large`): a peer cannot make a connector hold more than this per
    /// socket.
    pub max_frame_bytes: usize,
    /// Most gRPC streams (registrations) one HTTP/2 connection carries (default 80);
    /// past it another connection opens. 80 stays under the 100 concurrent streams
    /// many servers and proxies allow per connection.
    pub max_streams_per_channel: usize,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            max_handlers_per_socket: 512,
            command_queue_capacity: 1024,
            max_frame_bytes: 16 * 1024 * 1024,
            max_streams_per_channel: DEFAULT_MAX_STREAMS_PER_CHANNEL,
        }
    }
}

impl RunnerOptions {
    /// Sets [`RunnerOptions::max_handlers_per_socket`].
    pub fn with_max_handlers_per_socket(mut self, n: usize) -> Self {
        self.max_handlers_per_socket = n;
        self
    }

    /// Sets [`RunnerOptions::command_queue_capacity`] (at least 1).
    pub fn with_command_queue_capacity(mut self, n: usize) -> Self {
        self.command_queue_capacity = n.max(1);
        self
    }

    /// Sets [`RunnerOptions::max_frame_bytes`].
    pub fn with_max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
        self
    }

    /// Sets [`RunnerOptions::max_streams_per_channel`] (at least 1).
    pub fn with_max_streams_per_channel(mut self, n: usize) -> Self {
        self.max_streams_per_channel = n.max(1);
        self
    }
}

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
/// let runner = MultiConnectorRunner::new(RunnerOptions::default(), regs)?;
/// let stop = runner.shutdown_handle();
/// tokio::spawn(async move { tokio::signal::ctrl_c().await.ok(); stop.shutdown(); });
/// runner.run().await
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
        let runner = MultiConnectorRunner {
            inner: Arc::new(Inner {
                options,
                cancel: CancellationToken::new(),
                tracker: TaskTracker::new(),
                state: Mutex::default(),
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

    /// Connects every socket and serves until [`ShutdownHandle::shutdown`]; then closes
    /// each socket cleanly and returns once every task has stopped (at most a few
    /// seconds).
    pub async fn run(&self) -> Result<()> {
        {
            let mut state = self.inner.state();
            if state.running {
                return Err(Error::Config(
                    "MultiConnectorRunner::run called twice".into(),
                ));
            }
            state.running = true;
            self.inner.start_sockets(&mut state);
        }
        self.inner.cancel.cancelled().await;
        self.inner.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some tasks did not stop within {SHUTDOWN_GRACE:?} of shutdown");
        }
        Ok(())
    }

    /// A handle that stops the runner.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.inner.cancel.clone())
    }

    /// Every admitted registration, removed ones excluded.
    pub fn registrations(&self) -> Vec<RegistrationHandle> {
        let mut state = self.inner.state();
        state.handles.retain(|h| !h.state.is_removed());
        state.handles.clone()
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
    fn target(&self, state: &mut State, p: &Prepared, dialer: &Dialer) -> (Target, Framing, usize) {
        match &p.grpc {
            None => (
                Target::WebSocket(p.url.clone()),
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
                (Target::Grpc(pool), Framing::Stream, 1)
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
            let on_exit = move || {
                if let Some(inner) = weak.upgrade() {
                    inner.forget_socket(&key, id);
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
