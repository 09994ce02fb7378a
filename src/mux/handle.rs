//! [`RegistrationHandle`]: the user's view of one registration.
//!
//! The registration itself lives in its socket's connection core, owned by the
//! socket's driver task. The handle holds what the driver publishes
//! (`handle_state`: ARN, status, last error, counters) and talks to the driver
//! through the socket's one bounded command queue (remove, invoke).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::handle_state::{HandleState, Published};
use super::metrics::{snapshot, ConnectorMetrics};
use super::routing::HandleId;
use super::socket::{Command, SocketHandle};
use super::socket_invoker::SocketInvoker;
use crate::connector::{InvokeOptions, InvokeResponse};
use crate::encoding::Payload;
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::proto::{stream_message::Message, RegistrationStatus, WebSocketFrame};

/// The user's view of one registration: its identity, ARN, status and metrics, a way
/// to invoke other connectors from outside an execute, and a way to remove it. Cheap
/// to clone.
#[derive(Clone)]
pub struct RegistrationHandle {
    pub(crate) key: RegistrationKey,
    pub(crate) state: Arc<HandleState>,
    /// Shared, so that a context built from the handle (the runtime's local
    /// deliveries) holds it as an `Invoker` without an allocation.
    pub(crate) invoker: Arc<SocketInvoker>,
}

impl std::fmt::Debug for RegistrationHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrationHandle")
            .field("key", &self.key)
            .field("arn", &self.arn())
            .finish()
    }
}

impl RegistrationHandle {
    /// The handle of the registration the socket admitted as `handle`.
    pub(crate) fn new(
        key: RegistrationKey,
        state: Arc<HandleState>,
        handle: HandleId,
        socket: Arc<SocketHandle>,
    ) -> Self {
        let invoker = Arc::new(SocketInvoker {
            handle,
            socket,
            metrics: state.metrics.clone(),
        });
        RegistrationHandle {
            key,
            state,
            invoker,
        }
    }

    /// The registration's dot key (`tenant.type.instance`, sanitised).
    pub fn key(&self) -> &RegistrationKey {
        &self.key
    }

    /// The ARN the gateway assigned, once registered; `None` while (re)registering
    /// and while waiting for approval (see [`RegistrationHandle::pending_arn`]).
    pub fn arn(&self) -> Option<String> {
        self.state.arn()
    }

    /// The registration status from the gateway's last answer or approval
    /// notification: `Pending` while an operator has to approve it, `Rejected` (final)
    /// when they refused it.
    pub fn status(&self) -> Option<RegistrationStatus> {
        self.state.session().status
    }

    /// The ARN of a registration the gateway accepted as PENDING, for the operator's
    /// approve or reject call; `None` once registered.
    pub fn pending_arn(&self) -> Option<String> {
        self.state.session().pending_arn.clone()
    }

    /// The gateway's last refusal, if the latest register failed (for a rejected
    /// registration, `rejected: <the operator's reason>`).
    pub fn last_error(&self) -> Option<String> {
        self.state.session().last_error.clone()
    }

    /// The approval exchange's last failure (a used or expired one-time token, an
    /// unreachable token endpoint), if it has not succeeded since; the registration
    /// then waits for a new approval, or retries a transient failure by itself.
    pub fn approval_error(&self) -> Option<String> {
        self.state.session().approval_error.clone()
    }

    /// A copy of this registration's counters.
    pub fn metrics(&self) -> ConnectorMetrics {
        snapshot(&self.state.metrics, &self.invoker.socket.metrics)
    }

    /// Waits until the registration holds an ARN (registered on the current link), at
    /// most `timeout`. Returns the ARN. A registration waiting for approval keeps
    /// waiting; one the operator rejected fails at once with [`Error::Rejected`].
    pub async fn wait_registered(&self, timeout: Duration) -> Result<String> {
        let mut rx = self.state.subscribe();
        let wait = async {
            rx.wait_for(|p| p.arn.is_some() || p.rejected.is_some())
                .await
                .map(|p| p.clone())
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(Published { arn: Some(arn), .. })) => Ok(arn),
            Ok(Ok(Published { rejected, .. })) => {
                Err(Error::Rejected(rejected.unwrap_or_default()))
            }
            Ok(Err(_)) => Err(Error::Shutdown),
            Err(_) => {
                // Say why it is still waiting, when the approval flow knows.
                let why = match (self.status(), self.approval_error()) {
                    (_, Some(e)) => format!(" (approval exchange failed: {e})"),
                    (Some(RegistrationStatus::Pending), None) => {
                        " (pending: waiting for the gateway's operator to approve it)".to_owned()
                    }
                    _ => String::new(),
                };
                Err(Error::timeout(
                    format!("registration of {}{why}", self.key),
                    timeout,
                ))
            }
        }
    }

    /// Invokes `capability_id` of `target` (an ARN, or a dot key
    /// `tenant.type.instance`) through the gateway, as this registration, and waits for
    /// the answer at most [`InvokeOptions::timeout`]. A target that failed comes back
    /// as [`Error::Remote`] with the remote code; an invoke in flight when the socket
    /// dies fails at once with a recoverable [`Error::ConnectionClosed`]; dropping the
    /// future cancels the wait (a late answer is dropped and counted).
    pub async fn invoke(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<InvokeResponse> {
        self.invoker
            .invoke(target, capability_id, payload, options)
            .await
    }

    /// Sends an invoke the gateway executes without answering; returns once it is
    /// queued on the socket. For notifications whose outcome the caller does not need.
    pub async fn invoke_fire_and_forget(
        &self,
        target: &str,
        capability_id: &str,
        payload: Payload,
        options: InvokeOptions,
    ) -> Result<()> {
        self.invoker
            .invoke_fire_and_forget(target, capability_id, payload, options)
            .await
    }

    /// Sends a frame of a proxied WebSocket stream (one the connector accepted in
    /// `BaseConnector::ws_open`) back to the gateway. Dropped and counted while the
    /// socket is down.
    pub async fn send_ws_frame(&self, frame: WebSocketFrame) -> Result<()> {
        self.invoker
            .socket
            .commands
            .send(Command::Send(Box::new(Message::WsFrame(frame))))
            .await
            .map_err(|_| Error::Shutdown)
    }

    /// Removes the registration and returns once it is gone: it stops routing at once
    /// (a late execute for its ARN is dropped, never handed to another registration),
    /// its executes in flight are cancelled (dropped, not answered), and when it was
    /// the last one on its socket the socket closes cleanly. The protocol has no
    /// deregister message; the gateway forgets the registration when its socket closes
    /// or when it times out the executes it still sends.
    pub async fn remove(&self) {
        let (reply, done) = oneshot::channel();
        let command = Command::Remove {
            handle: self.invoker.handle,
            reply,
        };
        if self.invoker.socket.commands.send(command).await.is_ok() {
            let _ = done.await;
        }
        self.state.mark_removed();
    }
}
