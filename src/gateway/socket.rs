//! One accepted Phoenix socket, server side: Phoenix semantics (join, heartbeat,
//! duplicate join, `unmatched topic`, idle close) and the protocol's messages
//! (register, heartbeat, execute responses, invokes).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message as WsMessage, WebSocket};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::registry::{tenant_of, RegisterOutcome};
use super::server::{Shared, SocketLink};
use crate::phoenix::frame::{
    EVENT_CLOSE, EVENT_HEARTBEAT, EVENT_JOIN, EVENT_LEAVE, EVENT_PROTO, EVENT_REPLY,
};
use crate::phoenix::{Frame, LOBBY_TOPIC, PHOENIX_TOPIC};
use crate::proto::{
    stream_message::Message, HeartbeatResponse, InvokeCapabilityRequest, InvokeCapabilityResponse,
    PayloadEncoding, RegisterConnectorRequest, RegisterConnectorResponse, RegistrationStatus,
    StreamMessage,
};

/// Frames queued to one socket's writer. When full, whoever pushes awaits: an execute
/// caller, or this socket's own reader (backpressure on a client that does not read).
const WRITER_QUEUE: usize = 1024;

/// Serves one upgraded socket until it closes, idles out, or is killed.
pub(crate) async fn run(shared: Arc<Shared>, ws: WebSocket) {
    let id = shared.next_socket.fetch_add(1, Relaxed);
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    let link = Arc::new(SocketLink {
        id,
        tx,
        pending: Mutex::default(),
        join_ref: Mutex::new(None),
        kill: shared.cancel.child_token(),
    });
    shared
        .sockets
        .lock()
        .expect("sockets lock")
        .insert(id, link.clone());
    shared.counters.sockets_accepted.fetch_add(1, Relaxed);
    shared.counters.sockets_open.fetch_add(1, Relaxed);
    tracing::debug!(socket_id = id, "socket accepted");

    let (sink, mut stream) = ws.split();
    let writer = tokio::spawn(write_loop(shared.clone(), sink, rx));
    let idle_timeout = shared.config.idle_timeout;
    let mut last_inbound = Instant::now();
    let idle = sleep_until(last_inbound + idle_timeout);
    tokio::pin!(idle);
    let mut conn = Conn {
        shared: &shared,
        link: &link,
        joined: None,
    };
    loop {
        tokio::select! {
            _ = link.kill.cancelled() => break,
            _ = &mut idle => {
                let due = last_inbound + idle_timeout;
                if Instant::now() >= due {
                    tracing::info!(socket_id = id, ?idle_timeout, "closing idle socket");
                    break;
                }
                idle.as_mut().reset(due);
            }
            msg = stream.next() => {
                last_inbound = Instant::now();
                match msg {
                    Some(Ok(WsMessage::Text(text))) => conn.on_text(text.as_str()).await,
                    Some(Ok(WsMessage::Binary(_))) => shared.counters.drop_frame("binary_frame"),
                    Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => {}
                }
            }
        }
    }
    shared.sockets.lock().expect("sockets lock").remove(&id);
    let removed = shared.registry().remove_socket(id);
    shared.publish_registration_count();
    // Dropping the senders fails every waiting execute at once; closing the map makes
    // an execute that raced this teardown fail instead of waiting out its deadline.
    let failed = link.pending.lock().expect("pending lock").close();
    drop(failed);
    shared.counters.sockets_open.fetch_sub(1, Relaxed);
    writer.abort();
    tracing::debug!(socket_id = id, removed, "socket closed");
}

/// Feeds every queued frame and flushes only when the queue is empty.
async fn write_loop<S>(shared: Arc<Shared>, mut sink: S, mut rx: mpsc::Receiver<String>)
where
    S: futures_util::Sink<WsMessage> + Unpin,
{
    while let Some(text) = rx.recv().await {
        let mut n = 1;
        if sink.feed(WsMessage::Text(text.into())).await.is_err() {
            return;
        }
        while let Ok(text) = rx.try_recv() {
            n += 1;
            if sink.feed(WsMessage::Text(text.into())).await.is_err() {
                return;
            }
        }
        shared.counters.frames_out.fetch_add(n, Relaxed);
        if sink.flush().await.is_err() {
            return;
        }
    }
}

struct Conn<'a> {
    shared: &'a Arc<Shared>,
    link: &'a Arc<SocketLink>,
    /// The join ref of the lobby channel, while joined.
    joined: Option<String>,
}

impl Conn<'_> {
    async fn send_frame(&self, frame: Frame) {
        let _ = self.link.tx.send(frame.encode()).await;
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

    async fn on_text(&mut self, text: &str) {
        let counters = &self.shared.counters;
        counters.frames_in.fetch_add(1, Relaxed);
        if text.len() > self.shared.config.max_frame_bytes {
            tracing::warn!(
                socket_id = self.link.id,
                size = text.len(),
                "dropping oversized frame"
            );
            counters.drop_frame("too_large");
            return;
        }
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
                if self.shared.answer_phoenix_heartbeats.load(Relaxed) {
                    self.reply(&frame, "ok", json!({})).await;
                }
            }
            EVENT_JOIN if on_lobby => self.join(&frame).await,
            EVENT_JOIN => self.unmatched(&frame).await,
            _ if !on_lobby || self.joined.is_none() => self.unmatched(&frame).await,
            EVENT_LEAVE => {
                self.reply(&frame, "ok", json!({})).await;
                self.leave(frame.join_ref.clone()).await;
            }
            EVENT_PROTO => match frame.proto() {
                Ok(msg) => self.on_message(msg).await,
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
        if let Some(old) = self.joined.clone() {
            self.leave(Some(old)).await;
        }
        let jr = frame
            .join_ref
            .clone()
            .or_else(|| frame.msg_ref.clone())
            .unwrap_or_default();
        self.joined = Some(jr.clone());
        *self.link.join_ref.lock().expect("join ref lock") = Some(jr);
        self.reply(frame, "ok", json!({})).await;
    }

    /// Closes the lobby channel (a leave, or a duplicate join replacing it). As in
    /// Phoenix, the channel's state dies with it: its registrations are removed and its
    /// pending executes fail at once; the socket, and its tenant binding, live on. The
    /// client treats `phx_close` as a lost join and re-registers after rejoining.
    async fn leave(&mut self, join_ref: Option<String>) {
        self.joined = None;
        *self.link.join_ref.lock().expect("join ref lock") = None;
        let removed = self.shared.registry().clear_socket(self.link.id);
        if removed > 0 {
            self.shared.publish_registration_count();
        }
        let failed = self.link.pending.lock().expect("pending lock").drain();
        tracing::debug!(
            socket_id = self.link.id,
            removed,
            failed = failed.len(),
            "lobby channel closed"
        );
        drop(failed);
        self.send_frame(Frame::new(
            join_ref.clone(),
            join_ref,
            LOBBY_TOPIC,
            EVENT_CLOSE,
            json!({}),
        ))
        .await;
    }

    async fn on_message(&mut self, msg: StreamMessage) {
        let push = |m: Message| StreamMessage { message: Some(m) };
        match msg.message {
            Some(Message::RegisterRequest(req)) => {
                if self.shared.drop_on_register.load(Relaxed) {
                    tracing::info!(
                        socket_id = self.link.id,
                        "dropping the socket instead of registering (test hook)"
                    );
                    self.link.kill.cancel();
                    return;
                }
                let resp = self.register(&req);
                self.link.push(&push(Message::RegisterResponse(resp))).await;
            }
            Some(Message::HeartbeatRequest(hb)) => {
                if self.shared.answer_app_heartbeats.load(Relaxed) {
                    let resp = HeartbeatResponse {
                        gateway_id: hb.gateway_id,
                        timestamp_ms: hb.timestamp_ms,
                        should_reconnect: false,
                    };
                    self.link
                        .push(&push(Message::HeartbeatResponse(resp)))
                        .await;
                }
            }
            Some(Message::ExecuteResponse(resp)) => {
                let waiter = self
                    .link
                    .pending
                    .lock()
                    .expect("pending lock")
                    .complete(&resp.request_id);
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(resp);
                    }
                    None => {
                        tracing::warn!(socket_id = self.link.id, request_id = %resp.request_id, "execute response for no pending request");
                        self.shared.counters.drop_frame("unknown_request_id");
                    }
                }
            }
            Some(Message::InvokeRequest(req)) => {
                tokio::spawn(invoke(self.shared.clone(), self.link.clone(), req));
            }
            Some(Message::HeartbeatResponse(_)) | Some(Message::MetricsReport(_)) => {}
            None => self.shared.counters.drop_frame("empty"),
            Some(_) => self.shared.counters.drop_frame("unexpected_message"),
        }
    }

    fn register(&self, req: &RegisterConnectorRequest) -> RegisterConnectorResponse {
        let refuse = self.shared.refuse_registers.load(Relaxed);
        let outcome = {
            let mut registry = self.shared.registry();
            if refuse {
                let arn = crate::identity::Arn::for_key(&crate::identity::RegistrationKey::new(
                    &req.tenant_id,
                    &req.connector_type,
                    &req.instance_id,
                ))
                .to_string();
                RegisterOutcome::Refused {
                    arn,
                    reason: "registrations are refused by this gateway right now".into(),
                }
            } else {
                registry.register(self.link.id, req, self.link.clone())
            }
        };
        match outcome {
            RegisterOutcome::Accepted { arn } => {
                self.shared.publish_registration_count();
                tracing::debug!(socket_id = self.link.id, %arn, "registered");
                RegisterConnectorResponse {
                    success: true,
                    connector_arn: arn,
                    status: RegistrationStatus::Approved as i32,
                    session_token: session_token(),
                    ..Default::default()
                }
            }
            RegisterOutcome::Refused { arn, reason } => {
                tracing::info!(socket_id = self.link.id, tenant = %tenant_of(req), %reason, "register refused");
                RegisterConnectorResponse {
                    success: false,
                    connector_arn: arn,
                    error: reason,
                    status: RegistrationStatus::Rejected as i32,
                    ..Default::default()
                }
            }
        }
    }
}

/// Connector-to-connector: execute on the target, answer the caller by its request id.
async fn invoke(shared: Arc<Shared>, caller: Arc<SocketLink>, req: InvokeCapabilityRequest) {
    let timeout = match req.timeout_ms {
        t if t > 0 => std::time::Duration::from_millis(t as u64),
        _ => shared.config.default_execute_timeout,
    };
    let encoding = PayloadEncoding::try_from(req.payload_encoding).unwrap_or(PayloadEncoding::Json);
    let cap = (!req.capability_id.is_empty()).then_some(req.capability_id.as_str());
    let result = shared
        .execute(
            &req.target_address,
            req.payload,
            encoding,
            cap,
            req.context,
            timeout,
        )
        .await;
    if req.fire_and_forget {
        return;
    }
    let resp = match result {
        Ok(r) => InvokeCapabilityResponse {
            request_id: req.request_id,
            success: r.success,
            payload: r.payload,
            payload_encoding: r.payload_encoding,
            error: r.error,
            duration_ms: r.duration_ms,
            ..Default::default()
        },
        Err(e) => InvokeCapabilityResponse {
            request_id: req.request_id,
            success: false,
            error: e.to_string(),
            error_details: [("code".to_owned(), e.code().to_owned())].into(),
            ..Default::default()
        },
    };
    caller
        .push(&StreamMessage {
            message: Some(Message::InvokeResponse(resp)),
        })
        .await;
}

fn session_token() -> String {
    use rand::Rng as _;
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
