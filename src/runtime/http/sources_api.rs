//! The sources' admin API: the sources themselves, their state, their refusals.
//!
//! - `GET /api/v1/sources`: every source, its provider, kind and options, plus what
//!   its connector describes, and its `counts` (see `ops::sources`); never a
//!   secret (only how many are configured).
//! - `GET /api/v1/sources/{id}`: one source, described in full (for Notion the
//!   captured `verification_token`, which the operator must paste into Notion's UI to
//!   finish the subscription; it is shown here and nowhere else); for poll and stream
//!   sources the stored `cursor`; for cron the last fire.
//! - `DELETE /api/v1/sources/{id}/state/{key}`: delete one key of a source's state;
//!   `DELETE /api/v1/sources/{id}/verification_token` is Notion's (forget a captured
//!   token, so the next unsigned verification request is captured: re-subscription).
//! - `GET /api/v1/rejections?source=&limit=`: the newest audit rows.
//!
//! Behind the admin token like the rest of `/api` (`runtime::http`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::api_error::ApiError;
use crate::inbound::SourceKind;
use crate::ingress::event_search::parse_limit;
use crate::ingress::hosted::{HostedSource, CURSOR_KEY};
use crate::ingress::state::Ingress;
use crate::runtime::ops::sources::{describe, list_sources_report};

/// The sources' routes, with their state applied (the caller adds the token check).
pub(crate) fn routes(state: Arc<Ingress>) -> Router {
    Router::new()
        .route("/api/v1/sources", get(list_sources))
        .route("/api/v1/sources/{id}", get(one_source))
        .route(
            "/api/v1/sources/{id}/verification_token",
            delete(forget_token),
        )
        .route("/api/v1/sources/{id}/state/{key}", delete(forget_state))
        .route("/api/v1/rejections", get(rejections))
        .with_state(state)
}

type ApiResult = Result<Response, ApiError>;

fn find<'a>(app: &'a Ingress, id: &str) -> Result<&'a HostedSource, ApiError> {
    app.sources.get(id).map(|s| &**s).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_source",
            "no source with this id is configured",
        )
    })
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
