//! [`BaseConnector`]: what a connector author implements. A file of its own, below the
//! `connector` facade, so that the children that take a connector (`execute`, `echo`,
//! `register`) import it from a sibling rather than from their parent.

use std::collections::HashMap;

use super::context::ExecuteContext;
use crate::encoding::Payload;
use crate::error::Result;
use crate::proto::{
    ConnectorBehavior, PayloadEncoding, TaskTypeSchema, WebSocketCloseRequest, WebSocketFrame,
    WebSocketOpenRequest,
};

/// The metadata key under which a TOOL connector advertises its tools as a JSON array
/// of `{name, description, input_schema}`.
pub const TOOL_SCHEMAS_KEY: &str = "tool_schemas";

/// What a connector author implements: the answer to execute requests, plus the
/// self-description sent at registration.
///
/// Object-safe, because the runner holds connectors as `Arc<dyn BaseConnector>` so that
/// one runner can drive connectors of different types. Only
/// [`connector_type`](Self::connector_type) and [`execute`](Self::execute) are required.
#[async_trait::async_trait]
pub trait BaseConnector: Send + Sync + 'static {
    /// The connector type registered with the gateway (sanitised on the wire); it forms
    /// the middle part of the dot key and the ARN.
    fn connector_type(&self) -> &str;

    /// The connector's version, reported in its capabilities so operators can tell
    /// deployments apart.
    fn version(&self) -> &str {
        "0.1.0"
    }

    /// Answers one execute request. `capability_id` is the requested capability (a
    /// `task_type_id` from [`capabilities`](Self::capabilities)), `None` when the
    /// gateway named none. Return [`Error::Connector`](crate::Error::Connector) for failures of your own; the
    /// caller receives it as an error response.
    async fn execute(&self, payload: Payload, capability_id: Option<&str>) -> Result<Payload>;

    /// Like [`execute`](Self::execute) but also receives the [`ExecuteContext`]: the
    /// request's context entries (`connector_arn`, the gateway's `timeout_ms`,
    /// caller-supplied keys) and [`ExecuteContext::invoke`] to call other connectors
    /// while answering. The runner calls this one; override it only if you need the
    /// context, the default forwards to `execute`.
    ///
    /// The future is dropped when the execute times out
    /// ([`ConnectorConfig::execute_timeout`](crate::ConnectorConfig::execute_timeout), or the gateway's shorter deadline) or its
    /// registration is removed, so keep cleanup in `Drop` guards.
    async fn execute_with_context(
        &self,
        payload: Payload,
        capability_id: Option<&str>,
        context: &ExecuteContext,
    ) -> Result<Payload> {
        let _ = context;
        self.execute(payload, capability_id).await
    }

    /// The interaction styles the connector offers; the gateway uses them to decide how
    /// to address it. Default: request/response only.
    fn behaviors(&self) -> Vec<ConnectorBehavior> {
        vec![ConnectorBehavior::RequestResponse]
    }

    /// The payload encodings the connector accepts, advertised so callers pick one it
    /// understands. Default: the three this crate decodes.
    fn supported_encodings(&self) -> Vec<PayloadEncoding> {
        vec![
            PayloadEncoding::Json,
            PayloadEncoding::RawBytes,
            PayloadEncoding::JsonLines,
        ]
    }

    /// Free-form capability metadata. A TOOL connector may set
    /// [`TOOL_SCHEMAS_KEY`] itself; otherwise one is generated from
    /// [`capabilities`](Self::capabilities). Default: empty.
    fn metadata(&self) -> HashMap<String, String> {
        HashMap::new()
    }

    /// The task types (capabilities) the connector offers, with JSON schemas for their
    /// input and output, so gateways and UIs can list and validate them. Default: none.
    fn capabilities(&self) -> Vec<TaskTypeSchema> {
        Vec::new()
    }

    /// The connector's own figures, merged into every `metrics_report` as
    /// `custom_metrics` (queue depths, cache hit rates, ...). Called on the socket's
    /// task once per `metrics_interval`, so it must return at once. Default: none.
    fn custom_metrics(&self) -> HashMap<String, f64> {
        HashMap::new()
    }

    /// The gateway asks to open a proxied WebSocket stream through this connector;
    /// `Ok` accepts it (frames then arrive at [`ws_frame`](Self::ws_frame)). Called on
    /// the socket's task, so it must decide at once. Default: refused with an error
    /// that says this connector serves no proxied streams.
    fn ws_open(&self, request: &WebSocketOpenRequest) -> Result<()> {
        Err(crate::Error::NotFound(format!(
            "connector {:?} serves no proxied WebSocket streams (path {:?}); implement BaseConnector::ws_open to accept them",
            self.connector_type(),
            request.path
        )))
    }

    /// A frame of a proxied stream this connector accepted. Called on the socket's
    /// task: hand the frame to your own task if it needs work. Default: ignored.
    fn ws_frame(&self, frame: &WebSocketFrame) {
        let _ = frame;
    }

    /// The gateway closed a proxied stream. Default: ignored.
    fn ws_close(&self, request: &WebSocketCloseRequest) {
        let _ = request;
    }
}
