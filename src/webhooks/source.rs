//! `[[sources]]`: the webhook and cron sources' section of switchboard.toml, as
//! written ([`SourceConfig`]) and resolved ([`SourceSpec`]: options checked against
//! the provider, defaults applied, secrets read from the environment).
//!
//! The section belongs to the inbound connectors it configures, so every `webhooks`
//! module reads its sources from here; `runtime::config` only parses the file and
//! calls [`SourceConfig::resolve`] for each entry. Errors name the source and the
//! option, never a secret's value.

use serde::Deserialize;

use super::classify::Provider;
use super::cron::{CatchUp, Schedule};
use super::signature::MacEncoding;
use crate::duration::{secs_to_ms, MAX_SECS};
use crate::error::{Error, Result};
pub(crate) use crate::secret::Secret;

/// Default body limit: 10 MiB. Providers' own caps are lower (GitHub 25 MB is the
/// exception and is truncated by GitHub itself at that size), and a larger body is far
/// more likely a mistake or an attack than an event.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Default dedupe retention: 7 days, longer than any provider's retry schedule
/// (Stripe retries for 3 days, GitHub redeliveries are manual within 3 days).
pub(crate) const DEFAULT_DEDUPE_RETENTION_SECS: i64 = 7 * 24 * 3600;
/// Default `notion_recheck_limit`: re-reading a Notion source's stored token (after a
/// refusal that another process's capture could explain) at most once a second,
/// 10 at once. Legitimate re-checks follow an operator's capture or clear, a handful
/// at a time; a flood of unsigned requests gets the in-memory answer.
pub(crate) const DEFAULT_NOTION_RECHECK_LIMIT: RateLimit = RateLimit {
    per_second: 1.0,
    burst: Some(10.0),
};

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
/// refused by [`SourceConfig::resolve`] (called from `RuntimeConfig::resolve`) rather
/// than silently ignored.
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

impl SourceConfig {
    /// Checks this source's options against its provider and reads its secrets through
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
                .unwrap_or(DEFAULT_NOTION_RECHECK_LIMIT),
            rejection_audit_limit: self
                .rejection_audit_limit
                .unwrap_or(DEFAULT_REJECTION_AUDIT_LIMIT),
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
