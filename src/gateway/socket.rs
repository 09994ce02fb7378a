//! One accepted Phoenix socket, server side: Phoenix semantics (join, heartbeat,
//! duplicate join, `unmatched topic`, idle close). The protocol's messages it unwraps
//! are handled in `connector_messages.rs`, as a gRPC stream's are.
//!
//! A client may send a `StreamMessage` either as a `proto` text frame or as a binary
//! WebSocket frame carrying the raw protobuf bytes; both are accepted on the joined
//! lobby and handled alike.
//!
//! The socket's task reads it and, while its writer queue is short, writes it too;
//! a backlog's writes go to a helper task until it drains (`socket_writes.rs`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message as WsMessage, WebSocket};
use bytes::Bytes;
use futures_util::StreamExt;
use prost::Message as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::link::{ConnectorLink, Outbound};
use super::socket_writes::Writes;
use super::state::GatewayState;
use crate::phoenix::frame::{
    EVENT_CLOSE, EVENT_HEARTBEAT, EVENT_JOIN, EVENT_LEAVE, EVENT_PROTO, EVENT_REPLY,
};
use crate::phoenix::{Frame, FRAMES_BINARY, JOIN_FRAMES_KEY, LOBBY_TOPIC, PHOENIX_TOPIC};
use crate::proto::StreamMessage;

/// Frames queued to one socket's writes. When full, whoever pushes awaits: an execute
/// caller, or a handler of this socket's own frames (backpressure on a client that
/// does not read; the queue drains meanwhile, `socket_writes.rs`).
const WRITER_QUEUE: usize = 1024;

/// Serves one upgraded socket from `peer` until it closes, idles out, or is killed.
pub(crate) async fn run(state: Arc<GatewayState>, ws: WebSocket, peer: Option<SocketAddr>) {
    let id = state.next_socket.fetch_add(1, Relaxed);
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    let wire = Outbound::Phoenix {
        tx: tx.clone(),
        join_ref: Mutex::new(None),
        binary: AtomicBool::new(false),
    };
    let link = Arc::new(ConnectorLink::new(
        id,
        wire,
        state.config.max_in_flight_per_socket,
        state.cancel.child_token(),
        peer,
    ));
    state.add_link(link.clone());
    state.counters.sockets_accepted.fetch_add(1, Relaxed);
    state.counters.sockets_open.fetch_add(1, Relaxed);
    tracing::debug!(socket_id = id, "socket accepted");

    let (sink, mut stream) = ws.split();
    let apart = state.config.socket_writer_apart;
    let (mut writes, helper) = Writes::new(state.clone(), link.clone(), sink, rx, apart);
    let mut writer = state.tasks.spawn(helper);
    let idle_timeout = state.config.idle_timeout;
    let mut last_inbound = Instant::now();
    let idle = sleep_until(last_inbound + idle_timeout);
    tokio::pin!(idle);
    let mut conn = Conn {
        state: &state,
        link: &link,
        tx,
    };
    let mut goodbye = false;
    loop {
        tokio::select! {
            _ = link.kill.cancelled() => {
                goodbye = state.is_stopping();
                break;
            }
            _ = &mut idle => {
                let due = last_inbound + idle_timeout;
                if Instant::now() >= due {
                    tracing::info!(socket_id = id, ?idle_timeout, "closing idle socket");
                    break;
                }
                idle.as_mut().reset(due);
            }
            event = writes.next() => writes.on_event(event).await,
            msg = stream.next() => {
                last_inbound = Instant::now();
                match msg {
                    Some(Ok(WsMessage::Text(text))) => {
                        writes.while_handling(conn.on_text(text.as_str())).await
                    }
                    Some(Ok(WsMessage::Binary(bytes))) => {
                        writes.while_handling(conn.on_binary(bytes)).await
                    }
                    Some(Ok(WsMessage::Close(_))) | None => break,
                    Some(Err(e)) => {
                        if is_too_large(e) {
                            tracing::warn!(
                                socket_id = id,
                                limit = state.config.max_frame_bytes,
                                "closing a socket that sent an oversized message"
                            );
                            state.counters.drop_frame("too_large");
                        }
                        break;
                    }
                    Some(Ok(_)) => {}
                }
            }
        }
    }
    if goodbye {
        say_goodbye(&state, &link, &conn.tx).await;
        writes.leave_to_helper();
    }
    let removed = state.forget_link(&link);
    state.counters.sockets_open.fetch_sub(1, Relaxed);
    if goodbye {
        // The helper ends once it has flushed the close frame; a client that stopped
        // reading does not hold the stop longer than this.
        let _ = tokio::time::timeout(GOODBYE_FLUSH, &mut writer).await;
    }
    writer.abort();
    tracing::debug!(socket_id = id, removed, goodbye, "socket closed");
}

/// How long a stopping gateway waits for one socket's goodbye frames to be written.
const GOODBYE_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// WebSocket close code 1001, "going away": the server is going down (RFC 6455
/// §7.4.1). The SDK reconnects at once on it instead of after a backoff step.
pub(crate) const CLOSE_GOING_AWAY: u16 = 1001;

/// Tells the connector the gateway is stopping, as the protocol family can: the lobby
/// channel ends with `phx_close` (its registrations and pending executes go with it,
/// failed with a clear error) and the socket with a close frame, code 1001, so the
/// connector starts reconnecting now rather than when its heartbeat goes unanswered.
async fn say_goodbye(state: &GatewayState, link: &ConnectorLink, tx: &mpsc::Sender<WsMessage>) {
    if let Some(join_ref) = end_lobby(state, link) {
        let _ = tx.try_send(lobby_event_frame(join_ref, EVENT_CLOSE));
    }
    let _ = tx.try_send(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
        code: CLOSE_GOING_AWAY,
        reason: "gateway stopping".into(),
    })));
}

/// Whether a read failed because the message or a frame exceeded
/// `max_frame_bytes`: the WebSocket layer refuses it from the frame header, before
/// buffering the payload, with a capacity error.
fn is_too_large(e: axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error as WsError;
    e.into_inner()
        .downcast::<WsError>()
        .is_ok_and(|e| matches!(*e, WsError::Capacity(_)))
}

/// Ends the lobby channel of `link` on the server side, as a closing Phoenix channel
/// takes its state with it: its registrations are removed and its pending executes
/// fail at once; the socket, and its tenant binding, live on. Returns the join ref the
/// channel had, under which the caller announces the end; `None` if it was not joined.
pub(crate) fn end_lobby(state: &GatewayState, link: &ConnectorLink) -> Option<String> {
    let join_ref = link.replace_join_ref(None)?;
    let removed = state.registry().clear_socket(link.id);
    if removed > 0 {
        state.publish_registration_count();
    }
    let failed = link.pending.lock().expect("pending lock").drain();
    tracing::debug!(
        socket_id = link.id,
        removed,
        failed = failed.len(),
        "lobby channel closed"
    );
    drop(failed);
    Some(join_ref)
}

/// A server event (`phx_close`, `phx_error`) on the lobby channel: both refs are the
/// channel's join ref, as Phoenix writes them.
pub(crate) fn lobby_event_frame(join_ref: String, event: &str) -> WsMessage {
    let frame = Frame::new(
        Some(join_ref.clone()),
        Some(join_ref),
        LOBBY_TOPIC,
        event,
        json!({}),
    );
    WsMessage::Text(frame.encode().into())
}

struct Conn<'a> {
    state: &'a Arc<GatewayState>,
    link: &'a Arc<ConnectorLink>,
    /// The socket's writer queue, for the frames only Phoenix has (replies, channel
    /// events); protocol messages go through [`ConnectorLink::push`].
    tx: mpsc::Sender<WsMessage>,
}

impl Conn<'_> {
    async fn send_frame(&self, frame: Frame) {
        let _ = self.tx.send(WsMessage::Text(frame.encode().into())).await;
    }

    async fn reply(&self, to: &Frame, status: &str, response: Value) {
        let payload = json!({ "status": status, "response": response });
        self.send_frame(Frame::new(
            to.join_ref.clone(),
            to.msg_ref.clone(),
            to.topic.clone(),
            EVENT_REPLY,
            payload,
        ))
        .await;
    }

    async fn unmatched(&self, to: &Frame) {
        self.reply(to, "error", json!({ "reason": "unmatched topic" }))
            .await;
    }

    /// A binary frame: a raw protobuf `StreamMessage`, handled as a `proto` push on
    /// the joined lobby would be. It carries no topic or ref to answer with, so one
    /// sent while the lobby is not joined is dropped and counted.
    async fn on_binary(&mut self, bytes: Bytes) {
        let counters = &self.state.counters;
        counters.frames_in.fetch_add(1, Relaxed);
        if !self.link.joined() {
            tracing::warn!(
                socket_id = self.link.id,
                "dropping a binary frame sent before joining"
            );
            counters.drop_frame("not_joined");
            return;
        }
        match StreamMessage::decode(bytes) {
            Ok(msg) => {
                // A connector that sends binary reads it: answer in kind.
                if self.state.config.binary_frames {
                    self.link.use_binary_frames();
                }
                super::connector_messages::on_message(self.state, self.link, msg).await
            }
            Err(e) => {
                tracing::warn!(socket_id = self.link.id, error = %e, "dropping undecodable binary frame");
                counters.drop_frame("bad_protobuf");
            }
        }
    }

    async fn on_text(&mut self, text: &str) {
        let counters = &self.state.counters;
        counters.frames_in.fetch_add(1, Relaxed);
        let frame = match Frame::decode(text) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(socket_id = self.link.id, error = %e, "dropping malformed frame");
                counters.drop_frame(e.reason());
                return;
            }
        };
        let on_lobby = frame.topic == LOBBY_TOPIC;
        match frame.event.as_str() {
            EVENT_HEARTBEAT if frame.topic == PHOENIX_TOPIC => {
                if self.state.faults.answer_phoenix_heartbeats() {
                    self.reply(&frame, "ok", json!({})).await;
                }
            }
            EVENT_JOIN if on_lobby => self.join(&frame).await,
            EVENT_JOIN => self.unmatched(&frame).await,
            _ if !on_lobby || !self.link.joined() => self.unmatched(&frame).await,
            EVENT_LEAVE => {
                self.reply(&frame, "ok", json!({})).await;
                self.leave().await;
            }
            EVENT_PROTO => match frame.proto() {
                Ok(msg) => super::connector_messages::on_message(self.state, self.link, msg).await,
                Err(e) => {
                    tracing::warn!(socket_id = self.link.id, error = %e, "dropping undecodable proto frame");
                    counters.drop_frame(e.reason());
                }
            },
            _ => {
                tracing::warn!(socket_id = self.link.id, event = %frame.event, "dropping frame with unknown event");
                counters.drop_frame("unknown_event");
            }
        }
    }

    /// A join of the lobby. A second join on the same socket replaces the first: the
    /// old channel is closed with `phx_close` under its own join ref, as Phoenix does.
    async fn join(&mut self, frame: &Frame) {
        self.leave().await;
        let jr = frame
            .join_ref
            .clone()
            .or_else(|| frame.msg_ref.clone())
            .unwrap_or_default();
        // The reply is queued before the channel takes data, so that nothing pushed on
        // it (a test hook's push, say) can reach the client ahead of its join reply.
        self.reply(frame, "ok", json!({})).await;
        if self.state.config.binary_frames
            && frame.payload.get(JOIN_FRAMES_KEY).and_then(Value::as_str) == Some(FRAMES_BINARY)
        {
            self.link.use_binary_frames();
        }
        self.link.replace_join_ref(Some(jr));
    }

    /// Closes the lobby channel, if joined (a leave, or a duplicate join replacing it),
    /// with `phx_close` under its join ref; its state dies with it ([`end_lobby`]). The
    /// client treats `phx_close` as a lost join and re-registers after rejoining.
    async fn leave(&mut self) {
        if let Some(join_ref) = end_lobby(self.state, self.link) {
            let _ = self.tx.send(lobby_event_frame(join_ref, EVENT_CLOSE)).await;
        }
    }
}
