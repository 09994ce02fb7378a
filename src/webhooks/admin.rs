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
use serde::Deserialize;
use serde_json::{json, Value};

use super::event_search::{list_events, parse_limit, BadFilter, EventFilter};
use super::hosted::{HostedSource, CURSOR_KEY};
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

/// The runtime's view of a source, with what its connector adds (`describe`).
pub(crate) async fn describe(src: &HostedSource, full: bool) -> Value {
    let s = &src.spec;
    let webhook = src.kind == SourceKind::Webhook;
    let mut v = json!({
        "id": s.id,
        "provider": src.provider,
        "kind": src.kind.as_str(),
        "kinds": src.connector.kinds().iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        "tenant": s.tenant,
        "secrets_configured": src.ctx.secrets().len(),
        "max_body_bytes": s.max_body_bytes,
        "dedupe_retention_secs": s.retention_ms / 1000,
        "rate_limit": s.rate_limit.map(|r| json!({"per_second": r.per_second, "burst": r.burst})),
        "ingress_path": webhook.then(|| format!("/hooks/{}", s.id)),
    });
    if let Value::Object(own) = src.source.describe(full).await {
        for (k, val) in own {
            v.as_object_mut()
                .expect("an object")
                .entry(k)
                .or_insert(val);
        }
    }
    v
}

/// What the console shows of a source's traffic since start: `accepted` (requests
/// whose events were stored), `outcomes` and `refusals` by label, `last_event_ms`,
/// `last_refusal_ms`, and `rate_limit`'s live state (`tokens` now, `limited` when
/// below one token, so the next request would get a 429). Read from memory, never
/// from the store, so a sources page costs nothing however many events are kept.
pub(crate) fn source_counts(app: &Ingress, src: &HostedSource) -> Value {
    let mut counts = serde_json::to_value(app.metrics.source_tally(src.id())).unwrap_or_default();
    let limit = src.bucket.as_ref().map(|b| {
        let tokens = b
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .available(crate::clock::now_ms());
        json!({"tokens": tokens, "limited": tokens < 1.0})
    });
    counts["rate_limit"] = json!(limit);
    counts
}

/// Every source, described, with its counts: the operation behind
/// `GET /api/v1/sources`, for the console to call directly.
pub(crate) async fn list_sources_value(app: &Ingress) -> Value {
    let mut list = Vec::with_capacity(app.order.len());
    for s in &app.order {
        let mut v = describe(s, false).await;
        v["counts"] = source_counts(app, s);
        list.push(v);
    }
    json!({ "sources": list })
}

async fn list_sources(State(app): State<Arc<Ingress>>) -> Response {
    Json(list_sources_value(&app).await).into_response()
}

async fn one_source(State(app): State<Arc<Ingress>>, Path(id): Path<String>) -> ApiResult {
    let src = find(&app, &id)?;
    let mut v = describe(src, true).await;
    v["counts"] = source_counts(&app, src);
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
