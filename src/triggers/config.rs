//! `[[triggers]]` and `[[queues]]` of `switchboard.toml`: which events go where.
//!
//! Parsing checks shape (unknown keys are refused, as everywhere in the file);
//! resolving (which the runtime's config calls for the whole file) checks meaning
//! and builds the [`TriggerRegistry`] and the [`QueueSpec`]s. Every error names the
//! trigger (or queue) and the option.
//!
//! ```toml
//! [[queues]]
//! name = "work"
//! visibility_timeout = "30s"
//! max_receives = 5
//!
//! [[triggers]]
//! id = "issues-to-linear"
//! sources = ["github-main"]          # default: every source
//! events = ["issues.*"]              # default: every kind; a trailing * is a prefix
//! filter = 'payload.action == "opened"'
//! handler = { invoke = "acme.linear.main", capability = "create_issue", encoding = "json" }
//! retry = { max_attempts = 5, backoff = "exponential", base = "1s", cap = "5m", jitter = 0.2 }
//! ordering_key = 'payload.repository.full_name'
//! max_concurrent = 16
//! timeout = "30s"
//! priority = 10                      # -1000..=1000, default 0: due rows of higher priority go first
//! debounce = { key = 'payload.issue.id', window = "5s" }   # equal keys within 5 s: only the last runs
//! dedupe_key = 'payload.issue.id'    # a key seen within dedupe_retention enqueues nothing
//! dedupe_retention = "24h"           # default 24h
//! throttle = { starts = 10, per = "1s" }      # at most 10 attempts start per second (per process)
//! breaker = { errors = 5, cool_off = "1m" }   # filter errors on 5 events in a row: skip events for a minute
//!
//! [[triggers]]
//! id = "to-partner"
//! handler = { http = "https://partner.example/hooks", secret_env = ["HOOK_SECRET", "HOOK_SECRET_OLD"], timeout = "10s", retry_4xx = false }
//! # or secret_file = "/run/secrets/hook" (a path or a list), beside or instead of secret_env
//!
//! [[triggers]]
//! id = "failures"
//! handler = { queue = "dead" }       # a queue nobody declared: declared with defaults
//! dead_letter_for = "*"              # or ["issues-to-linear"]
//! ```

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::binding::{Binding, DeadLetterScope, Handler, DEFAULT_MAX_CONCURRENT, DEFAULT_TIMEOUT};
use super::filter::Expression;
use super::flow::{self, BreakerConfig, DebounceConfig, ThrottleConfig};
use super::registry::TriggerRegistry;
use crate::duration::{duration_or, DurationSetting};
use crate::error::{Error, Result};
use crate::outbox::retry::{self, RetryCurve, RetryPolicy};
use crate::proto::PayloadEncoding;

/// Default queue visibility timeout: 30 s, the default attempt timeout, so a consumer
/// that takes as long as a handler may keeps its message.
pub(crate) const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default receives before a queue message is dead-lettered: 5, as many as a
/// binding's default attempts.
pub(crate) const DEFAULT_MAX_RECEIVES: u32 = 5;

/// One `[[triggers]]` table as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TriggerConfig {
    /// Unique id: letters, digits, `-`, `_` and `.`.
    pub id: String,
    /// Source ids; empty = every source.
    #[serde(default)]
    pub sources: Vec<String>,
    /// Event kind patterns; empty = every kind.
    #[serde(default)]
    pub events: Vec<String>,
    /// CEL filter.
    pub filter: Option<String>,
    /// Where the events go.
    pub handler: HandlerConfig,
    /// Retry policy; each option defaults as in [`crate::outbox::retry`].
    pub retry: Option<RetryConfig>,
    /// CEL ordering key.
    pub ordering_key: Option<String>,
    /// Attempts in flight at once. Default [`DEFAULT_MAX_CONCURRENT`].
    pub max_concurrent: Option<usize>,
    /// Attempt timeout. Default [`DEFAULT_TIMEOUT`].
    pub timeout: Option<DurationSetting>,
    /// `"*"` or a list of trigger ids: makes this a dead-letter handler.
    pub dead_letter_for: Option<DeadLetterFor>,
    /// Claim priority among due rows, in -1000..=1000. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Collapse rows with equal keys arriving within a window to the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<DebounceConfig>,
    /// CEL key of the per-binding dedupe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_key: Option<String>,
    /// How long a dedupe key is remembered. Default 24 hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_retention: Option<DurationSetting>,
    /// Attempts started per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleConfig>,
    /// Pause after consecutive failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerConfig>,
}

/// `handler = { … }` as written: exactly one of `invoke`, `local`, `queue`, `http`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HandlerConfig {
    /// Invoke this connector (ARN or dot key) through the gateway.
    pub invoke: Option<String>,
    /// Execute this locally registered connector.
    pub local: Option<String>,
    /// Put the event in this queue.
    pub queue: Option<String>,
    /// The capability (`invoke` and `local`).
    pub capability: Option<String>,
    /// The invoke payload's encoding: `json` (default), `bytes` (`raw_bytes`) or
    /// `json_lines` (`invoke` only).
    pub encoding: Option<String>,
    /// POST the event to this URL (see [`http`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// `http` only: the environment variable(s) holding the signing secret(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<http::OneOrMany>,
    /// `http` only: the file(s) holding signing secret(s) (mounted secrets), read at
    /// load and at every reload; they sign after `secret_env`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<http::OneOrMany>,
    /// `http` only: bound on one request. Default
    /// [`super::binding::DEFAULT_HTTP_TIMEOUT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSetting>,
    /// `http` only: retry 4xx answers too. Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_4xx: Option<bool>,
}

/// `retry = { … }` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Attempts in all, at least 1.
    pub max_attempts: Option<u32>,
    /// `constant`, `linear` or `exponential`.
    pub backoff: Option<String>,
    /// The first delay (positive).
    pub base: Option<DurationSetting>,
    /// The largest delay, at least `base`. Default 5 minutes, or `base` if larger.
    pub cap: Option<DurationSetting>,
    /// Spread, in `[0, 1]`.
    pub jitter: Option<f64>,
}

/// `dead_letter_for` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum DeadLetterFor {
    /// `"*"`: every other binding.
    All(String),
    /// These bindings.
    Bindings(Vec<String>),
}

/// One `[[queues]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct QueueConfig {
    /// Unique name: letters, digits, `-`, `_` and `.`.
    pub name: String,
    /// How long a received message stays invisible. Default
    /// [`DEFAULT_VISIBILITY_TIMEOUT`].
    pub visibility_timeout: Option<DurationSetting>,
    /// Receives before dead-lettering. Default [`DEFAULT_MAX_RECEIVES`].
    pub max_receives: Option<u32>,
}

/// A queue, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSpec {
    /// Name.
    pub name: String,
    /// How long a received message stays invisible to other receivers.
    pub visibility_timeout: Duration,
    /// A message received this many times is dead-lettered instead of handed out.
    pub max_receives: u32,
    /// Declared only by a queue handler naming it, not by `[[queues]]`: a queue is
    /// where a handler puts events, so naming it is enough to have one, with the
    /// defaults; declaring it is only needed to change them.
    pub implicit: bool,
}

/// What a trigger may refer to outside itself.
pub(crate) struct Known<'a> {
    /// The configured source ids; `None` accepts any (rebuilding a stored version,
    /// whose sources may have left the configuration since: its rows still drain).
    pub(crate) sources: Option<&'a HashSet<&'a str>>,
    /// Whether a `[gateway]` section is configured.
    pub(crate) gateway: bool,
}

/// Resolves `[[triggers]]` and `[[queues]]`: every binding built and checked, the
/// registry built (duplicate ids, dead-letter scopes), and the queues declared, plus
/// one with default settings for each queue handler naming an undeclared queue.
pub(crate) fn resolve(
    triggers: &[TriggerConfig],
    queues: &[QueueConfig],
    known: &Known<'_>,
) -> Result<(TriggerRegistry, Vec<QueueSpec>)> {
    let bindings = triggers
        .iter()
        .map(|t| t.resolve(known))
        .collect::<Result<Vec<_>>>()?;
    let mut specs = queues
        .iter()
        .map(QueueConfig::resolve)
        .collect::<Result<Vec<_>>>()?;
    let mut names = HashSet::new();
    for q in &specs {
        if !names.insert(q.name.clone()) {
            return Err(Error::Config(format!(
                "two queues have the name {:?}",
                q.name
            )));
        }
    }
    for b in &bindings {
        if let Handler::Queue { queue } = &b.handler {
            if names.insert(queue.clone()) {
                specs.push(QueueSpec {
                    name: queue.clone(),
                    visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT,
                    max_receives: DEFAULT_MAX_RECEIVES,
                    implicit: true,
                });
            }
        }
    }
    Ok((TriggerRegistry::new(bindings)?, specs))
}

/// Builds a stored version's binding from its definition (the JSON of
/// [`TriggerConfig::of`]), accepting any source and any handler kind: the version was
/// checked when it was recorded, and its rows must still run after the configuration
/// moved on. `Err` says why the text no longer resolves (written by a newer build).
pub(crate) fn rebuild(definition: &str) -> Result<Binding> {
    let table: TriggerConfig = serde_json::from_str(definition)
        .map_err(|e| Error::Config(format!("stored trigger definition: {e}")))?;
    table.resolve(&Known {
        sources: None,
        gateway: true,
    })
}

/// The stored form of `binding`'s definition: JSON of [`TriggerConfig::of`].
pub(crate) fn definition_json(binding: &Binding) -> String {
    serde_json::to_string(&TriggerConfig::of(binding)).expect("plain data serialises")
}

/// Checks an id or a name: non-empty letters, digits, `-`, `_` and `.`, which reads
/// safely in URLs, metric labels and log lines.
fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be non-empty letters, digits, '-', '_' or '.'"
        ))
    }
}

impl TriggerConfig {
    /// The table that resolves to `binding` again: what the store keeps as a version's
    /// definition. Durations are written in milliseconds and every default spelled
    /// out, so [`rebuild`] gives a binding with the same fingerprint.
    pub(crate) fn of(binding: &Binding) -> TriggerConfig {
        let ms = |d: Duration| Some(DurationSetting::millis(d));
        let expr = |e: &Option<Expression>| e.as_ref().map(|e| e.source().to_owned());
        let mut handler = HandlerConfig {
            invoke: None,
            local: None,
            queue: None,
            capability: None,
            encoding: None,
            http: None,
            secret_env: None,
            secret_file: None,
            timeout: None,
            retry_4xx: None,
        };
        match &binding.handler {
            Handler::Invoke {
                target,
                capability,
                encoding,
            } => {
                handler.invoke = Some(target.clone());
                handler.capability = Some(capability.clone());
                handler.encoding = Some(encoding.as_str_name().to_ascii_lowercase());
            }
            Handler::Local {
                connector,
                capability,
            } => {
                handler.local = Some(connector.clone());
                handler.capability = Some(capability.clone());
            }
            Handler::Queue { queue } => handler.queue = Some(queue.clone()),
            Handler::Http {
                url,
                secret_env,
                secret_file,
                timeout,
                retry_4xx,
            } => {
                handler.http = Some(url.clone());
                // Unset lists stay unwritten: a handler signing from files only is
                // written back without an empty secret_env.
                handler.secret_env =
                    (!secret_env.is_empty()).then(|| http::OneOrMany::of(secret_env));
                handler.secret_file =
                    (!secret_file.is_empty()).then(|| http::OneOrMany::of(secret_file));
                handler.timeout = Some(DurationSetting::millis(*timeout));
                handler.retry_4xx = Some(*retry_4xx);
            }
        }
        let r = &binding.retry;
        TriggerConfig {
            id: binding.id.clone(),
            sources: binding.sources.clone(),
            events: binding.events.clone(),
            filter: expr(&binding.filter),
            handler,
            retry: Some(RetryConfig {
                max_attempts: Some(r.max_attempts),
                backoff: Some(r.backoff.as_str().to_owned()),
                base: ms(r.base),
                cap: ms(r.cap),
                jitter: Some(r.jitter),
            }),
            ordering_key: expr(&binding.ordering_key),
            max_concurrent: Some(binding.max_concurrent),
            timeout: ms(binding.timeout),
            dead_letter_for: match &binding.dead_letter_for {
                DeadLetterScope::None => None,
                DeadLetterScope::All => Some(DeadLetterFor::All("*".into())),
                DeadLetterScope::Bindings(ids) => Some(DeadLetterFor::Bindings(ids.clone())),
            },
            // Unset options stay unwritten, so the stored definition of a binding
            // without flow control reads as it did before the options existed.
            priority: (binding.priority != 0).then_some(binding.priority.into()),
            debounce: binding.debounce.as_ref().map(DebounceConfig::of),
            dedupe_key: binding.dedupe.as_ref().map(|d| d.key.source().to_owned()),
            dedupe_retention: binding
                .dedupe
                .as_ref()
                .map(|d| DurationSetting::millis(d.retention)),
            throttle: binding.throttle.as_ref().map(ThrottleConfig::of),
            breaker: binding.breaker.as_ref().map(BreakerConfig::of),
        }
    }

    /// Resolves this table on its own, against the configured `sources` and whether a
    /// gateway is configured: a binding registered at run time.
    pub(crate) fn resolve_one(&self, sources: &HashSet<&str>, gateway: bool) -> Result<Binding> {
        self.resolve(&Known {
            sources: Some(sources),
            gateway,
        })
    }

    fn resolve(&self, known: &Known<'_>) -> Result<Binding> {
        let id = &self.id;
        let bad =
            |option: &str, what: String| Error::Config(format!("trigger {id:?}: {option}: {what}"));
        check_name(id).map_err(|e| Error::Config(format!("trigger id {e}")))?;
        if let Some(s) = known
            .sources
            .and_then(|known| self.sources.iter().find(|s| !known.contains(s.as_str())))
        {
            return Err(bad(
                "sources",
                format!("{s:?} is not a configured source id (see [[sources]])"),
            ));
        }
        for p in &self.events {
            let star = p.find('*');
            if p.is_empty() || star.is_some_and(|at| at + 1 != p.len()) {
                return Err(bad(
                    "events",
                    format!("{p:?} is not a kind pattern; write a kind (issues.opened) or a prefix ending in * (issues.*)"),
                ));
            }
        }
        let dead_letter_for = match &self.dead_letter_for {
            None => DeadLetterScope::None,
            Some(DeadLetterFor::All(s)) if s == "*" => DeadLetterScope::All,
            Some(DeadLetterFor::All(s)) => {
                return Err(bad(
                    "dead_letter_for",
                    format!("{s:?}: write \"*\" (every trigger) or a list of trigger ids"),
                ))
            }
            Some(DeadLetterFor::Bindings(ids)) if ids.is_empty() => return Err(bad(
                "dead_letter_for",
                "the list is empty; name trigger ids, or remove the option for an ordinary trigger"
                    .into(),
            )),
            Some(DeadLetterFor::Bindings(ids)) => DeadLetterScope::Bindings(ids.clone()),
        };
        if dead_letter_for != DeadLetterScope::None {
            let ingest_only = [
                ("sources", !self.sources.is_empty()),
                ("events", !self.events.is_empty()),
                ("filter", self.filter.is_some()),
                ("debounce", self.debounce.is_some()),
                ("dedupe_key", self.dedupe_key.is_some()),
            ];
            if let Some((option, _)) = ingest_only.iter().find(|(_, set)| *set) {
                return Err(bad(
                    option,
                    "does not apply to a dead-letter handler, which takes dead letters, not ingest events".into(),
                ));
            }
        }
        let compile = |option: &str, src: &Option<String>| {
            src.as_deref()
                .map(|s| Expression::compile(id, option, s))
                .transpose()
        };
        let max_concurrent = match self.max_concurrent {
            Some(0) => return Err(bad("max_concurrent", "must be at least 1".into())),
            n => n.unwrap_or(DEFAULT_MAX_CONCURRENT),
        };
        let handler = self.handler.resolve(known).map_err(|e| bad("handler", e))?;
        if let Handler::Queue { .. } = handler {
            let dispatch_only = [
                ("priority", self.priority.is_some()),
                ("debounce", self.debounce.is_some()),
                ("throttle", self.throttle.is_some()),
                ("breaker", self.breaker.is_some()),
            ];
            if let Some((option, _)) = dispatch_only.iter().find(|(_, set)| *set) {
                return Err(bad(
                    option,
                    "applies to invoke, local and http handlers only; a queue handler's consumers pull at their own pace".into(),
                ));
            }
        }
        let mut binding = Binding {
            id: id.clone(),
            sources: self.sources.clone(),
            events: self.events.clone(),
            filter: compile("filter", &self.filter)?,
            handler,
            retry: self
                .retry
                .clone()
                .unwrap_or_default()
                .resolve()
                .map_err(|e| bad("retry", e))?,
            ordering_key: compile("ordering_key", &self.ordering_key)?,
            max_concurrent,
            timeout: duration_or(self.timeout.as_ref(), DEFAULT_TIMEOUT, true)
                .map_err(|e| bad("timeout", e))?,
            dead_letter_for,
            priority: flow::resolve_priority(self.priority).map_err(|e| bad("priority", e))?,
            debounce: self.debounce.as_ref().map(|d| d.resolve(id)).transpose()?,
            dedupe: flow::resolve_dedupe(
                id,
                self.dedupe_key.as_deref(),
                self.dedupe_retention.as_ref(),
            )?,
            throttle: self
                .throttle
                .as_ref()
                .map(ThrottleConfig::resolve)
                .transpose()
                .map_err(|e| bad("throttle", e))?,
            breaker: self
                .breaker
                .as_ref()
                .map(BreakerConfig::resolve)
                .transpose()
                .map_err(|e| bad("breaker", e))?,
            fingerprint: String::new(),
            version: 0,
        };
        binding.fingerprint = binding.definition_fingerprint();
        Ok(binding)
    }
}

/// The error for a handler naming none, or several, of its kinds.
const ONE_OF: &str =
    "name exactly one of invoke = \"…\", local = \"…\", queue = \"…\" or http = \"…\"";

impl HandlerConfig {
    fn resolve(&self, known: &Known<'_>) -> std::result::Result<Handler, String> {
        let capability = || match self.capability.as_deref().map(str::trim) {
            Some(c) if !c.is_empty() => Ok(c.to_owned()),
            _ => Err("capability is required for invoke and local handlers".to_owned()),
        };
        if let Some(url) = &self.http {
            if self.invoke.is_some() || self.local.is_some() || self.queue.is_some() {
                return Err(ONE_OF.into());
            }
            if self.capability.is_some() || self.encoding.is_some() {
                return Err(
                    "an http handler takes no capability or encoding: it POSTs the event as JSON"
                        .into(),
                );
            }
            return http::resolve(http::Options {
                url,
                secret_env: self.secret_env.as_ref(),
                secret_file: self.secret_file.as_ref(),
                timeout: self.timeout.as_ref(),
                retry_4xx: self.retry_4xx,
            });
        }
        let http_only = [
            ("secret_env", self.secret_env.is_some()),
            ("secret_file", self.secret_file.is_some()),
            ("timeout", self.timeout.is_some()),
            ("retry_4xx", self.retry_4xx.is_some()),
        ];
        if let Some((option, _)) = http_only.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{option} applies to http handlers only (the trigger's own timeout is the option beside handler)"
            ));
        }
        let handler = match (&self.invoke, &self.local, &self.queue) {
            (Some(target), None, None) => {
                if !known.gateway {
                    return Err(format!(
                        "invoke {target:?} needs a [gateway] section: the runtime invokes other connectors over its own gateway registration; add [gateway], or use a local or queue handler"
                    ));
                }
                check_target(target)?;
                Handler::Invoke {
                    target: target.clone(),
                    capability: capability()?,
                    encoding: parse_encoding(self.encoding.as_deref().unwrap_or("json"))?,
                }
            }
            (None, Some(connector), None) => Handler::Local {
                connector: connector.clone(),
                capability: capability()?,
            },
            (None, None, Some(queue)) => {
                check_name(queue).map_err(|e| format!("queue {e}"))?;
                if self.capability.is_some() {
                    return Err("a queue handler takes no capability".into());
                }
                Handler::Queue {
                    queue: queue.clone(),
                }
            }
            _ => return Err(ONE_OF.into()),
        };
        if self.encoding.is_some() && !matches!(handler, Handler::Invoke { .. }) {
            return Err("encoding applies to invoke handlers only".into());
        }
        Ok(handler)
    }
}

/// Checks an invoke target's form, so a typo fails the load rather than every
/// attempt: an ARN `matrix:tenant:type:instance`, or a dot key `tenant.type.instance`
/// (the instance may hold further dots or colons, as the gateway allows).
fn check_target(target: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = if target.starts_with("matrix:") {
        target.splitn(4, ':').skip(1).collect()
    } else {
        target.splitn(3, '.').collect()
    };
    if parts.len() == 3 && parts.iter().all(|p| !p.trim().is_empty()) {
        Ok(())
    } else {
        Err(format!(
            "invoke target {target:?} is neither an ARN (matrix:tenant:type:instance) nor a dot key (tenant.type.instance)"
        ))
    }
}

/// A payload encoding by its lower-case name: `PayloadEncoding`'s proto name in lower
/// case, or `bytes` for `raw_bytes`. Only the encodings [`crate::encoding`] implements
/// are accepted, as a handler could not decode the others.
fn parse_encoding(name: &str) -> std::result::Result<PayloadEncoding, String> {
    let proto_name = match name {
        "bytes" => "RAW_BYTES".to_owned(),
        n if n == n.to_ascii_lowercase() => n.to_ascii_uppercase(),
        _ => {
            return Err(format!(
                "encoding {name:?}: write it in lower case, e.g. json"
            ))
        }
    };
    match PayloadEncoding::from_str_name(&proto_name) {
        Some(e @ (PayloadEncoding::Json | PayloadEncoding::RawBytes | PayloadEncoding::JsonLines)) => {
            Ok(e)
        }
        Some(PayloadEncoding::Unspecified) | None => Err(format!(
            "encoding {name:?} is unknown; use json, bytes or json_lines"
        )),
        Some(_) => Err(format!(
            "encoding {name:?} is not one switchboard can encode (see crate::encoding); use json, bytes or json_lines"
        )),
    }
}

impl RetryConfig {
    fn resolve(self) -> std::result::Result<RetryPolicy, String> {
        let max_attempts = self.max_attempts.unwrap_or(retry::DEFAULT_MAX_ATTEMPTS);
        if max_attempts == 0 {
            return Err("max_attempts must be at least 1 (the first attempt counts)".into());
        }
        let backoff = match self.backoff.as_deref() {
            None | Some("exponential") => RetryCurve::Exponential,
            Some("linear") => RetryCurve::Linear,
            Some("constant") => RetryCurve::Constant,
            Some(other) => {
                return Err(format!(
                    "backoff {other:?}: expected \"constant\", \"linear\" or \"exponential\""
                ))
            }
        };
        let base = duration_or(self.base.as_ref(), retry::DEFAULT_BASE, true)
            .map_err(|e| format!("base: {e}"))?;
        let cap = duration_or(self.cap.as_ref(), retry::DEFAULT_CAP.max(base), true)
            .map_err(|e| format!("cap: {e}"))?;
        if base > cap {
            return Err(format!("base ({base:?}) exceeds cap ({cap:?})"));
        }
        let jitter = self.jitter.unwrap_or(retry::DEFAULT_JITTER);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(format!("jitter {jitter} is outside [0, 1]"));
        }
        Ok(RetryPolicy {
            max_attempts,
            backoff,
            base,
            cap,
            jitter,
        })
    }
}

impl QueueConfig {
    fn resolve(&self) -> Result<QueueSpec> {
        let name = &self.name;
        let bad =
            |option: &str, what: String| Error::Config(format!("queue {name:?}: {option}: {what}"));
        check_name(name).map_err(|e| Error::Config(format!("queue name {e}")))?;
        let max_receives = match self.max_receives {
            Some(0) => return Err(bad("max_receives", "must be at least 1".into())),
            n => n.unwrap_or(DEFAULT_MAX_RECEIVES),
        };
        Ok(QueueSpec {
            name: name.clone(),
            visibility_timeout: duration_or(
                self.visibility_timeout.as_ref(),
                DEFAULT_VISIBILITY_TIMEOUT,
                true,
            )
            .map_err(|e| bad("visibility_timeout", e))?,
            max_receives,
            implicit: false,
        })
    }
}

pub(crate) mod http;
#[cfg(test)]
mod tests;
