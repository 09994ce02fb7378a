//! [`ExecuteContext`]: what a connector knows about the execute it is answering, and
//! its way to call other connectors from inside it (through an [`Invoker`], which the
//! multiplexer supplies).

use std::collections::HashMap;
use std::sync::Arc;

use super::invoke::{InvokeOptions, InvokeResponse, Invoker};
use crate::context_keys::PROPAGATED_KEYS;
use crate::encoding::Payload;
use crate::error::{Error, Result};

/// The context of one execute request: its request id, the gateway's context entries
/// (`connector_arn`, `timeout_ms`, caller-supplied keys), and [`ExecuteContext::invoke`]
/// to call a capability of another connector through the gateway while answering.
///
/// Built by the runner for every execute; [`ExecuteContext::detached`] builds one for
/// unit tests of a connector, whose invokes fail with a clear error.
#[derive(Debug)]
pub struct ExecuteContext {
    request_id: String,
    values: HashMap<String, String>,
    /// The registration's invoker; `None` for a detached context.
    invoker: Option<Arc<dyn Invoker>>,
}

impl ExecuteContext {
    /// A context that belongs to no registration: for calling a connector's
    /// `execute_with_context` directly (in its unit tests, say). Its invokes fail with
    /// [`Error::Config`].
    pub fn detached(request_id: impl Into<String>, values: HashMap<String, String>) -> Self {
        ExecuteContext {
            request_id: request_id.into(),
            values,
            invoker: None,
        }
    }

    /// The context of an execute of a registration that invokes through `invoker`.
    #[cfg(feature = "websocket")]
    pub(crate) fn attached(
        request_id: String,
        values: HashMap<String, String>,
        invoker: Arc<dyn Invoker>,
    ) -> Self {
        ExecuteContext {
            request_id,
            values,
            invoker: Some(invoker),
        }
    }

    /// The gateway's request id of this execute.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// One context entry, e.g. `connector_arn`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.values.get(key)
    }

    /// Every context entry.
    pub fn values(&self) -> &HashMap<String, String> {
        &self.values
    }

    /// The ARN the gateway addressed this execute to.
    pub fn arn(&self) -> Option<&str> {
        self.get(crate::context_keys::CONNECTOR_ARN_CONTEXT_KEY)
            .map(String::as_str)
    }

    /// Invokes `capability_id` of `target` (an ARN, or a dot key
    /// `tenant.type.instance`) through the gateway and waits for its answer, at most
    /// [`InvokeOptions::timeout`]. A target that failed comes back as
    /// [`Error::Remote`]; a dead socket as a recoverable [`Error::ConnectionClosed`] at
    /// once. The invoke is sent by this execute's own registration.
    ///
    /// The context entries that describe a delivery chain (`switchboard.trace_id` and
    /// `switchboard.depth`, which a switchboard runtime stamps on its deliveries) are
    /// copied into the invoke's context unless `options` sets them, so an event that
    /// a handler produces through `outbox.enqueue` keeps its trace and counts its depth.
    pub async fn invoke(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<InvokeResponse> {
        let options = self.propagate(options);
        self.invoker()?
            .invoke(target, capability_id, payload, options)
            .await
    }

    fn propagate(&self, mut options: InvokeOptions) -> InvokeOptions {
        // Exported spans: the invoke nests under the span it is made in (a span of the
        // connector's own inside the execute, else the execute's).
        #[cfg(feature = "otel")]
        if let Some(tp) = crate::telemetry::otel::current_context() {
            options
                .context
                .entry(crate::context_keys::CONTEXT_TRACEPARENT.to_owned())
                .or_insert_with(|| tp.header());
        }
        for key in PROPAGATED_KEYS {
            if let Some(v) = self.values.get(*key) {
                options
                    .context
                    .entry((*key).to_owned())
                    .or_insert_with(|| v.clone());
            }
        }
        options
    }

    /// Sends an invoke that the gateway executes without answering; returns once it is
    /// queued on the socket.
    pub async fn invoke_fire_and_forget(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<()> {
        let options = self.propagate(options);
        self.invoker()?
            .invoke_fire_and_forget(target, capability_id, payload, options)
            .await
    }

    fn invoker(&self) -> Result<&dyn Invoker> {
        self.invoker.as_deref().ok_or_else(detached_error)
    }
}

fn detached_error() -> Error {
    Error::Config(
        "this ExecuteContext belongs to no registration (ExecuteContext::detached, or a build without the websocket feature), so it cannot invoke".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invokes_carry_the_delivery_chain_keys_unless_the_caller_sets_them() {
        let values = HashMap::from([
            ("switchboard.trace_id".to_owned(), "t1".to_owned()),
            ("switchboard.depth".to_owned(), "2".to_owned()),
            ("connector_arn".to_owned(), "arn".to_owned()),
        ]);
        let ctx = ExecuteContext::detached("r", values);
        let out = ctx.propagate(InvokeOptions::default().with_context("switchboard.depth", "7"));
        assert_eq!(
            out.context.get("switchboard.trace_id").map(String::as_str),
            Some("t1")
        );
        assert_eq!(
            out.context.get("switchboard.depth").map(String::as_str),
            Some("7")
        );
        assert!(
            !out.context.contains_key("connector_arn"),
            "only the chain keys travel"
        );
    }
}
