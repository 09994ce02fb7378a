//! The runtime's own registration: a connector whose capabilities drive the outbox, so
//! other connectors and gateway callers enqueue, invoke bindings, pull queues and
//! inspect dead letters through the execute channel like any other capability.
//!
//! Each capability takes and returns JSON and is described with JSON schemas in
//! [`BaseConnector::capabilities`]. Errors come back with the crate's stable codes:
//! `not_found`, `payload` (invalid input), `overloaded`, `store_unavailable`, and
//! `connector` with the failure kind first (`handler: …`, `timeout: …`) for a
//! synchronous attempt that failed.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::ops::{ApiTrace, EnqueueRequest, OpError, Operations};
use crate::connector::{BaseConnector, ExecuteContext};
use crate::context_keys::CONTEXT_DEPTH;
use crate::encoding::Payload;
use crate::error::{Error, Result};
use crate::outbox::model::DeadLetterQuery;
use crate::proto::TaskTypeSchema;

/// The capability ids.
pub(crate) const CAPABILITIES: [&str; 10] = [
    "outbox.enqueue",
    "triggers.invoke",
    "triggers.register",
    "triggers.deregister",
    "queue.receive",
    "queue.ack",
    "queue.nack",
    "dead_letters.list",
    "dead_letters.replay",
    "outbox.stats",
];

/// The runtime as a connector.
///
/// Its operations are set once the runtime is wired ([`OpsSlot`]): the registration
/// must exist before the handlers that deliver over it, and those before the
/// operations that use them; an execute that arrives in between is refused as
/// `overloaded`, which callers retry.
pub(crate) struct RuntimeConnector {
    ops: OpsSlot,
    connector_type: String,
}

/// Where the runtime's operations are put once they exist.
pub(crate) type OpsSlot = Arc<std::sync::OnceLock<Arc<Operations>>>;

impl RuntimeConnector {
    /// A connector of `connector_type` over the operations `ops` will hold.
    pub(crate) fn new(ops: OpsSlot, connector_type: impl Into<String>) -> RuntimeConnector {
        RuntimeConnector {
            ops,
            connector_type: connector_type.into(),
        }
    }

    fn ops(&self) -> Result<&Operations> {
        self.ops
            .get()
            .map(|o| &**o)
            .ok_or_else(|| Error::Overloaded("the runtime is still starting; retry".into()))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnqueueInput {
    binding: Option<String>,
    queue: Option<String>,
    #[serde(default)]
    payload: Value,
    kind: Option<String>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InvokeInput {
    binding: String,
    #[serde(default)]
    payload: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiveInput {
    queue: String,
    max: Option<usize>,
    visibility_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleInput {
    queue: String,
    id: i64,
    receipt: i64,
    #[serde(default)]
    delay_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListInput {
    binding: Option<String>,
    limit: Option<usize>,
    before: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayInput {
    id: i64,
    /// Replay under this version of the binding instead of the one it ran under.
    #[serde(default)]
    version: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeregisterInput {
    id: String,
}

fn input<T: for<'de> Deserialize<'de>>(payload: &Payload, capability: &str) -> Result<T> {
    let value = match payload {
        Payload::Json(v) => v.clone(),
        _ => return Err(Error::Payload(format!("{capability} takes a JSON object"))),
    };
    let value = if value.is_null() { json!({}) } else { value };
    serde_json::from_value(value).map_err(|e| Error::Payload(format!("{capability}: {e}")))
}

/// The depth of events produced from inside `ctx`: one more than the delivery it was
/// made in, or 0 from outside any delivery.
fn produced_depth(ctx: &ExecuteContext) -> u32 {
    ctx.get(CONTEXT_DEPTH)
        .and_then(|d| d.parse::<u32>().ok())
        .map_or(0, |d| d.saturating_add(1))
}

fn ok(v: Value) -> Result<Payload> {
    Ok(Payload::Json(v))
}

fn op<T>(r: std::result::Result<T, OpError>) -> Result<T> {
    r.map_err(OpError::into_error)
}

#[async_trait]
impl BaseConnector for RuntimeConnector {
    fn connector_type(&self) -> &str {
        &self.connector_type
    }

    fn version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }

    async fn execute(&self, payload: Payload, capability_id: Option<&str>) -> Result<Payload> {
        let ctx = ExecuteContext::detached("", Default::default());
        self.execute_with_context(payload, capability_id, &ctx)
            .await
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        capability_id: Option<&str>,
        ctx: &ExecuteContext,
    ) -> Result<Payload> {
        let cap = capability_id.unwrap_or_default();
        let ops = self.ops()?;
        let trace = ApiTrace::of_context(|k| ctx.get(k).map(String::as_str));
        match cap {
            "outbox.enqueue" => {
                let i: EnqueueInput = input(&payload, cap)?;
                let done = op(ops
                    .enqueue(EnqueueRequest {
                        binding: i.binding,
                        queue: i.queue,
                        payload: serde_json::to_vec(&i.payload).unwrap_or_default(),
                        kind: i.kind,
                        idempotency_key: i.idempotency_key,
                        depth: produced_depth(ctx),
                        trace_id: trace.trace_id.map(str::to_owned),
                        traceparent: trace.traceparent.map(str::to_owned),
                        tracestate: trace.tracestate.map(str::to_owned),
                    })
                    .await)?;
                ok(serde_json::to_value(done).unwrap_or(Value::Null))
            }
            "triggers.invoke" => {
                let i: InvokeInput = input(&payload, cap)?;
                let body = serde_json::to_vec(&i.payload).unwrap_or_default();
                op(ops
                    .invoke_now(&i.binding, body, produced_depth(ctx), trace)
                    .await)
            }
            "triggers.register" => {
                let v: Value = input(&payload, cap)?;
                ok(op(ops.register(v.to_string().as_bytes()).await)?)
            }
            "triggers.deregister" => {
                let i: DeregisterInput = input(&payload, cap)?;
                ok(op(ops.deregister(&i.id).await)?)
            }
            "queue.receive" => {
                let i: ReceiveInput = input(&payload, cap)?;
                let got = op(ops
                    .receive(
                        &i.queue,
                        i.max,
                        i.visibility_timeout_ms.map(Duration::from_millis),
                    )
                    .await)?;
                ok(json!({ "messages": got.messages, "dead_lettered": got.dead_lettered }))
            }
            "queue.ack" => {
                let i: SettleInput = input(&payload, cap)?;
                let acked = op(ops.ack(&i.queue, i.id, i.receipt).await)?;
                ok(json!({ "acked": acked }))
            }
            "queue.nack" => {
                let i: SettleInput = input(&payload, cap)?;
                let nacked = op(ops
                    .nack(&i.queue, i.id, i.receipt, Duration::from_millis(i.delay_ms))
                    .await)?;
                ok(json!({ "nacked": nacked }))
            }
            "dead_letters.list" => {
                let i: ListInput = input(&payload, cap)?;
                let list = op(ops
                    .dead_letters(DeadLetterQuery {
                        binding_id: i.binding,
                        limit: i.limit.unwrap_or(50),
                        before_id: i.before,
                        ..DeadLetterQuery::default()
                    })
                    .await)?;
                let next = list.last().map(|d| d.id);
                ok(json!({ "dead_letters": list, "next": next }))
            }
            "dead_letters.replay" => {
                let i: ReplayInput = input(&payload, cap)?;
                ok(json!(op(ops.replay_dead_letter(i.id, i.version).await)?))
            }
            "outbox.stats" => ok(json!(op(ops.stats().await)?)),
            other => Err(Error::NotFound(format!(
                "capability {other:?}; this runtime offers {}",
                CAPABILITIES.join(", ")
            ))),
        }
    }

    fn capabilities(&self) -> Vec<TaskTypeSchema> {
        schemas()
    }
}

fn schema(id: &str, description: &str, input: Value, output: Value) -> TaskTypeSchema {
    TaskTypeSchema {
        task_type_id: id.to_owned(),
        name: id.to_owned(),
        description: description.to_owned(),
        category: "switchboard".to_owned(),
        input_schema_json: input.to_string(),
        output_schema_json: output.to_string(),
        ..Default::default()
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The capabilities with their JSON schemas.
pub(crate) fn schemas() -> Vec<TaskTypeSchema> {
    let id = json!({"type": "integer"});
    let dead_letter = json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "binding_id": {"type": "string"},
        "event_id": {"type": "string"}, "attempts": {"type": "integer"},
        "errors": {"type": "array"}, "annotations": {"type": "array"},
        "replays": {"type": "integer"}}});
    vec![
        schema(
            "outbox.enqueue",
            "Store a payload as an event and enqueue it for one binding or queue, in one transaction; an idempotency key makes repeats enqueue nothing.",
            object(json!({
                "binding": {"type": "string"}, "queue": {"type": "string"},
                "payload": {}, "kind": {"type": "string"},
                "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 256}}), &[]),
            object(json!({"event_id": {"type": "string"}, "duplicate": {"type": "boolean"},
                "dropped": {"type": "boolean"}}), &["event_id", "duplicate", "dropped"]),
        ),
        schema(
            "triggers.invoke",
            "Run one attempt of a binding's handler with the payload, never retried, and answer with the handler's result.",
            object(json!({"binding": {"type": "string"}, "payload": {}}), &["binding"]),
            json!({}),
        ),
        schema(
            "triggers.register",
            "Register a binding at run time from a [[triggers]] table (kept in the store, loaded again at start). A duplicate id is refused unless `replace` is true; a replaced binding's old version drains under its own definition.",
            object(json!({"trigger": {"type": "object"}, "replace": {"type": "boolean"}}), &["trigger"]),
            object(json!({"changes": {"type": "array"}}), &["changes"]),
        ),
        schema(
            "triggers.deregister",
            "Deregister a binding registered at run time: it takes no new events, its rows finish, then it terminates.",
            object(json!({"id": {"type": "string"}}), &["id"]),
            object(json!({"changes": {"type": "array"}}), &["changes"]),
        ),
        schema(
            "queue.receive",
            "Receive up to `max` visible messages of a queue; each stays invisible to other receivers for the visibility timeout.",
            object(json!({"queue": {"type": "string"},
                "max": {"type": "integer", "minimum": 1, "maximum": super::ops::MAX_RECEIVE},
                "visibility_timeout_ms": {"type": "integer", "minimum": 1}}), &["queue"]),
            object(json!({"messages": {"type": "array", "items": {"type": "object", "properties": {
                "id": id, "receipt": id, "receives": {"type": "integer"},
                "payload": {}, "event_id": {"type": "string"}}}},
                "dead_lettered": {"type": "integer"}}), &["messages"]),
        ),
        schema(
            "queue.ack",
            "Delete a received message; false when its visibility expired and the receipt no longer holds it.",
            object(json!({"queue": {"type": "string"}, "id": id, "receipt": id}), &["queue", "id", "receipt"]),
            object(json!({"acked": {"type": "boolean"}}), &["acked"]),
        ),
        schema(
            "queue.nack",
            "Make a received message visible again after `delay_ms`.",
            object(json!({"queue": {"type": "string"}, "id": id, "receipt": id,
                "delay_ms": {"type": "integer", "minimum": 0}}), &["queue", "id", "receipt"]),
            object(json!({"nacked": {"type": "boolean"}}), &["nacked"]),
        ),
        schema(
            "dead_letters.list",
            "Dead letters, newest first, optionally of one binding; `before` pages.",
            object(json!({"binding": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": super::ops::MAX_DEAD_LETTER_PAGE},
                "before": id}), &[]),
            object(json!({"dead_letters": {"type": "array", "items": dead_letter},
                "next": {"type": ["integer", "null"]}}), &["dead_letters"]),
        ),
        schema(
            "dead_letters.replay",
            "Enqueue a dead letter's delivery again, attempts from zero.",
            object(json!({"id": id}), &["id"]),
            object(json!({"replayed": id, "row_id": id}), &["replayed", "row_id"]),
        ),
        schema(
            "outbox.stats",
            "Rows due, leased and scheduled, per binding and queue, the oldest row's age and the dead letters.",
            object(json!({}), &[]),
            object(json!({"due": {"type": "integer"}, "leased": {"type": "integer"},
                "scheduled": {"type": "integer"}, "oldest_age_ms": {"type": ["integer", "null"]},
                "dead_letters": {"type": "integer"}, "by_binding": {"type": "object"},
                "queues": {"type": "object"}, "depth_dropped": {"type": "integer"}}), &["due", "leased"]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_has_a_parseable_schema_pair() {
        let s = schemas();
        let ids: Vec<_> = s.iter().map(|t| t.task_type_id.as_str()).collect();
        assert_eq!(ids, CAPABILITIES);
        for t in &s {
            let input: Value = serde_json::from_str(&t.input_schema_json).unwrap();
            let _: Value = serde_json::from_str(&t.output_schema_json).unwrap();
            assert_eq!(input["type"], "object", "{}", t.task_type_id);
        }
    }

    #[test]
    fn events_produced_inside_a_delivery_are_one_hop_deeper() {
        let inside =
            ExecuteContext::detached("r", [(CONTEXT_DEPTH.to_owned(), "3".to_owned())].into());
        assert_eq!(produced_depth(&inside), 4);
        assert_eq!(
            produced_depth(&ExecuteContext::detached("r", Default::default())),
            0
        );
    }
}
