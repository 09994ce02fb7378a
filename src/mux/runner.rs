//! [`MultiConnectorRunner`]: runs any number of registrations, one socket per tenant.
//!
//! Registrations are grouped by sanitised tenant and gateway URL; each group shares
//! one socket task and one routing table, and each registration gets one handle task.
//! Sockets are never shared across tenants: the gateway binds a socket to the tenant of
//! its first registration. The socket's connection settings (timeouts, heartbeats,
//! backoff) come from the first registration of the group.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::handle::{HandleState, HandleTask, RegistrationHandle};
use super::metrics::{ConnectorMetrics, HandleMetrics};
use super::shared::SocketShared;
use super::socket::{self, SocketOptions};
use crate::config::ConnectorConfig;
use crate::connector::BaseConnector;
use crate::error::{Error, Result};
use crate::identity::sanitize;
use crate::proto::StreamMessage;

/// How long `run` waits for tasks to finish after shutdown before returning anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Options of the runner as a whole (per-registration settings live in
/// [`ConnectorConfig`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunnerOptions {
    /// Most registrations one socket carries (default 512). The gateway keeps per-socket
    /// state for each; past a few hundred, one slow socket affects too many
    /// registrations, so the runner refuses at admission rather than degrade silently.
    pub max_handlers_per_socket: usize,
    /// Capacity of each registration's inbox (default 64). When full, further executes
    /// for that registration are answered at once with an `overloaded` error and other
    /// frames are dropped and counted; the socket never blocks on one registration.
    pub inbox_capacity: usize,
    /// Capacity of each socket's outbound queue (default 1024). When full, senders
    /// await: backpressure on the connectors' responses, never loss.
    pub outbound_capacity: usize,
    /// Largest inbound text frame accepted (default 16 MiB); larger frames are dropped
    /// and counted while the socket stays up.
    pub max_frame_bytes: usize,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            max_handlers_per_socket: 512,
            inbox_capacity: 64,
            outbound_capacity: 1024,
            max_frame_bytes: 16 * 1024 * 1024,
        }
    }
}

impl RunnerOptions {
    /// Sets [`RunnerOptions::max_handlers_per_socket`].
    pub fn with_max_handlers_per_socket(mut self, n: usize) -> Self {
        self.max_handlers_per_socket = n;
        self
    }

    /// Sets [`RunnerOptions::inbox_capacity`].
    pub fn with_inbox_capacity(mut self, n: usize) -> Self {
        self.inbox_capacity = n.max(1);
        self
    }

    /// Sets [`RunnerOptions::max_frame_bytes`].
    pub fn with_max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
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

/// Stops a running [`MultiConnectorRunner`] from anywhere.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(CancellationToken);

impl ShutdownHandle {
    /// Asks every socket and registration to stop; `run` returns once they have.
    pub fn shutdown(&self) {
        self.0.cancel();
    }
}

struct SocketEntry {
    shared: Arc<SocketShared>,
    opts: SocketOptions,
    /// Present until the socket task is spawned.
    outbound_rx: Option<mpsc::Receiver<StreamMessage>>,
}

#[derive(Default)]
struct State {
    sockets: HashMap<(String, String), SocketEntry>,
    handles: Vec<RegistrationHandle>,
    not_started: Vec<HandleTask>,
    running: bool,
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
    options: RunnerOptions,
    cancel: CancellationToken,
    tracker: TaskTracker,
    state: Mutex<State>,
}

impl MultiConnectorRunner {
    /// Admits every registration; fails with a typed error (handler cap, duplicate key,
    /// bad address) before anything connects.
    pub fn new(
        options: RunnerOptions,
        registrations: impl IntoIterator<Item = Registration>,
    ) -> Result<Self> {
        let runner = MultiConnectorRunner {
            options,
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            state: Mutex::default(),
        };
        for r in registrations {
            runner.add(r)?;
        }
        Ok(runner)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("runner lock poisoned")
    }

    /// Admits one more registration. Before `run` it waits to start; while running it
    /// starts at once (opening its tenant's socket if it is the first).
    pub fn add(&self, registration: Registration) -> Result<RegistrationHandle> {
        let Registration { config, connector } = registration;
        let url = config.address()?.websocket_url()?;
        let key = config.key(connector.connector_type());
        let tenant = sanitize(&config.tenant_id);
        let mut state = self.state();
        let entry = state
            .sockets
            .entry((tenant.clone(), url.clone()))
            .or_insert_with(|| {
                let (shared, outbound_rx) = SocketShared::new(
                    tenant,
                    self.options.max_handlers_per_socket,
                    self.options.outbound_capacity,
                );
                let opts = SocketOptions {
                    url,
                    connect_timeout: config.connect_timeout,
                    heartbeat: config.heartbeat.clone(),
                    reconnect: config.reconnect.clone(),
                    max_frame_bytes: self.options.max_frame_bytes,
                };
                SocketEntry {
                    shared,
                    opts,
                    outbound_rx: Some(outbound_rx),
                }
            });
        let metrics = Arc::new(HandleMetrics::default());
        let (tx, inbox) = mpsc::channel(self.options.inbox_capacity);
        let id = entry.shared.admit(key.clone(), tx, metrics.clone())?;
        let handle = RegistrationHandle {
            key,
            id,
            state: HandleState::new(metrics),
            socket: entry.shared.clone(),
            cancel: self.cancel.child_token(),
        };
        let task = HandleTask {
            handle: handle.clone(),
            config,
            connector,
            inbox,
        };
        state.handles.push(handle.clone());
        if state.running {
            self.start_sockets(&mut state);
            self.tracker.spawn(task.run());
        } else {
            state.not_started.push(task);
        }
        Ok(handle)
    }

    fn start_sockets(&self, state: &mut State) {
        for entry in state.sockets.values_mut() {
            if let Some(rx) = entry.outbound_rx.take() {
                let fut = socket::run(
                    entry.shared.clone(),
                    entry.opts.clone(),
                    rx,
                    self.cancel.clone(),
                );
                self.tracker.spawn(fut);
            }
        }
    }

    /// Connects every socket and serves until [`ShutdownHandle::shutdown`]; then closes
    /// each socket cleanly and returns once every task has stopped (at most a few
    /// seconds).
    pub async fn run(&self) -> Result<()> {
        {
            let mut state = self.state();
            if state.running {
                return Err(Error::Config(
                    "MultiConnectorRunner::run called twice".into(),
                ));
            }
            state.running = true;
            self.start_sockets(&mut state);
            for task in std::mem::take(&mut state.not_started) {
                self.tracker.spawn(task.run());
            }
        }
        self.cancel.cancelled().await;
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some tasks did not stop within {SHUTDOWN_GRACE:?} of shutdown");
        }
        Ok(())
    }

    /// A handle that stops the runner.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.cancel.clone())
    }

    /// Every admitted registration, removed ones excluded.
    pub fn registrations(&self) -> Vec<RegistrationHandle> {
        let mut state = self.state();
        state.handles.retain(|h| !h.cancel.is_cancelled());
        state.handles.clone()
    }

    /// Number of sockets (one per tenant and gateway URL).
    pub fn socket_count(&self) -> usize {
        self.state().sockets.len()
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
