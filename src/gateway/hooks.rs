//! Fault and protocol hooks of [`Gateway`]: what a test needs to make the server side
//! misbehave, or say something the reference gateway would not say on its own, so that
//! the client side's handling of it can be tested against real sockets.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::extract::ws::Message as WsMessage;

use super::server::Gateway;
use super::socket::{end_lobby, lobby_event_frame};
use crate::phoenix::frame::{EVENT_CLOSE, EVENT_ERROR};
use crate::proto::StreamMessage;

/// A server-initiated end of a socket's `connector:lobby` channel
/// ([`Gateway::send_channel_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LobbyEvent {
    /// `phx_error`: the channel crashed on the server, as when a Phoenix channel
    /// process dies.
    Error,
    /// `phx_close`: the server closed the channel, as a Phoenix channel that stops.
    Close,
}

impl Gateway {
    /// Hard-closes one socket (no close frame), as a crashed network path would.
    pub fn drop_socket(&self, socket_id: u64) -> bool {
        self.socket(socket_id).map(|l| l.kill.cancel()).is_some()
    }

    /// Hard-closes every socket; returns how many.
    pub fn drop_all_sockets(&self) -> usize {
        let links: Vec<_> = self
            .state
            .sockets
            .lock()
            .expect("sockets lock")
            .values()
            .cloned()
            .collect();
        links.iter().for_each(|l| l.kill.cancel());
        links.len()
    }

    /// Cuts every open gRPC (HTTP/2) connection at the TCP level, as a failed network
    /// path would: every stream on them dies at once, and clients must redial.
    /// Connections accepted afterwards are not affected. Returns how many were open.
    pub fn drop_grpc_connections(&self) -> u64 {
        let open = self.state.counters.grpc_connections_open.load(Relaxed);
        let mut cut = self.state.grpc_cut.lock().expect("grpc cut lock");
        cut.cancel();
        *cut = self.state.cancel.child_token();
        open
    }

    /// While set, every register is answered with `success: false`.
    pub fn set_refuse_registers(&self, refuse: bool) {
        self.state.faults.set_refuse_registers(refuse);
    }

    /// While set, a socket that sends a register is hard-closed instead of answered: a
    /// gateway that accepts connections but never completes a registration.
    pub fn set_drop_sockets_on_register(&self, on: bool) {
        self.state.faults.set_drop_on_register(on);
    }

    /// While unset, Phoenix heartbeats go unanswered (a dead peer, to the client).
    pub fn set_answer_phoenix_heartbeats(&self, on: bool) {
        self.state.faults.set_answer_phoenix_heartbeats(on);
    }

    /// While unset, application `heartbeat_request`s go unanswered.
    pub fn set_answer_app_heartbeats(&self, on: bool) {
        self.state.faults.set_answer_app_heartbeats(on);
    }

    /// While set, each register (on either transport) is decided but held before its
    /// response is queued: its link reads nothing more meanwhile, and an accepted
    /// registration becomes visible (listed, counted by
    /// [`Gateway::wait_for_registrations`], executable) only once the response is
    /// queued after the release, ahead of anything addressed to it. Unsetting releases
    /// every held register. [`Gateway::wait_for_held_registers`] says when one waits.
    pub fn set_hold_registers(&self, on: bool) {
        self.state.faults.set_hold_registers(on);
    }

    /// Waits until at least `n` registers are held by [`Gateway::set_hold_registers`],
    /// at most `deadline`; false on timeout.
    pub async fn wait_for_held_registers(&self, n: usize, deadline: Duration) -> bool {
        self.state.faults.wait_for_held_registers(n, deadline).await
    }

    /// Queues a raw text frame to a socket, for malformed-input tests. False when the
    /// socket is gone or its writer queue is full.
    pub fn send_raw(&self, socket_id: u64, text: String) -> bool {
        self.queue(socket_id, WsMessage::Text(text.into()))
    }

    /// Queues a binary WebSocket frame carrying `bytes` to a socket, which Phoenix
    /// clients of the protocol never receive from a real gateway: tests use it to check
    /// that a client survives (or rejects) one. False as for [`Gateway::send_raw`].
    pub fn send_raw_binary(&self, socket_id: u64, bytes: Vec<u8>) -> bool {
        self.queue(socket_id, WsMessage::Binary(bytes.into()))
    }

    /// Pushes `msg` as a `proto` event on the socket's current lobby join, exactly as
    /// the gateway pushes its own messages: lets a test send what this gateway never
    /// sends by itself (a `heartbeat_response` with `should_reconnect`, a
    /// `ws_open_request`, an `execute_request` with chosen fields). False when the
    /// socket is gone, its lobby is not joined, or its writer queue is full.
    pub fn push(&self, socket_id: u64, msg: StreamMessage) -> bool {
        self.socket(socket_id).is_some_and(|l| l.try_push(&msg))
    }

    /// Ends the socket's lobby channel from the server side, as a Phoenix channel that
    /// crashed ([`LobbyEvent::Error`]) or stopped ([`LobbyEvent::Close`]) does: sends the
    /// event under the current join ref, and drops the channel's state with it (its
    /// registrations are removed, its pending executes fail), so that the client must
    /// rejoin and re-register, which is what such a test checks. The socket and its
    /// tenant binding stay. False when the socket is gone or its lobby is not joined.
    pub fn send_channel_event(&self, socket_id: u64, event: LobbyEvent) -> bool {
        let Some(link) = self.socket(socket_id) else {
            return false;
        };
        let Some(join_ref) = end_lobby(&self.state, &link) else {
            return false;
        };
        let event = match event {
            LobbyEvent::Error => EVENT_ERROR,
            LobbyEvent::Close => EVENT_CLOSE,
        };
        link.phoenix_tx()
            .is_some_and(|tx| tx.try_send(lobby_event_frame(join_ref, event)).is_ok())
    }

    fn queue(&self, socket_id: u64, frame: WsMessage) -> bool {
        self.socket(socket_id)
            .and_then(|l| l.phoenix_tx().map(|tx| tx.try_send(frame).is_ok()))
            .unwrap_or(false)
    }
}
