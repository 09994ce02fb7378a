//! What a source gets from the runtime: [`SourceContext`] (its id, tenant, typed
//! options, current secrets, clock, state and metrics), [`SourceState`] (a small
//! key/value store of its own, in the event store's database) and [`SourceMetrics`]
//! (counters under `/metrics`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use super::metrics::{CustomCounters, SourceMetrics};
use super::rate_limit::{Buckets, RateLimit, RateLimiter};
use crate::error::{Error, Result};
use crate::secret::Secret;

/// Where a source's state lives: the event store's `source_state` table. A trait so
/// this layer names no store; the runtime passes its store.
#[async_trait]
pub(crate) trait StateBackend: Send + Sync + 'static {
    async fn get(&self, source: &str, key: &str) -> Result<Option<String>>;
    async fn put(&self, source: &str, key: &str, value: Option<&str>) -> Result<()>;
    async fn put_if_absent(&self, source: &str, key: &str, value: &str) -> Result<Option<String>>;
    async fn swap(
        &self,
        source: &str,
        key: &str,
        expected: Option<&str>,
        value: &str,
    ) -> Result<bool>;
}

/// A [`StateBackend`] in memory, for sources built outside a runtime (the fuzz
/// targets' and unit tests').
#[derive(Default)]
pub(crate) struct MemoryState(Mutex<BTreeMap<(String, String), String>>);

#[async_trait]
impl StateBackend for MemoryState {
    async fn get(&self, source: &str, key: &str) -> Result<Option<String>> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.get(&(source.to_owned(), key.to_owned())).cloned())
    }

    async fn put(&self, source: &str, key: &str, value: Option<&str>) -> Result<()> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let k = (source.to_owned(), key.to_owned());
        match value {
            Some(v) => map.insert(k, v.to_owned()),
            None => map.remove(&k),
        };
        Ok(())
    }

    async fn put_if_absent(&self, source: &str, key: &str, value: &str) -> Result<Option<String>> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let k = (source.to_owned(), key.to_owned());
        if let Some(v) = map.get(&k) {
            return Ok(Some(v.clone()));
        }
        map.insert(k, value.to_owned());
        Ok(None)
    }

    async fn swap(
        &self,
        source: &str,
        key: &str,
        expected: Option<&str>,
        value: &str,
    ) -> Result<bool> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let k = (source.to_owned(), key.to_owned());
        if map.get(&k).map(String::as_str) != expected {
            return Ok(false);
        }
        map.insert(k, value.to_owned());
        Ok(true)
    }
}

/// A source's own small, durable key/value state (a captured token, a subscription
/// id, a last-seen marker), scoped to the source and shared by every runtime process
/// on the same store. Keys starting with `switchboard.` are the runtime's (a poll or
/// stream source's cursor is `switchboard.cursor`, written with its events).
///
/// Clones share one [`generation`](Self::generation), which every write through any
/// of them moves: a source that caches a value can tell when the operator (the admin
/// API writes through the same handle) changed it under it.
#[derive(Clone)]
pub struct SourceState {
    source: Arc<str>,
    backend: Arc<dyn StateBackend>,
    generation: Arc<AtomicU64>,
}

impl std::fmt::Debug for SourceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceState")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl SourceState {
    pub(crate) fn new(source: &str, backend: Arc<dyn StateBackend>) -> SourceState {
        SourceState {
            source: source.into(),
            backend,
            generation: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The stored value of `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<String>> {
        self.backend.get(&self.source, key).await
    }

    /// Stores (`Some`) or deletes (`None`) `key`'s value, durably.
    pub async fn put(&self, key: &str, value: Option<&str>) -> Result<()> {
        let done = self.backend.put(&self.source, key, value).await;
        self.generation.fetch_add(1, Ordering::AcqRel);
        done
    }

    /// Stores `value` unless `key` already has one, atomically across processes;
    /// returns the value already stored, or `None` when this one was written.
    pub async fn put_if_absent(&self, key: &str, value: &str) -> Result<Option<String>> {
        let done = self.backend.put_if_absent(&self.source, key, value).await;
        self.generation.fetch_add(1, Ordering::AcqRel);
        done
    }

    /// Compare-and-set: stores `value` only if `key` holds `expected` (`None`: no
    /// value), atomically across processes; true when it wrote. For leases and
    /// counters that several processes move.
    pub async fn swap(&self, key: &str, expected: Option<&str>, value: &str) -> Result<bool> {
        let done = self.backend.swap(&self.source, key, expected, value).await;
        self.generation.fetch_add(1, Ordering::AcqRel);
        done
    }

    /// How many writes went through this state's handles in this process.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// A source's secrets as last read: at start, and again at every reload (SIGHUP),
/// so a rotated secret takes effect without a restart.
#[derive(Clone, Default)]
pub(crate) struct SourceSecrets(Arc<RwLock<Arc<[Secret]>>>);

impl SourceSecrets {
    pub(crate) fn new(secrets: Vec<Secret>) -> SourceSecrets {
        SourceSecrets(Arc::new(RwLock::new(secrets.into())))
    }

    pub(crate) fn current(&self) -> Arc<[Secret]> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn replace(&self, secrets: Vec<Secret>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = secrets.into();
    }
}

/// What the runtime builds a [`SourceContext`] from.
pub(crate) struct ContextParts {
    pub(crate) source: String,
    pub(crate) provider: String,
    pub(crate) tenant: String,
    pub(crate) options: toml::Table,
    pub(crate) secrets: SourceSecrets,
    pub(crate) state: Arc<dyn StateBackend>,
    pub(crate) counters: Arc<CustomCounters>,
    pub(crate) clock: fn() -> i64,
    /// The outbound calls' limit and wait, and the runtime's shared buckets.
    pub(crate) outbound: (Option<RateLimit>, std::time::Duration, Buckets),
}

/// Everything a source gets from the runtime, given to
/// [`InboundConnector::init`](crate::InboundConnector::init); cheap to clone, so a
/// source keeps one.
#[derive(Clone)]
pub struct SourceContext {
    inner: Arc<Inner>,
}

struct Inner {
    source: String,
    provider: String,
    tenant: String,
    options: toml::Table,
    secrets: SourceSecrets,
    state: SourceState,
    metrics: SourceMetrics,
    limiter: RateLimiter,
    clock: fn() -> i64,
}

impl std::fmt::Debug for SourceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceContext")
            .field("source", &self.inner.source)
            .field("provider", &self.inner.provider)
            .field("tenant", &self.inner.tenant)
            .finish_non_exhaustive()
    }
}

impl SourceContext {
    /// A context for `spec` outside a runtime: state in memory, the wall clock.
    #[allow(dead_code)]
    pub(crate) fn detached(
        source: &str,
        provider: &str,
        tenant: &str,
        options: toml::Table,
        secrets: Vec<Secret>,
    ) -> SourceContext {
        SourceContext::new(ContextParts {
            source: source.into(),
            provider: provider.into(),
            tenant: tenant.into(),
            options,
            secrets: SourceSecrets::new(secrets),
            state: Arc::new(MemoryState::default()),
            counters: Arc::default(),
            clock: crate::clock::now_ms,
            outbound: (None, std::time::Duration::ZERO, Arc::default()),
        })
    }

    pub(crate) fn new(parts: ContextParts) -> SourceContext {
        let state = SourceState::new(&parts.source, parts.state);
        let metrics = SourceMetrics::new(&parts.source, parts.counters);
        let (limit, max_wait, buckets) = parts.outbound;
        let limiter = RateLimiter::new(
            &parts.provider,
            limit,
            max_wait,
            buckets,
            Some(metrics.clone()),
        );
        SourceContext {
            inner: Arc::new(Inner {
                source: parts.source,
                provider: parts.provider,
                tenant: parts.tenant,
                options: parts.options,
                secrets: parts.secrets,
                state,
                metrics,
                limiter,
                clock: parts.clock,
            }),
        }
    }

    /// The source's id: its `[[sources]]` `id`, the path segment of `/hooks/{id}` and
    /// the instance of its registration.
    pub fn source_id(&self) -> &str {
        &self.inner.source
    }

    /// The provider id it was configured with.
    pub fn provider(&self) -> &str {
        &self.inner.provider
    }

    /// The tenant its events belong to.
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }

    /// The source's own options (every key of its `[[sources]]` table that the
    /// runtime does not take itself) as `T`. Use `#[serde(deny_unknown_fields)]` on
    /// `T` so a misspelt option is an error; the error names the source and the
    /// option.
    pub fn options<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(toml::Value::Table(self.inner.options.clone())).map_err(|e| {
            let text = e.to_string();
            let text = text.trim_end();
            // serde names an unknown key as "unknown field `x`, expected …": say it in
            // the configuration's words.
            match text
                .strip_prefix("unknown field `")
                .and_then(|r| r.split_once('`'))
            {
                Some((name, rest)) => self.invalid(&format!(
                    "option {name} does not apply to provider {}{}",
                    self.inner.provider,
                    rest.trim_start_matches(',')
                        .trim()
                        .strip_prefix("expected ")
                        .map(|x| format!("; its options are {x}"))
                        .unwrap_or_else(|| "; it takes no options".into())
                )),
                None => self.invalid(text),
            }
        })
    }

    /// The names of the options given, for a connector that reads them one by one.
    pub fn option_names(&self) -> Vec<&str> {
        self.inner.options.keys().map(String::as_str).collect()
    }

    /// A configuration error about this source: `source "id" (provider p): {what}`.
    /// For checks of its own in `init` (`ctx.invalid("option schedule: …")`).
    pub fn invalid(&self, what: &str) -> Error {
        Error::Config(format!(
            "source {:?} (provider {}): {what}",
            self.inner.source, self.inner.provider
        ))
    }

    /// The source's secrets (`secret_env`), as of the last start or reload: read them
    /// at each use rather than keeping a copy, so a rotation applies.
    pub fn secrets(&self) -> Arc<[Secret]> {
        self.inner.secrets.current()
    }

    /// A secret from the environment variable `name` (one an option named, such as
    /// an API token's `api_token_env`): an unset or empty variable is a
    /// configuration error naming the source and the variable, never a value.
    pub fn env_secret(&self, name: &str) -> Result<Secret> {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Secret::new)
            .ok_or_else(|| self.invalid(&format!("{name} is unset or empty")))
    }

    /// The runtime's clock, Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        (self.inner.clock)()
    }

    /// The source's durable key/value state.
    pub fn state(&self) -> &SourceState {
        &self.inner.state
    }

    /// The source's counters.
    pub fn metrics(&self) -> &SourceMetrics {
        &self.inner.metrics
    }

    /// The rate limiter of the source's outbound calls. The runtime takes a token
    /// keyed by the source id before each capability call; a connector whose API
    /// limits per account or token takes more with keys of its own
    /// (`ctx.limiter().acquire(&installation_id).await?`).
    pub fn limiter(&self) -> &RateLimiter {
        &self.inner.limiter
    }
}
