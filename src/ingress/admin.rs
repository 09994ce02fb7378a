//! The admin API, on the ingress listener: sources, events, rejections, metrics.
//!
//! - `GET /api/v1/sources`: every source, its provider, kind and options, plus what
//!   its connector describes, and its `counts` (see [`source_counts`]); never a
//!   secret (only how many are configured).
//! - `GET /api/v1/sources/{id}`: one source, described in full (for Notion the
//!   captured `verification_token`, which the operator must paste into Notion's UI to
//!   finish the subscription; it is shown here and nowhere else); for poll and stream
//!   sources the stored `cursor`; for cron the last fire.
//! - `DELETE /api/v1/sources/{id}/state/{key}`: delete one key of a source's state;
//!   `DELETE /api/v1/sources/{id}/verification_token` is Notion's (forget a captured
//!   token, so the next unsigned verification request is captured: re-subscription).
//! - `GET /api/v1/events?source=&kind=&delivery_id=&since=&until=&limit=&after=`:
//!   newest first; `since`/`until` are received time in unix ms (`since` inclusive,
//!   `until` exclusive); `delivery_id` is the event's dedupe key as stored; `limit`
//!   1–500 (default 50); `after` is the `next` cursor of the previous page (events
//!   older than it). 400 `bad_limit` / `bad_filter` / `bad_cursor` for a value that
//!   does not parse. The search itself is `event_search::list_events`, which the
//!   console calls directly. (`GET /api/v1/events/{id}`, one event with its
//!   deliveries, is the deliver half's: `runtime::admin`.)
//! - `GET /api/v1/rejections?source=&limit=`: the newest audit rows.
//! - `GET /metrics`: Prometheus text. (The probes, `GET /healthz` and `GET /readyz`,
//!   are the runtime's: `runtime::life`.)
//!
//! With `admin_token_env` set, `/api/*` and `/metrics` need `Authorization: Bearer
//! <token>` (compared in constant time); without it the admin API is open, which the
//! default loopback listener makes safe.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::event_search::{list_events, parse_limit, BadFilter, EventFilter};
use super::hosted::{HostedSource, CURSOR_KEY};
use super::metrics::SourceTally;
use super::state::Ingress;
use crate::inbound::SourceKind;

/// The admin routes, behind the bearer-token check when one is configured.
pub(crate) fn routes(state: Arc<Ingress>) -> Router<Arc<Ingress>> {
    Router::new()
        .route("/api/v1/sources", get(list_sources))
        .route("/api/v1/sources/{id}", get(one_source))
        .route(
            "/api/v1/sources/{id}/verification_token",
            delete(forget_token),
        )
        .route("/api/v1/sources/{id}/state/{key}", delete(forget_state))
        .route("/api/v1/events", get(events))
        .route("/api/v1/rejections", get(rejections))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state, require_token))
}

/// An admin API failure, answered as `{"error": reason, "message": …}`.
struct ApiError {
    status: StatusCode,
    reason: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            reason,
            message: message.into(),
        }
    }
}

impl From<crate::Error> for ApiError {
    fn from(e: crate::Error) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            e.to_string(),
        )
    }
}

impl From<BadFilter> for ApiError {
    fn from(e: BadFilter) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, e.reason, e.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": self.reason, "message": self.message})),
        )
            .into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

/// Refuses a request without the configured bearer token (constant-time compare).
pub(crate) async fn require_token(
    State(app): State<Arc<Ingress>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(want) = &app.admin_token {
        let given = req.headers().get(header::AUTHORIZATION);
        if !want.is_bearer(given.and_then(|v| v.to_str().ok())) {
            let msg = "the admin API needs Authorization: Bearer <admin token>";
            return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", msg).into_response();
        }
    }
    next.run(req).await
}

fn find<'a>(app: &'a Ingress, id: &str) -> Result<&'a HostedSource, ApiError> {
    app.sources.get(id).map(|s| &**s).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_source",
            "no source with this id is configured",
        )
    })
}

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

async fn list_sources(State(app): State<Arc<Ingress>>) -> Response {
    Json(list_sources_report(&app).await).into_response()
}

async fn one_source(State(app): State<Arc<Ingress>>, Path(id): Path<String>) -> ApiResult {
    let src = find(&app, &id)?;
    let mut v = json!(describe(&app, src, true).await);
    if src.kind != SourceKind::Webhook {
        v["cursor"] = json!(src.ctx.state().get(CURSOR_KEY).await?);
    }
    Ok(Json(v).into_response())
}

/// Deletes one key of a source's state (through the source's own handle, so a
/// source caching it sees the change).
async fn forget_state(
    State(app): State<Arc<Ingress>>,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult {
    let src = find(&app, &id)?;
    src.ctx.state().put(&key, None).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /api/v1/sources/{id}/verification_token`: Notion's captured token, by the
/// path earlier releases documented.
async fn forget_token(State(app): State<Arc<Ingress>>, Path(id): Path<String>) -> ApiResult {
    forget_state(State(app), Path((id, "verification_token".to_owned()))).await
}

#[derive(Deserialize)]
struct Page {
    source: Option<String>,
    limit: Option<String>,
}

impl Page {
    fn limit(&self) -> Result<usize, ApiError> {
        Ok(parse_limit(self.limit.as_deref())?)
    }

    fn source(&self) -> Option<&str> {
        self.source.as_deref().filter(|s| !s.is_empty())
    }
}

async fn events(
    State(app): State<Arc<Ingress>>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult {
    let filter = EventFilter::parse(&params)?;
    Ok(Json(list_events(&app.store, &filter).await?).into_response())
}

async fn rejections(State(app): State<Arc<Ingress>>, Query(page): Query<Page>) -> ApiResult {
    let rows = app
        .store
        .backend()
        .rejections(page.source(), page.limit()?)
        .await?;
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            let headers: Value = serde_json::from_str(&r.headers_json).unwrap_or(Value::Null);
            json!({"source": r.source, "reason": r.reason, "detail": r.detail,
                   "received_at_ms": r.received_at_ms, "headers": headers, "body_len": r.body_len})
        })
        .collect();
    Ok(Json(json!({ "rejections": rows })).into_response())
}

async fn metrics(State(app): State<Arc<Ingress>>) -> Response {
    let mut body = app.metrics.render(app.store.stats());
    // One exposition: the first part's `# EOF` terminator goes, the last keeps it.
    if let Some(cut) = body.rfind("# EOF") {
        body.truncate(cut);
    }
    body.push_str(&app.counters.render());
    match app.more_metrics.get() {
        Some(more) => body.push_str(&more.render().await),
        None => body.push_str("# EOF\n"),
    }
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}
