//! The HTTP side of the gateway: the socket upgrade route and the JSON API; the
//! approval routes (`auth_api.rs`) are merged in.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::execute::{outcome, ExecuteCall};
use super::state::GatewayState;
use crate::error::Error;
use crate::proto::PayloadEncoding;

pub(crate) fn router(state: Arc<GatewayState>) -> Router {
    // The operator's routes, behind the operator token when one is set.
    let operator = Router::new()
        .route("/api/v1/connectors", get(list))
        .route("/api/v1/connectors/{arn}/execute", post(execute))
        .route("/api/v1/stats", get(stats))
        .route("/metrics", get(metrics))
        .merge(super::auth_api::operator_routes())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_operator,
        ));
    Router::new()
        .route("/socket/connector/websocket", get(upgrade))
        .merge(operator)
        .merge(super::auth_api::routes())
        .with_state(state.clone())
        .merge(super::console::routes(state))
}

/// Lets a request through when no operator token is set, or when it carries
/// `Authorization: Bearer <token>` (compared in constant time); 401 otherwise.
async fn require_operator(
    State(state): State<Arc<GatewayState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(token) = &state.config.admin_token else {
        return next.run(req).await;
    };
    let given = req.headers().get(header::AUTHORIZATION);
    if token.is_bearer(given.and_then(|v| v.to_str().ok())) {
        return next.run(req).await;
    }
    let body = json!({
        "error": "unauthorized",
        "message": "this gateway's HTTP API needs its operator token: Authorization: Bearer <token>"
    });
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(body),
    )
        .into_response()
}

/// Upgrades to the Phoenix socket. Both WebSocket limits are `max_frame_bytes`, so the
/// WebSocket layer refuses an oversized message from its frame headers instead of
/// buffering it first; the socket task is tracked for [`super::Gateway::shutdown`].
async fn upgrade(State(state): State<Arc<GatewayState>>, ws: WebSocketUpgrade) -> Response {
    let limit = state.config.max_frame_bytes;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| {
            let tasks = state.tasks.clone();
            tasks.track_future(super::socket::run(state, socket))
        })
}

async fn list(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.registry().list()).into_response()
}

async fn stats(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.stats()).into_response()
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    let body = state.stats().to_prometheus();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[derive(Deserialize)]
struct ExecuteBody {
    payload: serde_json::Value,
    #[serde(default)]
    capability_id: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

fn error(status: StatusCode, e: impl std::fmt::Display, code: &str) -> Response {
    (
        status,
        Json(json!({ "success": false, "error": e.to_string(), "code": code })),
    )
        .into_response()
}

async fn execute(
    State(state): State<Arc<GatewayState>>,
    Path(arn): Path<String>,
    body: Bytes,
) -> Response {
    let body: ExecuteBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                "body must be {{\"payload\": <json>, \"capability_id\"?, \"timeout_ms\"?}}: {e}"
            ),
                "bad_request",
            )
        }
    };
    let call = ExecuteCall {
        payload: serde_json::to_vec(&body.payload)
            .expect("a JSON value serialises")
            .into(),
        encoding: PayloadEncoding::Json,
        capability_id: body.capability_id.unwrap_or_default(),
        context: Default::default(),
        // Capped at max_execute_timeout inside, like every execute's deadline.
        timeout: body.timeout_ms.map(Duration::from_millis),
    };
    let result = state.execute(&arn, call).await;
    match result {
        Ok(resp) => {
            let out = outcome(resp);
            let status = if out.success {
                StatusCode::OK
            } else {
                StatusCode::BAD_GATEWAY
            };
            (status, Json(out)).into_response()
        }
        Err(e @ Error::NotFound(_)) => error(StatusCode::NOT_FOUND, &e, e.code()),
        Err(e @ Error::Timeout { .. }) => error(StatusCode::GATEWAY_TIMEOUT, &e, e.code()),
        Err(e @ Error::Overloaded(_)) => error(StatusCode::SERVICE_UNAVAILABLE, &e, e.code()),
        Err(e @ Error::PendingApproval(_)) => error(StatusCode::CONFLICT, &e, e.code()),
        Err(e) => error(StatusCode::BAD_GATEWAY, &e, e.code()),
    }
}
