//! The runtime's HTTP surface, on one listener: the root router and what it mounts.
//!
//! Each resource has one home:
//!
//! | paths | served by |
//! |---|---|
//! | `POST /hooks/{source_id}` | `ingress::endpoint` (the only route ingress serves) |
//! | `/api/v1/sources…`, `/api/v1/rejections` | [`sources_api`] |
//! | `/api/v1/triggers…`, `/api/v1/outbox…`, `/api/v1/dead-letters…`, `/api/v1/events…`, `/api/v1/queues…` | [`ops_api`] |
//! | `GET /metrics` | here: ingest's families, the sources' own counters, then the dispatcher's and the bindings' (`binding_metrics`) |
//! | `/console…` | `runtime::console` |
//! | `GET /healthz`, `GET /readyz` | `runtime::life` |
//!
//! With `admin_token_env` set, `/api/*` and `/metrics` need `Authorization: Bearer
//! <token>` (compared in constant time); without it they are open, which the default
//! loopback listener makes safe. The console signs in with the same token and keeps a
//! session cookie. The ingress route and the probes never need it.
//!
//! [`listener`] serves the router over HTTP/1 with the bounds on slow clients.

mod api_error;
pub(crate) mod listener;
pub(crate) mod ops_api;
pub(crate) mod sources_api;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use api_error::ApiError;

use super::binding_metrics::RuntimeMetrics;
use super::ops::Operations;
use crate::ingress::state::Ingress;
use crate::secret::Secret;

/// What the root router serves: the parts it mounts and the token that guards the
/// admin half.
pub(crate) struct Surface {
    /// The sources, their endpoint and ingest's metrics.
    pub(crate) ingress: Arc<Ingress>,
    /// The operator verbs the ops API serialises.
    pub(crate) ops: Arc<Operations>,
    /// The dispatcher's and the bindings' part of `/metrics`.
    pub(crate) metrics: Arc<RuntimeMetrics>,
    /// `admin_token_env`'s token, when set.
    pub(crate) admin_token: Option<Secret>,
    /// Ingress requests served at once (`max_concurrent_requests`).
    pub(crate) max_concurrent: usize,
}

/// The ingress route, and the admin API and `/metrics` behind the token check. The
/// caller merges the console and the probes, which guard themselves.
pub(crate) fn router(s: Surface) -> Router {
    let admin = Router::new()
        .route("/metrics", get(metrics))
        .with_state(MetricsParts {
            ingress: s.ingress.clone(),
            runtime: s.metrics,
        })
        .merge(sources_api::routes(s.ingress.clone()))
        .merge(ops_api::routes(s.ops))
        .route_layer(middleware::from_fn_with_state(
            Arc::new(s.admin_token),
            require_token,
        ));
    crate::ingress::endpoint::routes(s.ingress, s.max_concurrent).merge(admin)
}

/// Refuses a request without the configured bearer token (constant-time compare).
async fn require_token(
    State(token): State<Arc<Option<Secret>>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(want) = &*token {
        let given = req.headers().get(header::AUTHORIZATION);
        if !want.is_bearer(given.and_then(|v| v.to_str().ok())) {
            let msg = "the admin API needs Authorization: Bearer <admin token>";
            return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", msg).into_response();
        }
    }
    next.run(req).await
}

/// The two halves `/metrics` renders.
#[derive(Clone)]
struct MetricsParts {
    ingress: Arc<Ingress>,
    runtime: Arc<RuntimeMetrics>,
}

/// `GET /metrics`: one OpenMetrics exposition, rendered at each scrape so gauges that
/// need a store read (outbox depth) are fresh. Each part's `# EOF` terminator goes;
/// the last part keeps its own.
async fn metrics(State(parts): State<MetricsParts>) -> Response {
    let app = &parts.ingress;
    let mut body = app.metrics.render(app.store.stats());
    if let Some(cut) = body.rfind("# EOF") {
        body.truncate(cut);
    }
    body.push_str(&app.counters.render());
    body.push_str(&parts.runtime.render().await);
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}
