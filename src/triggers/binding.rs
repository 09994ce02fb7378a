//! A resolved trigger binding: which events it takes, where they go, and how its
//! deliveries are retried. Built from `[[triggers]]` by the runtime's config loader;
//! immutable once built, so the registry and the dispatcher share it behind an `Arc`.

use std::time::Duration;

use serde::Serialize;

use super::filter::Expression;
use super::flow::{BreakerSettings, Debounce, DedupeRule, Throttle};
use crate::outbox::retry::RetryPolicy;
use crate::proto::PayloadEncoding;

/// Default `max_concurrent` per binding: 64 attempts in flight at once, what a
/// connector admits by default (`DEFAULT_MAX_CONCURRENT_REQUESTS`), a quarter of the
/// process's `max_in_flight`, so one binding cannot take the whole process. It was 16
/// until issue 36: a claim takes no more of a binding than its free permits, so the
/// limit is also the claim's size, and at 16 a quick handler drained at about 0.3 of the
/// tuned rate (`benches/drain.rs`), at 64 above half of it.
pub(crate) const DEFAULT_MAX_CONCURRENT: usize = 64;
/// Default attempt timeout: 30 s, the gateway's own default execute timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a binding's events are delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Handler {
    /// Invoke `capability` of the connector `target` (an ARN or a dot key
    /// `tenant.type.instance`) through the gateway, over the runtime's own registration.
    Invoke {
        /// ARN or dot key.
        target: String,
        /// Capability id.
        capability: String,
        /// How the event is encoded as the invoke payload.
        #[serde(serialize_with = "encoding_name")]
        encoding: PayloadEncoding,
    },
    /// Execute `capability` of a [`crate::BaseConnector`] that the embedding program
    /// registered with the runtime under `connector`.
    Local {
        /// The name it was registered under.
        connector: String,
        /// Capability id.
        capability: String,
    },
    /// Put the event in the named queue, for consumers to pull.
    Queue {
        /// Queue name.
        queue: String,
    },
    /// POST the event to an HTTP endpoint, signed per Standard Webhooks
    /// (`dispatch::http` delivers it; `outbound` holds the client and its rules).
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Environment variables holding the signing secrets (`whsec_…`), one
        /// signature each: the first is the current secret, the rest are kept during a
        /// rotation. Names, never values, so the definition (and its fingerprint)
        /// holds no secret.
        secret_env: Vec<String>,
        /// Files holding further signing secrets (mounted secrets), signed with after
        /// `secret_env`'s; paths, never contents. Left out of the definition while
        /// empty, so a binding without it keeps the fingerprint it had before it
        /// existed.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        secret_file: Vec<String>,
        /// Bound on one request (the binding's `timeout` still bounds the attempt).
        #[serde(
            rename = "timeout_ms",
            serialize_with = "crate::duration::serialize_ms"
        )]
        timeout: Duration,
        /// Whether a 4xx answer (other than 408, 425 and 429, which are always
        /// retried) is retried per the retry policy instead of dead-lettered at once.
        retry_4xx: bool,
    },
}

/// Default timeout of one `http` handler request: 10 s. A webhook receiver is
/// expected to acknowledge at once and work later (Standard Webhooks and most senders
/// give it a few seconds); a slow one ties up a delivery slot.
pub(crate) const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(10);

fn encoding_name<S: serde::Serializer>(e: &PayloadEncoding, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(e.as_str_name())
}

/// Which failed bindings a dead-letter handler binding reports on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "bindings")]
pub enum DeadLetterScope {
    /// Not a dead-letter handler: an ordinary binding that matches events.
    None,
    /// Every other binding's dead letters.
    All,
    /// The dead letters of these bindings.
    Bindings(Vec<String>),
}

impl DeadLetterScope {
    /// Whether a dead letter of `binding_id` goes to a handler with this scope. A
    /// dead-letter handler never reports on itself.
    pub fn covers(&self, handler_id: &str, binding_id: &str) -> bool {
        handler_id != binding_id
            && match self {
                DeadLetterScope::None => false,
                DeadLetterScope::All => true,
                DeadLetterScope::Bindings(ids) => ids.iter().any(|b| b == binding_id),
            }
    }
}

/// One binding, resolved.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Binding {
    /// Unique id.
    pub id: String,
    /// Source ids it listens to; empty = every source.
    pub sources: Vec<String>,
    /// Event kinds it takes (`issues.opened`; a trailing `*` matches a prefix);
    /// empty = every kind.
    pub events: Vec<String>,
    /// A CEL expression over the event that must be `true` for it to match.
    pub filter: Option<Expression>,
    /// Where its events go.
    pub handler: Handler,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// A CEL expression over the event giving its ordering key.
    pub ordering_key: Option<Expression>,
    /// Attempts in flight at once, in this process.
    pub max_concurrent: usize,
    /// How long one attempt may take.
    #[serde(serialize_with = "crate::duration::serialize_ms")]
    pub timeout: Duration,
    /// Whether (and for which bindings) it handles dead letters. A dead-letter handler
    /// binding takes no events from ingest, only dead letters.
    pub dead_letter_for: DeadLetterScope,
    /// Among due rows, those of a higher priority are claimed first (default 0).
    pub priority: i32,
    /// Rows with equal debounce keys arriving within its window collapse to the last.
    pub debounce: Option<Debounce>,
    /// An event whose dedupe key this binding saw within the retention enqueues nothing
    /// for it.
    pub dedupe: Option<DedupeRule>,
    /// At most so many attempts start per period (applied by the dispatcher).
    pub throttle: Option<Throttle>,
    /// After so many failures in a row, no attempt starts for a while (applied by the
    /// dispatcher).
    pub breaker: Option<BreakerSettings>,
    /// A digest of the definition (everything above but the id; see
    /// [`Binding::definition_fingerprint`]), recorded in each outbox row.
    pub fingerprint: String,
    /// Its version number (`id@vN`), given when the runtime records the version; 0 for
    /// a binding built outside one. Not part of the definition.
    pub version: u32,
}

impl Binding {
    /// A binding of `id` delivering to `handler` with every other option at its
    /// default: all sources, all kinds, no filter, the default retry policy, no
    /// ordering key, [`DEFAULT_MAX_CONCURRENT`], [`DEFAULT_TIMEOUT`], not a dead-letter
    /// handler, priority 0 and no other flow control. Its fingerprint is computed; whoever changes a field afterwards
    /// recomputes it with [`Binding::definition_fingerprint`].
    pub fn new(id: impl Into<String>, handler: Handler) -> Binding {
        let mut b = Binding {
            id: id.into(),
            sources: Vec::new(),
            events: Vec::new(),
            filter: None,
            handler,
            retry: RetryPolicy::default(),
            ordering_key: None,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            timeout: DEFAULT_TIMEOUT,
            dead_letter_for: DeadLetterScope::None,
            priority: 0,
            debounce: None,
            dedupe: None,
            throttle: None,
            breaker: None,
            fingerprint: String::new(),
            version: 0,
        };
        b.fingerprint = b.definition_fingerprint();
        b
    }

    /// Whether this binding is a dead-letter handler.
    pub fn is_dead_letter_handler(&self) -> bool {
        self.dead_letter_for != DeadLetterScope::None
    }

    /// Whether an event of `source` and `kind` passes this binding's `sources` and
    /// `events` (the filter is evaluated separately, as it can fail).
    pub fn takes(&self, source: &str, kind: &str) -> bool {
        (self.sources.is_empty() || self.sources.iter().any(|s| s == source))
            && (self.events.is_empty() || self.events.iter().any(|p| kind_matches(p, kind)))
    }

    /// A digest of the definition: everything but the id and the fingerprint itself,
    /// expressions by their source text. Outbox rows record it, so a row enqueued under
    /// an older definition is recognisable after a reload; two loads of the same text
    /// give the same digest, and any change of meaning gives another. SHA-256 over a
    /// versioned JSON rendering with a fixed field order, as 64 hex digits. The
    /// flow-control options are left out of the rendering while unset (`priority`
    /// while 0), so a binding that sets none of them has the digest it had before they
    /// existed.
    pub fn definition_fingerprint(&self) -> String {
        use sha2::Digest as _;
        #[derive(Serialize)]
        struct Definition<'a> {
            sources: &'a [String],
            events: &'a [String],
            filter: Option<&'a str>,
            handler: &'a Handler,
            retry: &'a RetryPolicy,
            ordering_key: Option<&'a str>,
            max_concurrent: usize,
            timeout_ms: u64,
            dead_letter_for: &'a DeadLetterScope,
            #[serde(skip_serializing_if = "is_zero")]
            priority: i32,
            #[serde(skip_serializing_if = "Option::is_none")]
            debounce: Option<&'a Debounce>,
            #[serde(skip_serializing_if = "Option::is_none")]
            dedupe: Option<&'a DedupeRule>,
            #[serde(skip_serializing_if = "Option::is_none")]
            throttle: Option<&'a Throttle>,
            #[serde(skip_serializing_if = "Option::is_none")]
            breaker: Option<&'a BreakerSettings>,
        }
        fn is_zero(n: &i32) -> bool {
            *n == 0
        }
        let definition = Definition {
            sources: &self.sources,
            events: &self.events,
            filter: self.filter.as_ref().map(Expression::source),
            handler: &self.handler,
            retry: &self.retry,
            ordering_key: self.ordering_key.as_ref().map(Expression::source),
            max_concurrent: self.max_concurrent,
            timeout_ms: self.timeout.as_millis() as u64,
            dead_letter_for: &self.dead_letter_for,
            priority: self.priority,
            debounce: self.debounce.as_ref(),
            dedupe: self.dedupe.as_ref(),
            throttle: self.throttle.as_ref(),
            breaker: self.breaker.as_ref(),
        };
        let json = serde_json::to_vec(&definition).expect("plain data serialises");
        let mut hasher = sha2::Sha256::new();
        hasher.update(FINGERPRINT_VERSION);
        hasher.update(&json);
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Prefix of the fingerprinted text: a change to the rendering bumps it, so no old
/// digest can be mistaken for a new one of a different definition.
const FINGERPRINT_VERSION: &[u8] = b"switchboard-binding-v1\n";

/// Whether event kind `kind` matches `pattern`: equal, or, for a pattern ending in
/// `*`, starting with what comes before it (`issues.*` matches `issues.opened`; `*`
/// matches everything).
pub(crate) fn kind_matches(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => pattern == kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binding setting most of today's options, as written before the flow-control
    /// options existed.
    fn pinned() -> Binding {
        let mut b = Binding::new(
            "pinned",
            Handler::Local {
                connector: "audit".into(),
                capability: "record".into(),
            },
        );
        b.sources = vec!["github-main".into()];
        b.events = vec!["issues.*".into()];
        b.filter = Some(Expression::compile("pinned", "filter", "kind == \"push\"").unwrap());
        b.ordering_key = Some(Expression::compile("pinned", "ordering_key", "source").unwrap());
        b.max_concurrent = 4;
        b
    }

    /// Digests computed before the flow-control options existed: outbox rows and
    /// stored versions record them, so a binding that sets none of the new options
    /// must keep them.
    #[test]
    fn a_binding_without_flow_control_keeps_its_fingerprint() {
        assert_eq!(
            pinned().definition_fingerprint(),
            "4b9a582e52e77be355afa4a199573457d3f96cc582acaec55abf91d1f8b689fe"
        );
        // Written with the default of its time: `max_concurrent` was 16 until issue 36,
        // so a binding that left it unset got a new version at that upgrade (its old
        // rows drained under the old limit), and one that wrote 16 out did not.
        let mut plain = Binding::new("x", Handler::Queue { queue: "q".into() });
        plain.max_concurrent = 16;
        assert_eq!(
            plain.definition_fingerprint(),
            "dfd67a72a5a535f2818fe372f892b8382ddf2a9e2b21d2497b43ea20019aa079"
        );
    }

    #[test]
    fn each_flow_control_option_changes_the_fingerprint() {
        let base = pinned().definition_fingerprint();
        fn key(option: &str) -> Expression {
            Expression::compile("pinned", option, "payload.id").unwrap()
        }
        const SECOND: Duration = Duration::from_secs(1);
        let variants: [fn(&mut Binding); 6] = [
            |b| b.priority = 5,
            |b| b.priority = -5,
            |b| {
                b.debounce = Some(Debounce {
                    key: key("debounce"),
                    window: SECOND,
                })
            },
            |b| {
                b.dedupe = Some(DedupeRule {
                    key: key("dedupe_key"),
                    retention: SECOND,
                })
            },
            |b| {
                b.throttle = Some(Throttle {
                    starts: 3,
                    per: SECOND,
                })
            },
            |b| {
                b.breaker = Some(BreakerSettings {
                    errors: 3,
                    cool_off: SECOND,
                })
            },
        ];
        let mut seen = std::collections::HashSet::from([base]);
        for (i, change) in variants.iter().enumerate() {
            let mut b = pinned();
            change(&mut b);
            assert!(seen.insert(b.definition_fingerprint()), "variant {i}");
        }
    }
}
