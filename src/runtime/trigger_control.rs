//! The lifecycle's I/O half: every change of the bindings (a reload, a run-time
//! registration, a pause) is decided by [`Lifecycle`] on a copy, written to the store
//! in one transaction, and only then swapped in ([`LiveTriggers::replace`]); a refused
//! or failed change leaves everything as it was.
//!
//! A background task ([`TriggerControl::run`]) keeps the state true:
//! - it follows other processes on the same database: when the log's newest entry is
//!   not the one this process last saw (checked every [`TICK`], and at once on
//!   PostgreSQL's `switchboard_triggers` notification or when the dispatcher claims a
//!   row of a version it does not know), it rebuilds the lifecycle from the store;
//! - it terminates draining versions once the store holds none of their rows (an
//!   existence check per draining version, [`VersionStore::with_rows`]);
//! - at start, and when the dispatcher meets an unknown version, it dead-letters rows
//!   whose version has no record at all ([`VersionStore::strand`]):
//!   rows enqueued before versions were recorded under a definition no longer
//!   configured. Every other row keeps its version's record, so it is drained under
//!   the definition it was enqueued for, whatever the configuration says now.
//!
//! One change at a time: a mutex orders them, so two admin requests cannot decide on
//! the same old state.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::triggers::binding::{Binding, Handler};
use crate::triggers::config::{rebuild, TriggerConfig};
use crate::triggers::lifecycle::Lifecycle;
use crate::triggers::live::LiveTriggers;
use crate::triggers::versions::{LifecycleCommit, LifecycleEntry, VersionRecord, VersionStore};

/// How often the control task looks for other processes' changes and for draining
/// versions that are done.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// What a binding may name, checked at reload and run-time registration the way the
/// configuration file is checked at start.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// Configured source ids.
    pub(crate) sources: HashSet<String>,
    /// Whether a `[gateway]` is configured (invoke handlers need one).
    pub(crate) gateway: bool,
    /// Local connector names (`None`: any; a test deliverer stands in for all).
    pub(crate) local: Option<HashSet<String>>,
    /// Queues this runtime has (queues change with a restart).
    pub(crate) queues: HashSet<String>,
}

impl Scope {
    /// Why `binding` cannot run in this runtime, if it cannot.
    fn check(&self, binding: &Binding) -> Result<()> {
        let bad =
            |what: String| Error::Config(format!("trigger {:?}: handler: {what}", binding.id));
        match &binding.handler {
            Handler::Local { connector, .. }
                if self.local.as_ref().is_some_and(|l| !l.contains(connector)) =>
            {
                Err(bad(format!("local = {connector:?}: no connector is registered under that name")))
            }
            Handler::Queue { queue } if !self.queues.contains(queue) => Err(bad(format!(
                "queue = {queue:?} is not a queue of this runtime; queues are declared at start (restart to add one)"
            ))),
            _ => Ok(()),
        }
    }
}

/// Changes the bindings, through the store.
pub(crate) struct TriggerControl {
    live: Arc<LiveTriggers>,
    store: Arc<dyn VersionStore>,
    process: String,
    /// The configuration file `[[triggers]]` are reloaded from, if any.
    config_path: Option<PathBuf>,
    scope: Scope,
    /// The log's newest `seq` this process's state reflects; held across a change.
    seen: tokio::sync::Mutex<i64>,
    /// Manifest ids in file order (routing order after a restore).
    manifest_order: std::sync::Mutex<Vec<String>>,
    /// Notified by the dispatcher when a claimed row names an unknown version.
    pub(crate) unknown_version: Arc<Notify>,
    /// The sources, whose secrets a reload reads again (set once ingress exists).
    pub(crate) sources: std::sync::OnceLock<Arc<crate::ingress::state::Ingress>>,
    /// The outbound client, whose `http` handlers' secrets a reload reads again.
    pub(crate) http: std::sync::OnceLock<Arc<crate::outbound::http::HttpDelivery>>,
}

impl std::fmt::Debug for TriggerControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerControl")
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

/// This process's name in the log: `host:pid`.
pub(crate) fn process_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

impl TriggerControl {
    /// Loads the versions from the store, applies the configuration's bindings
    /// (`manifest`, in file order) as a reload would, and dead-letters rows of versions
    /// nobody recorded. Fails when the store cannot be read or written.
    pub(crate) async fn start(
        store: Arc<dyn VersionStore>,
        manifest: Vec<Binding>,
        config_path: Option<PathBuf>,
        scope: Scope,
    ) -> Result<TriggerControl> {
        let process = process_name();
        let order = manifest.iter().map(|b| b.id.clone()).collect();
        let control = TriggerControl {
            live: Arc::new(LiveTriggers::new(Lifecycle::new(process.clone()))),
            store,
            process,
            config_path,
            scope,
            seen: tokio::sync::Mutex::new(-1),
            manifest_order: std::sync::Mutex::new(order),
            unknown_version: Arc::default(),
            sources: std::sync::OnceLock::new(),
            http: std::sync::OnceLock::new(),
        };
        control
            .change(|l, now| l.start(manifest.clone(), now))
            .await?;
        control.strand().await;
        Ok(control)
    }

    /// The bindings in force, for the parts that route and deliver.
    pub(crate) fn live(&self) -> &Arc<LiveTriggers> {
        &self.live
    }

    /// Runs `decide` on a copy of the state brought up to date with the store, writes
    /// what it returns, and swaps the copy in. A conflict (another process recorded a
    /// version at the same moment) is decided once more on the fresh state.
    async fn change(
        &self,
        decide: impl Fn(&mut Lifecycle, i64) -> Result<LifecycleCommit>,
    ) -> Result<LifecycleCommit> {
        let mut seen = self.seen.lock().await;
        for attempt in 0..2 {
            let mut next = self.fresh(&mut seen).await?;
            let commit = decide(&mut next, now_ms())?;
            if commit.is_empty() {
                return Ok(commit);
            }
            match self.store.commit_lifecycle(&commit).await {
                Ok(seq) => {
                    *seen = seq;
                    self.live.replace(next);
                    return Ok(commit);
                }
                Err(Error::Conflict(m)) if attempt == 0 => {
                    tracing::info!(conflict = %m, "another process changed the bindings at the same time; deciding again");
                    *seen = -1;
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// The current state, rebuilt from the store first if another process wrote to the
    /// log since `seen`.
    async fn fresh(&self, seen: &mut i64) -> Result<Lifecycle> {
        let seq = self.store.lifecycle_seq().await?;
        if seq != *seen {
            let restored = self.restore().await?;
            self.live.replace(restored);
            *seen = seq;
        }
        Ok((*self.live.current()).clone())
    }

    async fn restore(&self) -> Result<Lifecycle> {
        let records = self.store.versions().await?;
        let log = self.store.lifecycle().await?;
        let pauses = self.store.pauses().await?;
        let built = records
            .into_iter()
            .map(|r| {
                let b = match rebuild(&r.definition) {
                    Ok(b) if b.fingerprint == r.fingerprint => Some(Arc::new(b)),
                    Ok(_) => {
                        tracing::warn!(binding = %r.binding_id, version = r.version, "a stored definition builds to another fingerprint; its rows cannot run here");
                        None
                    }
                    Err(e) => {
                        tracing::warn!(binding = %r.binding_id, version = r.version, error = %e, "a stored definition does not build; its rows cannot run here");
                        None
                    }
                };
                (r, b)
            })
            .collect();
        let order = self
            .manifest_order
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(Lifecycle::restore(
            self.process.clone(),
            built,
            &log,
            &pauses,
            &order,
        ))
    }

    /// Brings the state up to date with other processes' changes.
    pub(crate) async fn sync(&self) -> Result<()> {
        let mut seen = self.seen.lock().await;
        self.fresh(&mut seen).await.map(drop)
    }

    /// Re-reads the configuration file and applies its `[[triggers]]`. Other sections
    /// are not reloaded (they need a restart). An invalid file changes nothing and the
    /// error says why, as at start.
    pub(crate) async fn reload(&self) -> Result<LifecycleCommit> {
        let Some(path) = &self.config_path else {
            return Err(Error::Config(
                "this runtime was started without a configuration file; there is nothing to reload (use the admin API's run-time bindings instead)".into(),
            ));
        };
        let config = crate::runtime::config::RuntimeConfig::from_file(path)?.resolve()?;
        let commit = self
            .reload_with(config.triggers.to_vec_except(None))
            .await?;
        // The sources' secrets (from the environment and from files) were read again
        // by `resolve`: a rotated secret applies from here, with no restart.
        if let Some(ingress) = self.sources.get() {
            ingress.refresh_secrets(&config.sources);
        }
        // So were the `http` handlers' (`[outbound]` itself needs a restart).
        if let Some(http) = self.http.get() {
            http.refresh_secrets(&config.outbound);
        }
        Ok(commit)
    }

    /// Applies `manifest` as the configuration's `[[triggers]]`.
    pub(crate) async fn reload_with(&self, manifest: Vec<Binding>) -> Result<LifecycleCommit> {
        for b in &manifest {
            self.scope.check(b)?;
        }
        *self
            .manifest_order
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = manifest.iter().map(|b| b.id.clone()).collect();
        // No stranded-row sweep here: a reload records versions and never deletes one,
        // so it cannot strand a row (the sweep runs at start and when the dispatcher
        // meets a version nobody recorded).
        self.change(|l, now| l.reload(manifest.clone(), now)).await
    }

    /// Registers (or, with `replace`, replaces) a dynamic binding from its
    /// `[[triggers]]` table, checked as the configuration file's are.
    pub(crate) async fn register(
        &self,
        table: &TriggerConfig,
        replace: bool,
    ) -> Result<LifecycleCommit> {
        let sources: HashSet<&str> = self.scope.sources.iter().map(String::as_str).collect();
        let binding = table.resolve_one(&sources, self.scope.gateway)?;
        self.scope.check(&binding)?;
        self.change(|l, now| l.register(binding.clone(), replace, now))
            .await
    }

    /// Deregisters a dynamic binding.
    pub(crate) async fn deregister(&self, id: &str) -> Result<LifecycleCommit> {
        self.change(|l, now| l.deregister(id, now)).await
    }

    /// Drains a binding on its own.
    pub(crate) async fn drain(&self, id: &str) -> Result<LifecycleCommit> {
        self.change(|l, now| l.drain(id, now)).await
    }

    /// Pauses or resumes a binding.
    pub(crate) async fn set_paused(&self, id: &str, paused: bool) -> Result<LifecycleCommit> {
        self.change(|l, now| l.set_paused(id, paused, now)).await
    }

    /// Pins or unpins a version. Pinning one that has left memory brings it back
    /// from its stored definition ([`TriggerControl::recall`]).
    pub(crate) async fn set_pinned(
        &self,
        id: &str,
        version: u32,
        pinned: bool,
    ) -> Result<LifecycleCommit> {
        let reason = if pinned {
            "pinned by an operator"
        } else {
            "unpinned by an operator"
        };
        if pinned && self.live.current().version(id, version).is_none() {
            return self.recall(id, version, reason).await;
        }
        self.change(|l, now| l.set_pinned(id, version, pinned, reason, now))
            .await
    }

    /// Brings version `number` of `id` back into memory from the definition the store
    /// keeps of it (`trigger_versions`), pinned, so rows enqueued under it run in
    /// every process; pins it if it is in memory already. Fails with
    /// [`Error::NotFound`] when no such version was ever recorded and with
    /// [`Error::Config`] when its stored definition no longer builds to the same
    /// version (written by a build that understood more).
    pub(crate) async fn recall(
        &self,
        id: &str,
        number: u32,
        reason: &str,
    ) -> Result<LifecycleCommit> {
        let (record, binding) = self.stored(id, number).await?;
        self.change(|l, now| l.recall(record.clone(), binding.clone(), reason, now))
            .await
    }

    /// Version `number` of `id` as the store keeps it, built, changing nothing (a
    /// dry run reads a version this way). Errors as [`TriggerControl::recall`]'s.
    pub(crate) async fn stored(
        &self,
        id: &str,
        number: u32,
    ) -> Result<(VersionRecord, Arc<Binding>)> {
        let name = crate::triggers::lifecycle::label(id, number);
        let record = self
            .store
            .versions()
            .await?
            .into_iter()
            .find(|r| r.binding_id == id && r.version == number)
            .ok_or_else(|| Error::NotFound(format!("{name} was never recorded")))?;
        let mut binding = rebuild(&record.definition).map_err(|e| {
            Error::Config(format!(
                "{name}: its stored definition no longer builds: {e}"
            ))
        })?;
        if binding.fingerprint != record.fingerprint {
            return Err(Error::Config(format!(
                "{name}: its stored definition builds to another fingerprint in this build"
            )));
        }
        binding.version = number;
        Ok((record, Arc::new(binding)))
    }

    /// A binding's lifecycle log, oldest first.
    pub(crate) async fn history(
        &self,
        id: &str,
        after_seq: Option<i64>,
        limit: usize,
    ) -> Result<Vec<LifecycleEntry>> {
        self.store.history(id, after_seq, limit).await
    }

    /// Terminates draining versions that are done.
    async fn settle(&self) -> Result<()> {
        let draining: Vec<(String, String)> = self
            .live
            .current()
            .versions()
            .filter(|v| v.record.state == crate::triggers::versions::VersionState::Draining)
            .map(|v| (v.record.binding_id.clone(), v.record.fingerprint.clone()))
            .collect();
        if draining.is_empty() {
            return Ok(());
        }
        let with_rows: HashSet<(String, String)> =
            self.store.with_rows(&draining).await?.into_iter().collect();
        // Every version asked about gets an answer (0 or 1); one that began draining
        // since is absent and stays as it is.
        let outstanding: HashMap<(String, String), u64> = draining
            .into_iter()
            .map(|v| {
                let left = u64::from(with_rows.contains(&v));
                (v, left)
            })
            .collect();
        self.change(|l, now| Ok(l.observe(&outstanding, now)))
            .await
            .map(drop)
    }

    /// Dead-letters rows whose version has no record; logged, never fatal.
    async fn strand(&self) {
        match self.store.strand(now_ms()).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(rows = n, "dead-lettered outbox rows whose binding version is not recorded (enqueued under a definition this store never recorded)"),
            Err(e) => tracing::warn!(error = %e, "could not look for stranded outbox rows; will try again"),
        }
    }

    /// Follows other processes, terminates drained versions, dead-letters stranded
    /// rows when the dispatcher meets one; until `cancel`.
    pub(crate) async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let wake = self.store.lifecycle_wake();
        loop {
            let unknown = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(TICK) => false,
                _ = async { match &wake { Some(w) => w.notified().await, None => std::future::pending().await } } => false,
                _ = self.unknown_version.notified() => true,
            };
            if let Err(e) = self.sync().await {
                tracing::warn!(error = %e, "could not read the binding versions; will try again");
                continue;
            }
            if unknown {
                self.strand().await;
            }
            if let Err(e) = self.settle().await {
                tracing::warn!(error = %e, "could not terminate drained binding versions; will try again");
            }
        }
    }
}
