//! The routing table of one shared socket (PROTOCOL.md §5), with no I/O.
//!
//! All registrations of one tenant share a socket. Every inbound [`StreamMessage`]
//! goes through [`RoutingTable::route`], which names the handle that gets it (or says
//! why nobody does). The table owns the three indexes the protocol routes by: dot keys
//! (admitted handles), ARNs (assigned by the gateway) and pending request ids
//! (outbound requests whose responses must come back to their sender). The socket
//! task owns the table; nothing here blocks, sleeps or reads a clock, so every rule is
//! tested with plain `#[test]`s below.
//!
//! The guiding rule is *nothing misrouted*: when the addressing of a frame names
//! somebody who is not (or no longer) here, the frame is dropped with a
//! [`DropReason`], never handed to a guessed recipient. The "only handle on the
//! socket" fallback applies solely to frames that carry no usable address at all.

use std::collections::HashMap;
use std::fmt;

use crate::context_keys::CONNECTOR_ARN_CONTEXT_KEY;
use crate::error::Error;
use crate::identity::{Arn, RegistrationKey};
use crate::proto::stream_message::Message;
use crate::proto::StreamMessage;

/// Identifies one registration handle on a socket; chosen by the caller, unique per
/// socket.
pub(crate) type HandleId = u64;

/// Where one inbound message goes. `P` is what the caller tracked with a pending
/// request (see [`RoutingTable::track_request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Route<P = ()> {
    /// Deliver to this handle.
    Handle(HandleId),
    /// The response to a pending request of this handle; the value tracked with the
    /// request is handed back, and the request is no longer pending.
    Response(HandleId, P),
    /// A `heartbeat_request`: the socket answers it itself.
    AnswerHeartbeat,
    /// A `heartbeat_response`: the socket consumes it as a liveness signal.
    HeartbeatResponse,
    /// Nobody gets it: log and count it under [`DropReason::as_str`].
    Drop(DropReason),
}

/// Why an inbound message was dropped instead of routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DropReason {
    /// The message has no `oneof message` variant set.
    Empty,
    /// A `register_response` whose `connector_arn` does not parse (including an empty
    /// one) on a socket with more than one handle.
    MalformedArn,
    /// The ARN names no handle on this socket: an execute or invoke for an ARN that was
    /// never assigned here or whose handle is gone, or a `register_response` whose ARN
    /// matches no dot key, no unique instance id, and the socket has several handles.
    UnknownArn,
    /// A response whose `request_id` is not pending (already answered, timed out,
    /// cancelled, failed by a disconnect, or never sent from here).
    UnknownRequestId,
    /// A `credentials_issued` / `approval_notification` whose `gateway_id` is no
    /// admitted dot key.
    UnknownGatewayId,
    /// The message carries no address and the socket does not carry exactly one handle.
    Unaddressed,
}

impl DropReason {
    /// Every reason, so counters can be registered up front.
    #[cfg(test)]
    pub(crate) const ALL: [DropReason; 6] = [
        DropReason::Empty,
        DropReason::MalformedArn,
        DropReason::UnknownArn,
        DropReason::UnknownRequestId,
        DropReason::UnknownGatewayId,
        DropReason::Unaddressed,
    ];

    /// A stable snake_case label for logs and counters; never changes meaning.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            DropReason::Empty => "empty",
            DropReason::MalformedArn => "malformed_arn",
            DropReason::UnknownArn => "unknown_arn",
            DropReason::UnknownRequestId => "unknown_request_id",
            DropReason::UnknownGatewayId => "unknown_gateway_id",
            DropReason::Unaddressed => "unaddressed",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One admitted handle.
#[derive(Debug)]
struct Entry {
    key: RegistrationKey,
    /// The ARN the gateway assigned, once a register succeeded.
    arn: Option<String>,
}

/// The routing table of one socket: which handle gets each inbound frame.
///
/// # Call order
///
/// 1. [`RoutingTable::new`] when the socket for a tenant is created.
/// 2. [`RoutingTable::admit`] for each handle *before* its first `register_request`
///    is sent, so the `register_response` has somewhere to go. Fails with
///    [`Error::HandlerCapReached`] or [`Error::DuplicateRegistration`].
/// 3. For every inbound frame, [`RoutingTable::route`]. When a `register_response`
///    routed to a handle reports success, call [`RoutingTable::set_arn`] with its
///    `connector_arn`, so that `execute_request`s addressed to it find it.
/// 4. Before sending a request whose response must come back (an `invoke_request`),
///    [`RoutingTable::track_request`] with the value to get back (the connection core
///    tracks its waiter and deadline); `route` removes the entry and returns
///    [`Route::Response`] when the response arrives. On timeout or cancellation call
///    [`RoutingTable::forget_request`].
/// 5. When a handle goes away, [`RoutingTable::remove`]: fail the requests it
///    returns. The handle's ARN is forgotten, so later executes for it are dropped.
/// 6. When the socket disconnects, [`RoutingTable::disconnect`]: fail every returned
///    request. Admissions and ARNs stay; the handles re-register on the new
///    connection and `set_arn` replaces the ARN if the gateway assigns a new one.
///
/// This pending map is the socket's only record of outstanding requests (the
/// connection core keeps no second one), pruned on response, timeout/cancellation,
/// handle removal and disconnect, so it cannot leak.
#[derive(Debug)]
pub(crate) struct RoutingTable<P = ()> {
    tenant: String,
    max_handlers: usize,
    handles: HashMap<HandleId, Entry>,
    by_dot: HashMap<String, HandleId>,
    by_arn: HashMap<String, HandleId>,
    pending: HashMap<String, (HandleId, P)>,
}

impl<P> RoutingTable<P> {
    /// An empty table for a socket of `tenant` that carries at most `max_handlers`
    /// handles (the `max_handlers_per_socket` option).
    pub(crate) fn new(tenant: impl Into<String>, max_handlers: usize) -> Self {
        RoutingTable {
            tenant: tenant.into(),
            max_handlers,
            handles: HashMap::new(),
            by_dot: HashMap::new(),
            by_arn: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// Admit a handle under its dot key before its first register is sent.
    ///
    /// Fails with [`Error::DuplicateRegistration`] when the dot key (or the handle id)
    /// is already admitted, and with [`Error::HandlerCapReached`] when the socket
    /// already carries `max_handlers` handles. A failed admission changes nothing.
    pub(crate) fn admit(&mut self, id: HandleId, key: RegistrationKey) -> Result<(), Error> {
        if self.by_dot.contains_key(key.dot_key()) {
            return Err(Error::DuplicateRegistration {
                key: key.dot_key().to_owned(),
            });
        }
        if let Some(existing) = self.handles.get(&id) {
            return Err(Error::DuplicateRegistration {
                key: existing.key.dot_key().to_owned(),
            });
        }
        if self.handles.len() >= self.max_handlers {
            return Err(Error::HandlerCapReached {
                tenant: self.tenant.clone(),
                cap: self.max_handlers,
            });
        }
        self.by_dot.insert(key.dot_key().to_owned(), id);
        self.handles.insert(id, Entry { key, arn: None });
        Ok(())
    }

    /// Remove a handle; returns the requests it had pending (sorted by id, so the
    /// caller fails them in a stable order), and forgets its dot key and ARN. Unknown
    /// ids return nothing.
    pub(crate) fn remove(&mut self, id: HandleId) -> Vec<(String, P)> {
        let Some(entry) = self.handles.remove(&id) else {
            return Vec::new();
        };
        self.by_dot.remove(entry.key.dot_key());
        if let Some(arn) = entry.arn {
            self.by_arn.remove(&arn);
        }
        let ids: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, (owner, _))| *owner == id)
            .map(|(request_id, _)| request_id.clone())
            .collect();
        let mut out: Vec<(String, P)> = ids
            .into_iter()
            .filter_map(|rid| self.pending.remove(&rid).map(|(_, v)| (rid, v)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Record the ARN the gateway assigned (from a successful `register_response`);
    /// replaces a previous ARN of that handle.
    ///
    /// An empty `arn` only clears the previous one. If another handle held the same
    /// ARN, the gateway's latest assignment wins and the other handle loses it. Unknown
    /// handle ids are ignored.
    pub(crate) fn set_arn(&mut self, id: HandleId, arn: &str) {
        let Some(entry) = self.handles.get_mut(&id) else {
            return;
        };
        if let Some(old) = entry.arn.take() {
            self.by_arn.remove(&old);
        }
        if arn.is_empty() {
            return;
        }
        entry.arn = Some(arn.to_owned());
        if let Some(previous_owner) = self.by_arn.insert(arn.to_owned(), id) {
            if previous_owner != id {
                if let Some(other) = self.handles.get_mut(&previous_owner) {
                    other.arn = None;
                }
            }
        }
    }

    /// Track an outbound request (e.g. `invoke_request`) whose response must come back
    /// to `id`, with `value` to hand back when it does.
    ///
    /// Gives `value` back and tracks nothing when `request_id` is empty, `id` is not
    /// admitted, or the id is already pending (it stays with its first owner: request
    /// ids must be unique per socket).
    pub(crate) fn track_request(
        &mut self,
        request_id: String,
        id: HandleId,
        value: P,
    ) -> Result<(), P> {
        if request_id.is_empty()
            || !self.handles.contains_key(&id)
            || self.pending.contains_key(&request_id)
        {
            return Err(value);
        }
        self.pending.insert(request_id, (id, value));
        Ok(())
    }

    /// Forget a pending request on timeout/cancellation; returns its value if it was
    /// there.
    pub(crate) fn forget_request(&mut self, request_id: &str) -> Option<P> {
        self.pending.remove(request_id).map(|(_, v)| v)
    }

    /// Socket disconnected: drop all pending requests; returns them grouped by handle
    /// (handles ascending, ids sorted) so each can be failed. ARNs and admissions stay
    /// (handles re-register on reconnect).
    pub(crate) fn disconnect(&mut self) -> Vec<(HandleId, Vec<(String, P)>)> {
        let mut grouped: HashMap<HandleId, Vec<(String, P)>> = HashMap::new();
        for (request_id, (id, v)) in self.pending.drain() {
            grouped.entry(id).or_default().push((request_id, v));
        }
        let mut out: Vec<(HandleId, Vec<(String, P)>)> = grouped.into_iter().collect();
        for (_, reqs) in &mut out {
            reqs.sort_by(|a, b| a.0.cmp(&b.0));
        }
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// Route one inbound message (PROTOCOL.md §5). A matched response is removed from
    /// the pending map.
    pub(crate) fn route(&mut self, msg: &StreamMessage) -> Route<P> {
        let Some(message) = &msg.message else {
            return Route::Drop(DropReason::Empty);
        };
        match message {
            Message::RegisterResponse(resp) => self.route_register_response(&resp.connector_arn),
            Message::ExecuteRequest(req) => {
                self.route_by_arn(req.context.get(CONNECTOR_ARN_CONTEXT_KEY))
            }
            Message::InvokeRequest(req) => {
                self.route_by_arn(req.context.get(CONNECTOR_ARN_CONTEXT_KEY))
            }
            Message::ExecuteResponse(resp) => self.route_by_request_id(&resp.request_id),
            Message::InvokeResponse(resp) => self.route_by_request_id(&resp.request_id),
            Message::CredentialsIssued(c) => self.route_by_gateway_id(&c.gateway_id),
            Message::ApprovalNotification(a) => self.route_by_gateway_id(&a.gateway_id),
            Message::HeartbeatRequest(_) => Route::AnswerHeartbeat,
            Message::HeartbeatResponse(_) => Route::HeartbeatResponse,
            Message::RegisterRequest(_)
            | Message::WsOpenRequest(_)
            | Message::WsOpenResponse(_)
            | Message::WsFrame(_)
            | Message::WsCloseRequest(_)
            | Message::MetricsReport(_) => self.only_handle_or(DropReason::Unaddressed),
        }
    }

    /// Number of admitted handles.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether no handle is admitted.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Number of pending requests.
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The handle that holds exactly this ARN.
    #[cfg(test)]
    pub(crate) fn handle_for_arn(&self, arn: &str) -> Option<HandleId> {
        self.by_arn.get(arn).copied()
    }

    /// The handle admitted under this dot key.
    #[cfg(test)]
    pub(crate) fn handle_for_dot_key(&self, dot_key: &str) -> Option<HandleId> {
        self.by_dot.get(dot_key).copied()
    }

    /// The ARN last recorded for a handle with [`RoutingTable::set_arn`].
    pub(crate) fn arn_of(&self, id: HandleId) -> Option<&str> {
        self.handles.get(&id).and_then(|e| e.arn.as_deref())
    }

    /// The handle, if the socket carries exactly one.
    fn only_handle(&self) -> Option<HandleId> {
        if self.handles.len() == 1 {
            self.handles.keys().next().copied()
        } else {
            None
        }
    }

    fn only_handle_or(&self, reason: DropReason) -> Route<P> {
        match self.only_handle() {
            Some(id) => Route::Handle(id),
            None => Route::Drop(reason),
        }
    }

    /// Dot key rebuilt from the ARN; else the unique handle with the ARN's instance id
    /// (the gateway may canonicalise the type); else the only handle; else drop.
    fn route_register_response(&self, arn: &str) -> Route<P> {
        let parsed = match Arn::parse(arn) {
            Ok(parsed) => parsed,
            Err(_) => return self.only_handle_or(DropReason::MalformedArn),
        };
        if let Some(&id) = self.by_dot.get(&parsed.dot_key()) {
            return Route::Handle(id);
        }
        let mut by_instance = self
            .handles
            .iter()
            .filter(|(_, e)| e.key.instance_id() == parsed.instance_id)
            .map(|(&id, _)| id);
        if let (Some(id), None) = (by_instance.next(), by_instance.next()) {
            return Route::Handle(id);
        }
        self.only_handle_or(DropReason::UnknownArn)
    }

    /// Exact ARN from the request context; a present but unknown ARN is never given
    /// to the only handle.
    fn route_by_arn(&self, arn: Option<&String>) -> Route<P> {
        match arn.map(String::as_str) {
            Some(arn) if !arn.is_empty() => match self.by_arn.get(arn) {
                Some(&id) => Route::Handle(id),
                None => Route::Drop(DropReason::UnknownArn),
            },
            _ => self.only_handle_or(DropReason::Unaddressed),
        }
    }

    fn route_by_request_id(&mut self, request_id: &str) -> Route<P> {
        if request_id.is_empty() {
            return self.only_handle_or(DropReason::Unaddressed);
        }
        match self.pending.remove(request_id) {
            Some((id, v)) => Route::Response(id, v),
            None => Route::Drop(DropReason::UnknownRequestId),
        }
    }

    fn route_by_gateway_id(&self, gateway_id: &str) -> Route<P> {
        if gateway_id.is_empty() {
            return self.only_handle_or(DropReason::Unaddressed);
        }
        match self.by_dot.get(gateway_id) {
            Some(&id) => Route::Handle(id),
            None => Route::Drop(DropReason::UnknownGatewayId),
        }
    }
}

#[cfg(test)]
mod tests;
