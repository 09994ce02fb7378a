//! The deliver half's admin API, on the same listener and behind the same bearer
//! token as the ingest admin API (`webhooks::admin`):
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
//! - `GET /api/v1/outbox/stats`: due, leased, scheduled, oldest age, per binding and
//!   queue, dead letters, depth drops.
//! - `GET /api/v1/dead-letters?binding=&limit=&before=`, `GET /api/v1/dead-letters/{id}`,
//!   `POST /api/v1/dead-letters/{id}/replay?version=`: a dead letter again, under the
//!   version it ran under (or version N; the live one, with a note, when its own left
//!   memory).
//! - `POST /api/v1/events/{id}/replay?binding=&version=`: a stored event again, to each
//!   binding as it was when the event arrived (see `replay_ops`).
//! - `POST /api/v1/queues/{name}/receive?max=&visibility_ms=`,
//!   `POST /api/v1/queues/{name}/messages/{id}/ack?receipt=`,
//!   `POST /api/v1/queues/{name}/messages/{id}/nack?receipt=&delay_ms=`: the queue
//!   operations for consumers that speak HTTP rather than the execute channel.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::ops::{DeliverOps, EnqueueRequest, OpError};
use crate::encoding::{encode_payload, Payload};
use crate::outbox::model::DeadLetterQuery;

/// The routes, with their state applied (the caller adds the token check).
pub(crate) fn routes(ops: Arc<DeliverOps>) -> Router {
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
        .route("/api/v1/dead-letters", get(dead_letters))
        .route("/api/v1/dead-letters/{id}", get(dead_letter))
        .route("/api/v1/dead-letters/{id}/replay", post(replay))
        .route("/api/v1/events/{id}/replay", post(replay_event))
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

type Ops = State<Arc<DeliverOps>>;

async fn triggers(State(ops): Ops) -> Response {
    Json(ops.triggers()).into_response()
}

fn answer(status: StatusCode, r: Result<serde_json::Value, OpError>) -> Response {
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
    if q.wait {
        return match ops.invoke_now(&id, body.to_vec(), 0, None).await {
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

#[derive(Deserialize)]
struct ListQuery {
    binding: Option<String>,
    limit: Option<usize>,
    before: Option<i64>,
}

async fn dead_letters(State(ops): Ops, Query(q): Query<ListQuery>) -> Response {
    let query = DeadLetterQuery {
        binding_id: q.binding,
        limit: q.limit.unwrap_or(50),
        before_id: q.before,
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
