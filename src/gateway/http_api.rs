//! The HTTP side of the gateway: the socket upgrade route and the JSON API; the
//! approval routes (`auth_api.rs`) are merged in.
//!
//! Operator routes (behind the operator token when one is set, [`require_operator`]):
//!
//! - `GET /api/v1/connectors`: every registration, a JSON array (kept as it was for
//!   existing clients; `GET /api/v1/registrations` is the paged form).
//! - `POST /api/v1/connectors/{arn}/execute`: `{"payload", "capability_id"?,
//!   "timeout_ms"?}` → the outcome; 404, 409, 502, 503, 504 as the error says.
//! - `GET /api/v1/stats` (JSON) and `GET /metrics` (Prometheus text): the counters.
//! - `GET /api/v1/registrations/{arn}`: one registration as the listing shows it plus
//!   `capability_schemas` (`[{"id", "name", "description", "input_schema",
//!   "output_schema"}]`, or `null`); 404 for an unknown ARN.
//! - `GET /api/v1/registrations?tenant=&status=&transport=&q=&limit=&after=`: one
//!   page, by ARN, `{"items", "next", "total"}`. Each item is a `/connectors` item plus
//!   `since_ms`, `executes`, `execute_errors`, `execute_timeouts`, `in_flight`,
//!   `invokes_received` (by outcome). `status` is `approved` or `pending`,
//!   `transport` `websocket` or `grpc`, `q` a case-insensitive substring of the ARN
//!   (so of the type and instance), `limit` 1–500 (default 50), `after` the previous
//!   page's `next`; `total` counts every match. Empty values mean "not given".
//! - `GET /api/v1/tenants`: `{"items": [{"tenant_id", "connections",
//!   "registrations", "approved", "pending"}], "unbound_connections"}`.
//! - `GET /api/v1/connections?tenant=&limit=&after=`: one page of open links by id,
//!   `{"items": [{"id", "transport", "tenant_id", "peer", "since_ms",
//!   "registrations", "arns", "in_flight", "invokes_sent"}], "next", "total"}`.
//! - `GET /api/v1/stats/series`: the live chart, `{"interval_ms": 1000, "points":
//!   [{"at_ms", "round_trips", "errors", "latency_p50_ms", "latency_p99_ms"}]}`,
//!   oldest first, at most 300.
//!
//! A bad query parameter (unknown, out of range, not one of the choices) is a 400
//! `{"error": "bad_request", "message": …}` naming it. The views themselves are
//! methods on the gateway's state (`views.rs`), so the console's HTML pages show
//! what these routes answer without calling them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::execute::{outcome, ExecuteCall};
use super::state::GatewayState;
use super::views::{ConnectionsQuery, RegistrationsQuery};
use crate::error::Error;
use crate::proto::PayloadEncoding;

pub(crate) fn router(state: Arc<GatewayState>) -> Router {
    // The operator's routes, behind the operator token when one is set.
    let operator = Router::new()
        .route("/api/v1/connectors", get(list))
        .route("/api/v1/connectors/{arn}/execute", post(execute))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/stats/series", get(series))
        .route("/api/v1/registrations", get(registrations))
        .route("/api/v1/registrations/{arn}", get(registration))
        .route("/api/v1/tenants", get(tenants))
        .route("/api/v1/connections", get(connections))
        .route("/metrics", get(metrics))
        .merge(super::auth_api::operator_routes())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_operator,
        ));
    Router::new()
        .route("/socket/connector/websocket", get(upgrade))
        // The probes: open like the sockets (a kubelet holds no token), and they name
        // no secrets.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
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
/// The peer's address comes from the server's connect info when it was served with
/// it (`server.rs` is), for `GET /api/v1/connections`.
async fn upgrade(
    State(state): State<Arc<GatewayState>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    ws: WebSocketUpgrade,
) -> Response {
    if state.is_stopping() {
        return stopping();
    }
    let limit = state.config.max_frame_bytes;
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr);
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| {
            let tasks = state.tasks.clone();
            tasks.track_future(super::socket::run(state, socket, peer))
        })
}

/// 200 while the process serves HTTP at all.
async fn healthz() -> Response {
    Json(json!({"alive": true})).into_response()
}

/// 200 while the gateway takes sockets and executes; 503 once it has begun to stop,
/// so a balancer sends new connectors elsewhere while the ones connected are told.
async fn readyz(State(state): State<Arc<GatewayState>>) -> Response {
    if state.is_stopping() {
        let body = json!({"ready": false, "checks": {"stopping": {"ok": false, "detail": "the gateway is stopping"}}});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let body = json!({"ready": true, "checks": {"stopping": {"ok": true, "detail": "running"}}});
    Json(body).into_response()
}

/// The answer to a new socket while the gateway stops: the client's reconnect loop
/// tries again (another replica behind the same address, or this one restarted).
fn stopping() -> Response {
    let body = json!({
        "error": "stopping",
        "message": "this gateway is stopping; reconnect in a moment"
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        Json(body),
    )
        .into_response()
}

async fn list(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.registry().list()).into_response()
}

/// The 400 for a query that cannot be used: the message names the parameter.
fn bad_query(message: impl std::fmt::Display) -> Response {
    let body = json!({ "error": "bad_request", "message": message.to_string() });
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

async fn registrations(
    State(state): State<Arc<GatewayState>>,
    query: Result<Query<RegistrationsQuery>, QueryRejection>,
) -> Response {
    match query
        .map_err(|e| e.body_text())
        .and_then(|Query(q)| q.parse().map_err(|e| e.to_string()))
    {
        Ok(filter) => Json(state.registrations_page(&filter)).into_response(),
        Err(message) => bad_query(message),
    }
}

async fn registration(State(state): State<Arc<GatewayState>>, Path(arn): Path<String>) -> Response {
    match state.registration(&arn) {
        Some(detail) => Json(detail).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            format!("no registration {arn}; GET /api/v1/registrations lists them"),
            "not_found",
        ),
    }
}

async fn connections(
    State(state): State<Arc<GatewayState>>,
    query: Result<Query<ConnectionsQuery>, QueryRejection>,
) -> Response {
    match query
        .map_err(|e| e.body_text())
        .and_then(|Query(q)| q.parse().map_err(|e| e.to_string()))
    {
        Ok(filter) => Json(state.connections_page(&filter)).into_response(),
        Err(message) => bad_query(message),
    }
}

async fn tenants(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.tenants()).into_response()
}

async fn series(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.stats_series()).into_response()
}

async fn stats(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.stats()).into_response()
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    let body = state.metrics_text();
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
