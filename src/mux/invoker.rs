//! The path of an invoke from the caller's future to its socket's core, and back.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::core::InvokeSpec;
use super::driver::Command;
use super::invoke::{InvokeOptions, InvokeResponse, DEFAULT_INVOKE_TIMEOUT};
use super::metrics::{HandleMetrics, SocketMetrics};
use super::routing::HandleId;
use crate::encoding::{encode_payload, Payload};
use crate::error::{Error, Result};
use crate::proto::InvokeCapabilityResponse;

/// What a socket's handles share: the command queue of its driver, its counters, and
/// the invoke request-id counter.
#[derive(Debug)]
pub(crate) struct SocketLink {
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) metrics: Arc<SocketMetrics>,
    next_invoke: AtomicU64,
}

impl SocketLink {
    pub(crate) fn new(commands: mpsc::Sender<Command>, metrics: Arc<SocketMetrics>) -> Self {
        SocketLink {
            commands,
            metrics,
            next_invoke: AtomicU64::new(1),
        }
    }
}

/// One registration's ability to invoke: held by its [`RegistrationHandle`] and by
/// every [`ExecuteContext`] of its executes.
///
/// [`RegistrationHandle`]: crate::RegistrationHandle
/// [`ExecuteContext`]: crate::ExecuteContext
#[derive(Debug, Clone)]
pub(crate) struct Invoker {
    pub(crate) handle: HandleId,
    pub(crate) link: Arc<SocketLink>,
    pub(crate) metrics: Arc<HandleMetrics>,
}

/// Tells the core to forget an invoke whose caller stopped waiting. Best effort: when
/// the command queue is full, the entry is pruned at its deadline instead.
struct CancelOnDrop<'a> {
    link: &'a SocketLink,
    request_id: Option<String>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.request_id.take() {
            let _ = self.link.commands.try_send(Command::CancelInvoke(id));
        }
    }
}

impl Invoker {
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
        let encoding = match (options.encoding, &payload) {
            (None, p) => p.encoding(),
            (Some(e), Payload::Bytes(_)) => e,
            (Some(e), p) => {
                return Err(Error::Config(format!(
                    "InvokeOptions::encoding ({e:?}) applies only to Payload::Bytes; a {:?} payload declares its own encoding",
                    p.encoding()
                )))
            }
        };
        let request_id = format!("inv-{:x}", self.link.next_invoke.fetch_add(1, Relaxed));
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
        if self.link.commands.send(command).await.is_err() {
            self.metrics.invokes_failed.fetch_add(1, Relaxed);
            return Err(Error::Shutdown);
        }
        let mut guard = CancelOnDrop {
            link: &self.link,
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
