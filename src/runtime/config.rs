//! `switchboard.toml`: the runtime's listener, store and sources.
//!
//! Parsing ([`RuntimeConfig::from_toml`]) checks shape; [`RuntimeConfig::resolve`]
//! checks meaning (unique ids, required options per provider) and reads the secrets
//! from the environment variables the file names, so a secret never sits in the file.
//! Errors name the source and the option, never a secret's value.
//!
//! ```toml
//! listen = "127.0.0.1:8787"
//! store = "sqlite:./switchboard-data/events.db"   # or a postgres:// URL
//! process_id = "runtime-1"   # default: host name + listen address
//!
//! [[sources]]
//! id = "github-main"
//! provider = "github"
//! secret_env = ["GITHUB_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET_OLD"]  # any one verifies
//! rate_limit = { per_second = 50, burst = 200 }
//!
//! [[sources]]
//! id = "nightly"
//! provider = "cron"
//! schedule = "0 3 * * *"
//! timezone = "Europe/Berlin"
//! catch_up = "latest"
//! ```
//!
//! The deliver half (`[gateway]`, `[dispatcher]`, `event_retention`) is in [`deliver`];
//! `[outbound]` (egress policy, response cap, breaker of outbound HTTP) in [`outbound`];
//! `[[triggers]]` and `[[queues]]` in [`crate::triggers::config`]; the deploy check
//! (`switchboard serve --check`) in `check`; durations
//! (`"30s"`, `"7d"`) are read by [`crate::duration`].

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::duration::secs_to_ms;
use crate::error::{Error, Result};
use crate::ingress::limits::{self, IngressLimits};
use crate::ingress::source::{SourceConfig, SourceSpec, DEFAULT_MAX_BODY_BYTES};
use crate::secret::Secret;
use crate::store::body_codec::BodyCompression;
use crate::triggers::config::{QueueConfig, QueueSpec, TriggerConfig};
use crate::triggers::registry::TriggerRegistry;

mod check;
pub(crate) mod deliver;
pub(crate) mod outbound;
pub(crate) mod telemetry;

pub(crate) use crate::duration::DurationSetting;
pub(crate) use deliver::{
    DispatcherConfig, DispatcherSettings, GatewaySettings, RuntimeGatewayConfig,
};

/// Default audit retention for rejections: 30 days.
pub(crate) const DEFAULT_REJECTION_RETENTION_SECS: i64 = 30 * 24 * 3600;
/// Default listener: loopback, so a fresh install exposes nothing.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// Default retention of events, dead letters and run records: 7 days, long enough to
/// inspect and replay a weekend's failures on Monday.
pub(crate) const DEFAULT_EVENT_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 3600);

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Address of the ingress + admin listener. Default `127.0.0.1:8787`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Directory for the default SQLite file. Default `./switchboard-data`.
    pub data_dir: Option<PathBuf>,
    /// `sqlite:PATH` or `postgres://…`. Default `sqlite:{data_dir}/events.db`.
    pub store: Option<StoreUrl>,
    /// Tenant of the sources that name none: stamped on their events, and the tenant
    /// they register under with the gateway. Default: `[gateway] tenant`, so the
    /// sources share the runtime's socket; `default` without a `[gateway]`.
    pub tenant: Option<String>,
    /// This process's stable identity among those sharing the store: stamped on the
    /// outbox rows it claims and the poll leases it takes, so the same process started
    /// again (after a crash or `kill -9`) takes back at once what it held instead of
    /// waiting out its leases. Default: `<host name>/<listen address>` (two processes
    /// on one host cannot listen on one address). Set it when a process may come back
    /// under another host name or port (a container scheduled anew, `listen` on port 0). Two processes given one
    /// identity are a misconfiguration whose worst is a duplicate delivery at a start,
    /// never a lost one (docs/guide/delivery.md, "A restart recognises what it held").
    pub process_id: Option<String>,
    /// Body limit for sources that set none. Default 10 MiB.
    pub max_body_bytes: Option<usize>,
    /// Ingress requests served at once; beyond, 503 + `Retry-After`. Default 1024.
    pub max_concurrent_requests: Option<usize>,
    /// Time a client has to send a request's headers. Default `"10s"`.
    pub header_read_timeout: Option<DurationSetting>,
    /// Time a client has to send a request's body after its headers; beyond, 408 and
    /// the connection is closed. Default `"30s"`.
    pub body_read_timeout: Option<DurationSetting>,
    /// Bytes of writes (bodies, audit rows) that may wait for the group commit;
    /// beyond, ingress answers 503 `overloaded`. Default 64 MiB.
    pub write_queue_max_bytes: Option<usize>,
    /// Environment variable holding a bearer token for `/api/*` and `/metrics`. Unset:
    /// the admin API is open, which is fine on the default loopback listener only.
    pub admin_token_env: Option<String>,
    /// Serve the admin API without a token on a non-loopback listener. Off by default:
    /// ingress must be reachable by providers, and the admin API on the same listener
    /// shows stored bodies and a captured Notion token, so a public listener without
    /// `admin_token_env` is refused at start unless this says it is intended (say,
    /// behind a proxy that only forwards `/hooks/*`).
    #[serde(default)]
    pub allow_open_admin: bool,
    /// SQLite sync mode: `full` (default) or `normal`.
    pub sqlite_synchronous: Option<String>,
    /// SQLite size cap in bytes; past it writes fail and ingress answers 503.
    pub sqlite_max_bytes: Option<u64>,
    /// How the SQLite store keeps event bodies: `"none"` (default: as received) or
    /// `"zstd"` (compressed when at least `sqlite_body_compression_min_bytes` and it
    /// saves an eighth: about half the disk for JSON, at some CPU per event; see
    /// `benches/ingest.rs`). Readers always get the received bytes back.
    pub sqlite_body_compression: Option<String>,
    /// Smallest body the SQLite store compresses with `sqlite_body_compression =
    /// "zstd"`. Default 512.
    pub sqlite_body_compression_min_bytes: Option<usize>,
    /// PostgreSQL pool size. Default 8.
    pub pool_size: Option<usize>,
    /// How long rejection audit rows are kept. Default 30 days.
    pub rejection_retention_secs: Option<i64>,
    /// How often expired claims and old audit rows are swept. Default 3600.
    pub sweep_interval_secs: Option<u64>,
    /// The sources.
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
    /// How long events, dead letters and run records are kept. Default
    /// 7 days.
    pub event_retention: Option<DurationSetting>,
    /// The runtime's own gateway registration; required by `invoke` handlers.
    pub gateway: Option<RuntimeGatewayConfig>,
    /// How the outbox is drained.
    #[serde(default)]
    pub dispatcher: DispatcherConfig,
    /// Queues, for `queue` handlers and their consumers.
    #[serde(default)]
    pub queues: Vec<QueueConfig>,
    /// Trigger bindings: which events go to which handler.
    #[serde(default)]
    pub triggers: Vec<TriggerConfig>,
    /// Rules for outbound HTTP (`http` handlers): egress allow-list, response cap,
    /// per-endpoint breaker.
    #[serde(default)]
    pub outbound: outbound::OutboundConfig,
    /// How spans relate and where the console links trace ids (`[telemetry]`).
    #[serde(default)]
    pub telemetry: telemetry::TelemetryConfig,
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("valid default")
}

/// A store URL. Its `Debug` hides any password (a PostgreSQL URL may carry one), so
/// printing a config never leaks it; it reads as a `&str` everywhere else.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct StoreUrl(String);

impl StoreUrl {
    /// Wraps a URL.
    pub fn new(url: impl Into<String>) -> StoreUrl {
        StoreUrl(url.into())
    }
}

impl std::ops::Deref for StoreUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", crate::store::redact_url(&self.0))
    }
}

/// The whole configuration, resolved.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ResolvedConfig {
    /// Listener address.
    pub listen: SocketAddr,
    /// The listener's bounds on clients.
    pub limits: IngressLimits,
    /// Store URL.
    pub store: StoreUrl,
    /// Store tuning.
    pub store_options: crate::store::StoreOptions,
    /// The process identity, as configured (`None`: derived at start from the host
    /// name and the listener, see [`RuntimeConfig::process_id`]).
    pub process_id: Option<String>,
    /// Admin bearer token, if any.
    pub admin_token: Option<Secret>,
    /// Rejection audit retention, ms.
    pub rejection_retention_ms: i64,
    /// Sweep period.
    pub sweep_interval: std::time::Duration,
    /// Sources, in file order.
    pub sources: Vec<SourceSpec>,
    /// The trigger bindings, shared by ingress, the cron sources and the dispatcher.
    pub triggers: std::sync::Arc<TriggerRegistry>,
    /// Queues: declared ones in file order, then the ones queue handlers name.
    pub queues: Vec<QueueSpec>,
    /// The runtime's gateway registration, if configured.
    pub gateway: Option<GatewaySettings>,
    /// Dispatcher settings.
    pub dispatcher: DispatcherSettings,
    /// `[telemetry]`, resolved.
    pub(crate) telemetry: telemetry::TelemetrySettings,
    /// Retention of events, dead letters and run records, ms.
    pub event_retention_ms: i64,
    /// Outbound HTTP settings and the `http` handlers' signing secrets.
    pub outbound: crate::outbound::http::OutboundSettings,
}

impl RuntimeConfig {
    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<RuntimeConfig> {
        toml::from_str(text).map_err(|e| Error::Config(format!("switchboard.toml: {e}")))
    }

    /// Reads and parses a file.
    pub fn from_file(path: &std::path::Path) -> Result<RuntimeConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| match e {
            Error::Config(m) => {
                Error::Config(m.replace("switchboard.toml", &path.display().to_string()))
            }
            other => other,
        })
    }

    /// Resolves against the process environment.
    pub fn resolve(&self) -> Result<ResolvedConfig> {
        self.resolve_with(|name| std::env::var(name).ok())
    }

    /// `sqlite_body_compression` and its threshold, checked.
    fn body_compression(&self) -> Result<BodyCompression> {
        let min_bytes = self
            .sqlite_body_compression_min_bytes
            .unwrap_or(crate::store::body_codec::DEFAULT_MIN_BYTES);
        match self.sqlite_body_compression.as_deref() {
            Some("zstd") => Ok(BodyCompression::Zstd {
                min_bytes,
                level: 1,
            }),
            None | Some("none") if self.sqlite_body_compression_min_bytes.is_none() => {
                Ok(BodyCompression::None)
            }
            None | Some("none") => Err(Error::Config(
                "sqlite_body_compression_min_bytes is set but sqlite_body_compression = \"none\"; remove one".into(),
            )),
            Some(other) => Err(Error::Config(format!(
                "sqlite_body_compression = {other:?}: expected \"zstd\" or \"none\""
            ))),
        }
    }

    /// `store`, or the SQLite file in `data_dir` when it names none.
    pub(crate) fn store_url(&self) -> StoreUrl {
        match &self.store {
            Some(s) => s.clone(),
            None => {
                let data_dir = self
                    .data_dir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("switchboard-data"));
                StoreUrl::new(format!("sqlite:{}", data_dir.join("events.db").display()))
            }
        }
    }

    /// Resolves, reading environment variables through `env` (tests pass a map).
    pub fn resolve_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<ResolvedConfig> {
        let store = self.store_url();
        let synchronous = match self.sqlite_synchronous.as_deref() {
            None | Some("full") => crate::store::sqlite::Synchronous::Full,
            Some("normal") => crate::store::sqlite::Synchronous::Normal,
            Some(other) => {
                return Err(Error::Config(format!(
                    "sqlite_synchronous = {other:?}: expected \"full\" or \"normal\""
                )))
            }
        };
        let mut store_options = crate::store::StoreOptions {
            max_db_bytes: self.sqlite_max_bytes,
            synchronous,
            body_compression: self.body_compression()?,
            ..Default::default()
        };
        if let Some(n) = self.write_queue_max_bytes {
            if n == 0 {
                return Err(Error::Config(
                    "write_queue_max_bytes must be at least 1".into(),
                ));
            }
            store_options.write_queue_max_bytes = n;
        }
        if let Some(n) = self.pool_size {
            store_options.pool_size = n.max(1);
        }
        let admin_token = match &self.admin_token_env {
            None => None,
            Some(var) => Some(Secret::new(env(var).filter(|v| !v.is_empty()).ok_or_else(
                || {
                    Error::Config(format!(
                        "admin_token_env names {var}, which is unset or empty"
                    ))
                },
            )?)),
        };
        if admin_token.is_none() && !self.listen.ip().is_loopback() && !self.allow_open_admin {
            return Err(Error::Config(format!(
                "listen = {} is not a loopback address and no admin_token_env is set: the admin API would be open to anyone who can reach ingress; set admin_token_env, or allow_open_admin = true if a proxy guards /api and /metrics",
                self.listen
            )));
        }
        let gateway = self.gateway.as_ref().map(|g| g.resolve(&env)).transpose()?;
        // Each source is also a registration on the gateway, under its tenant, and a
        // tenant is a socket: the runtime's own tenant as the default keeps them all
        // on the runtime's one socket (and their events under the tenant that
        // `POST /api/v1/events` stamps).
        let tenant = match (&self.tenant, &gateway) {
            (Some(t), _) => t.clone(),
            (None, Some(g)) => g.tenant.clone(),
            (None, None) => "default".into(),
        };
        let max_body = self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        let mut seen = HashSet::new();
        let sources = self
            .sources
            .iter()
            .map(|s| {
                if !seen.insert(s.id.clone()) {
                    return Err(Error::Config(format!("two sources have the id {:?}", s.id)));
                }
                s.resolve(&tenant, max_body, &env)
            })
            .collect::<Result<Vec<_>>>()?;
        let source_ids = sources.iter().map(|s| s.id.as_str()).collect();
        let known = crate::triggers::config::Known {
            sources: Some(&source_ids),
            gateway: gateway.is_some(),
        };
        let (triggers, queues) =
            crate::triggers::config::resolve(&self.triggers, &self.queues, &known)?;
        let outbound = self.outbound.resolve(&triggers, &env)?;
        let event_retention = crate::duration::duration_or(
            self.event_retention.as_ref(),
            DEFAULT_EVENT_RETENTION,
            true,
        )
        .map_err(|e| Error::Config(format!("event_retention: {e}")))?;
        Ok(ResolvedConfig {
            listen: self.listen,
            limits: limits::resolve(
                self.max_concurrent_requests,
                self.header_read_timeout.as_ref(),
                self.body_read_timeout.as_ref(),
            )?,
            store,
            store_options,
            process_id: self
                .process_id
                .as_deref()
                .map(crate::runtime::process_id::checked)
                .transpose()?,
            admin_token,
            rejection_retention_ms: secs_to_ms(
                "rejection_retention_secs",
                self.rejection_retention_secs
                    .unwrap_or(DEFAULT_REJECTION_RETENTION_SECS),
            )?,
            sweep_interval: std::time::Duration::from_secs(
                self.sweep_interval_secs.unwrap_or(3600).max(1),
            ),
            triggers: std::sync::Arc::new(triggers),
            queues,
            gateway,
            dispatcher: self.dispatcher.resolve()?,
            telemetry: self.telemetry.resolve()?,
            event_retention_ms: i64::try_from(event_retention.as_millis()).unwrap_or(i64::MAX),
            sources,
            outbound,
        })
    }
}

#[cfg(test)]
mod binding_tests;
#[cfg(test)]
mod example_tests;
#[cfg(test)]
mod tests;
