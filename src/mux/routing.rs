//! The socket's routing table: which registration gets each inbound message
//! (PROTOCOL.md §5). No I/O, no clock: the socket task feeds it and acts on the answer.
//!
//! Call order: [`RoutingTable::admit`] a handle before its first register is sent;
//! [`RoutingTable::set_arn`] when its register succeeds; [`RoutingTable::track_request`]
//! for each outbound request whose response must come back to it; pass every inbound
//! message to [`RoutingTable::route`]; [`RoutingTable::forget_request`] on a request's
//! timeout or cancellation; [`RoutingTable::disconnect`] when the connection drops (pending
//! correlations die with it; admissions and ARNs stay for the re-register);
//! [`RoutingTable::remove`] when the handle leaves.
//!
//! The rule throughout: an addressed frame whose address matches nothing is dropped,
//! never handed to a guessed recipient. Only frames that carry no address at all fall
//! back to "the only handle on the socket" (for peers that predate multiplexing).

use std::collections::HashMap;

use crate::error::Error;
use crate::identity::{Arn, RegistrationKey};
use crate::proto::{stream_message::Message, StreamMessage};

/// Identifies one handle on one socket.
pub type HandleId = u64;

/// Where an inbound message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this handle's inbox.
    Handle(HandleId),
    /// A `heartbeat_request`: the socket answers it.
    AnswerHeartbeat,
    /// A `heartbeat_response`: the socket's liveness bookkeeping consumes it.
    HeartbeatResponse,
    /// Nowhere; count and log the reason.
    Drop(DropReason),
}

/// Why a message was dropped. Each is a separate counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A `StreamMessage` with no message set.
    Empty,
    /// An ARN that does not parse (`matrix:{tenant}:{type}:{instance}`).
    MalformedArn,
    /// A well-formed ARN that no handle on this socket holds.
    UnknownArn,
    /// A response whose request id is not pending.
    UnknownRequestId,
    /// A `gateway_id` that is no handle's dot key.
    UnknownGatewayId,
    /// No address, and not exactly one handle to give it to.
    Unaddressed,
}

impl DropReason {
    /// Stable snake_case label for counters and logs.
    pub fn as_str(&self) -> &'static str {
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

#[derive(Debug)]
struct Entry {
    key: RegistrationKey,
    arn: Option<String>,
}

/// The routing state of one socket.
#[derive(Debug)]
pub struct RoutingTable {
    tenant: String,
    max_handlers: usize,
    handles: HashMap<HandleId, Entry>,
    by_dot_key: HashMap<String, HandleId>,
    by_arn: HashMap<String, HandleId>,
    pending: HashMap<String, HandleId>,
}

impl RoutingTable {
    /// An empty table for `tenant`'s socket that admits at most `max_handlers`.
    pub fn new(tenant: impl Into<String>, max_handlers: usize) -> Self {
        RoutingTable {
            tenant: tenant.into(),
            max_handlers,
            handles: HashMap::new(),
            by_dot_key: HashMap::new(),
            by_arn: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// Admits a handle under its dot key; refuses at the cap or for a key already here.
    pub fn admit(&mut self, id: HandleId, key: RegistrationKey) -> Result<(), Error> {
        if self.by_dot_key.contains_key(key.dot_key()) {
            return Err(Error::DuplicateRegistration {
                key: key.dot_key().to_owned(),
            });
        }
        if self.handles.len() >= self.max_handlers {
            return Err(Error::HandlerCapReached {
                tenant: self.tenant.clone(),
                cap: self.max_handlers,
            });
        }
        self.by_dot_key.insert(key.dot_key().to_owned(), id);
        self.handles.insert(id, Entry { key, arn: None });
        Ok(())
    }

    /// Removes a handle and its ARN; returns the request ids it had pending.
    pub fn remove(&mut self, id: HandleId) -> Vec<String> {
        let Some(entry) = self.handles.remove(&id) else {
            return Vec::new();
        };
        self.by_dot_key.remove(entry.key.dot_key());
        if let Some(arn) = entry.arn {
            self.by_arn.remove(&arn);
        }
        let ids: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, h)| **h == id)
            .map(|(r, _)| r.clone())
            .collect();
        for r in &ids {
            self.pending.remove(r);
        }
        ids
    }

    /// Records the ARN the gateway assigned; replaces the handle's previous ARN.
    pub fn set_arn(&mut self, id: HandleId, arn: &str) {
        let Some(entry) = self.handles.get_mut(&id) else {
            return;
        };
        if let Some(old) = entry.arn.replace(arn.to_owned()) {
            self.by_arn.remove(&old);
        }
        self.by_arn.insert(arn.to_owned(), id);
    }

    /// Tracks an outbound request whose response must come back to `id`.
    pub fn track_request(&mut self, request_id: String, id: HandleId) {
        self.pending.insert(request_id, id);
    }

    /// Forgets a pending request (timeout, cancellation); returns whether it was there.
    pub fn forget_request(&mut self, request_id: &str) -> bool {
        self.pending.remove(request_id).is_some()
    }

    /// The connection dropped: every pending request is void. Returns them grouped by
    /// handle so each can be failed at once. Admissions and ARNs stay.
    pub fn disconnect(&mut self) -> Vec<(HandleId, Vec<String>)> {
        let mut by_handle: HashMap<HandleId, Vec<String>> = HashMap::new();
        for (r, h) in self.pending.drain() {
            by_handle.entry(h).or_default().push(r);
        }
        by_handle.into_iter().collect()
    }

    /// Admitted handles.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether no handle is admitted.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Pending request correlations.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The handle holding `arn`.
    pub fn handle_for_arn(&self, arn: &str) -> Option<HandleId> {
        self.by_arn.get(arn).copied()
    }

    fn only_handle(&self) -> Option<HandleId> {
        match self.handles.len() {
            1 => self.handles.keys().next().copied(),
            _ => None,
        }
    }

    fn only_or(&self, reason: DropReason) -> Route {
        self.only_handle()
            .map_or(Route::Drop(reason), Route::Handle)
    }

    /// Routes one inbound message.
    pub fn route(&mut self, msg: &StreamMessage) -> Route {
        let Some(m) = &msg.message else {
            return Route::Drop(DropReason::Empty);
        };
        match m {
            Message::RegisterResponse(r) => self.route_register_response(&r.connector_arn),
            Message::ExecuteRequest(r) => self.route_by_context_arn(r.context.get("connector_arn")),
            Message::InvokeRequest(r) => self.route_by_context_arn(r.context.get("connector_arn")),
            Message::ExecuteResponse(r) => self.route_response(&r.request_id),
            Message::InvokeResponse(r) => self.route_response(&r.request_id),
            Message::CredentialsIssued(c) => self.route_gateway_id(&c.gateway_id),
            Message::ApprovalNotification(a) => self.route_gateway_id(&a.gateway_id),
            Message::HeartbeatRequest(_) => Route::AnswerHeartbeat,
            Message::HeartbeatResponse(_) => Route::HeartbeatResponse,
            _ => self.only_or(DropReason::Unaddressed),
        }
    }

    fn route_register_response(&self, arn: &str) -> Route {
        let parsed = match Arn::parse(arn) {
            Ok(a) => a,
            // A failed register may carry no ARN; only a sole handle can own it.
            Err(_) => return self.only_or(DropReason::MalformedArn),
        };
        if let Some(id) = self.by_dot_key.get(&parsed.dot_key()) {
            return Route::Handle(*id);
        }
        // The gateway may canonicalise the type; the instance id is unique per socket.
        let mut matches = self
            .handles
            .iter()
            .filter(|(_, e)| e.key.instance_id() == parsed.instance_id);
        if let (Some((id, _)), None) = (matches.next(), matches.next()) {
            return Route::Handle(*id);
        }
        self.only_or(DropReason::UnknownArn)
    }

    fn route_by_context_arn(&self, arn: Option<&String>) -> Route {
        match arn.map(String::as_str) {
            None | Some("") => self.only_or(DropReason::Unaddressed),
            Some(arn) => match self.by_arn.get(arn) {
                Some(id) => Route::Handle(*id),
                None if Arn::parse(arn).is_err() => Route::Drop(DropReason::MalformedArn),
                None => Route::Drop(DropReason::UnknownArn),
            },
        }
    }

    fn route_response(&mut self, request_id: &str) -> Route {
        if request_id.is_empty() {
            return self.only_or(DropReason::Unaddressed);
        }
        match self.pending.remove(request_id) {
            Some(id) => Route::Handle(id),
            None => Route::Drop(DropReason::UnknownRequestId),
        }
    }

    fn route_gateway_id(&self, gateway_id: &str) -> Route {
        if gateway_id.is_empty() {
            return self.only_or(DropReason::Unaddressed);
        }
        match self.by_dot_key.get(gateway_id) {
            Some(id) => Route::Handle(*id),
            None => Route::Drop(DropReason::UnknownGatewayId),
        }
    }
}

#[cfg(test)]
mod tests;
