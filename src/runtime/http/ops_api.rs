//! The operations' admin API: the routes over [`Operations`], on the runtime's
//! listener behind the admin token (`runtime::http`):
//!
//! - `GET /api/v1/triggers`: every binding, its definition, fingerprint, whether this
//!   process delivers it, and its counts (dispatched, failed, retried, dead-lettered,
//!   in flight).
//! - `POST /api/v1/triggers/reload`: reads the configuration file's `[[triggers]]`
//!   again (as SIGHUP does); 200 `{"changes": [log entries]}`, 422 with the reason when
//!   the file is invalid (nothing changes).
//! - `POST /api/v1/triggers` with `{"trigger": {…a [[triggers]] table…}, "replace":
//!   false}`: registers a dynamic binding (kept in the store, loaded again at start);
//!   201, 409 for an id already registered, 422 for an invalid table.
//!   `PUT /api/v1/triggers/{id}` replaces (or adds) it; `DELETE /api/v1/triggers/{id}`
//!   deregisters it (it drains, then terminates).
//! - `POST /api/v1/triggers/{id}/pause`, `…/resume`, `…/drain`: a paused binding's
//!   events are kept as rows and none starts until it is resumed; a drained one takes
//!   no new events, finishes its rows, and terminates.
//! - `POST /api/v1/triggers/{id}/versions/{n}/pin` and `…/unpin`: a pinned version
//!   stays resolvable for replays however old.
//! - `GET /api/v1/triggers/{id}/history?after=&limit=`: its lifecycle log, oldest
//!   first (`next` pages on).
//! - `POST /api/v1/triggers/{id}/invoke`: the body is the event payload. Without
//!   `?wait=true` it is enqueued for the binding (202 `{"event_id", "duplicate"}`; an
//!   `Idempotency-Key` header makes repeats enqueue nothing). With `?wait=true` it runs
//!   ONE attempt, never retried, and answers 200 with the handler's result, or 422
//!   (validation), 502 (handler error), 503 (overloaded), 504 (timeout) or 500
//!   (platform) with `{"error": kind, "message"}`. A caller that hangs up does not
//!   cancel the attempt; its result is recorded as abandoned.
//! - `POST /api/v1/backfills` with `{"binding", "version"?, "sources"?, "kinds"?,
//!   "since"?, "until"?, "filter"?, "rate"?, "skip_delivered"?, "priority"?,
//!   "dry_run"?}`: starts a backfill of stored events into a binding (201, the job),
//!   or with `"dry_run": true` answers how many events it would read, match, leave
//!   to the binding's filter, skip as handled and enqueue (200), enqueuing nothing.
//!   `since` / `until` are unix ms or RFC 3339. 404 for an unknown binding, 422 for a
//!   bad field (unknown keys included). `GET /api/v1/backfills` lists the jobs newest
//!   first (`{"backfills": [...]}`), `GET /api/v1/backfills/{id}` one, with
//!   `progress`, `walk_rate` and `eta_seconds`; `POST /api/v1/backfills/{id}/pause`,
//!   `…/resume`, `…/cancel` move it (409 from a state it cannot leave that way).
//! - `GET /api/v1/outbox/stats`: due, leased, scheduled, oldest age, per binding and
//!   queue, dead letters, depth drops.
//! - `GET /api/v1/outbox/series`: the outbox depth over the last five minutes,
//!   `{"interval_ms": 1000, "points": [{"at_ms", "due", "leased", "dead_letters"}]}`,
//!   oldest first (`outbox_series`).
//! - `GET /api/v1/dead-letters?binding=&error_kind=&since=&until=&limit=&before=`,
//!   `GET /api/v1/dead-letters/{id}`,
//!   `POST /api/v1/dead-letters/{id}/replay?version=`: a dead letter again, under the
//!   version it ran under (or version N; the live one, with a note, when its own left
//!   memory). `error_kind` is the last attempt's; `since`/`until` bound the time it
//!   was dead-lettered (unix ms); `before` is the previous page's `next`.
//! - `POST /api/v1/dead-letters/replay?binding=&error_kind=&since=&before=&after=&limit=&include_replayed=`
//!   (the same keys may come as a JSON object body): replays the selected dead
//!   letters that were never replayed (all of them with `include_replayed=true`), so
//!   repeating a call, or retrying one a store error cut short, replays nothing twice;
//!   newest first, each as the single replay does, at most `limit` (1–1000,
//!   default 100) per call; `since` / `before` (alias `until`) bound the time they
//!   were dead-lettered (unix ms; `before` exclusive), `after` is the previous call's
//!   `next` (a dead-letter id). 200 `{"replayed": n,
//!   "ids", "failed": [{"id", "error", "message"}], "next"}`; `next` is set when more
//!   may match.
//! - `GET /api/v1/events?source=&kind=&delivery_id=&since=&until=&limit=&after=`:
//!   newest first; `since`/`until` are received time in unix ms (`since` inclusive,
//!   `until` exclusive); `delivery_id` is the event's dedupe key as stored; `limit`
//!   1–500 (default 50); `after` is the `next` cursor of the previous page (events
//!   older than it). 400 `bad_limit` / `bad_filter` / `bad_cursor` for a value that
//!   does not parse. The search itself is `ingress::event_search::list_events`, which
//!   the console calls directly.
//! - `GET /api/v1/events/{id}`: one event with everything that became of it (see
//!   `ops::inspect`): its fields, redacted headers, decoded payload and `deliveries`;
//!   404 `{"error": "unknown_event"}` for an id the store does not hold.
//! - `POST /api/v1/events/{id}/replay?binding=&version=`: a stored event again, to each
//!   binding as it was when the event arrived (see `ops::replay`).
//! - `POST /api/v1/queues/{name}/receive?max=&visibility_ms=`,
//!   `POST /api/v1/queues/{name}/messages/{id}/ack?receipt=`,
//!   `POST /api/v1/queues/{name}/messages/{id}/nack?receipt=&delay_ms=`: the queue
//!   operations for consumers that speak HTTP rather than the execute channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::api_error::ApiError;
use crate::encoding::{encode_payload, Payload};
use crate::ingress::event_search::{list_events, EventFilter};
use crate::outbox::model::DeadLetterQuery;
use crate::runtime::ops::replay::{DeadLetterSelection, MAX_BULK_REPLAY};
use crate::runtime::ops::{ApiTrace, EnqueueRequest, OpError, Operations};
use crate::triggers::backfill::{BackfillSpec, BackfillState};

/// The routes, with their state applied (the caller adds the token check).
pub(crate) fn routes(ops: Arc<Operations>) -> Router {
    Router::new()
        .route("/api/v1/triggers", get(triggers).post(register))
        .route("/api/v1/triggers/reload", post(reload))
        .route("/api/v1/triggers/{id}", put(replace).delete(deregister))
        .route("/api/v1/triggers/{id}/pause", post(pause))
        .route("/api/v1/triggers/{id}/resume", post(resume))
        .route("/api/v1/triggers/{id}/drain", post(drain))
        .route("/api/v1/triggers/{id}/versions/{n}/pin", post(pin))
        .route("/api/v1/triggers/{id}/versions/{n}/unpin", post(unpin))
        .route("/api/v1/triggers/{id}/history", get(history))
        .route("/api/v1/triggers/{id}/invoke", post(invoke))
        .route("/api/v1/outbox/stats", get(stats))
        .route("/api/v1/outbox/series", get(series))
        .route("/api/v1/dead-letters", get(dead_letters))
        .route("/api/v1/dead-letters/replay", post(replay_selected))
        .route("/api/v1/events", get(events))
        .route("/api/v1/events/{id}", get(event_detail))
        .route("/api/v1/dead-letters/{id}", get(dead_letter))
        .route("/api/v1/dead-letters/{id}/replay", post(replay))
        .route("/api/v1/events/{id}/replay", post(replay_event))
        .route("/api/v1/backfills", get(backfills).post(start_backfill))
        .route("/api/v1/backfills/{id}", get(backfill))
        .route("/api/v1/backfills/{id}/{action}", post(change_backfill))
        .route("/api/v1/queues/{name}/receive", post(receive))
        .route("/api/v1/queues/{name}/messages/{id}/ack", post(ack))
        .route("/api/v1/queues/{name}/messages/{id}/nack", post(nack))
        .with_state(ops)
}

fn error(e: OpError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": e.code(), "message": e.message()})),
    )
        .into_response()
}

type Ops = State<Arc<Operations>>;

async fn events(
    State(ops): Ops,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let filter = EventFilter::parse(&params)?;
    Ok(Json(list_events(&ops.store, &filter).await?).into_response())
}

async fn triggers(State(ops): Ops) -> Response {
    Json(ops.triggers()).into_response()
}

fn answer<T: serde::Serialize>(status: StatusCode, r: Result<T, OpError>) -> Response {
    match r {
        Ok(v) => (status, Json(v)).into_response(),
        Err(e) => error(e),
    }
}

async fn reload(State(ops): Ops) -> Response {
    answer(StatusCode::OK, ops.reload().await)
}

async fn register(State(ops): Ops, body: Bytes) -> Response {
    answer(StatusCode::CREATED, ops.register(&body).await)
}

async fn replace(State(ops): Ops, Path(id): Path<String>, body: Bytes) -> Response {
    // The path names the binding; the body is the table, its id optional.
    let mut table: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(OpError::Invalid(format!("the body is not JSON: {e}"))),
    };
    match table.get("id").and_then(|v| v.as_str()) {
        Some(other) if other != id => {
            return error(OpError::Invalid(format!(
                "the body's id {other:?} is not the path's {id:?}"
            )))
        }
        _ => table["id"] = serde_json::Value::String(id),
    }
    let req = json!({"trigger": table, "replace": true}).to_string();
    answer(StatusCode::OK, ops.register(req.as_bytes()).await)
}

async fn deregister(State(ops): Ops, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, ops.deregister(&id).await)
}

async fn pause(State(ops): Ops, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, ops.set_paused(&id, true).await)
}

async fn resume(State(ops): Ops, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, ops.set_paused(&id, false).await)
}

async fn drain(State(ops): Ops, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, ops.drain(&id).await)
}

async fn pin(State(ops): Ops, Path((id, n)): Path<(String, u32)>) -> Response {
    answer(StatusCode::OK, ops.set_pinned(&id, n, true).await)
}

async fn unpin(State(ops): Ops, Path((id, n)): Path<(String, u32)>) -> Response {
    answer(StatusCode::OK, ops.set_pinned(&id, n, false).await)
}

#[derive(Deserialize)]
struct HistoryQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

async fn history(
    State(ops): Ops,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    answer(StatusCode::OK, ops.history(&id, q.after, q.limit).await)
}

#[derive(Deserialize)]
struct InvokeQuery {
    #[serde(default)]
    wait: bool,
}

async fn invoke(
    State(ops): Ops,
    Path(id): Path<String>,
    Query(q): Query<InvokeQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A caller's W3C context: the invocation's spans nest under the caller's.
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if q.wait {
        let trace = ApiTrace {
            trace_id: None,
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
        };
        return match ops.invoke_now(&id, body.to_vec(), 0, trace).await {
            Ok(Payload::Json(v)) => Json(v).into_response(),
            Ok(other) => (StatusCode::OK, encode_payload(&other)).into_response(),
            Err(e) => error(e),
        };
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let req = EnqueueRequest {
        binding: Some(id),
        payload: body.to_vec(),
        idempotency_key: key,
        traceparent: header("traceparent").map(str::to_owned),
        tracestate: header("tracestate").map(str::to_owned),
        ..Default::default()
    };
    match ops.enqueue(req).await {
        Ok(done) => (StatusCode::ACCEPTED, Json(done)).into_response(),
        Err(e) => error(e),
    }
}

async fn stats(State(ops): Ops) -> Response {
    match ops.stats().await {
        Ok(v) => Json(v).into_response(),
        Err(e) => error(e),
    }
}

async fn series(State(ops): Ops) -> Response {
    Json(ops.outbox_series()).into_response()
}

async fn event_detail(State(ops): Ops, Path(id): Path<String>) -> Response {
    match ops.event_detail(&id).await {
        Ok(v) => Json(v).into_response(),
        Err(OpError::NotFound(m)) => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "unknown_event", "message": m})),
        )
            .into_response(),
        Err(e) => error(e),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    binding: Option<String>,
    limit: Option<usize>,
    before: Option<i64>,
    error_kind: Option<String>,
    since: Option<i64>,
    until: Option<i64>,
}

async fn dead_letters(State(ops): Ops, Query(q): Query<ListQuery>) -> Response {
    let query = DeadLetterQuery {
        binding_id: q.binding,
        limit: q.limit.unwrap_or(50),
        before_id: q.before,
        since_ms: q.since,
        until_ms: q.until,
        error_kind: q.error_kind.filter(|k| !k.is_empty()),
        unreplayed: false,
    };
    match ops.dead_letters(query).await {
        Ok(list) => {
            let next = list.last().map(|d| d.id);
            Json(json!({"dead_letters": list, "next": next})).into_response()
        }
        Err(e) => error(e),
    }
}

async fn dead_letter(State(ops): Ops, Path(id): Path<i64>) -> Response {
    match ops.store.backend().dead_letter(id).await {
        Ok(Some(d)) => Json(d).into_response(),
        Ok(None) => error(OpError::NotFound(format!("no dead letter {id}"))),
        Err(e) => error(e.into()),
    }
}

/// The selection of a bulk replay from the query string and, for keys the query
/// does not set, a JSON object body (numbers or strings).
fn selection(query: &HashMap<String, String>, body: &[u8]) -> Result<DeadLetterSelection, OpError> {
    let mut all = query.clone();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| OpError::Invalid(format!("the body is not JSON: {e}")))?;
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let text = match v {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Null => continue,
                        other => other.to_string(),
                    };
                    all.entry(k).or_insert(text);
                }
            }
            serde_json::Value::Null => {}
            _ => return Err(OpError::Invalid("the body must be a JSON object".into())),
        }
    }
    let text = |k: &str| all.get(k).filter(|s| !s.is_empty()).cloned();
    let int = |k: &str| -> Result<Option<i64>, OpError> {
        text(k)
            .map(|s| {
                s.parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| OpError::Invalid(format!("{k} must be a non-negative integer")))
            })
            .transpose()
    };
    let limit = match int("limit")? {
        None => 100,
        Some(n) if (1..=MAX_BULK_REPLAY as i64).contains(&n) => n as usize,
        Some(_) => {
            return Err(OpError::Invalid(format!(
                "limit must be from 1 to {MAX_BULK_REPLAY}"
            )))
        }
    };
    Ok(DeadLetterSelection {
        binding: text("binding"),
        error_kind: text("error_kind"),
        since_ms: int("since")?,
        // `until` as on the dead-letter list; `before` as the issue names it.
        before_ms: int("before")?.or(int("until")?),
        after_id: int("after")?,
        limit,
        include_replayed: match text("include_replayed").as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => {
                return Err(OpError::Invalid(
                    "include_replayed must be true or false".into(),
                ))
            }
        },
    })
}

async fn replay_selected(
    State(ops): Ops,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    match selection(&q, &body) {
        Ok(sel) => answer(StatusCode::OK, ops.replay_dead_letters(&sel).await),
        Err(e) => error(e),
    }
}

#[derive(Deserialize)]
struct ReplayQuery {
    binding: Option<String>,
    version: Option<u32>,
}

async fn replay(State(ops): Ops, Path(id): Path<i64>, Query(q): Query<ReplayQuery>) -> Response {
    answer(StatusCode::OK, ops.replay_dead_letter(id, q.version).await)
}

async fn replay_event(
    State(ops): Ops,
    Path(id): Path<String>,
    Query(q): Query<ReplayQuery>,
) -> Response {
    answer(
        StatusCode::OK,
        ops.replay_event(&id, q.binding.as_deref(), q.version).await,
    )
}

/// A backfill request: the job's fields ([`BackfillSpec`]), `since` / `until` as
/// unix ms or RFC 3339 (aliases of `since_ms` / `until_ms`), and `dry_run`.
#[derive(Deserialize)]
struct BackfillRequest {
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    since: Option<Instant>,
    #[serde(default)]
    until: Option<Instant>,
    #[serde(flatten)]
    spec: serde_json::Map<String, Value>,
}

/// An instant as unix ms or an RFC 3339 text.
#[derive(Deserialize)]
#[serde(untagged)]
enum Instant {
    Ms(i64),
    Text(String),
}

impl Instant {
    fn ms(self, name: &str) -> Result<i64, OpError> {
        match self {
            Instant::Ms(ms) => Ok(ms),
            Instant::Text(t) => chrono::DateTime::parse_from_rfc3339(&t)
                .map(|d| d.timestamp_millis())
                .map_err(|e| {
                    OpError::Invalid(format!(
                        "{name}: {t:?} is neither unix ms nor an RFC 3339 time ({e})"
                    ))
                }),
        }
    }
}

fn backfill_spec(body: &[u8]) -> Result<(BackfillSpec, bool), OpError> {
    let req: BackfillRequest = serde_json::from_slice(body)
        .map_err(|e| OpError::Invalid(format!("backfill request: {e}")))?;
    let mut spec = req.spec;
    for (key, value) in [("since_ms", req.since), ("until_ms", req.until)] {
        if let Some(v) = value {
            spec.insert(key.into(), json!(v.ms(&key[..5])?));
        }
    }
    let spec = serde_json::from_value(Value::Object(spec))
        .map_err(|e| OpError::Invalid(format!("backfill request: {e}")))?;
    Ok((spec, req.dry_run))
}

async fn start_backfill(State(ops): Ops, body: Bytes) -> Response {
    match backfill_spec(&body) {
        Ok((spec, true)) => answer(StatusCode::OK, ops.dry_run_backfill(&spec).await),
        Ok((spec, false)) => answer(StatusCode::CREATED, ops.start_backfill(spec).await),
        Err(e) => error(e),
    }
}

async fn backfills(State(ops): Ops) -> Response {
    answer(
        StatusCode::OK,
        ops.backfills().await.map(|b| json!({ "backfills": b })),
    )
}

async fn backfill(State(ops): Ops, Path(id): Path<i64>) -> Response {
    answer(StatusCode::OK, ops.backfill(id).await)
}

async fn change_backfill(State(ops): Ops, Path((id, action)): Path<(i64, String)>) -> Response {
    let to = match action.as_str() {
        "pause" => BackfillState::Paused,
        "resume" => BackfillState::Running,
        "cancel" => BackfillState::Cancelled,
        other => {
            return error(OpError::NotFound(format!(
                "no backfill action {other:?} (pause, resume, cancel)"
            )))
        }
    };
    answer(StatusCode::OK, ops.set_backfill(id, to).await)
}

#[derive(Deserialize)]
struct ReceiveQuery {
    max: Option<usize>,
    visibility_ms: Option<u64>,
}

async fn receive(
    State(ops): Ops,
    Path(name): Path<String>,
    Query(q): Query<ReceiveQuery>,
) -> Response {
    match ops
        .receive(&name, q.max, q.visibility_ms.map(Duration::from_millis))
        .await
    {
        Ok(got) => Json(json!({"messages": got.messages, "dead_lettered": got.dead_lettered}))
            .into_response(),
        Err(e) => error(e),
    }
}

#[derive(Deserialize)]
struct SettleQuery {
    receipt: i64,
    #[serde(default)]
    delay_ms: u64,
}

async fn ack(
    State(ops): Ops,
    Path((name, id)): Path<(String, i64)>,
    Query(q): Query<SettleQuery>,
) -> Response {
    match ops.ack(&name, id, q.receipt).await {
        Ok(acked) => Json(json!({"acked": acked})).into_response(),
        Err(e) => error(e),
    }
}

async fn nack(
    State(ops): Ops,
    Path((name, id)): Path<(String, i64)>,
    Query(q): Query<SettleQuery>,
) -> Response {
    match ops
        .nack(&name, id, q.receipt, Duration::from_millis(q.delay_ms))
        .await
    {
        Ok(nacked) => Json(json!({"nacked": nacked})).into_response(),
        Err(e) => error(e),
    }
}
