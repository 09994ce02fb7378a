//! [`ExecuteContext`]: what a connector knows about the execute it is answering, and
//! its way to call other connectors from inside it.

use std::collections::HashMap;

use crate::encoding::Payload;
use crate::error::{Error, Result};
use crate::mux::invoke::{InvokeOptions, InvokeResponse};
#[cfg(feature = "websocket")]
use crate::mux::invoker::Invoker;

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
    #[cfg(feature = "websocket")]
    invoker: Option<Invoker>,
}

impl ExecuteContext {
    /// A context that belongs to no registration: for calling a connector's
    /// `execute_with_context` directly (in its unit tests, say). Its invokes fail with
    /// [`Error::Config`].
    pub fn detached(request_id: impl Into<String>, values: HashMap<String, String>) -> Self {
        ExecuteContext {
            request_id: request_id.into(),
            values,
            #[cfg(feature = "websocket")]
            invoker: None,
        }
    }

    #[cfg(feature = "websocket")]
    pub(crate) fn attached(
        request_id: String,
        values: HashMap<String, String>,
        invoker: Invoker,
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
        self.get("connector_arn").map(String::as_str)
    }

    /// Invokes `capability_id` of `target` (an ARN, or a dot key
    /// `tenant.type.instance`) through the gateway and waits for its answer, at most
    /// [`InvokeOptions::timeout`]. A target that failed comes back as
    /// [`Error::Remote`]; a dead socket as a recoverable [`Error::ConnectionClosed`] at
    /// once. The invoke is sent by this execute's own registration.
    pub async fn invoke(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<InvokeResponse> {
        self.invoker()?
            .invoke(target, capability_id, payload, options)
            .await
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
        self.invoker()?
            .invoke_fire_and_forget(target, capability_id, payload, options)
            .await
    }

    #[cfg(feature = "websocket")]
    fn invoker(&self) -> Result<&Invoker> {
        self.invoker.as_ref().ok_or_else(detached_error)
    }

    #[cfg(not(feature = "websocket"))]
    fn invoker(&self) -> Result<&NoInvoker> {
        Err(detached_error())
    }
}

fn detached_error() -> Error {
    Error::Config(
        "this ExecuteContext belongs to no registration (ExecuteContext::detached, or a build without the websocket feature), so it cannot invoke".into(),
    )
}

/// Stands in for the invoker in builds without a transport.
#[cfg(not(feature = "websocket"))]
struct NoInvoker;

#[cfg(not(feature = "websocket"))]
impl NoInvoker {
    async fn invoke(
        &self,
        _: &str,
        _: &str,
        _: Payload,
        _: InvokeOptions,
    ) -> Result<InvokeResponse> {
        Err(detached_error())
    }
    async fn invoke_fire_and_forget(
        &self,
        _: &str,
        _: &str,
        _: Payload,
        _: InvokeOptions,
    ) -> Result<()> {
        Err(detached_error())
    }
}
