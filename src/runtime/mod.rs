//! The runtime: one HTTP listener (ingress + admin API), the event store with its group
//! commit and outbox, the inbound sources (each through its connector; a task per
//! poll or stream source), the dispatcher that delivers matched
//! events, the runtime's own gateway registration, and the sweeper that expires dedupe
//! claims, old audit rows and, past `event_retention`, events and finished records.
//!
//! [`Runtime::start`] (or [`Runtime::builder`], to add local connectors) wires them
//! from a [`ResolvedConfig`]; [`Runtime::shutdown`] is the graceful stop an
//! orchestrator's SIGTERM starts: readiness goes false and new requests are answered
//! 503 while those in flight finish (their writes commit before they are answered),
//! the sources stop and hand back their poll leases, the dispatcher stops claiming
//! (in-flight attempts get the shutdown grace, what is still held is released), the
//! gateway registrations leave, and the listener closes last ([`life`]).
//!
//! [`start`] wires them in named stages, in dependency order, and says why each of the
//! three write-once cells that tie the remaining loops must stay.

mod backfill_runner;
mod binding_metrics;
pub(crate) mod config;
pub(crate) mod connector;
mod console;
pub(crate) mod http;
pub(crate) mod life;
pub(crate) mod ops;
pub(crate) mod outbox_series;
mod process_id;
mod source_registrations;
mod start;
mod sweeper;
pub(crate) mod trigger_control;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::connector::BaseConnector;
use crate::dispatch::deliver::Deliver;
use crate::dispatch::dispatcher::Dispatcher;
use crate::error::{Error, Result};
use crate::inbound::InboundConnector;
use crate::mux::{RegistrationHandle, ShutdownHandle};
use crate::runtime::config::ResolvedConfig;
use crate::store::Store;
use ops::{EnqueueRequest, Enqueued, Operations};
use trigger_control::TriggerControl;

/// How long the sources' `shutdown` may take, together.
const SOURCE_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stop waits for the requests already admitted (a webhook whose write is
/// committing) before it goes on: a request is bounded by the ingress's header and
/// body timeouts plus a commit, well inside this.
const REQUEST_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// A running runtime.
pub struct Runtime {
    addr: SocketAddr,
    store: Store,
    cancel: CancellationToken,
    /// Stops the listener: last in a stop, after everything it fronts ([`life`]).
    listener_stop: CancellationToken,
    life: Arc<life::Life>,
    server: JoinHandle<std::io::Result<()>>,
    tasks: Vec<JoinHandle<()>>,
    dispatcher: Option<Dispatcher>,
    runner: Option<(ShutdownHandle, JoinHandle<()>)>,
    registration: Option<RegistrationHandle>,
    ops: Arc<Operations>,
    control: Arc<TriggerControl>,
    sources: Vec<Arc<crate::ingress::hosted::HostedSource>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Reloads a running [`Runtime`]'s `[[triggers]]` from its configuration file; see
/// [`Runtime::reload_handle`].
#[derive(Clone)]
pub struct ReloadHandle(Arc<TriggerControl>);

impl std::fmt::Debug for ReloadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadHandle").finish_non_exhaustive()
    }
}

impl ReloadHandle {
    /// As [`Runtime::reload`]: how many lifecycle transitions the reload wrote (0:
    /// nothing changed); an invalid file changes nothing and the error says why.
    pub async fn reload(&self) -> Result<usize> {
        Ok(self.0.reload().await?.entries.len())
    }
}

/// Builds a [`Runtime`] with connectors of its own: `local` handlers deliver to a
/// [`BaseConnector`] registered here by name, in this process, without a gateway.
pub struct RuntimeBuilder {
    config: ResolvedConfig,
    local: HashMap<String, Arc<dyn BaseConnector>>,
    deliver: Option<Arc<dyn Deliver>>,
    config_path: Option<std::path::PathBuf>,
    inbound: Vec<Arc<dyn InboundConnector>>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("local", &self.local.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Registers `connector` under `name`, the name `handler = { local = "name" }`
    /// bindings use.
    pub fn local_connector(self, name: impl Into<String>, connector: impl BaseConnector) -> Self {
        self.local_connector_shared(name, Arc::new(connector))
    }

    /// Like [`RuntimeBuilder::local_connector`], for a connector already shared.
    pub fn local_connector_shared(
        mut self,
        name: impl Into<String>,
        connector: Arc<dyn BaseConnector>,
    ) -> Self {
        self.local.insert(name.into(), connector);
        self
    }

    /// Registers an inbound connector of the program's own: `[[sources]]` entries
    /// whose `provider` is its [`InboundConnector::provider`] run through it, exactly
    /// as the built-ins (`github`, `cron`, …) do. A provider id that is already
    /// registered, a built-in's included, makes [`RuntimeBuilder::start`] fail.
    pub fn inbound_connector(self, connector: impl InboundConnector) -> Self {
        self.inbound_connector_shared(Arc::new(connector))
    }

    /// Like [`RuntimeBuilder::inbound_connector`], for a connector already shared.
    pub fn inbound_connector_shared(mut self, connector: Arc<dyn InboundConnector>) -> Self {
        self.inbound.push(connector);
        self
    }

    /// The configuration file the runtime was loaded from: a reload (SIGHUP in
    /// `switchboard serve`, `POST /api/v1/triggers/reload`, [`Runtime::reload`])
    /// reads its `[[triggers]]` again. Without one, a reload is refused and bindings
    /// change only at run time (`POST /api/v1/triggers`).
    pub fn config_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config_path = Some(path.into());
        self
    }

    /// Replaces the handlers with `deliver` for every binding (invoke and local): for
    /// benchmarks and tests that measure the outbox without a handler's cost. Hidden
    /// and unstable, like the [`Deliver`] trait it takes.
    #[doc(hidden)]
    pub fn deliver_with(mut self, deliver: Arc<dyn Deliver>) -> Self {
        self.deliver = Some(deliver);
        self
    }

    /// Opens the store (running migrations), connects to the gateway if configured,
    /// binds the listener and starts every task. Fails with a clear error when the
    /// store cannot be opened, the address is taken, or a `local` binding names a
    /// connector that was not registered; nothing is left running on failure.
    pub async fn start(self) -> Result<Runtime> {
        let s = start::start(start::Ingredients {
            config: self.config,
            local: self.local,
            deliver: self.deliver,
            config_path: self.config_path,
            inbound: self.inbound,
        })
        .await?;
        Ok(Runtime {
            addr: s.addr,
            store: s.store,
            cancel: s.cancel,
            listener_stop: s.listener_stop,
            life: s.life,
            server: s.server,
            tasks: s.tasks,
            dispatcher: Some(s.dispatcher),
            runner: s.runner,
            registration: s.registration,
            ops: s.ops,
            control: s.control,
            sources: s.sources,
        })
    }
}

impl Runtime {
    /// Opens the store, binds the listener and starts every task; see
    /// [`RuntimeBuilder::start`]. Use [`Runtime::builder`] to add local connectors.
    pub async fn start(config: ResolvedConfig) -> Result<Runtime> {
        Self::builder(config).start().await
    }

    /// A builder, for local connectors.
    pub fn builder(config: ResolvedConfig) -> RuntimeBuilder {
        RuntimeBuilder {
            config,
            local: HashMap::new(),
            deliver: None,
            config_path: None,
            inbound: Vec::new(),
        }
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store. Hidden and unstable: this crate's tests and benches read rows
    /// through it; an application reads through the admin API instead.
    #[doc(hidden)]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The runtime's gateway registration, if a `[gateway]` is configured.
    pub fn registration(&self) -> Option<&RegistrationHandle> {
        self.registration.as_ref()
    }

    /// The operations (enqueue, sync invoke, queues, dead letters, stats), as
    /// the admin API and the runtime's capabilities run them. Hidden and unstable:
    /// [`Runtime::enqueue`] is the supported way in.
    #[doc(hidden)]
    pub fn ops(&self) -> &Arc<Operations> {
        &self.ops
    }

    /// Enqueues an event for delivery from inside the embedding process, exactly as
    /// `POST /api/v1/events` would: the event is durable (and its outbox rows written)
    /// when this returns, and an `idempotency_key` seen before returns the first
    /// event's id instead of a second copy. Fails with [`Error::Payload`] on a
    /// bad request, [`Error::Overloaded`] when a queue is full, and the store's error
    /// when it cannot take the write.
    pub async fn enqueue(&self, request: EnqueueRequest) -> Result<Enqueued> {
        self.ops.enqueue(request).await.map_err(|e| e.into_error())
    }

    /// Reads the configuration file's `[[triggers]]` again (see
    /// [`RuntimeBuilder::config_path`]): unchanged bindings stay as they are, a changed
    /// one gets a new version while the old one drains, a removed one drains. An
    /// invalid file changes nothing and the error says why. Returns how many lifecycle
    /// transitions it wrote (0: nothing changed).
    pub async fn reload(&self) -> Result<usize> {
        self.reload_handle().reload().await
    }

    /// A handle that reloads the configuration's `[[triggers]]` (as
    /// [`Runtime::reload`]) from any task, e.g. a SIGHUP handler, without holding the
    /// runtime. Cloneable and cheap.
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle(self.control.clone())
    }

    /// A handle that stops the runtime (e.g. from a signal handler): [`Runtime::wait`]
    /// returns once the runtime has shut down. Cloneable and cheap, so any task may
    /// hold one.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle::new(self.cancel.clone())
    }

    /// Runs until a [`Runtime::shutdown_handle`] fires, then shuts down.
    pub async fn wait(self) -> Result<()> {
        self.cancel.cancelled().await;
        self.shutdown().await
    }

    /// The graceful stop: readiness goes false and new requests are answered 503
    /// (`Retry-After`) while those in flight finish; the sources stop and hand back
    /// their poll leases; the dispatcher stops claiming, gives attempts in flight the
    /// shutdown grace and releases every row it still holds (another process claims
    /// them at once); the gateway registrations leave; the listener closes last. One
    /// log line (info) says what the stop finished and released.
    pub async fn shutdown(mut self) -> Result<()> {
        let started = std::time::Instant::now();
        let unanswered = self.life.stop_taking_requests(REQUEST_DRAIN).await;
        if unanswered > 0 {
            tracing::warn!(
                unanswered,
                ?REQUEST_DRAIN,
                "requests still running at the end of the drain; stopping under them"
            );
        }
        self.cancel.cancel();
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        // Every source gets the same deadline to finish what it holds.
        let deadline = std::time::Instant::now() + SOURCE_SHUTDOWN_GRACE;
        let stopping = futures_util::future::join_all(
            self.sources.iter().map(|s| s.source.shutdown(deadline)),
        );
        if tokio::time::timeout(SOURCE_SHUTDOWN_GRACE, stopping)
            .await
            .is_err()
        {
            tracing::warn!("a source's shutdown overran its deadline; it is abandoned");
        }
        let dispatched = match self.dispatcher.take() {
            Some(d) => d.shutdown().await,
            None => Default::default(),
        };
        let left_gateway = self.runner.is_some();
        if let Some((runner, task)) = self.runner.take() {
            runner.shutdown();
            let _ = task.await;
        }
        self.listener_stop.cancel();
        let served = self
            .server
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        tracing::info!(
            target: crate::signals::STOP_LOG_TARGET,
            elapsed_ms = started.elapsed().as_millis() as u64,
            requests_unanswered = unanswered,
            attempts_finished = dispatched.finished,
            attempts_abandoned = dispatched.abandoned,
            rows_released = dispatched.released,
            left_gateway,
            "runtime stopped: attempts in flight finished or abandoned, rows still held released, poll leases handed back"
        );
        served.map_err(Error::Io)
    }
}
