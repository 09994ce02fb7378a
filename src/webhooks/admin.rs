//! The admin API, on the ingress listener: sources, events, rejections, metrics.
//!
//! - `GET /api/v1/sources`: every source, its provider and options; never a secret
//!   (only how many are configured).
//! - `GET /api/v1/sources/{id}`: one source; for Notion also the captured
//!   `verification_token`, which the operator must paste into Notion's UI to finish
//!   the subscription (it is shown here and nowhere else); for cron the last fire.
//! - `DELETE /api/v1/sources/{id}/verification_token`: forget a captured Notion token,
//!   so the next unsigned verification request is captured (re-subscription).
//! - `GET /api/v1/events?source=&limit=&after=`: newest first; `limit` 1–500 (default
//!   50); `after` is the `next` cursor of the previous page (events older than it).
//! - `GET /api/v1/rejections?source=&limit=`: the newest audit rows.
//! - `GET /metrics`: Prometheus text. `GET /healthz`: liveness.
//!
//! With `admin_token_env` set, `/api/*` and `/metrics` need `Authorization: Bearer
//! <token>` (compared in constant time); without it the admin API is open, which the
//! default loopback listener makes safe.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::config::Rule;
use super::server::{Ingress, LiveSource, NOTION_TOKEN_KEY};
use crate::store::EventQuery;

/// Largest page of events or rejections.
pub(crate) const MAX_PAGE: usize = 500;
/// Page size when `limit` is not given.
pub(crate) const DEFAULT_PAGE: usize = 50;

pub(crate) fn routes() -> Router<Arc<Ingress>> {
    Router::new()
        .route("/api/v1/sources", get(list_sources))
        .route("/api/v1/sources/{id}", get(one_source))
        .route(
            "/api/v1/sources/{id}/verification_token",
            delete(forget_token),
        )
        .route("/api/v1/events", get(events))
        .route("/api/v1/rejections", get(rejections))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
}

fn error(status: StatusCode, reason: &str, message: &str) -> Response {
    (status, Json(json!({"error": reason, "message": message}))).into_response()
}

/// Checks the bearer token when one is configured.
fn authorised(app: &Ingress, headers: &axum::http::HeaderMap) -> Result<(), Refused> {
    let Some(want) = &app.admin_token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let ok =
        given.len() == want.expose().len() && bool::from(given.as_bytes().ct_eq(want.expose()));
    if ok {
        Ok(())
    } else {
        Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the admin API needs Authorization: Bearer <admin token>",
        )))
    }
}

fn describe(src: &LiveSource) -> Value {
    let s = &src.spec;
    let mut v = json!({
        "id": s.id,
        "provider": s.rule.provider_name(),
        "tenant": s.tenant,
        "secrets_configured": s.secrets.len(),
        "max_body_bytes": s.max_body_bytes,
        "dedupe_retention_secs": s.retention_ms / 1000,
        "rate_limit": s.rate_limit.map(|r| json!({"per_second": r.per_second, "burst": r.burst})),
        "ingress_path": format!("/hooks/{}", s.id),
    });
    match &s.rule {
        Rule::Cron(c) => {
            v["schedule"] = json!(c.expression);
            v["timezone"] = json!(c.schedule.timezone());
            v["catch_up"] = json!(format!("{:?}", c.catch_up).to_lowercase());
            v["ingress_path"] = Value::Null;
        }
        Rule::Provider(super::classify::Provider::Notion) => {
            let captured = src
                .notion_token
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .is_some();
            v["verification_token_captured"] = json!(captured);
        }
        Rule::Provider(_) | Rule::Generic(_) => {
            v["timestamp_tolerance_secs"] = json!(s.tolerance_s);
        }
    }
    v
}

async fn list_sources(State(app): State<Arc<Ingress>>, headers: axum::http::HeaderMap) -> Response {
    if let Err(r) = authorised(&app, &headers) {
        return *r;
    }
    let list: Vec<Value> = app
        .order
        .iter()
        .filter_map(|id| app.sources.get(id))
        .map(|s| describe(s))
        .collect();
    Json(json!({ "sources": list })).into_response()
}

async fn one_source(
    State(app): State<Arc<Ingress>>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(r) = authorised(&app, &headers) {
        return *r;
    }
    let Some(src) = app.sources.get(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_source",
            "no source with this id is configured",
        );
    };
    let mut v = describe(src);
    match &src.spec.rule {
        Rule::Provider(super::classify::Provider::Notion) => {
            v["verification_token"] = json!(src
                .notion_token
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone());
        }
        Rule::Cron(_) => match app
            .store
            .backend()
            .get_state(&id, super::ticker::LAST_FIRE_KEY)
            .await
        {
            Ok(last) => v["last_fire_ms"] = json!(last.and_then(|s| s.parse::<i64>().ok())),
            Err(e) => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    &e.to_string(),
                )
            }
        },
        _ => {}
    }
    Json(v).into_response()
}

async fn forget_token(
    State(app): State<Arc<Ingress>>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(r) = authorised(&app, &headers) {
        return *r;
    }
    let Some(src) = app.sources.get(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_source",
            "no source with this id is configured",
        );
    };
    if !matches!(
        src.spec.rule,
        Rule::Provider(super::classify::Provider::Notion)
    ) {
        return error(
            StatusCode::BAD_REQUEST,
            "not_notion",
            "only Notion sources capture a verification token",
        );
    }
    if let Err(e) = app
        .store
        .backend()
        .put_state(&id, NOTION_TOKEN_KEY, None)
        .await
    {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &e.to_string(),
        );
    }
    *src.notion_token.write().unwrap_or_else(|p| p.into_inner()) = None;
    StatusCode::NO_CONTENT.into_response()
}

/// Boxed so the happy path's `Result` stays small.
type Refused = Box<Response>;

#[derive(Deserialize)]
struct Page {
    source: Option<String>,
    limit: Option<String>,
    after: Option<String>,
}

fn parse_limit(limit: Option<&str>) -> Result<usize, Refused> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            _ => Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                "bad_limit",
                &format!("limit must be an integer from 1 to {MAX_PAGE}"),
            ))),
        },
    }
}

async fn events(
    State(app): State<Arc<Ingress>>,
    Query(page): Query<Page>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(r) = authorised(&app, &headers) {
        return *r;
    }
    let limit = match parse_limit(page.limit.as_deref()) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let before_seq = match page.after.as_deref() {
        None | Some("") => None,
        Some(s) => match s.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad_cursor",
                    "after must be the `next` value of a previous page",
                )
            }
        },
    };
    let q = EventQuery {
        source: page.source.filter(|s| !s.is_empty()),
        limit,
        before_seq,
    };
    match app.store.backend().events(&q).await {
        Ok(rows) => {
            let next = if rows.len() == limit {
                rows.last().map(|r| r.seq.to_string())
            } else {
                None
            };
            let events: Vec<&crate::triggers::TriggerEvent> =
                rows.iter().map(|r| &r.event).collect();
            Json(json!({"events": events, "next": next})).into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &e.to_string(),
        ),
    }
}

async fn rejections(
    State(app): State<Arc<Ingress>>,
    Query(page): Query<Page>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(r) = authorised(&app, &headers) {
        return *r;
    }
    let limit = match parse_limit(page.limit.as_deref()) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    match app
        .store
        .backend()
        .rejections(page.source.as_deref().filter(|s| !s.is_empty()), limit)
        .await
    {
        Ok(rows) => {
            let rows: Vec<Value> = rows
                .into_iter()
                .map(|r| {
                    let headers: Value = serde_json::from_str(&r.headers_json).unwrap_or(Value::Null);
                    json!({"source": r.source, "reason": r.reason, "detail": r.detail,
                           "received_at_ms": r.received_at_ms, "headers": headers, "body_len": r.body_len})
                })
                .collect();
            Json(json!({ "rejections": rows })).into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &e.to_string(),
        ),
    }
}

async fn metrics(State(app): State<Arc<Ingress>>, headers: axum::http::HeaderMap) -> Response {
    if let Err(r) = authorised(&app, &headers) {
        return *r;
    }
    let body = app.metrics.render(app.store.stats());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
