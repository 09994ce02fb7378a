//! The deliver half's admin API, on the same listener and behind the same bearer
//! token as the ingest admin API (`webhooks::admin`):
//!
//! - `GET /api/v1/triggers`: every binding, its definition, fingerprint, whether this
//!   process delivers it, and its counts (dispatched, failed, retried, dead-lettered,
//!   in flight).
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
//!   `POST /api/v1/dead-letters/{id}/replay`.
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
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::ops::{DeliverOps, EnqueueRequest, OpError};
use crate::encoding::{encode_payload, Payload};
use crate::outbox::model::DeadLetterQuery;

/// The routes, with their state applied (the caller adds the token check).
pub(crate) fn routes(ops: Arc<DeliverOps>) -> Router {
    Router::new()
        .route("/api/v1/triggers", get(triggers))
        .route("/api/v1/triggers/{id}/invoke", post(invoke))
        .route("/api/v1/outbox/stats", get(stats))
        .route("/api/v1/dead-letters", get(dead_letters))
        .route("/api/v1/dead-letters/{id}", get(dead_letter))
        .route("/api/v1/dead-letters/{id}/replay", post(replay))
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

async fn replay(State(ops): Ops, Path(id): Path<i64>) -> Response {
    match ops.replay(id).await {
        Ok(row) => Json(json!({"replayed": id, "row_id": row})).into_response(),
        Err(e) => error(e),
    }
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
