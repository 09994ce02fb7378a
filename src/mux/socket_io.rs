//! [`SocketIo`]: the open connection a socket's driver holds, whichever transport it
//! is (a Phoenix WebSocket or one gRPC stream), and the one place that moves
//! messages between it and the connection core.
//!
//! The transports (`crate::transport`) only open connections and hand out a sink and
//! a stream of messages; they never see the core. Here, each poll writes the core's
//! transmits into the sink (flushing once the core has none left) and feeds up to a
//! batch of received messages into the core, the same two loops for both transports;
//! only how a transmit becomes a message and how a received item becomes the core's
//! [`Incoming`] differ per transport.

use std::pin::Pin;
#[cfg(feature = "grpc")]
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};

use super::core::{Incoming, Transmit};
use super::metrics::SocketMetrics;
use super::socket::{now, Core};
use crate::error::Result;
use crate::transport::dial::Dialer;
use crate::transport::websocket::{self, WsStream};

#[cfg(feature = "grpc")]
use crate::proto::StreamMessage;
#[cfg(feature = "grpc")]
use crate::transport::grpc::{ChannelPool, GrpcStream, StreamFailed};

/// How many inbound messages one pass reads before it lets the other branches
/// (finished executes, commands, timers) run, so a flood of requests cannot starve
/// them.
const READ_BATCH: usize = 64;

/// How long a clean close waits for what is queued to be written (and, on a gRPC
/// stream, for the gateway to end its side).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How a disconnect reason begins when the gateway said it is going away (a close
/// frame with code 1001, or a gRPC stream ended UNAVAILABLE): it is stopping or
/// restarting on purpose, so the driver reconnects at once instead of after a backoff
/// step ([`is_going_away`]).
pub(crate) const GOING_AWAY: &str = "the gateway is going away";

/// Whether a disconnect reason says the gateway went away on purpose.
pub(crate) fn is_going_away(reason: &str) -> bool {
    reason.starts_with(GOING_AWAY)
}

/// Where a socket's driver connects.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
    /// A Phoenix WebSocket URL.
    WebSocket(String),
    /// A stream on a pooled gRPC connection.
    #[cfg(feature = "grpc")]
    Grpc(Arc<ChannelPool>),
}

/// An open connection.
pub(crate) enum SocketIo {
    WebSocket(Box<Open<WsStream, WsMessage>>),
    #[cfg(feature = "grpc")]
    Grpc(Box<Open<GrpcStream, StreamMessage>>),
}

impl SocketIo {
    /// Dials `target` within `timeout`; `max_message` bounds every inbound message.
    pub(crate) async fn dial(
        target: Upstream,
        dialer: &Dialer,
        timeout: Duration,
        max_message: usize,
    ) -> Result<SocketIo> {
        match target {
            Upstream::WebSocket(url) => {
                let ws = websocket::connect(&url, dialer, timeout, max_message).await?;
                Ok(SocketIo::WebSocket(Box::new(Open::new(ws))))
            }
            #[cfg(feature = "grpc")]
            Upstream::Grpc(pool) => {
                let stream = GrpcStream::open(&pool, max_message).await?;
                Ok(SocketIo::Grpc(Box::new(Open::new(stream))))
            }
        }
    }

    /// Writes what the core has, flushes, and reads up to a batch of inbound messages
    /// into the core. Ready with `Some(reason)` when the connection failed, `None`
    /// after some progress; pending while there is nothing to read.
    pub(crate) fn poll(
        &mut self,
        core: &mut Core,
        metrics: &SocketMetrics,
        cx: &mut Context<'_>,
    ) -> Poll<Option<String>> {
        match self {
            SocketIo::WebSocket(ws) => {
                if let Err(e) = ws.poll_write(core, ws_frame, cx) {
                    return Poll::Ready(Some(format!("write failed: {e}")));
                }
                poll_read(&mut ws.conn, "socket closed", cx, |item| {
                    read_ws(item, core, metrics)
                })
            }
            #[cfg(feature = "grpc")]
            SocketIo::Grpc(stream) => {
                if let Err(e) = stream.poll_write(core, grpc_message, cx) {
                    return Poll::Ready(Some(e.to_string()));
                }
                poll_read(
                    &mut stream.conn,
                    "the gateway ended the stream",
                    cx,
                    |item| read_grpc(item, core, metrics),
                )
            }
        }
    }

    /// Closes the connection cleanly: what is queued is written, then a close.
    pub(crate) async fn close(self, core: &mut Core) {
        match self {
            SocketIo::WebSocket(open) => {
                let mut ws = open.conn;
                let flush = async {
                    while let Some(t) = core.poll_transmit() {
                        if let Some(frame) = ws_frame(t) {
                            ws.feed(frame).await?;
                        }
                    }
                    WsStream::close(&mut ws, None).await
                };
                let _ = tokio::time::timeout(CLOSE_GRACE, flush).await;
            }
            #[cfg(feature = "grpc")]
            SocketIo::Grpc(open) => {
                let Open { conn, unsent, .. } = *open;
                let queued = std::iter::from_fn(|| core.poll_transmit()).filter_map(grpc_message);
                let rest: Vec<StreamMessage> = unsent.into_iter().chain(queued).collect();
                let _ = tokio::time::timeout(CLOSE_GRACE, conn.finish(rest)).await;
            }
        }
    }
}

/// A transmit as a WebSocket frame.
fn ws_frame(t: Transmit) -> Option<WsMessage> {
    match t {
        Transmit::Text(text) => Some(WsMessage::text(text)),
        Transmit::Binary(bytes) => Some(WsMessage::Binary(bytes)),
        Transmit::Message(_) => None,
    }
}

/// A transmit as a gRPC stream message; a stream core writes no Phoenix frames.
#[cfg(feature = "grpc")]
fn grpc_message(t: Transmit) -> Option<StreamMessage> {
    match t {
        Transmit::Message(m) => Some(*m),
        Transmit::Text(_) | Transmit::Binary(_) => None,
    }
}

/// One WebSocket read into the core; the reason to give up the connection, if any.
fn read_ws(
    item: std::result::Result<WsMessage, tungstenite::Error>,
    core: &mut Core,
    metrics: &SocketMetrics,
) -> Option<String> {
    let msg = match item {
        Ok(msg) => msg,
        Err(tungstenite::Error::Capacity(e)) => {
            metrics.drop_frame("too_large");
            return Some(format!("inbound message over max_frame_bytes: {e}"));
        }
        Err(e) => return Some(format!("read failed: {e}")),
    };
    let now = now();
    match msg {
        WsMessage::Text(text) => core.handle_frame(now, Incoming::Text(text.as_str())),
        WsMessage::Binary(bytes) => core.handle_frame(now, Incoming::Binary(bytes)),
        WsMessage::Close(Some(frame))
            if frame.code == tungstenite::protocol::frame::coding::CloseCode::Away =>
        {
            return Some(format!("{GOING_AWAY} (close 1001: {})", frame.reason));
        }
        WsMessage::Close(frame) => return Some(format!("server closed the socket: {frame:?}")),
        // Pings are answered by tungstenite itself.
        _ => core.handle_frame(now, Incoming::Activity),
    }
    None
}

/// One gRPC stream read into the core; the reason to give up the stream, if any.
#[cfg(feature = "grpc")]
fn read_grpc(
    item: std::result::Result<StreamMessage, StreamFailed>,
    core: &mut Core,
    metrics: &SocketMetrics,
) -> Option<String> {
    match item {
        Ok(msg) => {
            core.handle_frame(now(), Incoming::Message(msg));
            None
        }
        Err(failed) => {
            if failed.too_large {
                metrics.drop_frame("too_large");
            }
            if failed.going_away {
                return Some(format!("{GOING_AWAY} ({})", failed.reason));
            }
            Some(failed.reason)
        }
    }
}

/// Reads up to [`READ_BATCH`] items from `stream`, handing each to `feed`, which
/// returns the reason to give up the connection, if any; `ended` is the reason when
/// the stream ends. Ready with `None` after some progress, pending when there was
/// nothing to read.
fn poll_read<S: Stream + Unpin>(
    stream: &mut S,
    ended: &str,
    cx: &mut Context<'_>,
    mut feed: impl FnMut(S::Item) -> Option<String>,
) -> Poll<Option<String>> {
    let mut progress = false;
    for _ in 0..READ_BATCH {
        let item = match stream.poll_next_unpin(cx) {
            Poll::Pending => break,
            Poll::Ready(None) => return Poll::Ready(Some(ended.to_owned())),
            Poll::Ready(Some(item)) => item,
        };
        if let Some(why) = feed(item) {
            return Poll::Ready(Some(why));
        }
        progress = true;
    }
    if progress {
        Poll::Ready(None)
    } else {
        Poll::Pending
    }
}

/// An open connection of one transport (a sink and a stream of its messages), with
/// what its writes left over between polls: a message the sink was not ready for
/// yet, and whether messages were fed since the last flush.
pub(crate) struct Open<C, M> {
    conn: C,
    unsent: Option<M>,
    dirty: bool,
}

impl<C: Sink<M> + Unpin, M> Open<C, M> {
    fn new(conn: C) -> Self {
        Open {
            conn,
            unsent: None,
            dirty: false,
        }
    }

    /// Feeds the core's transmits (as `encode` makes them into this transport's
    /// messages) to the sink while it is ready, then flushes once nothing is left; a
    /// message the sink cannot take yet waits in `unsent`.
    fn poll_write(
        &mut self,
        core: &mut Core,
        encode: fn(Transmit) -> Option<M>,
        cx: &mut Context<'_>,
    ) -> std::result::Result<(), C::Error> {
        let sink = &mut self.conn;
        loop {
            let msg = match self.unsent.take() {
                Some(m) => m,
                None => match core.poll_transmit() {
                    Some(t) => match encode(t) {
                        Some(m) => m,
                        None => continue,
                    },
                    None => break,
                },
            };
            match Pin::new(&mut *sink).poll_ready(cx) {
                Poll::Ready(Ok(())) => {
                    Pin::new(&mut *sink).start_send(msg)?;
                    self.dirty = true;
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => {
                    self.unsent = Some(msg);
                    return Ok(());
                }
            }
        }
        if self.dirty {
            match Pin::new(&mut *sink).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.dirty = false,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => {}
            }
        }
        Ok(())
    }
}
