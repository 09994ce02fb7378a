//! The sources' report: each source as the runtime hosts it, what its connector adds
//! to that, and its traffic since start. `GET /api/v1/sources` serialises it and the
//! console's sources page renders it, so both show the same facts. Read from the
//! ingress's memory ([`Ingress`]), never from the store.

use serde::Serialize;
use serde_json::Value;

use crate::inbound::SourceKind;
use crate::ingress::hosted::HostedSource;
use crate::ingress::metrics::SourceTally;
use crate::ingress::state::Ingress;

/// Keys of a [`SourceReport`] a source's own description cannot take (its entries under
/// them are dropped: the runtime's facts win).
const REPORT_KEYS: [&str; 12] = [
    "id",
    "provider",
    "kind",
    "kinds",
    "tenant",
    "secrets_configured",
    "max_body_bytes",
    "dedupe_retention_secs",
    "rate_limit",
    "ingress_path",
    "counts",
    "cursor",
];

/// One source as `GET /api/v1/sources` lists it and the console's sources page shows
/// it: the runtime's facts, what its connector adds (`InboundConnector::describe`, at
/// the top level), and its counts since start.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceReport {
    pub(crate) id: String,
    pub(crate) provider: String,
    /// `webhook`, `poll` or `stream`.
    pub(crate) kind: &'static str,
    /// The kinds its connector offers.
    pub(crate) kinds: Vec<&'static str>,
    pub(crate) tenant: String,
    pub(crate) secrets_configured: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) dedupe_retention_secs: i64,
    pub(crate) rate_limit: Option<RateLimitView>,
    /// `/hooks/{id}` for a webhook source.
    pub(crate) ingress_path: Option<String>,
    /// What its connector says of it, less [`REPORT_KEYS`].
    #[serde(flatten)]
    pub(crate) own: serde_json::Map<String, Value>,
    pub(crate) counts: SourceCounts,
}

/// A source's configured rate limit.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct RateLimitView {
    pub(crate) per_second: f64,
    pub(crate) burst: Option<f64>,
}

/// What the console shows of a source's traffic since start: `accepted` (requests
/// whose events were stored), `outcomes` and `refusals` by label, `last_event_ms`,
/// `last_refusal_ms`, and `rate_limit`'s live state. Read from memory, never from the
/// store, so a sources page costs nothing however many events are kept.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceCounts {
    #[serde(flatten)]
    pub(crate) tally: SourceTally,
    pub(crate) rate_limit: Option<BucketState>,
}

/// A rate-limited source's bucket now: `tokens` left, `limited` when below one token
/// (so the next request would get a 429).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct BucketState {
    pub(crate) tokens: f64,
    pub(crate) limited: bool,
}

/// `GET /api/v1/sources`: every source, in configuration order.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourcesReport {
    pub(crate) sources: Vec<SourceReport>,
}

/// The runtime's view of a source, with what its connector adds (`describe`) and its
/// counts.
pub(crate) async fn describe(app: &Ingress, src: &HostedSource, full: bool) -> SourceReport {
    let s = &src.spec;
    let own = match src.source.describe(full).await {
        Value::Object(own) => own
            .into_iter()
            .filter(|(k, _)| !REPORT_KEYS.contains(&k.as_str()))
            .collect(),
        _ => serde_json::Map::new(),
    };
    SourceReport {
        id: s.id.clone(),
        provider: src.provider.clone(),
        kind: src.kind.as_str(),
        kinds: src.connector.kinds().iter().map(|k| k.as_str()).collect(),
        tenant: s.tenant.clone(),
        secrets_configured: src.ctx.secrets().len(),
        max_body_bytes: s.max_body_bytes,
        dedupe_retention_secs: s.retention_ms / 1000,
        rate_limit: s.rate_limit.map(|r| RateLimitView {
            per_second: r.per_second,
            burst: r.burst,
        }),
        ingress_path: (src.kind == SourceKind::Webhook).then(|| format!("/hooks/{}", s.id)),
        own,
        counts: source_counts(app, src),
    }
}

fn source_counts(app: &Ingress, src: &HostedSource) -> SourceCounts {
    let rate_limit = src.bucket.as_ref().map(|b| {
        let tokens = b
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .available(crate::clock::now_ms());
        BucketState {
            tokens,
            limited: tokens < 1.0,
        }
    });
    SourceCounts {
        tally: app.metrics.source_tally(src.id()),
        rate_limit,
    }
}

/// Every source, described, with its counts: the operation behind
/// `GET /api/v1/sources`, for the console to call directly.
pub(crate) async fn list_sources_report(app: &Ingress) -> SourcesReport {
    let mut sources = Vec::with_capacity(app.order.len());
    for s in &app.order {
        sources.push(describe(app, s, false).await);
    }
    SourcesReport { sources }
}
