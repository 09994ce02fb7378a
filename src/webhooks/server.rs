//! The ingress endpoint, `POST /hooks/{source_id}`, and the router that also carries
//! the admin API ([`super::admin`]).
//!
//! Per request: find the source (404), take a rate-limit token (429 + `Retry-After`),
//! read the body under the source's limit (413), let [`super::ingest::decide`] judge
//! it, then act: store and answer 200 `{"id", "duplicate"}`, answer a handshake, capture
//! a Notion token, or refuse (counted per source and reason, and audited). A store
//! failure answers 503 + `Retry-After` and acknowledges nothing: the sender retries and
//! the dedupe claim makes the retry safe.
//!
//! Bounds on hostile clients: at most `max_concurrent_requests` ingress requests run at
//! once (beyond, 503 `overloaded` + `Retry-After` at once, never a queue); a body not
//! received within `body_read_timeout` is answered 408 and its connection closed
//! ([`super::listener`] sets the deadline and the header-read timeout); a full group
//! commit queue answers 503 `overloaded`; Notion token re-checks are bounded in
//! [`super::notion`].
//!
//! Slack wants an answer within 3 s; the only work before the answer is verification
//! (microseconds), matching the trigger bindings (their CEL filters, microseconds) and
//! the group-committed insert (milliseconds), which writes the event and its outbox
//! rows together; anything slower (executing bindings) happens after, from the store.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::json;

use super::classify::Provider;
use super::ingest::{decide, IngestDecision, Refusal, Request};
use super::notion::NOTION_TOKEN_KEY;
use super::redact::redact_headers;
use super::source::Rule;
use super::state::{Ingress, LiveSource};
use crate::store::{now_ms, Appended, Rejected};
use crate::triggers::IdSeed;

/// `Retry-After` seconds when the store cannot take a write: long enough for a
/// restarted database to come back, short next to providers' retry schedules.
pub(crate) const STORE_RETRY_AFTER_SECS: u64 = 5;

/// `Retry-After` seconds when the listener is at `max_concurrent_requests` or the
/// write queue is full: load that clears as requests finish, in well under a second
/// when it is a burst, so the shortest whole value `Retry-After` can say.
pub(crate) const OVERLOADED_RETRY_AFTER_SECS: u64 = 1;

/// The whole HTTP surface: ingress, the ingest admin API, and `deliver` (the deliver
/// half's admin routes, state applied), which gets the same bearer-token check.
///
/// Ingress runs at most `max_concurrent` requests at once: tower's concurrency limit
/// behind a load shedder, so a request over the limit is answered 503 at once rather
/// than queued (a queue would hold every hostile client's connection and body). The
/// admin API is outside the limit, so an operator can still look during a flood.
pub(crate) fn router(state: Arc<Ingress>, deliver: Router, max_concurrent: usize) -> Router {
    let deliver = deliver.route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        super::admin::require_token,
    ));
    let metrics = state.metrics.clone();
    let shed = tower::ServiceBuilder::new()
        .layer(axum::error_handling::HandleErrorLayer::new(
            move |_: tower::BoxError| {
                let metrics = metrics.clone();
                async move {
                    metrics.outcome("", "overloaded");
                    overloaded("the listener is at max_concurrent_requests; retry later")
                }
            },
        ))
        .load_shed()
        .concurrency_limit(max_concurrent);
    Router::new()
        .route("/hooks/{source_id}", post(hook).layer(shed))
        .merge(super::admin::routes(state.clone()))
        .with_state(state)
        .merge(deliver)
}

fn json_error(status: StatusCode, reason: &str, detail: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": reason, "message": detail})),
    )
        .into_response()
}

fn overloaded(detail: &str) -> Response {
    let resp = json_error(StatusCode::SERVICE_UNAVAILABLE, "overloaded", detail);
    with_retry_after(resp, OVERLOADED_RETRY_AFTER_SECS)
}

fn with_retry_after(mut resp: Response, secs: u64) -> Response {
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

async fn hook(
    State(app): State<Arc<Ingress>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let resp = handle(&app, &id, &method, &uri, &headers, body).await;
    app.metrics.observe(started.elapsed().as_secs_f64());
    resp
}

async fn handle(
    app: &Ingress,
    id: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let Some(source) = app.sources.get(id).cloned() else {
        app.metrics.outcome("", "unknown_source");
        return json_error(
            StatusCode::NOT_FOUND,
            "unknown_source",
            "no source with this id is configured",
        );
    };
    let now = now_ms();
    if let Some(bucket) = &source.bucket {
        let taken = bucket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_take(now);
        if let Err(secs) = taken {
            app.metrics.outcome(id, "rate_limited");
            let resp = json_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "this source's rate limit is exhausted; retry later",
            );
            return with_retry_after(resp, secs);
        }
    }
    let slack = matches!(source.spec.rule, Rule::Provider(Provider::Slack));
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
        .collect();
    let limit = source.spec.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let bytes = match declared {
        Some(n) if n > limit as u64 => None,
        _ => match axum::body::to_bytes(body, limit).await {
            Ok(bytes) => Some(bytes),
            Err(e) if super::listener::is_body_timeout(&e) => return body_timeout(app, id),
            Err(_) => None,
        },
    };
    let Some(bytes) = bytes else {
        let refusal = Refusal {
            status: 413,
            reason: "body_too_large",
            detail: format!("the body exceeds this source's limit of {limit} bytes"),
        };
        return refuse(
            app,
            &source,
            &pairs,
            declared.unwrap_or(limit as u64) as i64,
            now,
            refusal,
            slack,
        );
    };
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let req = Request {
        method: method.as_str(),
        path,
        headers: &pairs,
        body: &bytes,
        now_ms: now,
        ids: IdSeed::random(),
    };
    let judged_with = source.notion_token();
    let mut decision = decide(&source.spec, judged_with.as_deref(), &req);
    if let Some(d) = source
        .notion
        .recheck(
            &source.spec,
            &app.store,
            &app.metrics,
            &req,
            &decision,
            judged_with.as_deref(),
        )
        .await
    {
        decision = d;
    }
    let refuse_here = |refusal| {
        refuse(
            app,
            &source,
            &pairs,
            bytes.len() as i64,
            now,
            refusal,
            slack,
        )
    };
    match decision {
        IngestDecision::Store(event) => {
            let event_id = event.id.clone();
            let rows = app.router.route(&event);
            match app
                .store
                .append_enqueue(*event, now + source.spec.retention_ms, rows)
                .await
            {
                Ok(Appended::Stored(_)) => {
                    app.metrics.outcome(id, "stored");
                    axum::Json(json!({"id": event_id, "duplicate": false})).into_response()
                }
                Ok(Appended::Duplicate(existing)) => {
                    app.metrics.outcome(id, "duplicate");
                    axum::Json(json!({"id": existing, "duplicate": true})).into_response()
                }
                Err(e) => store_unavailable(app, id, &e),
            }
        }
        IngestDecision::Reply {
            status,
            content_type,
            body,
        } => {
            app.metrics.outcome(id, "handshake");
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        IngestDecision::CaptureNotionToken(token) => {
            // The token came out of a JSON string, so it is UTF-8.
            let token = String::from_utf8_lossy(token.expose()).into_owned();
            let _capturing = source.capture.lock().await;
            // Atomic in the store too, so of several processes only one captures.
            match app
                .store
                .backend()
                .put_state_if_absent(id, NOTION_TOKEN_KEY, &token)
                .await
            {
                Err(e) => return store_unavailable(app, id, &e),
                Ok(Some(existing)) => {
                    source.set_notion_token(Some(existing));
                    let refusal = Refusal {
                        status: 409,
                        reason: "verification_token_already_captured",
                        detail: "a verification token is already captured for this source".into(),
                    };
                    return refuse_here(refusal);
                }
                Ok(None) => source.set_notion_token(Some(token)),
            }
            app.metrics.outcome(id, "handshake");
            tracing::info!(
                source = id,
                "captured the Notion verification token; see GET /api/v1/sources/{id}"
            );
            axum::Json(json!({"captured": "verification_token"})).into_response()
        }
        IngestDecision::Refuse(refusal) => refuse_here(refusal),
    }
}

/// A body not received within `body_read_timeout`: 408, and `Connection: close` so
/// hyper drops the connection rather than wait for the rest of a body nobody reads.
fn body_timeout(app: &Ingress, id: &str) -> Response {
    app.metrics.outcome(id, "body_timeout");
    let mut resp = json_error(
        StatusCode::REQUEST_TIMEOUT,
        "body_timeout",
        "the body did not arrive within body_read_timeout",
    );
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

fn store_unavailable(app: &Ingress, id: &str, e: &crate::Error) -> Response {
    if let crate::Error::Overloaded(m) = e {
        // The group commit's queue is full (count or bytes): shed, nothing stored.
        app.metrics.outcome(id, "overloaded");
        return overloaded(m);
    }
    app.metrics.outcome(id, "store_unavailable");
    tracing::warn!(source = id, error = %e, "store unavailable; answered 503");
    let resp = json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        "the event store cannot take writes right now; nothing was stored, retry later",
    );
    with_retry_after(resp, STORE_RETRY_AFTER_SECS)
}

fn refuse(
    app: &Ingress,
    source: &LiveSource,
    pairs: &[(&str, &str)],
    body_len: i64,
    now: i64,
    refusal: Refusal,
    slack: bool,
) -> Response {
    let id = source.spec.id.as_str();
    app.metrics.outcome(id, "rejected");
    app.metrics.rejection(id, refusal.reason);
    tracing::info!(source = id, reason = refusal.reason, detail = %refusal.detail, "delivery refused");
    let audit = source
        .audit_bucket
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .try_take(now);
    if audit.is_err() {
        app.metrics.audit_skipped(id);
    } else {
        app.store.reject(Rejected {
            source: id.to_owned(),
            reason: refusal.reason.to_owned(),
            detail: refusal.detail.clone(),
            received_at_ms: now,
            headers_json: serde_json::to_string(&redact_headers(pairs.iter().copied()))
                .unwrap_or_default(),
            body_len,
        });
    }
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut resp = json_error(status, refusal.reason, &refusal.detail);
    if slack && status.is_client_error() {
        // Slack retries a failed delivery three times; a refusal will not get better.
        resp.headers_mut()
            .insert("x-slack-no-retry", HeaderValue::from_static("1"));
    }
    resp
}
