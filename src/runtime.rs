//! The ingest runtime: one HTTP listener (ingress + admin API), the event store with
//! its group commit, a task per cron source, and the sweeper that expires dedupe
//! claims and old audit rows. Ingress and the cron sources share the configuration's
//! trigger registry and write each event's outbox rows in the event's transaction.
//! [`Runtime::start`] wires them from a [`ResolvedConfig`]; [`Runtime::shutdown`] stops
//! accepting, lets in-flight requests finish (their writes commit before they are
//! answered), and ends every task.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::store::{now_ms, open_backend, redact_url, Store};
use crate::webhooks::config::{ResolvedConfig, Rule};
use crate::webhooks::server::{router, Ingress};
use crate::webhooks::ticker::{self, Ticker};

/// A running ingest runtime.
pub struct Runtime {
    addr: SocketAddr,
    store: Store,
    cancel: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Opens the store (running migrations), binds the listener and starts every task.
    /// Fails with a clear error when the store cannot be opened or the address is
    /// taken; nothing is left running on failure.
    pub async fn start(config: ResolvedConfig) -> Result<Runtime> {
        let backend = open_backend(&config.store, &config.store_options).await?;
        tracing::info!(store = %redact_url(&config.store), backend = backend.name(), "store open");
        let store = Store::new(backend);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", config.listen)))?;
        let addr = listener.local_addr()?;
        // Everything fallible comes before the first task is spawned, so a failed start
        // leaves nothing running.
        let cron: Vec<_> = config
            .sources
            .iter()
            .filter(|s| matches!(s.rule, Rule::Cron(_)))
            .cloned()
            .collect();
        let ingress = Arc::new(
            Ingress::new(
                config.sources,
                config.triggers,
                store.clone(),
                config.admin_token,
            )
            .await?,
        );
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        for spec in cron {
            if let Rule::Cron(rule) = &spec.rule {
                let ticker = Ticker {
                    rule: rule.clone(),
                    spec,
                    store: store.clone(),
                    router: ingress.router.clone(),
                };
                tasks.push(tokio::spawn(ticker::run(ticker, cancel.clone())));
            }
        }
        tasks.push(tokio::spawn(sweeper(
            store.clone(),
            config.rejection_retention_ms,
            config.sweep_interval,
            cancel.clone(),
        )));
        let app = router(ingress);
        let stop = cancel.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        });
        tracing::info!(%addr, "ingest runtime listening");
        Ok(Runtime {
            addr,
            store,
            cancel,
            server,
            tasks,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store, for reads (tests, embedding applications).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A token that stops the runtime when cancelled (e.g. from a signal handler).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Runs until the shutdown token is cancelled, then shuts down.
    pub async fn wait(self) -> Result<()> {
        self.cancel.cancelled().await;
        self.shutdown().await
    }

    /// Stops accepting, finishes in-flight requests and ends every task.
    pub async fn shutdown(self) -> Result<()> {
        self.cancel.cancel();
        let served = self
            .server
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        for t in self.tasks {
            let _ = t.await;
        }
        served.map_err(Error::Io)
    }
}

async fn sweeper(
    store: Store,
    rejection_retention_ms: i64,
    every: std::time::Duration,
    cancel: CancellationToken,
) {
    loop {
        let now = now_ms();
        match store
            .backend()
            .sweep(now, now - rejection_retention_ms)
            .await
        {
            Ok(s) if s.claims + s.rejections > 0 => {
                tracing::info!(
                    claims = s.claims,
                    rejections = s.rejections,
                    "swept expired dedupe claims and old audit rows"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweep failed; will retry next period"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
