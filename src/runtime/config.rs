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
//! `[[triggers]]` and `[[queues]]` in [`crate::triggers::config`]; durations
//! (`"30s"`, `"7d"`) are read by [`crate::duration`].

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::store::body_codec::BodyCompression;
use crate::triggers::config::{QueueConfig, QueueSpec, TriggerConfig};
use crate::triggers::registry::TriggerRegistry;
use crate::webhooks::classify::Provider;
use crate::webhooks::cron::{CatchUp, Schedule};
use crate::webhooks::signature::MacEncoding;

pub(crate) mod deliver;
pub(crate) mod limits;

pub(crate) use crate::duration::DurationSetting;
pub(crate) use deliver::{DispatcherConfig, DispatcherSettings, GatewayConfig, GatewaySettings};
pub(crate) use limits::IngressLimits;

/// Default body limit: 10 MiB. Providers' own caps are lower (GitHub 25 MB is the
/// exception and is truncated by GitHub itself at that size), and a larger body is far
/// more likely a mistake or an attack than an event.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Default dedupe retention: 7 days, longer than any provider's retry schedule
/// (Stripe retries for 3 days, GitHub redeliveries are manual within 3 days).
pub(crate) const DEFAULT_DEDUPE_RETENTION_SECS: i64 = 7 * 24 * 3600;
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
    /// Tenant stamped on events of sources that name none. Default `default`.
    pub tenant: Option<String>,
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
    pub gateway: Option<GatewayConfig>,
    /// How the outbox is drained.
    #[serde(default)]
    pub dispatcher: DispatcherConfig,
    /// Queues, for `queue` handlers and their consumers.
    #[serde(default)]
    pub queues: Vec<QueueConfig>,
    /// Trigger bindings: which events go to which handler.
    #[serde(default)]
    pub triggers: Vec<TriggerConfig>,
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("valid default")
}

/// One or several environment variable names.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(untagged)]
pub enum EnvNames {
    /// None given.
    #[default]
    None,
    /// One variable.
    One(String),
    /// Several (rotation: any one verifies).
    Many(Vec<String>),
}

impl EnvNames {
    fn names(&self) -> Vec<&str> {
        match self {
            EnvNames::None => vec![],
            EnvNames::One(n) => vec![n.as_str()],
            EnvNames::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// A token bucket: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: f64,
    /// Bucket size. Default: one second's worth (at least 1).
    pub burst: Option<f64>,
}

/// One `[[sources]]` table as written. Options that do not apply to the provider are
/// refused by [`RuntimeConfig::resolve`] rather than silently ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SourceConfig {
    /// Path segment of `/hooks/{id}`: letters, digits, `-` and `_`.
    pub id: String,
    /// `github`, `slack`, `linear`, `notion`, `stripe`, `standard_webhooks`,
    /// `generic_hmac` or `cron`.
    pub provider: String,
    /// Environment variable(s) holding the signing secret(s).
    #[serde(default)]
    pub secret_env: EnvNames,
    /// Tenant of this source's events.
    pub tenant: Option<String>,
    /// Signed-timestamp tolerance either way. Defaults: Slack, Stripe, Standard
    /// Webhooks and generic Authorization 300 s; Linear 60 s.
    pub timestamp_tolerance_secs: Option<i64>,
    /// Linear only: extra seconds on top of the 60 s window for clock skew. Default 0.
    pub timestamp_grace_secs: Option<i64>,
    /// How long a dedupe claim lasts. Default 7 days.
    pub dedupe_retention_secs: Option<i64>,
    /// Body limit for this source.
    pub max_body_bytes: Option<usize>,
    /// Per-source rate limit. Default: none.
    pub rate_limit: Option<RateLimit>,
    /// notion: how often a refused delivery may re-read the stored verification token
    /// (another process may have captured or cleared it). Default
    /// `{ per_second = 1, burst = 10 }`.
    pub notion_recheck_limit: Option<RateLimit>,
    /// How many refusals of this source are written to the rejection audit table.
    /// Default `{ per_second = 20, burst = 200 }`; past it, refusals are counted only.
    pub rejection_audit_limit: Option<RateLimit>,
    /// generic_hmac: `header` (default) or `authorization` (the canonical
    /// `Authorization: HMAC-SHA256 timestamp=…,signature=…` form).
    pub scheme: Option<String>,
    /// generic_hmac header scheme: the header carrying the MAC.
    pub header: Option<String>,
    /// generic_hmac header scheme: a prefix before the MAC, e.g. `sha256=`.
    pub prefix: Option<String>,
    /// generic_hmac header scheme: `hex` (default) or `base64`.
    pub encoding: Option<String>,
    /// generic_hmac: header whose value is the dedupe key. Default: SHA-256 of the body.
    pub dedupe_header: Option<String>,
    /// generic_hmac: the event kind, fixed. Default `webhook`.
    pub kind: Option<String>,
    /// generic_hmac: JSON pointer (`/type`) to the kind inside the body; wins over `kind`.
    pub kind_pointer: Option<String>,
    /// generic_hmac: refuse bodies that are not JSON (400). Default true.
    pub require_json: Option<bool>,
    /// cron: the schedule (5 fields, or 6 with seconds first, or `@daily` etc.).
    pub schedule: Option<String>,
    /// cron: IANA time zone. Default `UTC`.
    pub timezone: Option<String>,
    /// cron: `skip` (default), `all` or `latest` for fires missed while down.
    pub catch_up: Option<String>,
    /// cron: a JSON-able table sent as each tick's payload. Default `{}`.
    pub payload: Option<toml::Value>,
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

/// A secret's bytes. Debug and Display never show them.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// The bytes, for MAC computation only.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// How a generic HMAC source is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenericScheme {
    /// MAC of the raw body in a header.
    Header {
        /// Header name.
        header: &'static str,
        /// Prefix before the MAC.
        prefix: String,
        /// Hex or base64.
        encoding: MacEncoding,
    },
    /// The canonical `Authorization` form.
    Authorization,
}

/// A generic HMAC source's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericRule {
    /// Signature scheme.
    pub scheme: GenericScheme,
    /// Header holding the dedupe key, if any.
    pub dedupe_header: Option<String>,
    /// Fixed kind.
    pub kind: String,
    /// JSON pointer to the kind.
    pub kind_pointer: Option<String>,
    /// Whether the body must be JSON.
    pub require_json: bool,
}

/// A cron source's rule.
#[derive(Debug, Clone)]
pub struct CronRule {
    /// Parsed schedule with its zone.
    pub schedule: Schedule,
    /// The schedule as written (shown by the admin API).
    pub expression: String,
    /// Catch-up mode.
    pub catch_up: CatchUp,
    /// Payload of each tick, as JSON text.
    pub payload: String,
}

/// What a source verifies and how.
#[derive(Debug, Clone)]
pub enum Rule {
    /// A built-in provider.
    Provider(Provider),
    /// Generic HMAC.
    Generic(GenericRule),
    /// Cron ticks (no ingress).
    Cron(CronRule),
}

impl Rule {
    /// The provider label stored on events.
    pub fn provider_name(&self) -> &'static str {
        match self {
            Rule::Provider(p) => p.as_str(),
            Rule::Generic(_) => "generic_hmac",
            Rule::Cron(_) => "cron",
        }
    }
}

/// A source ready to serve: options resolved, secrets loaded.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceSpec {
    /// Source id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// The rule.
    pub rule: Rule,
    /// Secrets, in the order configured.
    pub secrets: Vec<Secret>,
    /// Timestamp tolerance in seconds (for rules that check one).
    pub tolerance_s: i64,
    /// How long claims last, ms.
    pub retention_ms: i64,
    /// Body limit.
    pub max_body_bytes: usize,
    /// Rate limit.
    pub rate_limit: Option<RateLimit>,
    /// Notion only: the budget of stored-token re-checks.
    pub notion_recheck_limit: RateLimit,
    /// The budget of rejection audit rows.
    pub rejection_audit_limit: RateLimit,
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
    /// Retention of events, dead letters and run records, ms.
    pub event_retention_ms: i64,
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

    /// Resolves, reading environment variables through `env` (tests pass a map).
    pub fn resolve_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<ResolvedConfig> {
        let data_dir = self
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("switchboard-data"));
        let store = match &self.store {
            Some(s) => s.clone(),
            None => StoreUrl::new(format!("sqlite:{}", data_dir.join("events.db").display())),
        };
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
        let tenant = self.tenant.clone().unwrap_or_else(|| "default".into());
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
        let gateway = self.gateway.as_ref().map(|g| g.resolve(&env)).transpose()?;
        let source_ids = sources.iter().map(|s| s.id.as_str()).collect();
        let known = crate::triggers::config::Known {
            sources: &source_ids,
            gateway: gateway.is_some(),
        };
        let (triggers, queues) =
            crate::triggers::config::resolve(&self.triggers, &self.queues, &known)?;
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
            event_retention_ms: i64::try_from(event_retention.as_millis()).unwrap_or(i64::MAX),
            sources,
        })
    }
}

impl SourceConfig {
    fn resolve(
        &self,
        tenant: &str,
        max_body: usize,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<SourceSpec> {
        let id = &self.id;
        let bad = |what: String| Error::Config(format!("source {id:?}: {what}"));
        if id.is_empty()
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad(
                "the id must be non-empty letters, digits, '-' or '_'".into()
            ));
        }
        let provider = self.provider.as_str();
        let generic_only = [
            ("scheme", self.scheme.is_some()),
            ("header", self.header.is_some()),
            ("prefix", self.prefix.is_some()),
            ("encoding", self.encoding.is_some()),
            ("dedupe_header", self.dedupe_header.is_some()),
            ("kind", self.kind.is_some()),
            ("kind_pointer", self.kind_pointer.is_some()),
            ("require_json", self.require_json.is_some()),
        ];
        let cron_only = [
            ("schedule", self.schedule.is_some()),
            ("timezone", self.timezone.is_some()),
            ("catch_up", self.catch_up.is_some()),
            ("payload", self.payload.is_some()),
        ];
        let refuse = |opts: &[(&str, bool)]| -> Result<()> {
            match opts.iter().find(|(_, set)| *set) {
                Some((name, _)) => Err(bad(format!(
                    "option {name} does not apply to provider {provider}"
                ))),
                None => Ok(()),
            }
        };
        if provider != "generic_hmac" {
            refuse(&generic_only)?;
        }
        if provider != "cron" {
            refuse(&cron_only)?;
        }
        if provider != "linear" && self.timestamp_grace_secs.is_some() {
            return Err(bad(
                "timestamp_grace_secs applies to provider linear only".into()
            ));
        }
        let rule = match provider {
            "generic_hmac" => Rule::Generic(self.generic_rule(&bad)?),
            "cron" => Rule::Cron(self.cron_rule(&bad)?),
            other => Rule::Provider(Provider::parse(other).ok_or_else(|| {
                bad(format!(
                    "unknown provider {other:?}; expected github, slack, linear, notion, stripe, standard_webhooks, generic_hmac or cron"
                ))
            })?),
        };
        let mut secrets = Vec::new();
        for var in self.secret_env.names() {
            let value = env(var)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(format!("secret_env names {var}, which is unset or empty")))?;
            if matches!(rule, Rule::Provider(Provider::StandardWebhooks)) {
                use base64::Engine as _;
                let b64 = value.strip_prefix("whsec_").unwrap_or(&value);
                if base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .is_err()
                {
                    return Err(bad(format!(
                        "the secret in {var} is not a Standard Webhooks secret (base64 after an optional whsec_ prefix)"
                    )));
                }
            }
            secrets.push(Secret::new(value.into_bytes()));
        }
        let needs_secret = !matches!(rule, Rule::Cron(_) | Rule::Provider(Provider::Notion));
        if needs_secret && secrets.is_empty() {
            return Err(bad("secret_env is required: name the environment variable(s) holding the signing secret".into()));
        }
        if matches!(rule, Rule::Cron(_)) && !secrets.is_empty() {
            return Err(bad("cron sources take no secret_env".into()));
        }
        for (name, limit) in [
            ("rate_limit", &self.rate_limit),
            ("notion_recheck_limit", &self.notion_recheck_limit),
            ("rejection_audit_limit", &self.rejection_audit_limit),
        ] {
            if let Some(r) = limit {
                let valid = r.per_second.is_finite()
                    && r.per_second > 0.0
                    && r.burst.is_none_or(|b| b.is_finite() && b >= 1.0);
                if !valid {
                    return Err(bad(format!("{name} needs per_second > 0 and burst >= 1")));
                }
            }
        }
        if provider != "notion" && self.notion_recheck_limit.is_some() {
            return Err(bad(
                "notion_recheck_limit applies to provider notion only".into()
            ));
        }
        let default_tolerance = match rule {
            Rule::Provider(Provider::Linear) => 60,
            _ => 300,
        };
        let tolerance_s = self
            .timestamp_tolerance_secs
            .unwrap_or(default_tolerance)
            .checked_add(self.timestamp_grace_secs.unwrap_or(0))
            .filter(|t| *t <= MAX_SECS);
        let Some(tolerance_s) = tolerance_s else {
            return Err(bad(format!(
                "timestamp_tolerance_secs + timestamp_grace_secs must be at most {MAX_SECS} (10 years)"
            )));
        };
        if tolerance_s <= 0 {
            return Err(bad("timestamp_tolerance_secs must be positive".into()));
        }
        let retention = self
            .dedupe_retention_secs
            .unwrap_or(DEFAULT_DEDUPE_RETENTION_SECS);
        if retention <= 0 {
            return Err(bad("dedupe_retention_secs must be positive".into()));
        }
        let retention_ms =
            secs_to_ms("dedupe_retention_secs", retention).map_err(|e| bad(e.to_string()))?;
        Ok(SourceSpec {
            id: id.clone(),
            tenant: self.tenant.clone().unwrap_or_else(|| tenant.to_owned()),
            rule,
            secrets,
            tolerance_s,
            retention_ms,
            max_body_bytes: self.max_body_bytes.unwrap_or(max_body),
            rate_limit: self.rate_limit,
            notion_recheck_limit: self
                .notion_recheck_limit
                .unwrap_or(limits::DEFAULT_NOTION_RECHECK_LIMIT),
            rejection_audit_limit: self
                .rejection_audit_limit
                .unwrap_or(limits::DEFAULT_REJECTION_AUDIT_LIMIT),
        })
    }

    fn generic_rule(&self, bad: &impl Fn(String) -> Error) -> Result<GenericRule> {
        let scheme = match self.scheme.as_deref().unwrap_or("header") {
            "header" => {
                let header = self.header.clone().ok_or_else(|| {
                    bad("generic_hmac needs `header` (or scheme = \"authorization\")".into())
                })?;
                let encoding = match self.encoding.as_deref().unwrap_or("hex") {
                    "hex" => MacEncoding::Hex,
                    "base64" => MacEncoding::Base64,
                    other => {
                        return Err(bad(format!(
                            "encoding = {other:?}: expected \"hex\" or \"base64\""
                        )))
                    }
                };
                GenericScheme::Header {
                    // Leaked once per configured source at startup: the signature
                    // functions take header names as &'static str.
                    header: Box::leak(header.into_boxed_str()),
                    prefix: self.prefix.clone().unwrap_or_default(),
                    encoding,
                }
            }
            "authorization" => {
                if self.header.is_some() || self.prefix.is_some() || self.encoding.is_some() {
                    return Err(bad(
                        "header, prefix and encoding do not apply to scheme = \"authorization\""
                            .into(),
                    ));
                }
                GenericScheme::Authorization
            }
            other => {
                return Err(bad(format!(
                    "scheme = {other:?}: expected \"header\" or \"authorization\""
                )))
            }
        };
        if let Some(p) = &self.kind_pointer {
            if !p.starts_with('/') {
                return Err(bad(format!(
                    "kind_pointer {p:?} is not a JSON pointer (it starts with '/')"
                )));
            }
        }
        Ok(GenericRule {
            scheme,
            dedupe_header: self.dedupe_header.clone(),
            kind: self.kind.clone().unwrap_or_else(|| "webhook".into()),
            kind_pointer: self.kind_pointer.clone(),
            require_json: self.require_json.unwrap_or(true),
        })
    }

    fn cron_rule(&self, bad: &impl Fn(String) -> Error) -> Result<CronRule> {
        let expression = self
            .schedule
            .clone()
            .ok_or_else(|| bad("cron sources need `schedule`".into()))?;
        let tz = self.timezone.as_deref().unwrap_or("UTC");
        let schedule = Schedule::parse(&expression, tz).map_err(|e| bad(e.to_string()))?;
        let catch_up = match self.catch_up.as_deref() {
            None => CatchUp::default(),
            Some(s) => s
                .parse()
                .map_err(|e: crate::webhooks::cron::CronError| bad(e.to_string()))?,
        };
        let payload = match &self.payload {
            None => "{}".to_owned(),
            Some(v) => serde_json::to_string(v).map_err(|e| bad(format!("payload: {e}")))?,
        };
        Ok(CronRule {
            schedule,
            expression,
            catch_up,
            payload,
        })
    }
}

#[cfg(test)]
mod tests;

/// Longest duration in seconds a `*_secs` option may name: ten years. Far beyond any
/// sensible retention or tolerance, and small enough that milliseconds of it, added to
/// a current timestamp, cannot overflow an `i64` (the fuzzer found options that did).
const MAX_SECS: i64 = 10 * 365 * 86_400;

/// `secs` of option `name` in milliseconds, refused past [`MAX_SECS`].
fn secs_to_ms(name: &str, secs: i64) -> Result<i64> {
    if secs > MAX_SECS {
        return Err(Error::Config(format!(
            "{name} = {secs}: at most {MAX_SECS} (10 years)"
        )));
    }
    Ok(secs * 1000)
}
