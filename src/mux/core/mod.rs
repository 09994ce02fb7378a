//! The connection core: everything one socket's frames touch, as a plain data
//! structure with no I/O, no clock and no runtime.
//!
//! [`Connection`] owns the Phoenix channel state, the link (join, liveness,
//! heartbeats) and the routing table (PROTOCOL.md §5), and orchestrates one table per
//! concern, each owning its state and answering with what must happen:
//!
//! - `registrations`: each registration's register phase, credentials (decided by
//!   `credentials`), backoff and metrics report timer;
//! - `executes`: each registration's in-flight executes (its permits) and its bounded
//!   queue of waiting ones, with their deadlines;
//! - `pending_invokes`: the invokes waiting for their answer, kept in the routing
//!   table's pending map;
//! - `timers`: every deadline of the tables: registers, executes, invokes and metrics
//!   reports.
//!
//! The task that drives it (`mux::driver`) only moves bytes, starts and drops the
//! connectors' futures, and hands results back; so every rule below is unit-tested
//! with plain `#[test]`s and an explicit [`Now`], the tables on their own too.
//!
//! # Call order
//!
//! 1. [`Connection::new`]; [`Connection::add`] for each registration (also later, at
//!    any time).
//! 2. When the connection opens (a WebSocket, or a gRPC stream whose request side is
//!    open), [`Connection::handle_connected`]; when it dies,
//!    [`Connection::handle_disconnected`].
//! 3. Feed every inbound message to [`Connection::handle_frame`]; when the
//!    instant from [`Connection::poll_timeout`] arrives, call
//!    [`Connection::handle_timeout`]; when an execute started by
//!    [`Event::StartExecute`] finishes, [`Connection::handle_execute_done`]. Commands:
//!    [`Connection::add`], [`Connection::remove`], [`Connection::invoke`],
//!    [`Connection::cancel_invoke`], [`Connection::send_metrics_report`],
//!    [`Connection::send`], [`Connection::set_credentials`] (the approval exchange's
//!    JWT, see `credentials`).
//! 4. After every input, drain [`Connection::poll_event`] (act on each event) and
//!    [`Connection::poll_transmit`] (write each frame; flush when it returns
//!    `None`), then sleep until the new [`Connection::poll_timeout`].
//!
//! # Framing
//!
//! The same core serves both transports ([`Framing`]); only what a connection is
//! differs. A Phoenix socket carries many registrations of one tenant over the lobby
//! channel: the core joins it, sends Phoenix heartbeats and encodes every message as
//! a `proto` push. A gRPC `Connect` stream carries one registration and no channel:
//! the stream is "joined" as soon as it opens, so the register request is the first
//! message on it (PROTOCOL.md §3), and messages travel as they are. Registration,
//! execute admission and deadlines, invoke correlation, application heartbeats, the
//! idle watchdog and metrics reports are the same code for both.
//!
//! Inputs never block and never fail: what cannot be done is answered on the wire
//! (an `overloaded` or `timeout` execute response), reported as an [`Event`], or
//! dropped and counted under a stable reason.

use std::time::{Duration, Instant};

use crate::connector::config::HeartbeatSettings;
use crate::error::Result;
use crate::proto::{
    stream_message::Message, ExecuteRequest, InvokeCapabilityResponse, StreamMessage,
};

use super::routing::HandleId;

mod connection;
mod credentials;
mod executes;
mod pending_invokes;
mod registrations;
mod timers;

pub(crate) use connection::Connection;
pub(crate) use credentials::Credential;
pub(crate) use executes::ExecId;
pub(crate) use pending_invokes::InvokeSpec;
pub(crate) use registrations::RegistrationSpec;

#[cfg(test)]
mod tests;

/// The present, as the core sees it: a monotonic instant for deadlines and the wall
/// clock in Unix milliseconds for the timestamps the protocol carries
/// (`heartbeat_request.timestamp_ms`, `metrics_report.timestamp_ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub(crate) instant: Instant,
    pub(crate) unix_ms: i64,
}

/// Settings of one socket's core.
#[derive(Debug, Clone)]
pub(crate) struct CoreOptions {
    pub(crate) tenant: String,
    pub(crate) heartbeat: HeartbeatSettings,
    /// How long a join may wait for its reply (the connect timeout).
    pub(crate) join_timeout: Duration,
    pub(crate) max_handlers: usize,
    /// Largest inbound message accepted; the transport enforces it too.
    pub(crate) max_frame_bytes: usize,
    /// Seed of the jitter source for register retries, so tests are deterministic.
    pub(crate) seed: u64,
    /// How messages are framed on this connection.
    pub(crate) framing: Framing,
}

/// How a connection frames its messages; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Phoenix Channels v2 over a WebSocket.
    Phoenix,
    /// One gRPC `Connect` stream: `StreamMessage`s as they are, no channel.
    Stream,
}

/// One frame for the driver to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transmit {
    /// A Phoenix text frame ([`Framing::Phoenix`]).
    Text(String),
    /// A Phoenix binary frame: a raw protobuf `StreamMessage`, no envelope, no
    /// base64. Written instead of a `proto` text frame once the gateway has sent a
    /// binary frame on this socket ([`Framing::Phoenix`] only).
    Binary(bytes::Bytes),
    /// A message of a gRPC stream ([`Framing::Stream`]); boxed because transmits
    /// wait in a queue, where every Phoenix text frame would otherwise take a
    /// message's size.
    Message(Box<StreamMessage>),
}

/// What the driver must do, besides writing transmits.
#[derive(Debug)]
pub(crate) enum Event<W> {
    /// Run the registration's connector on this request and report the response with
    /// [`Connection::handle_execute_done`].
    StartExecute {
        exec: ExecId,
        handle: HandleId,
        request: ExecuteRequest,
    },
    /// Drop the execute's future: it timed out, its registration was removed, or the
    /// connection died. Its answer, if one comes, is ignored.
    CancelExecute(ExecId),
    /// An invoke ended: answered (`Ok(Some(response))`), sent fire-and-forget
    /// (`Ok(None)`), or failed (timeout, disconnect, removal).
    InvokeDone {
        waiter: W,
        result: Result<Option<InvokeCapabilityResponse>>,
    },
    /// The registration is registered under `arn` (first register or a later one);
    /// `session_token` is the fresh one the gateway issued, to persist.
    Registered {
        handle: HandleId,
        arn: String,
        status: i32,
        session_token: Option<String>,
    },
    /// The gateway accepted the registration as PENDING under `arn`: it waits for the
    /// operator's approval (no retries, no timers).
    Pending { handle: HandleId, arn: String },
    /// The operator rejected the registration: terminal.
    Rejected { handle: HandleId, reason: String },
    /// The gateway called the presented credential invalid; it is dropped (forget the
    /// stored copy too) and the next register presents the next one.
    CredentialRefused {
        handle: HandleId,
        credential: Credential,
        error: String,
    },
    /// A register was refused or timed out; it is retried after a backoff.
    RegisterFailed { handle: HandleId, error: String },
    /// The registration lost its registration (the link or the channel went down).
    Unregistered(HandleId),
    /// An `approval_notification` for the registration.
    Approval {
        handle: HandleId,
        status: i32,
        message: String,
    },
    /// A message for the registration that its connector's hooks handle (WebSocket
    /// proxy messages, `credentials_issued`).
    Deliver {
        handle: HandleId,
        message: Box<Message>,
    },
    /// The registration's metrics report is due: gather the connector's custom
    /// figures and call [`Connection::send_metrics_report`].
    MetricsDue(HandleId),
    /// The connection is unusable (dead peer, refused join, the gateway asked): close
    /// it, call [`Connection::handle_disconnected`], reconnect after a backoff.
    Reconnect(String),
    /// The last registration was removed: close the socket for good.
    Close,
}

/// One message from the gateway, as the core takes it ("incoming": "inbound" names the
/// event sources of `crate::inbound`). Passed by value once and never
/// stored, so its large variant costs nothing worth a box.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Incoming<'a> {
    /// A message of a gRPC stream, already decoded (and size-checked) by the
    /// transport.
    Message(StreamMessage),
    /// A Phoenix v2 text frame.
    Text(&'a str),
    /// A binary frame carrying a raw protobuf `StreamMessage`, as some gateways of the
    /// family send.
    Binary(bytes::Bytes),
    /// A ping, pong or other control frame: proof of life, nothing to route.
    Activity,
}

/// The oneof's name, for log lines.
pub(crate) fn kind(msg: &Message) -> &'static str {
    match msg {
        Message::RegisterRequest(_) => "register_request",
        Message::RegisterResponse(_) => "register_response",
        Message::ExecuteRequest(_) => "execute_request",
        Message::ExecuteResponse(_) => "execute_response",
        Message::ApprovalNotification(_) => "approval_notification",
        Message::HeartbeatRequest(_) => "heartbeat_request",
        Message::HeartbeatResponse(_) => "heartbeat_response",
        Message::InvokeRequest(_) => "invoke_request",
        Message::InvokeResponse(_) => "invoke_response",
        Message::CredentialsIssued(_) => "credentials_issued",
        Message::WsOpenRequest(_) => "ws_open_request",
        Message::WsOpenResponse(_) => "ws_open_response",
        Message::WsFrame(_) => "ws_frame",
        Message::WsCloseRequest(_) => "ws_close_request",
        Message::MetricsReport(_) => "metrics_report",
    }
}
