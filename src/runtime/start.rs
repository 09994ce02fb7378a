//! The composition root: [`RuntimeBuilder::start`](super::RuntimeBuilder::start) in
//! named stages, each taking what the stages before it built, in dependency order:
//!
//! 1. [`check`]: what can be refused before anything opens (a `local` handler naming
//!    a connector nobody registered, a duplicate inbound provider);
//! 2. [`open_store`]; 3. [`bind`] the listener (early, so a taken port fails before
//!    any task starts) and settle the process identity;
//! 4. [`triggers`]: the bindings' control and their live registry;
//! 5. [`ingress`]: the sources and the ingest router over those bindings;
//! 6. [`gateway`]: the runtime's own registration and, beside it, the sources' and
//!    the `http` connector's;
//! 7. [`operations`]: the handlers, the permits and the operator's verbs;
//! 8. [`background`]: pollers, the sweeper, the trigger control loop, the depth
//!    sampler; 9. [`dispatch`]; 10. [`serve`]: the router and the listener.
//!
//! Two write-once cells remain, each closing a loop the order cannot open:
//! - `TriggerControl::sources` (set after stage 5): a reload re-activates the sources
//!   with the new bindings, and the sources are built over the bindings' registry;
//! - `connector::OpsSlot` (set after stage 7): the runtime's gateway connector serves
//!   the operations, which deliver `invoke` handlers over that same registration.
//!
//! (A third, `/metrics` learning the dispatcher's figures after the ingress was
//! built, went when the root router moved from the ingress to `runtime::http`: the
//! router is now built last, with every part in hand.)

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{GatewaySettings, ResolvedConfig};
use super::ops::{Operations, QueueLimits};
use super::trigger_control::{Scope, TriggerControl};
use super::{
    backfill_runner, binding_metrics, connector, console, http, life, outbox_series, process_id,
    source_registrations, sweeper,
};
use crate::connector::BaseConnector;
use crate::dispatch::deliver::{Deliver, Handlers};
use crate::dispatch::dispatcher::Dispatcher;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::options::DispatcherOptions;
use crate::dispatch::permits::Permits;
use crate::error::{Error, Result};
use crate::inbound::InboundConnector;
use crate::ingress::hosted::Connectors;
use crate::ingress::state::Ingress;
use crate::mux::{
    MultiConnectorRunner, Registration, RegistrationHandle, RunnerOptions, ShutdownHandle,
};
use crate::outbound::http::HttpDelivery;
use crate::store::{open_backend, redact_url, Backend, Store};
use crate::triggers::binding::Handler;
use crate::triggers::live::LiveTriggers;

/// Executes the runtime's own registration may run at once: its capabilities are
/// short store operations, except `triggers.invoke`, which waits for a handler.
const RUNTIME_MAX_CONCURRENT: usize = 256;

/// What [`RuntimeBuilder::start`](super::RuntimeBuilder::start) was given.
pub(super) struct Ingredients {
    pub(super) config: ResolvedConfig,
    pub(super) local: HashMap<String, Arc<dyn BaseConnector>>,
    pub(super) deliver: Option<Arc<dyn Deliver>>,
    pub(super) config_path: Option<std::path::PathBuf>,
    pub(super) inbound: Vec<Arc<dyn InboundConnector>>,
}

/// What a start built and left running: the `Runtime`'s parts.
pub(super) struct Started {
    pub(super) addr: SocketAddr,
    pub(super) store: Store,
    pub(super) cancel: CancellationToken,
    pub(super) listener_stop: CancellationToken,
    pub(super) life: Arc<life::Life>,
    pub(super) server: JoinHandle<std::io::Result<()>>,
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) dispatcher: Dispatcher,
    pub(super) runner: Option<(ShutdownHandle, JoinHandle<()>)>,
    pub(super) registration: Option<RegistrationHandle>,
    pub(super) ops: Arc<Operations>,
    pub(super) control: Arc<TriggerControl>,
    pub(super) sources: Vec<Arc<crate::ingress::hosted::HostedSource>>,
}

/// Starts a runtime, stage by stage (the module doc lists them).
pub(super) async fn start(given: Ingredients) -> Result<Started> {
    let Ingredients {
        config,
        local,
        deliver,
        config_path,
        inbound,
    } = given;
    let connectors = check(&config, &local, deliver.is_some(), inbound)?;
    let (backend, store) = open_store(&config).await?;
    let (listener, addr, identity) = bind(&config).await?;
    let scope = Scope {
        sources: config.sources.iter().map(|s| s.id.clone()).collect(),
        gateway: config.gateway.is_some(),
        local: deliver
            .is_none()
            .then(|| local.keys().cloned().collect::<HashSet<_>>()),
        queues: config.queues.iter().map(|q| q.name.clone()).collect(),
    };
    let control = triggers(&backend, &config, config_path, scope).await?;
    let live = control.live().clone();
    let ingress = ingress(&config, &connectors, &live, &store).await?;
    let _ = control.sources.set(ingress.clone());

    let slot: connector::OpsSlot = Arc::default();
    let http = Arc::new(HttpDelivery::new(&config.outbound)?);
    let _ = control.http.set(http.clone());
    let (runner, registration) = gateway(&config, &slot, &ingress, &http).await?;
    let ops = operations(
        &config,
        &store,
        &control,
        &ingress,
        Handlers::new(registration.clone(), local).with_http(http),
        deliver,
    );
    let _ = slot.set(ops.clone());

    let cancel = CancellationToken::new();
    let tasks = background(
        &config, &backend, &store, &control, &ingress, &ops, &identity, &cancel,
    )
    .await;
    let dispatcher = dispatch(&config, &backend, &control, &ops, identity);
    let runner = runner.map(|r: MultiConnectorRunner| {
        let stop = r.shutdown_handle();
        let task = tokio::spawn(async move {
            if let Err(e) = r.run().await {
                tracing::error!(error = %e, "the runtime's gateway registration stopped");
            }
        });
        (stop, task)
    });
    let sources = ingress.order.clone();
    let served = Served::start(
        &config,
        listener,
        &backend,
        &control,
        ingress,
        &ops,
        &registration,
        &cancel,
    );
    tracing::info!(%addr, served = ?dispatcher.served(), "runtime listening");
    Ok(Started {
        addr,
        store,
        cancel,
        listener_stop: served.listener_stop,
        life: served.life,
        server: served.server,
        tasks,
        dispatcher,
        runner,
        registration,
        ops,
        control,
        sources,
    })
}

/// Stage 1: the inbound connectors (the built-ins plus the builder's), and every
/// `local` handler's connector registered, unless the builder replaced the handlers.
fn check(
    config: &ResolvedConfig,
    local: &HashMap<String, Arc<dyn BaseConnector>>,
    custom_deliver: bool,
    inbound: Vec<Arc<dyn InboundConnector>>,
) -> Result<Connectors> {
    let mut connectors = crate::ingress::builtin::registry();
    for c in inbound {
        connectors.add(c)?;
    }
    if !custom_deliver {
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
    Ok(connectors)
}

/// Stage 2: the store, and its group-committing front.
async fn open_store(config: &ResolvedConfig) -> Result<(Arc<dyn Backend>, Store)> {
    let backend = open_backend(&config.store, &config.store_options).await?;
    tracing::info!(store = %redact_url(&config.store), backend = backend.name(), "store open");
    let store =
        Store::with_max_queue_bytes(backend.clone(), config.store_options.write_queue_max_bytes);
    Ok((backend, store))
}

/// Stage 3: the listener, and the process identity (configured, or derived from the
/// host and the bound address).
async fn bind(config: &ResolvedConfig) -> Result<(tokio::net::TcpListener, SocketAddr, String)> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", config.listen)))?;
    let addr = listener.local_addr()?;
    let identity = (config.process_id.clone()).unwrap_or_else(|| process_id::default_for(addr));
    Ok((listener, addr, identity))
}

/// Stage 4: the bindings' control (versions recorded, the live registry built).
async fn triggers(
    backend: &Arc<dyn Backend>,
    config: &ResolvedConfig,
    config_path: Option<std::path::PathBuf>,
    scope: Scope,
) -> Result<Arc<TriggerControl>> {
    Ok(Arc::new(
        TriggerControl::start(
            backend.clone(),
            config.triggers.to_vec_except(None),
            config_path,
            scope,
        )
        .await?,
    ))
}

/// Stage 5: the sources, each initialised by its connector, and the ingest router.
async fn ingress(
    config: &ResolvedConfig,
    connectors: &Connectors,
    live: &Arc<LiveTriggers>,
    store: &Store,
) -> Result<Arc<Ingress>> {
    Ok(Arc::new(
        Ingress::new(&config.sources, connectors, live.clone(), store.clone()).await?,
    ))
}

/// Stage 6: with a `[gateway]`, the runtime's own registration (its connector serves
/// the operations through `slot`), each source's and the `http` connector's.
async fn gateway(
    config: &ResolvedConfig,
    slot: &connector::OpsSlot,
    ingress: &Ingress,
    http: &Arc<HttpDelivery>,
) -> Result<(Option<MultiConnectorRunner>, Option<RegistrationHandle>)> {
    let Some(gw) = &config.gateway else {
        return Ok((None, None));
    };
    let mut builder = crate::ConnectorConfig::builder(gw.url.clone(), gw.tenant.clone())
        .instance_id(gw.instance_id.clone())
        .display_name(format!("switchboard runtime {}", gw.instance_id))
        .max_concurrent_requests(RUNTIME_MAX_CONCURRENT);
    if let Some(t) = &gw.token {
        builder = builder.auth_token(String::from_utf8_lossy(t.expose()).into_owned());
    }
    let cfg = builder.build()?;
    let conn = connector::RuntimeConnector::new(slot.clone(), gw.connector_type.clone());
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), [])?;
    let handle = runner.add(Registration::new(cfg, conn)).await?;
    register_outbound(gw, &runner, ingress, http).await?;
    Ok((Some(runner), Some(handle)))
}

/// Registers every source (its outbound side) and the `http` connector on the
/// runtime's gateway connection, beside the runtime's own registration.
async fn register_outbound(
    gw: &GatewaySettings,
    runner: &MultiConnectorRunner,
    ingress: &Ingress,
    http: &Arc<HttpDelivery>,
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

/// Stage 7: the handlers (or the builder's replacement), the permit gates and the
/// operator's verbs over them.
fn operations(
    config: &ResolvedConfig,
    store: &Store,
    control: &Arc<TriggerControl>,
    ingress: &Ingress,
    handlers: Handlers,
    custom: Option<Arc<dyn Deliver>>,
) -> Arc<Operations> {
    let handlers = Arc::new(handlers);
    let any_handler = custom.is_some();
    let judge = handlers.clone();
    let d = &config.dispatcher;
    let permits = Permits::new(
        move |b| any_handler || judge.can_deliver(b),
        d.max_in_flight,
    );
    let deliver: Arc<dyn Deliver> = custom.unwrap_or(handlers);
    Arc::new(Operations {
        store: store.clone(),
        triggers: control.live().clone(),
        control: control.clone(),
        matcher: ingress.router.clone(),
        deliver,
        permits,
        metrics: Arc::new(DispatchMetrics::new()),
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
        series: Arc::new(std::sync::Mutex::new(outbox_series::SeriesRing::new(
            outbox_series::INTERVAL,
            outbox_series::CAPACITY,
        ))),
        tenant: config
            .gateway
            .as_ref()
            .map_or_else(|| "default".to_owned(), |g| g.tenant.clone()),
        backfill_wake: Arc::default(),
    })
}

/// Stage 8: what runs beside the listener and the dispatcher. First, what an earlier
/// start of this identity held is made due again, before the poll drivers and the
/// dispatcher could wait on it.
#[allow(clippy::too_many_arguments)]
async fn background(
    config: &ResolvedConfig,
    backend: &Arc<dyn Backend>,
    store: &Store,
    control: &Arc<TriggerControl>,
    ingress: &Ingress,
    ops: &Operations,
    identity: &str,
    cancel: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    process_id::release_previous(backend, &ingress.order, identity).await;
    tasks.extend(crate::ingress::poller::spawn_all(
        &ingress.order,
        &ingress.committer,
        identity,
        cancel,
    ));
    tasks.push(tokio::spawn(crate::ingress::poller::activation_loop(
        ingress.order.clone(),
        control.live().clone(),
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
    tasks.push(tokio::spawn(backfill_runner::run(
        backfill_runner::Runner {
            store: store.clone(),
            control: control.clone(),
            holder: identity.to_owned(),
            wake: ops.backfill_wake.clone(),
            metrics: ops.metrics.clone(),
        },
        cancel.clone(),
    )));
    let sampled = store.clone();
    tasks.push(tokio::spawn(outbox_series::sample_loop(
        ops.series.clone(),
        outbox_series::INTERVAL,
        move || {
            let store = sampled.clone();
            async move {
                let d = store.backend().depth(crate::clock::now_ms()).await.ok()?;
                Some(outbox_series::Sample {
                    due: d.due,
                    leased: d.leased,
                    dead_letters: d.dead_letters,
                })
            }
        },
        crate::clock::now_ms,
        cancel.clone(),
    )));
    tasks
}

/// Stage 9: the dispatcher, over the operations' handlers, permits and metrics.
fn dispatch(
    config: &ResolvedConfig,
    backend: &Arc<dyn Backend>,
    control: &TriggerControl,
    ops: &Operations,
    identity: String,
) -> Dispatcher {
    let d = &config.dispatcher;
    Dispatcher::start_live(
        backend.clone(),
        control.live().clone(),
        ops.deliver.clone(),
        ops.permits.clone(),
        ops.metrics.clone(),
        DispatcherOptions::default()
            .with_max_in_flight(d.max_in_flight)
            .with_batch(d.batch)
            .with_lease(d.lease)
            .with_poll_interval(d.poll_interval)
            .with_shutdown_grace(d.shutdown_grace)
            .with_process_id(identity)
            .with_span_relationship(config.telemetry.span_relationship),
        control.unknown_version.clone(),
    )
}

/// Stage 10's result: the listener's task, its stop, and the process's life (probes,
/// the gate that answers 503 while stopping).
struct Served {
    server: JoinHandle<std::io::Result<()>>,
    listener_stop: CancellationToken,
    life: Arc<life::Life>,
}

impl Served {
    /// Stage 10: the ingress, admin API, `/metrics`, console and probes go behind one
    /// router; the listener serves it.
    #[allow(clippy::too_many_arguments)]
    fn start(
        config: &ResolvedConfig,
        listener: tokio::net::TcpListener,
        backend: &Arc<dyn Backend>,
        control: &TriggerControl,
        ingress: Arc<Ingress>,
        ops: &Arc<Operations>,
        registration: &Option<RegistrationHandle>,
        cancel: &CancellationToken,
    ) -> Served {
        let metrics = Arc::new(binding_metrics::RuntimeMetrics {
            dispatch: ops.metrics.clone(),
            triggers: control.live().clone(),
            store: backend.clone(),
            breakers: ingress.router.breakers().clone(),
        });
        let limits = config.limits;
        let console = console::routes(
            ops.clone(),
            ingress.clone(),
            config.admin_token.clone(),
            config.telemetry.clone(),
            cancel.child_token(),
        );
        let life = life::Life::new(backend.clone(), registration.clone(), ingress.order.len());
        let app = http::router(http::Surface {
            ingress,
            ops: ops.clone(),
            metrics,
            admin_token: config.admin_token.clone(),
            max_concurrent: limits.max_concurrent_requests,
        })
        .merge(console)
        .layer(axum::middleware::from_fn_with_state(
            life.clone(),
            life::gate,
        ))
        .merge(life::probes(life.clone()));
        let listener_stop = CancellationToken::new();
        let server = tokio::spawn(http::listener::serve(
            listener,
            app,
            limits,
            listener_stop.clone(),
        ));
        Served {
            server,
            listener_stop,
            life,
        }
    }
}
