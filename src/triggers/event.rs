//! [`TriggerEvent`], the normalised form of one accepted delivery.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::trace_context::{traceparent_trace_id, TraceParent};

/// How a delivery's authenticity was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureStatus {
    /// A configured (or captured) secret verified the provider's signature.
    Verified,
    /// Produced inside the runtime (a cron tick): there is nothing to verify.
    Internal,
}

impl SignatureStatus {
    /// The stored label.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureStatus::Verified => "verified",
            SignatureStatus::Internal => "internal",
        }
    }

    /// Parses a stored label; unknown labels read as `Verified` would be a lie, so they
    /// are refused.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "verified" => Some(SignatureStatus::Verified),
            "internal" => Some(SignatureStatus::Internal),
            _ => None,
        }
    }
}

/// One accepted delivery, normalised across providers.
///
/// Times are unix milliseconds (UTC): they sort, compare and store the same way in
/// SQLite and PostgreSQL, and the admin API shows them as numbers a client converts.
/// `payload` is the parsed `body` (JSON `null` when a source accepts non-JSON bodies);
/// stores keep only `body` and re-parse it on read, so a row holds one copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TriggerEvent {
    /// Unique id, time-ordered (`evt_` + 12 hex digits of milliseconds + 16 random).
    pub id: String,
    /// The configured source id (`/hooks/{source}`).
    pub source: String,
    /// Provider rule that accepted it: `github`, `slack`, …, `generic_hmac`, `cron`.
    pub provider: String,
    /// Provider-specific kind, e.g. `issues.opened`, `invoice.paid`, `tick`.
    pub kind: String,
    /// When the runtime received it.
    pub received_at_ms: i64,
    /// When the provider says it happened, if the delivery says.
    pub occurred_at_ms: Option<i64>,
    /// The key under which a redelivery is recognised (per source).
    pub dedupe_key: String,
    /// W3C trace id: from an incoming `traceparent` when valid, otherwise new.
    pub trace_id: String,
    /// The W3C trace context the event was created under, as a `traceparent`: the
    /// sender's (continued by the ingress's own span when spans are exported), or a new
    /// root. Every attempt to deliver the event, and every outbox row made from it,
    /// traces from here. Empty for events stored before schema 10.
    #[serde(default)]
    pub traceparent: String,
    /// The sender's `tracestate`, passed on beside `traceparent` unchanged; empty when
    /// the sender sent none or an invalid one.
    #[serde(default)]
    pub tracestate: String,
    /// Tenant the source belongs to.
    pub tenant: String,
    /// Request headers, names lower-cased, sensitive values blanked.
    pub headers: BTreeMap<String, String>,
    /// The raw body exactly as received (signatures were computed over it).
    #[serde(with = "body_text")]
    pub body: Vec<u8>,
    /// The parsed body.
    pub payload: serde_json::Value,
    /// How the delivery was authenticated.
    pub signature: SignatureStatus,
}

impl TriggerEvent {
    /// Builds an event with a fresh id. `payload` is `body` parsed (the caller has
    /// parsed it already to classify it; parsing a 5 KiB body twice per request was
    /// measurable), or JSON `null` for a body that is not JSON. The event's
    /// `traceparent` is a new root in trace `trace_id` (when that is 32 hex digits);
    /// set the field to continue a sender's context instead.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        source: &str,
        provider: &str,
        kind: String,
        received_at_ms: i64,
        occurred_at_ms: Option<i64>,
        dedupe_key: String,
        trace_id: String,
        tenant: &str,
        headers: BTreeMap<String, String>,
        body: Vec<u8>,
        payload: serde_json::Value,
        signature: SignatureStatus,
    ) -> Self {
        let traceparent = u128::from_str_radix(&trace_id, 16)
            .ok()
            .filter(|t| *t != 0 && trace_id.len() == 32)
            .map(|trace_id| root_context(trace_id, rand::random()).header())
            .unwrap_or_default();
        TriggerEvent {
            id: new_event_id(received_at_ms),
            source: source.to_owned(),
            provider: provider.to_owned(),
            kind,
            received_at_ms,
            occurred_at_ms,
            dedupe_key,
            trace_id,
            traceparent,
            tracestate: String::new(),
            tenant: tenant.to_owned(),
            headers,
            body,
            payload,
            signature,
        }
    }
}

/// The randomness an event's identity needs, drawn by the caller so that decision
/// cores (`ingress::ingest::decide`) stay deterministic functions of their inputs:
/// the random half of the event id, and the trace id used when the delivery carries
/// no valid `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdSeed {
    /// The low 64 bits of the event id.
    pub(crate) event: u64,
    /// The trace id of a delivery without a valid `traceparent`.
    pub(crate) trace: u128,
    /// The root span id of a delivery without a valid `traceparent`.
    pub(crate) span: u64,
}

impl IdSeed {
    /// Fresh randomness from the thread's generator.
    pub(crate) fn random() -> Self {
        IdSeed {
            event: rand::random(),
            trace: rand::random(),
            span: rand::random(),
        }
    }
}

/// A new time-ordered event id for an event received at `now_ms`.
pub(crate) fn new_event_id(now_ms: i64) -> String {
    event_id(now_ms, rand::random())
}

/// The event id for `now_ms` and the random part `r`: `evt_` + 12 hex digits of
/// milliseconds + 16 of `r`, so ids sort by time.
pub(crate) fn event_id(now_ms: i64, r: u64) -> String {
    // Written into one allocation of the final size (`format!` would grow it twice).
    let mut id = String::with_capacity(32);
    let _ = write!(id, "evt_{:012x}{:016x}", now_ms.max(0), r);
    id
}

/// The trace id of a W3C `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`) when it
/// is valid by the Recommendation's rules (`crate::trace_context`), otherwise a fresh
/// random one: a bad header from a sender must not become a trace id that collides
/// with others.
pub fn trace_id_from(traceparent: Option<&str>) -> String {
    trace_id_or(traceparent, rand::random())
}

/// The context an event is created under when its sender sent none (or an invalid
/// one): a new root, trace `trace_id`, parent `span_id` (the ingress's span when spans
/// are exported, else an id that names no recorded span), not sampled: nothing here
/// recorded it, so a downstream parent-based sampler decides for itself. Zero ids,
/// which the Recommendation forbids, become one.
pub(crate) fn root_context(trace_id: u128, span_id: u64) -> TraceParent {
    TraceParent {
        trace_id: trace_id.max(1),
        parent_id: span_id.max(1),
        flags: 0,
    }
}

/// [`trace_id_from`] with the fresh id given: `fallback` when `traceparent` is absent
/// or malformed.
pub(crate) fn trace_id_or(traceparent: Option<&str>, fallback: u128) -> String {
    let id = traceparent
        .and_then(traceparent_trace_id)
        .unwrap_or(fallback);
    let mut out = String::with_capacity(32);
    let _ = write!(out, "{id:032x}");
    out
}

/// Bodies are JSON text almost always; the admin API shows them as a string when they
/// are UTF-8 and as `{"base64": …}` when they are not, so no byte is lost either way.
mod body_text {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Binary { base64: String },
    }

    pub(super) fn serialize<S: Serializer>(body: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(body) {
            Ok(text) => Repr::Text(text.to_owned()),
            Err(_) => Repr::Binary {
                base64: base64::engine::general_purpose::STANDARD.encode(body),
            },
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(t) => Ok(t.into_bytes()),
            Repr::Binary { base64 } => base64::engine::general_purpose::STANDARD
                .decode(base64)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_gives_its_trace_id_and_junk_gives_a_fresh_one() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id_from(Some(tp)), "4bf92f3577b34da6a3ce929d0e0e4736");
        let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        // Upper-case hex is not a traceparent (the Recommendation's rule): a fresh id.
        let upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
        assert_ne!(
            trace_id_from(Some(upper)),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        for bad in [Some(zeros), Some(upper), Some("nonsense"), None] {
            let id = trace_id_from(bad);
            assert_eq!(id.len(), 32);
            assert_ne!(id, "00000000000000000000000000000000");
        }
        assert_ne!(trace_id_from(None), trace_id_from(None));
    }

    #[test]
    fn ids_sort_by_time_and_bodies_round_trip_through_json() {
        assert!(new_event_id(1_000) < new_event_id(2_000));
        let mut ev = TriggerEvent::new(
            "s",
            "github",
            "ping".into(),
            5,
            None,
            "k".into(),
            trace_id_from(None),
            "t",
            BTreeMap::new(),
            br#"{"zen":"x"}"#.to_vec(),
            serde_json::json!({"zen": "x"}),
            SignatureStatus::Verified,
        );
        assert_eq!(ev.payload["zen"], "x");
        let back: TriggerEvent =
            serde_json::from_str(&serde_json::to_string(&ev).unwrap()).unwrap();
        assert_eq!(back, ev);
        ev.body = vec![0xff, 0x00, 0x80];
        let json = serde_json::to_value(&ev).unwrap();
        assert!(json["body"]["base64"].is_string());
        let back: TriggerEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back.body, vec![0xff, 0x00, 0x80]);
    }
}
