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
//! The wiring order matters once: the gateway registration exists before the handlers
//! that deliver over it, the handlers before the operations that use them, and the
//! operations are then handed to the registration's connector ([`connector::OpsSlot`]).

pub(crate) mod admin;
mod binding_metrics;
pub(crate) mod config;
pub(crate) mod connector;
mod console;
pub(crate) mod life;
pub(crate) mod ops;
pub(crate) mod outbox_series;
mod process_id;
mod source_registrations;
mod sweeper;
pub(crate) mod trigger_control;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::connector::BaseConnector;
use crate::dispatch::deliver::{Deliver, Handlers};
use crate::dispatch::dispatcher::Dispatcher;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::options::DispatcherOptions;
use crate::dispatch::permits::Permits;
use crate::error::{Error, Result};
use crate::inbound::InboundConnector;
use crate::mux::{
    MultiConnectorRunner, Registration, RegistrationHandle, RunnerOptions, ShutdownHandle,
};
use crate::runtime::config::ResolvedConfig;
use crate::store::{open_backend, redact_url, Store};
use crate::triggers::binding::Handler;
use crate::webhooks::server::router;
use crate::webhooks::state::Ingress;
use ops::{DeliverOps, EnqueueRequest, Enqueued, QueueLimits};
use trigger_control::{Scope, TriggerControl};

/// Executes the runtime's own registration may run at once: its capabilities are
/// short store operations, except `triggers.invoke`, which waits for a handler.
const RUNTIME_MAX_CONCURRENT: usize = 256;

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
    ops: Arc<DeliverOps>,
    control: Arc<TriggerControl>,
    sources: Vec<Arc<crate::webhooks::hosted::HostedSource>>,
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
        let RuntimeBuilder {
            config,
            local,
            deliver,
            config_path,
            inbound,
        } = self;
        let mut connectors = crate::webhooks::builtin::registry();
        for c in inbound {
            connectors.add(c)?;
        }
        if deliver.is_none() {
            for b in config.triggers.bindings() {
                if let Handler::Local { connector, .. } = &b.handler {
                    if !local.contains_key(connector) {
                        return Err(Error::Config(format!(
                            "trigger {:?}: handler local = {connector:?}: no connector is registered under that name; register it with RuntimeBuilder::local_connector",
                            b.id
                        )));
                    }
                }
            }
        }
        let backend = open_backend(&config.store, &config.store_options).await?;
        tracing::info!(store = %redact_url(&config.store), backend = backend.name(), "store open");
        let store = Store::with_max_queue_bytes(
            backend.clone(),
            config.store_options.write_queue_max_bytes,
        );
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", config.listen)))?;
        let addr = listener.local_addr()?;
        let identity = (config.process_id.clone()).unwrap_or_else(|| process_id::default_for(addr));
        let scope = Scope {
            sources: config.sources.iter().map(|s| s.id.clone()).collect(),
            gateway: config.gateway.is_some(),
            local: deliver
                .is_none()
                .then(|| local.keys().cloned().collect::<HashSet<_>>()),
            queues: config.queues.iter().map(|q| q.name.clone()).collect(),
        };
        let control = Arc::new(
            TriggerControl::start(
                backend.clone(),
                config.triggers.to_vec_except(None),
                config_path,
                scope,
            )
            .await?,
        );
        let live = control.live().clone();
        let ingress = Arc::new(
            Ingress::new(
                &config.sources,
                &connectors,
                live.clone(),
                store.clone(),
                config.admin_token.clone(),
            )
            .await?,
        );

        let _ = control.sources.set(ingress.clone());

        // The runtime's own registration, then its handlers, then the operations.
        let slot: connector::OpsSlot = Arc::default();
        let mut runner = None;
        let mut registration = None;
        if let Some(gw) = &config.gateway {
            let mut builder = crate::ConnectorConfig::builder(gw.url.clone(), gw.tenant.clone())
                .instance_id(gw.instance_id.clone())
                .display_name(format!("switchboard runtime {}", gw.instance_id))
                .max_concurrent_requests(RUNTIME_MAX_CONCURRENT);
            if let Some(t) = &gw.token {
                builder = builder.auth_token(String::from_utf8_lossy(t.expose()).into_owned());
            }
            let cfg = builder.build()?;
            let conn = connector::RuntimeConnector::new(slot.clone(), gw.connector_type.clone());
            let r = MultiConnectorRunner::new(RunnerOptions::default(), [])?;
            let handle = r.add(Registration::new(cfg, conn)).await?;
            registration = Some(handle);
            runner = Some(r);
        }
        let http = Arc::new(crate::outbound::http::HttpDelivery::new(&config.outbound)?);
        let _ = control.http.set(http.clone());
        if let (Some(gw), Some(r)) = (&config.gateway, &runner) {
            register_outbound(gw, r, &ingress, &http).await?;
        }
        let handlers = Arc::new(Handlers::new(registration.clone(), local).with_http(http));
        let any_handler = deliver.is_some();
        let judge = handlers.clone();
        let d = &config.dispatcher;
        let permits = Permits::new(
            move |b| any_handler || judge.can_deliver(b),
            d.max_in_flight,
        );
        let deliver: Arc<dyn Deliver> = deliver.unwrap_or(handlers);
        let metrics = Arc::new(DispatchMetrics::new());
        let series = Arc::new(std::sync::Mutex::new(outbox_series::SeriesRing::new(
            outbox_series::INTERVAL,
            outbox_series::CAPACITY,
        )));
        let ops = Arc::new(DeliverOps {
            store: store.clone(),
            triggers: live.clone(),
            control: control.clone(),
            ingest: Some(ingress.metrics.clone()),
            breakers: Some(ingress.router.breakers().clone()),
            deliver: deliver.clone(),
            permits: permits.clone(),
            metrics: metrics.clone(),
            queues: config
                .queues
                .iter()
                .map(|q| {
                    (
                        q.name.clone(),
                        QueueLimits {
                            visibility: q.visibility_timeout,
                            max_receives: q.max_receives,
                        },
                    )
                })
                .collect(),
            max_depth: d.max_depth,
            retention_ms: config.event_retention_ms,
            series: series.clone(),
            tenant: config
                .gateway
                .as_ref()
                .map_or_else(|| "default".to_owned(), |g| g.tenant.clone()),
        });
        let _ = slot.set(ops.clone());

        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        // Before the poll drivers and the dispatcher: what an earlier start held.
        process_id::release_previous(&backend, &ingress.order, &identity).await;
        tasks.extend(crate::webhooks::poller::spawn_all(
            &ingress.order,
            &ingress.committer,
            &identity,
            &cancel,
        ));
        tasks.push(tokio::spawn(crate::webhooks::poller::activation_loop(
            ingress.order.clone(),
            live.clone(),
            cancel.clone(),
        )));
        tasks.push(tokio::spawn(sweeper::run(
            store.clone(),
            sweeper::Retention {
                rejections_ms: config.rejection_retention_ms,
                events_ms: config.event_retention_ms,
            },
            config.sweep_interval,
            cancel.clone(),
        )));
        tasks.push(tokio::spawn(control.clone().run(cancel.clone())));
        let sampled = store.clone();
        tasks.push(tokio::spawn(outbox_series::sample_loop(
            series,
            outbox_series::INTERVAL,
            move || {
                let store = sampled.clone();
                async move {
                    let d = store.backend().depth(crate::store::now_ms()).await.ok()?;
                    Some(outbox_series::Sample {
                        due: d.due,
                        leased: d.leased,
                        dead_letters: d.dead_letters,
                    })
                }
            },
            crate::store::now_ms,
            cancel.clone(),
        )));
        let dispatcher = Dispatcher::start_live(
            backend.clone(),
            live,
            deliver,
            permits,
            metrics.clone(),
            DispatcherOptions::default()
                .with_max_in_flight(d.max_in_flight)
                .with_batch(d.batch)
                .with_lease(d.lease)
                .with_poll_interval(d.poll_interval)
                .with_shutdown_grace(d.shutdown_grace)
                .with_process_id(identity),
            control.unknown_version.clone(),
        );
        let runner = runner.map(|r: MultiConnectorRunner| {
            let stop = r.shutdown_handle();
            let task = tokio::spawn(async move {
                if let Err(e) = r.run().await {
                    tracing::error!(error = %e, "the runtime's gateway registration stopped");
                }
            });
            (stop, task)
        });
        let _ = ingress
            .more_metrics
            .set(Arc::new(binding_metrics::RuntimeMetrics {
                dispatch: metrics,
                triggers: control.live().clone(),
                store: backend.clone(),
                breakers: ingress.router.breakers().clone(),
            }));
        let sources = ingress.order.clone();
        let limits = config.limits;
        let console = console::routes(
            ops.clone(),
            ingress.clone(),
            config.admin_token.clone(),
            cancel.child_token(),
        );
        let life = life::Life::new(backend, registration.clone(), sources.len());
        let app = router(
            ingress,
            admin::routes(ops.clone()),
            limits.max_concurrent_requests,
        )
        .merge(console)
        .layer(axum::middleware::from_fn_with_state(
            life.clone(),
            life::gate,
        ))
        .merge(life::probes(life.clone()));
        let listener_stop = CancellationToken::new();
        let server = tokio::spawn(crate::webhooks::listener::serve(
            listener,
            app,
            limits,
            listener_stop.clone(),
        ));
        tracing::info!(%addr, served = ?dispatcher.served(), "runtime listening");
        Ok(Runtime {
            addr,
            store,
            cancel,
            listener_stop,
            life,
            server,
            tasks,
            dispatcher: Some(dispatcher),
            runner,
            registration,
            ops,
            control,
            sources,
        })
    }
}

/// Registers every source (its outbound side) and the `http` connector on the
/// runtime's gateway connection, beside the runtime's own registration.
async fn register_outbound(
    gw: &crate::runtime::config::GatewaySettings,
    runner: &MultiConnectorRunner,
    ingress: &Ingress,
    http: &Arc<crate::outbound::http::HttpDelivery>,
) -> Result<()> {
    let config = |tenant: &str, instance: &str, name: String| {
        let mut builder = crate::ConnectorConfig::builder(gw.url.clone(), tenant.to_owned())
            .instance_id(instance.to_owned())
            .display_name(name);
        if let Some(t) = &gw.token {
            builder = builder.auth_token(String::from_utf8_lossy(t.expose()).into_owned());
        }
        builder.build()
    };
    for s in &ingress.order {
        if s.spec.tenant != gw.tenant {
            tracing::warn!(source = s.id(), tenant = %s.spec.tenant, gateway_tenant = %gw.tenant, "the source names a tenant other than [gateway] tenant, so its registration opens a gateway socket of its own; leave tenant unset to share the runtime's");
        }
        let cfg = config(
            &s.spec.tenant,
            s.id(),
            format!("{} source {}", s.provider, s.id()),
        )?;
        let conn = source_registrations::SourceConnector::new(s.clone());
        runner.add(Registration::new(cfg, conn)).await?;
    }
    let cfg = config(
        &gw.tenant,
        &gw.instance_id,
        format!("switchboard http {}", gw.instance_id),
    )?;
    let conn = source_registrations::HttpConnector::new(http.clone());
    runner.add(Registration::new(cfg, conn)).await?;
    Ok(())
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

    /// The deliver operations (enqueue, sync invoke, queues, dead letters, stats), as
    /// the admin API and the runtime's capabilities run them. Hidden and unstable:
    /// [`Runtime::enqueue`] is the supported way in.
    #[doc(hidden)]
    pub fn ops(&self) -> &Arc<DeliverOps> {
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
