//! `[[sources]]`: the sources' section of switchboard.toml, as written
//! ([`SourceConfig`]) and resolved ([`SourceSpec`]: the runtime's own options checked,
//! defaults applied, secrets read from the environment).
//!
//! A source table has two halves. The runtime's keys ([`RUNTIME_KEYS`]: `id`,
//! `provider`, `secret_env`, `secret_file`, `tenant`, limits and leases) are read
//! here, the same for every provider; every other key is the source's own option, handed as a table to the provider's inbound
//! connector, which checks it when the runtime starts (`InboundConnector::init`).
//! That split is why this module knows no provider: a program's own connector gets
//! its options the way the built-ins do. Errors name the source and the option, never
//! a secret's value.

use serde::Deserialize;

use crate::duration::secs_to_ms;
use crate::error::{Error, Result};
pub(crate) use crate::inbound::RateLimit;
pub(crate) use crate::secret::Secret;

/// Default body limit: 10 MiB. Providers' own caps are lower (GitHub 25 MB is the
/// exception and is truncated by GitHub itself at that size), and a larger body is far
/// more likely a mistake or an attack than an event.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Default dedupe retention: 7 days, longer than any provider's retry schedule
/// (Stripe retries for 3 days, GitHub redeliveries are manual within 3 days).
pub(crate) const DEFAULT_DEDUPE_RETENTION_SECS: i64 = 7 * 24 * 3600;
/// Default `outbound_max_wait_secs`: an outbound call waits up to 10 s for a token,
/// inside the 30 s a gateway gives an execute by default.
pub(crate) const DEFAULT_OUTBOUND_MAX_WAIT_SECS: f64 = 10.0;

/// Default `rejection_audit_limit`: 20 audit rows per source per second, 200 at once.
/// Refusals beyond it are still answered and counted (`rejections_total`,
/// `audit_skipped_total`) but not written, so a flood of forged deliveries cannot fill
/// the disk through the audit table and starve real events of space, while an
/// operator still sees a sample of every kind of refusal.
pub(crate) const DEFAULT_REJECTION_AUDIT_LIMIT: RateLimit = RateLimit {
    per_second: 20.0,
    burst: Some(200.0),
};

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
    /// The names, in order.
    pub(crate) fn names(&self) -> Vec<&str> {
        match self {
            EnvNames::None => vec![],
            EnvNames::One(n) => vec![n.as_str()],
            EnvNames::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// One `[[sources]]` table as written: the runtime's keys, and the rest as the
/// source's own options for its connector.
#[derive(Debug, Clone, Deserialize)]
#[non_exhaustive]
pub struct SourceConfig {
    /// Path segment of `/hooks/{id}`, and the instance of the source's registration:
    /// letters, digits, `-` and `_`.
    pub id: String,
    /// The provider id of the inbound connector that runs it (`github`, `cron`,
    /// `http_poll`, or one a program registered).
    pub provider: String,
    /// Environment variable(s) holding the source's secret(s) (signing secrets,
    /// tokens); several for rotation.
    #[serde(default)]
    pub secret_env: EnvNames,
    /// File(s) holding the source's secret(s), for mounted secrets (Kubernetes,
    /// Docker): the whole file, less one trailing newline. Read at start and again
    /// at every reload (SIGHUP), so a rotated file needs no restart. Relative paths
    /// are from the working directory. Listed after `secret_env`'s.
    #[serde(default)]
    pub secret_file: EnvNames,
    /// Tenant of this source's events and of its gateway registration. Default: the
    /// top-level `tenant`, else `[gateway] tenant` (one socket for the runtime and
    /// its sources), else `default`.
    pub tenant: Option<String>,
    /// How long a dedupe claim lasts. Default 7 days.
    pub dedupe_retention_secs: Option<i64>,
    /// Body limit for this source.
    pub max_body_bytes: Option<usize>,
    /// Per-source rate limit. Default: none.
    pub rate_limit: Option<RateLimit>,
    /// How many refusals of this source are written to the rejection audit table.
    /// Default `{ per_second = 20, burst = 200 }`; past it, refusals are counted only.
    pub rejection_audit_limit: Option<RateLimit>,
    /// The rate limit of the source's outbound calls (its capabilities, called
    /// through the gateway), per (provider, key). Default: none.
    pub outbound_rate_limit: Option<RateLimit>,
    /// How long an outbound call waits for a token before it is refused. Default 10.
    pub outbound_max_wait_secs: Option<f64>,
    /// Poll sources: how long the lease a process takes before each poll lasts; a
    /// killed process's sources are taken over within it. Default 30.
    pub poll_lease_secs: Option<f64>,
    /// Every other key: the source's own options, checked by its connector.
    #[serde(flatten)]
    pub options: toml::Table,
}

/// Lists the runtime's keys of a source table and has the compiler check the list:
/// the pattern below names every field of [`SourceConfig`] but the flattened
/// `options`, with no `..`, so a field added to the struct and not here fails to
/// build. The list is what a flattened struct cannot tell serde's derive to report
/// (the example configuration's completeness test needs it).
macro_rules! runtime_keys {
    ($($key:ident),* $(,)?) => {
        /// The runtime's keys of a `[[sources]]` table, in declaration order: every
        /// key that is not the provider's own option.
        #[allow(dead_code)] // Read by the example configuration's test only.
        pub(crate) const RUNTIME_KEYS: &[&str] = &[$(stringify!($key)),*];

        #[allow(dead_code)]
        fn runtime_keys_name_every_field(c: SourceConfig) {
            let SourceConfig { $($key: _,)* options: _ } = c;
        }
    };
}

runtime_keys!(
    id,
    provider,
    secret_env,
    secret_file,
    tenant,
    dedupe_retention_secs,
    max_body_bytes,
    rate_limit,
    rejection_audit_limit,
    outbound_rate_limit,
    outbound_max_wait_secs,
    poll_lease_secs,
);

/// A source ready to start: the runtime's options resolved, secrets loaded; its own
/// options still a table, for its connector's `init`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceSpec {
    /// Source id.
    pub id: String,
    /// The provider id.
    pub provider: String,
    /// Tenant.
    pub tenant: String,
    /// Secrets, in the order configured (`secret_env`'s, then `secret_file`'s).
    pub secrets: Vec<Secret>,
    /// How long claims last, ms.
    pub retention_ms: i64,
    /// Body limit.
    pub max_body_bytes: usize,
    /// Rate limit.
    pub rate_limit: Option<RateLimit>,
    /// The budget of rejection audit rows.
    pub rejection_audit_limit: RateLimit,
    /// The outbound calls' rate limit.
    pub outbound_rate_limit: Option<RateLimit>,
    /// How long an outbound call may wait for a token.
    pub outbound_max_wait: std::time::Duration,
    /// How long a poll lease lasts.
    pub poll_lease: std::time::Duration,
    /// The source's own options.
    pub options: toml::Table,
}

impl SourceConfig {
    /// Checks the runtime's options of this source and reads its secrets through
    /// `env`; errors name the source and the option.
    pub(crate) fn resolve(
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
        let mut secrets = read_secrets(&self.secret_env.names(), env).map_err(bad)?;
        for path in self.secret_file.names() {
            secrets.push(crate::secret::read_file(path).map_err(bad)?);
        }
        for (name, limit) in [
            ("rate_limit", &self.rate_limit),
            ("rejection_audit_limit", &self.rejection_audit_limit),
            ("outbound_rate_limit", &self.outbound_rate_limit),
        ] {
            if let Some(r) = limit {
                r.check(name).map_err(bad)?;
            }
        }
        let retention = self
            .dedupe_retention_secs
            .unwrap_or(DEFAULT_DEDUPE_RETENTION_SECS);
        if retention <= 0 {
            return Err(bad("dedupe_retention_secs must be positive".into()));
        }
        let retention_ms =
            secs_to_ms("dedupe_retention_secs", retention).map_err(|e| bad(e.to_string()))?;
        let max_wait = self
            .outbound_max_wait_secs
            .unwrap_or(DEFAULT_OUTBOUND_MAX_WAIT_SECS);
        if !(0.0..=3600.0).contains(&max_wait) {
            return Err(bad(
                "outbound_max_wait_secs must be between 0 and 3600".into()
            ));
        }
        let lease = self
            .poll_lease_secs
            .unwrap_or(crate::ingress::lease::DEFAULT_POLL_LEASE.as_secs_f64());
        if !(0.1..=3600.0).contains(&lease) {
            return Err(bad("poll_lease_secs must be between 0.1 and 3600".into()));
        }
        Ok(SourceSpec {
            id: id.clone(),
            provider: self.provider.clone(),
            tenant: self.tenant.clone().unwrap_or_else(|| tenant.to_owned()),
            secrets,
            retention_ms,
            max_body_bytes: self.max_body_bytes.unwrap_or(max_body),
            rate_limit: self.rate_limit,
            rejection_audit_limit: self
                .rejection_audit_limit
                .unwrap_or(DEFAULT_REJECTION_AUDIT_LIMIT),
            outbound_rate_limit: self.outbound_rate_limit,
            outbound_max_wait: std::time::Duration::from_secs_f64(max_wait),
            poll_lease: std::time::Duration::from_secs_f64(lease),
            options: self.options.clone(),
        })
    }
}

/// Reads each named variable through `env`; an unset or empty one is an error that
/// names it (never its value).
pub(crate) fn read_secrets(
    names: &[&str],
    env: &impl Fn(&str) -> Option<String>,
) -> std::result::Result<Vec<Secret>, String> {
    names
        .iter()
        .map(|var| {
            env(var)
                .filter(|v| !v.is_empty())
                .map(|v| Secret::new(v.into_bytes()))
                .ok_or_else(|| format!("secret_env names {var}, which is unset or empty"))
        })
        .collect()
}
