//! The ingress endpoint, `POST /hooks/{source_id}`: the one route ingress serves. The
//! runtime's root router (`runtime::http`) mounts it beside the admin API, the
//! console and the probes.
//!
//! Per request: find the source (404), take a rate-limit token (429 + `Retry-After`),
//! read the body under the source's limit (413), let the source's inbound connector
//! judge it (`InboundSource::receive`, within [`RECEIVE_DEADLINE`]), then act: store
//! its events (one: 200 `{"id", "duplicate"}`; a batch: `{"events": [...]}`), send its
//! own response (after storing the events it came with), or refuse (counted per
//! source and reason, and audited). No provider is known here. A store
//! failure answers 503 + `Retry-After` and acknowledges nothing: the sender retries and
//! the dedupe claim makes the retry safe.
//!
//! Bounds on hostile clients: at most `max_concurrent_requests` ingress requests run at
//! once (beyond, 503 `overloaded` + `Retry-After` at once, never a queue); a body not
//! received within `body_read_timeout` is answered 408 and its connection closed
//! (the runtime's listener sets the deadline, [`super::limits::body_deadline`], and
//! the header-read timeout); a full group
//! commit queue answers 503 `overloaded`; a source's `receive` runs under
//! [`RECEIVE_DEADLINE`].
//!
//! Slack wants an answer within 3 s; the only work before the answer is verification
//! (microseconds), matching the trigger bindings (their CEL filters, microseconds) and
//! the group-committed insert (milliseconds), which writes the event and its outbox
//! rows together; anything slower (executing bindings) happens after, from the store.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::json;

use super::hosted::{materialise_each, stored_headers, HostedSource, Origin};
use super::limits::{is_body_timeout, PeerAddr};
use super::redact::redact_headers;
use super::state::Ingress;
use crate::clock::now_ms;
use crate::inbound::{InboundEvent, InboundRequest, InboundResponse, Received, Refusal};
use crate::store::{Appended, Rejected};
use crate::telemetry::{Parent, Span, SpanKind};
use crate::triggers::SignatureStatus;

/// `Retry-After` seconds when the store cannot take a write: long enough for a
/// restarted database to come back, short next to providers' retry schedules.
pub(crate) const STORE_RETRY_AFTER_SECS: u64 = 5;

/// How long a source's `receive` may take before the delivery is answered 503 (and
/// nothing stored): well inside the 10 s that senders such as GitHub wait, so the
/// sender hears a retryable answer rather than timing out.
pub(crate) const RECEIVE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Most events one delivery may become: a batch larger than this is refused (413)
/// rather than held in one transaction.
pub(crate) const MAX_EVENTS_PER_DELIVERY: usize = 1000;

/// `Retry-After` seconds when the listener is at `max_concurrent_requests` or the
/// write queue is full: load that clears as requests finish, in well under a second
/// when it is a burst, so the shortest whole value `Retry-After` can say.
pub(crate) const OVERLOADED_RETRY_AFTER_SECS: u64 = 1;

/// The ingress route, `POST /hooks/{source_id}`, with its state applied.
///
/// It runs at most `max_concurrent` requests at once: tower's concurrency limit
/// behind a load shedder, so a request over the limit is answered 503 at once rather
/// than queued (a queue would hold every hostile client's connection and body). The
/// limit covers this route only, so an operator can still use the admin API during a
/// flood.
pub(crate) fn routes(state: Arc<Ingress>, max_concurrent: usize) -> Router {
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
        .with_state(state)
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

/// The handler. It takes the request whole rather than through the method, URI and
/// header extractors, which would each copy their part out of it.
async fn hook(
    State(app): State<Arc<Ingress>>,
    Path(id): Path<String>,
    peer: Option<Extension<PeerAddr>>,
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    let peer = peer.map(|Extension(PeerAddr(a))| a);
    let (parts, body) = request.into_parts();
    let resp = handle(
        &app,
        &id,
        peer,
        &parts.method,
        &parts.uri,
        &parts.headers,
        body,
    )
    .await;
    app.metrics.observe(started.elapsed().as_secs_f64());
    resp
}

async fn handle(
    app: &Ingress,
    id: &str,
    peer: Option<std::net::SocketAddr>,
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
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(headers.len());
    pairs.extend(
        headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))),
    );
    let limit = source.spec.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let bytes = match declared {
        Some(n) if n > limit as u64 => None,
        _ => match axum::body::to_bytes(body, limit).await {
            Ok(bytes) => Some(bytes),
            Err(e) if is_body_timeout(&e) => return body_timeout(app, id),
            Err(_) => None,
        },
    };
    let Some(bytes) = bytes else {
        let refusal = Refusal::new(
            413,
            "body_too_large",
            format!("the body exceeds this source's limit of {limit} bytes"),
        );
        let len = declared.unwrap_or(limit as u64) as i64;
        return refuse(app, &source, &pairs, len, now, refusal);
    };
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let mut req = InboundRequest::new(method.as_str(), path, &pairs, &bytes, now);
    req.remote_addr = peer;
    let received = match tokio::time::timeout(RECEIVE_DEADLINE, source.source.receive(&req)).await {
        Ok(r) => r,
        Err(_) => {
            app.metrics.outcome(id, "receive_timeout");
            tracing::warn!(
                source = id,
                "the source's receive did not finish within {RECEIVE_DEADLINE:?}"
            );
            let resp = json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "receive_timeout",
                "the source did not judge the delivery in time; nothing was stored, retry later",
            );
            return with_retry_after(resp, STORE_RETRY_AFTER_SECS);
        }
    };
    let body_len = bytes.len() as i64;
    match received {
        Received::Events(events) => match store_events(app, &source, &req, events).await {
            Ok(stored) => {
                app.metrics.outcome(id, stored.outcome());
                axum::Json(stored.answer()).into_response()
            }
            Err(resp) => resp,
        },
        Received::Respond { response, events } => {
            let outcome = if events.is_empty() {
                "handshake"
            } else {
                match store_events(app, &source, &req, events).await {
                    Ok(stored) => stored.outcome(),
                    Err(resp) => return resp,
                }
            };
            app.metrics.outcome(id, outcome);
            into_response(response)
        }
        Received::Reject(refusal) => refuse(app, &source, &pairs, body_len, now, refusal),
    }
}

/// What storing a delivery's events did, one entry per event: the stored (or
/// holding) event's id and whether it was a duplicate.
struct Stored(Vec<(String, bool)>);

impl Stored {
    /// The request's outcome label: `duplicate` when every event was one.
    fn outcome(&self) -> &'static str {
        if !self.0.is_empty() && self.0.iter().all(|(_, dup)| *dup) {
            "duplicate"
        } else {
            "stored"
        }
    }

    /// `{"id", "duplicate"}` for one event, `{"events": [...]}` otherwise.
    fn answer(&self) -> Answer<'_> {
        fn each((id, duplicate): &(String, bool)) -> EventAnswer<'_> {
            EventAnswer {
                id,
                duplicate: *duplicate,
            }
        }
        match self.0.as_slice() {
            [one] => Answer::One(each(one)),
            all => Answer::Many {
                events: all.iter().map(each).collect(),
            },
        }
    }
}

/// The 200 answer's body ([`Stored::answer`]), serialised straight from the ids.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Answer<'a> {
    One(EventAnswer<'a>),
    Many { events: Vec<EventAnswer<'a>> },
}

/// One event of [`Answer`].
#[derive(serde::Serialize)]
struct EventAnswer<'a> {
    id: &'a str,
    duplicate: bool,
}

/// Materialises a delivery's events and commits them (with their claims and outbox
/// rows) in one transaction; the error is the answer to send.
async fn store_events(
    app: &Ingress,
    source: &HostedSource,
    req: &InboundRequest<'_>,
    events: Vec<InboundEvent>,
) -> Result<Stored, Response> {
    let id = source.id();
    let refuse_here = |refusal| {
        let body_len = req.body.len() as i64;
        refuse(
            app,
            source,
            req.headers,
            body_len,
            req.received_at_ms,
            refusal,
        )
    };
    if events.len() > MAX_EVENTS_PER_DELIVERY {
        let refusal = Refusal::new(
            413,
            "too_many_events",
            format!(
                "the delivery normalised into {} events; at most {MAX_EVENTS_PER_DELIVERY} are stored from one",
                events.len()
            ),
        );
        return Err(refuse_here(refusal));
    }
    let headers = stored_headers(req.headers, source.source.secret_headers());
    let mut origin = Origin::untraced(req.received_at_ms, SignatureStatus::Verified)
        .with_sender_context(req.header("traceparent"), req.header("tracestate"));
    // The span that creates the delivery's events (messaging conventions: `create`,
    // kind PRODUCER, destination the source). When it records, its context is the
    // events' creation context, so the attempts nest under ingress, which nests under
    // the sender's span.
    let mut span = Span::start(
        "create",
        id,
        SpanKind::Producer,
        Parent::child_of(origin.trace),
        origin.tracestate.unwrap_or_default(),
        || {
            vec![
                ("messaging.system", "switchboard".into()),
                ("messaging.operation.type", "create".into()),
                ("messaging.operation.name", "create".into()),
                ("messaging.destination.name", id.to_owned().into()),
                (
                    "messaging.batch.message_count",
                    (events.len() as i64).into(),
                ),
                (
                    "switchboard.provider",
                    source.stamp().provider.to_owned().into(),
                ),
            ]
        },
    );
    if span.owns_context() {
        origin.trace = Some(span.context());
    }
    let stored = match materialise_each(source.stamp(), events, &origin, headers) {
        Ok(stored) => stored,
        Err(e) => return Err(refuse_here(Refusal::new(400, "malformed", e.to_string()))),
    };
    match app.committer.commit(source, stored, None).await {
        Ok(appended) => Ok(Stored(
            appended
                .into_iter()
                .map(|a| match a {
                    Appended::Stored(id) => (id, false),
                    Appended::Duplicate(id) => (id, true),
                })
                .collect(),
        )),
        Err(e) => {
            span.fail(|| e.to_string());
            Err(store_unavailable(app, id, &e))
        }
    }
}

/// A source's own answer as an HTTP response.
fn into_response(r: InboundResponse) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
    let mut resp = (status, r.body).into_response();
    // The body's default content type goes if the source names one.
    set_headers(&mut resp, r.headers);
    resp
}

/// Sets a source's headers on `resp`: the first value of a name replaces what is
/// there, later values of the same name are added.
fn set_headers(resp: &mut Response, headers: Vec<(String, String)>) {
    let mut seen = Vec::new();
    for (k, v) in headers {
        let (Ok(k), Ok(v)) = (
            header::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) else {
            continue;
        };
        if seen.contains(&k) {
            resp.headers_mut().append(k, v);
        } else {
            seen.push(k.clone());
            resp.headers_mut().insert(k, v);
        }
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
    source: &HostedSource,
    pairs: &[(&str, &str)],
    body_len: i64,
    now: i64,
    refusal: Refusal,
) -> Response {
    let id = source.id();
    app.metrics.outcome(id, "rejected");
    app.metrics.rejection(id, &refusal.reason);
    tracing::info!(source = id, reason = %refusal.reason, detail = %refusal.detail, "delivery refused");
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
            reason: refusal.reason.to_string(),
            detail: refusal.detail.clone(),
            received_at_ms: now,
            headers_json: serde_json::to_string(&redact_headers(pairs.iter().copied()))
                .unwrap_or_default(),
            body_len,
        });
    }
    if let Some(response) = refusal.response {
        return into_response(response);
    }
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut resp = json_error(status, &refusal.reason, &refusal.detail);
    set_headers(&mut resp, refusal.headers);
    resp
}
