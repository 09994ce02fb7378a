//! State one socket shares with its handles and with the runner: the routing table and
//! the handles' inboxes behind one short-lived lock, the link state, the outbound queue
//! and the socket's counters.
//!
//! The lock is held only to route one frame or to admit/remove a handle; nothing awaits
//! while holding it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::metrics::{HandleMetrics, SocketMetrics};
use super::routing::{HandleId, Route, RoutingTable};
use crate::error::Result;
use crate::identity::RegistrationKey;
use crate::phoenix::{encode_proto, LOBBY_TOPIC};
use crate::proto::{stream_message::Message, StreamMessage};

/// Whether the socket is joined, and which connection that is. Handles re-register
/// whenever `generation` changes while `up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Link {
    pub(crate) generation: u64,
    pub(crate) up: bool,
}

/// What a handle's inbox carries. Boxed because tokio's channel allocates its first
/// block of 32 slots eagerly: with the message inline (the largest variant is several
/// hundred bytes) that block alone cost ~8 KiB per idle registration; boxed, 256 bytes.
pub(crate) type InboxItem = Box<StreamMessage>;

/// A handle's entry on its socket.
struct Inbox {
    tx: mpsc::Sender<InboxItem>,
    metrics: Arc<HandleMetrics>,
}

struct Routes {
    table: RoutingTable,
    inboxes: HashMap<HandleId, Inbox>,
}

/// What the socket task must do with an inbound message after routing.
#[derive(Debug)]
pub(crate) enum Dispatch {
    /// Queued to a handle.
    Delivered,
    /// The handle's inbox is full; the message is given back so the socket can answer
    /// an execute with an overload error instead of leaving the gateway to time out.
    Overloaded(StreamMessage),
    /// A `heartbeat_request` the socket answers itself.
    AnswerHeartbeat(StreamMessage),
    /// A `heartbeat_response` for the socket's liveness bookkeeping.
    HeartbeatResponse(StreamMessage),
    /// Dropped; the reason is already counted and logged.
    Dropped,
}

/// The joined connection's writer, for tasks that write frames without going through
/// the socket task (execute responses: one hand-off fewer per round trip).
#[derive(Clone)]
pub(crate) struct Wire {
    pub(crate) writer: mpsc::Sender<WsMessage>,
    pub(crate) join_ref: Arc<str>,
}

/// The shared core of one tenant's socket.
pub(crate) struct SocketShared {
    pub(crate) tenant: String,
    pub(crate) metrics: SocketMetrics,
    pub(crate) link: watch::Sender<Link>,
    pub(crate) outbound: mpsc::Sender<StreamMessage>,
    /// Set by a handle when its register succeeds on the current link; the socket
    /// resets its reconnect backoff only then, so a gateway that accepts connections
    /// but refuses every register sees ever longer pauses.
    pub(crate) registered_on_link: AtomicBool,
    next_id: AtomicU64,
    /// The socket's Phoenix ref counter, shared with its channel state.
    pub(crate) refs: Arc<AtomicU64>,
    /// Present while joined.
    wire: Mutex<Option<Wire>>,
    routes: Mutex<Routes>,
}

impl SocketShared {
    /// A socket with no handles; returns the receiving end of its outbound queue.
    pub(crate) fn new(
        tenant: String,
        max_handlers: usize,
        outbound_capacity: usize,
    ) -> (Arc<Self>, mpsc::Receiver<StreamMessage>) {
        let (outbound, outbound_rx) = mpsc::channel(outbound_capacity);
        let shared = SocketShared {
            tenant: tenant.clone(),
            metrics: SocketMetrics::default(),
            link: watch::channel(Link::default()).0,
            outbound,
            registered_on_link: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            refs: Arc::default(),
            wire: Mutex::new(None),
            routes: Mutex::new(Routes {
                table: RoutingTable::new(tenant, max_handlers),
                inboxes: HashMap::new(),
            }),
        };
        (Arc::new(shared), outbound_rx)
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().expect("routing lock poisoned")
    }

    /// Publishes (or, with `None`, withdraws) the joined connection's writer.
    pub(crate) fn set_wire(&self, wire: Option<Wire>) {
        *self.wire.lock().expect("wire lock poisoned") = wire;
    }

    /// Encodes `msg` on the calling task and queues it straight to the writer; false
    /// when no connection is joined (the caller then uses the outbound queue, which
    /// counts and discards while disconnected).
    pub(crate) async fn send_direct(&self, msg: &StreamMessage) -> bool {
        let Some(wire) = self.wire.lock().expect("wire lock poisoned").clone() else {
            return false;
        };
        let msg_ref = (self.refs.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        let text = encode_proto(Some(&wire.join_ref), Some(&msg_ref), LOBBY_TOPIC, msg);
        let sent = wire.writer.send(WsMessage::text(text)).await.is_ok();
        if sent {
            self.metrics.frames_out.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Admits a handle under its dot key; fails with a typed error at the handler cap
    /// or for a duplicate key.
    pub(crate) fn admit(
        &self,
        key: RegistrationKey,
        tx: mpsc::Sender<InboxItem>,
        metrics: Arc<HandleMetrics>,
    ) -> Result<HandleId> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut routes = self.routes();
        routes.table.admit(id, key)?;
        routes.inboxes.insert(id, Inbox { tx, metrics });
        Ok(id)
    }

    /// Removes a handle: its ARN stops routing at once, so a late execute for it is
    /// dropped rather than handed to a survivor.
    pub(crate) fn remove(&self, id: HandleId) {
        let mut routes = self.routes();
        routes.table.remove(id);
        routes.inboxes.remove(&id);
    }

    /// Records the ARN the gateway assigned to a handle.
    pub(crate) fn set_arn(&self, id: HandleId, arn: &str) {
        self.routes().table.set_arn(id, arn);
    }

    /// The connection ended: pending request correlations are void.
    pub(crate) fn disconnected(&self) -> usize {
        self.routes()
            .table
            .disconnect()
            .iter()
            .map(|(_, ids)| ids.len())
            .sum()
    }

    /// Routes one inbound message (PROTOCOL.md §5) and queues it to its handle.
    ///
    /// Inbox policy when full: executes come back as [`Dispatch::Overloaded`] for an
    /// immediate error answer; anything else is dropped and counted, because blocking
    /// here would stall every other registration on the socket.
    pub(crate) fn dispatch(&self, msg: StreamMessage) -> Dispatch {
        let mut routes = self.routes();
        let id = match routes.table.route(&msg) {
            Route::Handle(id) => id,
            Route::AnswerHeartbeat => return Dispatch::AnswerHeartbeat(msg),
            Route::HeartbeatResponse => return Dispatch::HeartbeatResponse(msg),
            Route::Drop(reason) => {
                drop(routes);
                tracing::warn!(tenant = %self.tenant, reason = reason.as_str(), kind = kind(&msg), "dropping unroutable frame");
                self.metrics.drop_frame(reason.as_str());
                return Dispatch::Dropped;
            }
        };
        let Some(inbox) = routes.inboxes.get(&id) else {
            drop(routes);
            self.metrics.drop_frame("handle_gone");
            return Dispatch::Dropped;
        };
        match inbox.tx.try_send(Box::new(msg)) {
            Ok(()) => Dispatch::Delivered,
            Err(mpsc::error::TrySendError::Full(boxed)) => {
                let msg = *boxed;
                if matches!(msg.message, Some(Message::ExecuteRequest(_))) {
                    inbox
                        .metrics
                        .requests_rejected_overloaded
                        .fetch_add(1, Ordering::Relaxed);
                    inbox
                        .metrics
                        .requests_failed
                        .fetch_add(1, Ordering::Relaxed);
                    return Dispatch::Overloaded(msg);
                }
                drop(routes);
                tracing::warn!(tenant = %self.tenant, kind = kind(&msg), "registration inbox full; dropping frame");
                self.metrics.drop_frame("inbox_full");
                Dispatch::Dropped
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                drop(routes);
                self.metrics.drop_frame("handle_gone");
                Dispatch::Dropped
            }
        }
    }
}

/// The oneof's name, for log lines.
pub(crate) fn kind(msg: &StreamMessage) -> &'static str {
    match &msg.message {
        None => "empty",
        Some(Message::RegisterRequest(_)) => "register_request",
        Some(Message::RegisterResponse(_)) => "register_response",
        Some(Message::ExecuteRequest(_)) => "execute_request",
        Some(Message::ExecuteResponse(_)) => "execute_response",
        Some(Message::ApprovalNotification(_)) => "approval_notification",
        Some(Message::HeartbeatRequest(_)) => "heartbeat_request",
        Some(Message::HeartbeatResponse(_)) => "heartbeat_response",
        Some(Message::InvokeRequest(_)) => "invoke_request",
        Some(Message::InvokeResponse(_)) => "invoke_response",
        Some(Message::CredentialsIssued(_)) => "credentials_issued",
        Some(Message::WsOpenRequest(_)) => "ws_open_request",
        Some(Message::WsOpenResponse(_)) => "ws_open_response",
        Some(Message::WsFrame(_)) => "ws_frame",
        Some(Message::WsCloseRequest(_)) => "ws_close_request",
        Some(Message::MetricsReport(_)) => "metrics_report",
    }
}
