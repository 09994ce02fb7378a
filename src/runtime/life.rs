//! The runtime process's life as an orchestrator sees it: the probes (`GET /healthz`,
//! `GET /readyz`) and the gate every other request passes while the runtime stops.
//!
//! **Alive** (`/healthz`, always 200 while the listener answers): the process is not
//! wedged; restarting it would not help anything the probe can see.
//!
//! **Ready** (`/readyz`, 200 or 503 with a JSON body naming each check): the store
//! answers and a write could begin at a schema this build knows ([`Backend::ping`]),
//! the sources were started (they are, once the listener serves), the runtime's
//! gateway registration holds an ARN when `[gateway]` is configured, and the runtime
//! is not stopping. A store check is cached for [`STORE_CHECK_TTL`] so a probe storm
//! is one query, and bounded by [`STORE_CHECK_TIMEOUT`], so a hung database reads as
//! not ready instead of hanging the probe. Readiness follows an outage both ways: the
//! next check after the store comes back reads ready again.
//!
//! **Stopping** (the decision, and why): the listener stays open through the stop and
//! answers every request but the probes with 503 and `Retry-After`, rather than
//! closing at once. A load balancer or sender then gets a definite "not here, retry"
//! (the providers that retry, retry on 503; a balancer's retry policy moves the request
//! to another replica), and the orchestrator's probes still read `/readyz` = stopping
//! rather than a refused connection it cannot tell from a crash. Requests that were
//! already being served (a webhook whose write is committing) finish first: the stop
//! waits for them ([`Life::stop_taking_requests`]) before anything below them stops.
//! The listener closes last, after the dispatcher has released what it held.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use tokio_util::task::TaskTracker;

use crate::mux::RegistrationHandle;
use crate::store::Backend;

/// How long one store check's answer is reused: probes every few seconds from
/// several places (kubelet, a balancer) cost one query a second at most.
pub(crate) const STORE_CHECK_TTL: Duration = Duration::from_secs(1);

/// How long a store check may take before it reads as failed: below kubelet's
/// default probe timeout (1 s is its default; operators usually raise it), well
/// above a healthy `SELECT` on either backend.
pub(crate) const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a request gets while the runtime stops: come back in this many seconds
/// (another replica, or this one restarted, will take it).
pub(crate) const STOPPING_RETRY_AFTER_SECS: u64 = 5;

/// The runtime's life: the stop flag, the requests in flight, and what readiness
/// looks at. Shared by the gate middleware, the probes and [`super::Runtime`].
pub(crate) struct Life {
    stopping: AtomicBool,
    /// One token per request in flight behind the gate (probes excluded).
    requests: TaskTracker,
    store: Arc<dyn Backend>,
    registration: Option<RegistrationHandle>,
    sources: usize,
    store_check: Mutex<Option<(Instant, Check)>>,
}

/// One readiness check's result.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Check {
    ok: bool,
    detail: String,
}

impl Check {
    fn pass(detail: impl Into<String>) -> Check {
        Check {
            ok: true,
            detail: detail.into(),
        }
    }

    fn fail(detail: impl Into<String>) -> Check {
        Check {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// The `/readyz` body.
#[derive(Debug, Serialize)]
pub(crate) struct Readiness {
    ready: bool,
    checks: Checks,
}

/// Each readiness check by name.
#[derive(Debug, Serialize)]
struct Checks {
    stopping: Check,
    store: Check,
    sources: Check,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<Check>,
}

impl Life {
    pub(crate) fn new(
        store: Arc<dyn Backend>,
        registration: Option<RegistrationHandle>,
        sources: usize,
    ) -> Arc<Life> {
        Arc::new(Life {
            stopping: AtomicBool::new(false),
            requests: TaskTracker::new(),
            store,
            registration,
            sources,
            store_check: Mutex::new(None),
        })
    }

    /// Readiness goes false and every new request is answered 503; returns once the
    /// requests already admitted have been answered, or at `deadline` with how many
    /// were still running.
    pub(crate) async fn stop_taking_requests(&self, deadline: Duration) -> usize {
        // SeqCst on both sides (here and in `gate`): a request either sees the flag
        // or holds its token before the tracker is closed and waited on.
        self.stopping.store(true, Ordering::SeqCst);
        self.requests.close();
        match tokio::time::timeout(deadline, self.requests.wait()).await {
            Ok(()) => 0,
            Err(_) => self.requests.len(),
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Every check, now.
    pub(crate) async fn readiness(&self) -> Readiness {
        let stopping = if self.is_stopping() {
            Check::fail("the runtime is stopping")
        } else {
            Check::pass("running")
        };
        let store = self.store_check().await;
        let sources = Check::pass(format!("{} started", self.sources));
        let gateway = self.registration.as_ref().map(|r| match r.arn() {
            Some(arn) => Check::pass(format!("registered as {arn}")),
            None => Check::fail(match r.last_error() {
                Some(e) => format!("not registered: {e}"),
                None => "not registered yet (connecting or registering)".to_owned(),
            }),
        });
        let ready = stopping.ok && store.ok && sources.ok && gateway.as_ref().is_none_or(|g| g.ok);
        Readiness {
            ready,
            checks: Checks {
                stopping,
                store,
                sources,
                gateway,
            },
        }
    }

    async fn store_check(&self) -> Check {
        let now = Instant::now();
        if let Some((at, check)) = self.cached() {
            if now.duration_since(at) < STORE_CHECK_TTL {
                return check;
            }
        }
        let check = match tokio::time::timeout(STORE_CHECK_TIMEOUT, self.store.ping()).await {
            Ok(Ok(())) => Check::pass(format!("{} answers", self.store.name())),
            Ok(Err(e)) => Check::fail(format!("{} failed: {e}", self.store.name())),
            Err(_) => Check::fail(format!(
                "{} did not answer within {STORE_CHECK_TIMEOUT:?}",
                self.store.name()
            )),
        };
        let mut cached = self.store_check.lock().unwrap_or_else(|p| p.into_inner());
        let was_ok = cached.as_ref().is_none_or(|(_, c)| c.ok);
        if was_ok != check.ok {
            if check.ok {
                tracing::info!("readiness: the store answers again");
            } else {
                tracing::warn!(detail = %check.detail, "readiness: the store check failed");
            }
        }
        *cached = Some((now, check.clone()));
        check
    }

    fn cached(&self) -> Option<(Instant, Check)> {
        self.store_check
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The probe routes, outside the gate and outside the admin token (a kubelet holds
/// no token; the bodies name checks, not secrets).
pub(crate) fn probes(life: Arc<Life>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(life)
}

async fn healthz() -> Response {
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"alive": true})),
    )
        .into_response()
}

async fn readyz(State(life): State<Arc<Life>>) -> Response {
    let readiness = life.readiness().await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(readiness)).into_response()
}

/// Middleware over every route but the probes: counts the request in flight, or,
/// once the runtime is stopping, answers 503 with `Retry-After` (module doc).
pub(crate) async fn gate(State(life): State<Arc<Life>>, req: Request, next: Next) -> Response {
    // The token first, then the flag: see `Life::stop_taking_requests`.
    let token = life.requests.token();
    if life.is_stopping() {
        drop(token);
        let mut resp = (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({
                "error": "stopping",
                "message": "this runtime is stopping; retry later (another replica, or this one once restarted, takes the request)",
            })),
        )
            .into_response();
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(STOPPING_RETRY_AFTER_SECS),
        );
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    }
    let resp = next.run(req).await;
    drop(token);
    resp
}
