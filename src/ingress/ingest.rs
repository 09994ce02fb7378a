//! The built-in webhook providers' decision for one delivery: verify, handle
//! handshakes, normalise into an [`InboundEvent`]. No I/O and no clock: the built-in
//! sources (`super::builtin`) pass the request and the time, then do what the returned
//! [`IngestDecision`] says (store, answer, capture a token). Ids, trace ids and the
//! stored headers are the runtime's, added to every source's events alike
//! (`super::hosted::materialise`).
//!
//! Order of checks, for every provider: the signature first (an unauthenticated body
//! is never parsed beyond what a handshake needs), then the body's shape, then the
//! provider's freshness rule. The one exception is Notion's first request, which is
//! unsigned by design: it is recognised only when no signature header is present and
//! only captured while no verification token is known yet, so a forged "first
//! request" cannot replace a token in use.

// The decision's helpers return `Result<_, Refusal>` so `?` reads as "or refuse";
// a refusal is the cold path (a few per bad delivery), so its size does not matter.
#![allow(clippy::result_large_err)]

use serde_json::Value;

use super::classify::{classify, Provider};
use super::signature::{self, Headers, MacEncoding, Rejection};
use crate::inbound::{InboundEvent, InboundRequest, InboundResponse, Refusal};
use crate::secret::Secret;

/// How a generic HMAC source is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GenericScheme {
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
pub(crate) struct GenericRule {
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

/// What a built-in webhook source verifies and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rule {
    /// A provider with a fixed rule.
    Provider(Provider),
    /// Generic HMAC.
    Generic(GenericRule),
}

/// A built-in webhook source's rule and timestamp tolerance (the secrets are passed
/// per request: they may rotate on reload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebhookSpec {
    /// The rule.
    pub rule: Rule,
    /// Timestamp tolerance in seconds (for rules that check one).
    pub tolerance_s: i64,
}

/// What to do with a delivery, in `inbound`'s own terms but for one case the trait's
/// [`Received`](crate::inbound::Received) cannot say: Notion's token capture, which
/// the source acts on (a state write) before it answers. The built-in source turns
/// the rest into a `Received` one to one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum IngestDecision {
    /// Claim and store this event, then answer 200.
    Store(Box<InboundEvent>),
    /// Answer this and store nothing (a handshake: Slack's `url_verification`).
    Respond(InboundResponse),
    /// Notion's first, unsigned request: persist this verification token, answer 200.
    /// (A [`Secret`]: the token is the key of every later signature.)
    CaptureNotionToken(Secret),
    /// Refuse.
    Refuse(Refusal),
}

fn refuse(status: u16, reason: &'static str, detail: impl Into<String>) -> IngestDecision {
    IngestDecision::Refuse(Refusal::new(status, reason, detail))
}

fn parse_json(body: &[u8]) -> Result<Value, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal::new(
            400,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
        )
    })
}

/// Decides what to do with `req` for `spec`, verifying with `secrets` (any one may
/// verify: rotation). `notion_token` is the verification token captured earlier for
/// this source, if any.
pub(crate) fn decide(
    spec: &WebhookSpec,
    secrets: &[Secret],
    notion_token: Option<&str>,
    req: &InboundRequest<'_>,
) -> IngestDecision {
    match decide_inner(spec, secrets, notion_token, req) {
        Ok(d) => d,
        Err(r) => IngestDecision::Refuse(r),
    }
}

fn decide_inner(
    spec: &WebhookSpec,
    secrets: &[Secret],
    notion_token: Option<&str>,
    req: &InboundRequest<'_>,
) -> Result<IngestDecision, Refusal> {
    let h = req.headers;
    let now_s = req.received_at_ms.div_euclid(1000);
    let keys: Vec<&[u8]> = secrets.iter().map(|s| s.expose()).collect();
    let provider = match &spec.rule {
        Rule::Provider(p) => *p,
        Rule::Generic(g) => return generic(spec, g, &keys, req),
    };
    // A signed but absurd time (near i64::MAX seconds) is no time at all, not an overflow.
    let occurred_s = |v: Option<i64>| v.and_then(|s| s.checked_mul(1000));
    let (body, occurred_at_ms) = match provider {
        Provider::Github => {
            signature::github(&keys, h, req.body)?;
            (parse_json(req.body)?, None)
        }
        Provider::Slack => {
            signature::slack(&keys, h, req.body, now_s, spec.tolerance_s)?;
            let body = parse_json(req.body)?;
            if body.get("type").and_then(Value::as_str) == Some("url_verification") {
                let challenge = body
                    .get("challenge")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Refusal::new(
                            400,
                            "malformed",
                            "url_verification without a challenge string",
                        )
                    })?;
                return Ok(IngestDecision::Respond(InboundResponse {
                    status: 200,
                    headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
                    body: challenge.as_bytes().to_vec(),
                }));
            }
            let at = occurred_s(body.get("event_time").and_then(Value::as_i64));
            (body, at)
        }
        Provider::Linear => {
            signature::linear(&keys, h, req.body)?;
            let body = parse_json(req.body)?;
            let ts_ms = body
                .get("webhookTimestamp")
                .and_then(Value::as_i64)
                .ok_or_else(|| {
                    Refusal::new(
                        400,
                        "malformed",
                        "webhookTimestamp (ms) missing or not an integer",
                    )
                })?;
            check_ms(ts_ms, req.received_at_ms, spec.tolerance_s)?;
            (body, Some(ts_ms))
        }
        Provider::Notion => {
            if h.header("X-Notion-Signature").is_none() {
                return notion_handshake(req.body, notion_token);
            }
            let mut keys = keys.clone();
            keys.extend(notion_token.map(str::as_bytes));
            if keys.is_empty() {
                return Err(Refusal::new(
                    401,
                    "no_verification_token",
                    "no verification token captured yet: Notion's unsigned verification request comes first",
                ));
            }
            signature::notion(&keys, h, req.body)?;
            let body = parse_json(req.body)?;
            let at = body
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.timestamp_millis());
            (body, at)
        }
        Provider::Stripe => {
            signature::stripe(&keys, h, req.body, now_s, spec.tolerance_s)?;
            let body = parse_json(req.body)?;
            let at = occurred_s(body.get("created").and_then(Value::as_i64));
            (body, at)
        }
        Provider::StandardWebhooks => {
            let texts: Vec<&str> = secrets
                .iter()
                .filter_map(|s| std::str::from_utf8(s.expose()).ok())
                .collect();
            signature::standard_webhooks(&texts, h, req.body, now_s, spec.tolerance_s)?;
            let ts = h
                .header("webhook-timestamp")
                .or_else(|| h.header("svix-timestamp"));
            (
                parse_json(req.body)?,
                occurred_s(ts.and_then(|t| t.trim().parse().ok())),
            )
        }
    };
    let c = classify(provider, h, &body)?;
    Ok(store(req, c.kind, c.dedupe_key, occurred_at_ms, body))
}

/// [`signature::check_timestamp`] at millisecond precision (Linear's timestamps are ms).
fn check_ms(ts_ms: i64, now_ms: i64, tolerance_s: i64) -> Result<(), Rejection> {
    let delta = now_ms.saturating_sub(ts_ms);
    let tolerance_ms = tolerance_s.saturating_mul(1000);
    if delta > tolerance_ms {
        Err(Rejection::Stale {
            age_s: delta / 1000,
            tolerance_s,
        })
    } else if delta.saturating_neg() > tolerance_ms {
        Err(Rejection::Future {
            ahead_s: delta.saturating_neg() / 1000,
            tolerance_s,
        })
    } else {
        Ok(())
    }
}

fn notion_handshake(body: &[u8], known: Option<&str>) -> Result<IngestDecision, Refusal> {
    let parsed = parse_json(body)?;
    let Some(token) = parsed.get("verification_token").and_then(Value::as_str) else {
        return Err(Rejection::MissingHeader("X-Notion-Signature").into());
    };
    if known.is_some() {
        return Err(Refusal::new(
            409,
            "verification_token_already_captured",
            "a verification token is already captured for this source; clear it (DELETE /api/v1/sources/{id}/verification_token) to accept a new one",
        ));
    }
    Ok(IngestDecision::CaptureNotionToken(Secret::new(token)))
}

fn generic(
    spec: &WebhookSpec,
    rule: &GenericRule,
    keys: &[&[u8]],
    req: &InboundRequest<'_>,
) -> Result<IngestDecision, Refusal> {
    let h = req.headers;
    match &rule.scheme {
        GenericScheme::Header {
            header,
            prefix,
            encoding,
        } => {
            signature::generic_header(keys, h, req.body, header, prefix, *encoding)?;
        }
        GenericScheme::Authorization => {
            signature::canonical_authorization(
                keys,
                h,
                req.method,
                req.path,
                req.body,
                req.received_at_ms.div_euclid(1000),
                spec.tolerance_s,
            )?;
        }
    }
    let payload = if rule.require_json {
        Some(parse_json(req.body)?)
    } else {
        serde_json::from_slice::<Value>(req.body).ok()
    };
    let kind = rule
        .kind_pointer
        .as_deref()
        .and_then(|p| payload.as_ref()?.pointer(p)?.as_str().map(str::to_owned))
        .unwrap_or_else(|| rule.kind.clone());
    let dedupe_key = match rule.dedupe_header.as_deref() {
        Some(name) => h
            .header(name)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                Refusal::new(
                    400,
                    "missing_header",
                    format!("missing header {name} (this source's dedupe_header)"),
                )
            })?,
        None => {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(req.body);
            format!(
                "sha256:{}",
                digest
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )
        }
    };
    Ok(store(
        req,
        kind,
        dedupe_key,
        None,
        payload.unwrap_or(Value::Null),
    ))
}

fn store(
    req: &InboundRequest<'_>,
    kind: String,
    dedupe_key: String,
    occurred_at_ms: Option<i64>,
    payload: Value,
) -> IngestDecision {
    // PostgreSQL TEXT cannot hold NUL, and a kind or key with one is no real delivery:
    // refuse it here rather than fail the whole group-commit batch it would join.
    if kind.contains('\0') || dedupe_key.contains('\0') {
        return refuse(
            400,
            "malformed",
            "the kind or dedupe key contains a NUL character",
        );
    }
    IngestDecision::Store(Box::new(
        InboundEvent::new(kind, dedupe_key, payload)
            .occurred_at(occurred_at_ms)
            .with_body(req.body),
    ))
}
