//! [`SocketInvoker`]: one registration's invokes, from the caller's future to its
//! socket's core and back. It is the mux's [`Invoker`]: every [`ExecuteContext`] of
//! the registration holds it behind that trait, and its [`RegistrationHandle`] holds
//! it as it is.
//!
//! [`RegistrationHandle`]: crate::RegistrationHandle
//! [`ExecuteContext`]: crate::ExecuteContext

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::core::InvokeSpec;
use super::metrics::HandleMetrics;
use super::routing::HandleId;
use super::socket::{Command, SocketHandle};
use crate::connector::{InvokeOptions, InvokeResponse, Invoker, DEFAULT_INVOKE_TIMEOUT};
use crate::encoding::{encode_payload, Payload};
use crate::error::{Error, Result};
use crate::proto::InvokeCapabilityResponse;

/// One registration's ability to invoke: held by its [`RegistrationHandle`] and,
/// as an [`Invoker`], by every [`ExecuteContext`] of its executes.
///
/// [`RegistrationHandle`]: crate::RegistrationHandle
/// [`ExecuteContext`]: crate::ExecuteContext
#[derive(Debug)]
pub(crate) struct SocketInvoker {
    pub(crate) handle: HandleId,
    pub(crate) socket: Arc<SocketHandle>,
    pub(crate) metrics: Arc<HandleMetrics>,
}

/// Tells the core to forget an invoke whose caller stopped waiting. Best effort: when
/// the command queue is full, the entry is pruned at its deadline instead.
struct CancelOnDrop<'a> {
    socket: &'a SocketHandle,
    request_id: Option<String>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.request_id.take() {
            let _ = self.socket.commands.try_send(Command::CancelInvoke(id));
        }
    }
}

impl SocketInvoker {
    /// Invokes `capability_id` of `target` (an ARN or a dot key) and waits for the
    /// answer.
    pub(crate) async fn invoke(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<InvokeResponse> {
        let resp = self
            .send(target, capability_id, payload, options, false)
            .await?;
        let resp = resp.ok_or_else(|| {
            Error::Protocol("an awaited invoke completed without an answer".into())
        })?;
        let out = InvokeResponse::from_wire(resp);
        if out.is_err() {
            self.metrics.invokes_failed.fetch_add(1, Relaxed);
        }
        out
    }

    /// Sends an invoke the gateway does not answer; returns once it is queued.
    pub(crate) async fn invoke_fire_and_forget(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<()> {
        self.send(target, capability_id, payload, options, true)
            .await
            .map(drop)
    }

    async fn send(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
        fire_and_forget: bool,
    ) -> Result<Option<InvokeCapabilityResponse>> {
        let encoding = options.encoding_for(&payload)?;
        let request_id = format!("inv-{:x}", self.socket.next_invoke.fetch_add(1, Relaxed));
        let spec = InvokeSpec {
            request_id: request_id.clone(),
            target: target.to_owned(),
            capability_id: capability_id.to_owned(),
            payload: encode_payload(&payload).into(),
            payload_encoding: encoding as i32,
            context: options.context,
            timeout: options.timeout.unwrap_or(DEFAULT_INVOKE_TIMEOUT),
            fire_and_forget,
        };
        self.metrics.invokes_sent.fetch_add(1, Relaxed);
        let (reply, answer) = oneshot::channel();
        let command = Command::Invoke {
            handle: self.handle,
            spec,
            reply,
        };
        if self.socket.commands.send(command).await.is_err() {
            self.metrics.invokes_failed.fetch_add(1, Relaxed);
            return Err(Error::Shutdown);
        }
        let mut guard = CancelOnDrop {
            socket: &self.socket,
            request_id: (!fire_and_forget).then_some(request_id),
        };
        let result = answer.await.unwrap_or(Err(Error::Shutdown));
        guard.request_id = None;
        if result.is_err() {
            self.metrics.invokes_failed.fetch_add(1, Relaxed);
        }
        result
    }
}

impl Invoker for SocketInvoker {
    fn invoke<'a>(
        &'a self,
        target: &'a str,
        capability_id: &'a str,
        payload: Payload,
        options: InvokeOptions,
    ) -> BoxFuture<'a, Result<InvokeResponse>> {
        Box::pin(SocketInvoker::invoke(
            self,
            target,
            capability_id,
            payload,
            options,
        ))
    }

    fn invoke_fire_and_forget<'a>(
        &'a self,
        target: &'a str,
        capability_id: &'a str,
        payload: Payload,
        options: InvokeOptions,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(SocketInvoker::invoke_fire_and_forget(
            self,
            target,
            capability_id,
            payload,
            options,
        ))
    }
}
