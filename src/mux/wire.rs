//! The connection a socket's driver holds, whichever transport it is: a Phoenix
//! WebSocket or one gRPC stream. The driver dials one, polls it (write the core's
//! transmits, read inbound messages into the core) and closes it; everything else
//! about the connection lives in the core, the same for both.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Sink, SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};

use super::core::{Inbound, Transmit};
use super::driver::{now, Core};
use super::metrics::SocketMetrics;
use crate::error::Result;
use crate::transport::dial::Dialer;
use crate::transport::websocket::{self, WsStream};

#[cfg(feature = "grpc")]
use crate::transport::grpc::{ChannelPool, GrpcStream};

/// How many inbound messages one pass reads before it lets the other branches
/// (finished executes, commands, timers) run, so a flood of requests cannot starve
/// them.
const READ_BATCH: usize = 64;

/// How long a clean close waits for what is queued to be written (and, on a gRPC
/// stream, for the gateway to end its side).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Where a socket's driver connects.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A Phoenix WebSocket URL.
    WebSocket(String),
    /// A stream on a pooled gRPC connection.
    #[cfg(feature = "grpc")]
    Grpc(Arc<ChannelPool>),
}

/// An open connection.
pub(crate) enum Wire {
    WebSocket {
        ws: Box<WsStream>,
        /// A frame the sink was not ready for yet.
        unsent: Option<WsMessage>,
        /// Whether frames were fed since the last flush.
        dirty: bool,
    },
    #[cfg(feature = "grpc")]
    Grpc(Box<GrpcStream>),
}

impl Wire {
    /// Dials `target` within `timeout`; `max_message` bounds every inbound message.
    pub(crate) async fn dial(
        target: Target,
        dialer: &Dialer,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Wire> {
        match target {
            Target::WebSocket(url) => {
                let ws = websocket::connect(&url, dialer, timeout, max_message).await?;
                Ok(Wire::WebSocket {
                    ws: Box::new(ws),
                    unsent: None,
                    dirty: false,
                })
            }
            #[cfg(feature = "grpc")]
            Target::Grpc(pool) => {
                let stream = GrpcStream::open(&pool, max_message).await?;
                Ok(Wire::Grpc(Box::new(stream)))
            }
        }
    }

    /// Writes what the core has, flushes, and reads up to a batch of inbound messages
    /// into the core. Ready with `Some(reason)` when the connection failed, `None`
    /// after some progress; pending while there is nothing to read.
    pub(crate) fn poll_io(
        &mut self,
        core: &mut Core,
        metrics: &SocketMetrics,
        cx: &mut Context<'_>,
    ) -> Poll<Option<String>> {
        match self {
            Wire::WebSocket { ws, unsent, dirty } => poll_ws(ws, core, unsent, dirty, metrics, cx),
            #[cfg(feature = "grpc")]
            Wire::Grpc(stream) => stream.poll_io(cx, READ_BATCH, core, metrics),
        }
    }

    /// Closes the connection cleanly: what is queued is written, then a close.
    pub(crate) async fn close(self, core: &mut Core) {
        match self {
            Wire::WebSocket { mut ws, .. } => {
                let flush = async {
                    while let Some(t) = core.poll_transmit() {
                        if let Transmit::Text(text) = t {
                            ws.feed(WsMessage::text(text)).await?;
                        }
                    }
                    WsStream::close(&mut ws, None).await
                };
                let _ = tokio::time::timeout(CLOSE_GRACE, flush).await;
            }
            #[cfg(feature = "grpc")]
            Wire::Grpc(stream) => {
                let rest: Vec<Transmit> = std::iter::from_fn(|| core.poll_transmit()).collect();
                let _ = tokio::time::timeout(CLOSE_GRACE, stream.close(rest.into_iter())).await;
            }
        }
    }
}

fn poll_ws(
    ws: &mut WsStream,
    core: &mut Core,
    unsent: &mut Option<WsMessage>,
    dirty: &mut bool,
    metrics: &SocketMetrics,
    cx: &mut Context<'_>,
) -> Poll<Option<String>> {
    if let Err(e) = poll_ws_write(ws, core, unsent, dirty, cx) {
        return Poll::Ready(Some(format!("write failed: {e}")));
    }
    let mut progress = false;
    for _ in 0..READ_BATCH {
        let msg = match ws.poll_next_unpin(cx) {
            Poll::Pending => break,
            Poll::Ready(None) => return Poll::Ready(Some("socket closed".into())),
            Poll::Ready(Some(Err(tungstenite::Error::Capacity(e)))) => {
                metrics.drop_frame("too_large");
                return Poll::Ready(Some(format!("inbound message over max_frame_bytes: {e}")));
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(format!("read failed: {e}"))),
            Poll::Ready(Some(Ok(msg))) => msg,
        };
        progress = true;
        let now = now();
        match msg {
            WsMessage::Text(text) => core.handle_frame(now, Inbound::Text(text.as_str())),
            WsMessage::Binary(bytes) => core.handle_frame(now, Inbound::Binary(bytes)),
            WsMessage::Close(frame) => {
                return Poll::Ready(Some(format!("server closed the socket: {frame:?}")))
            }
            // Pings are answered by tungstenite itself.
            _ => core.handle_frame(now, Inbound::Activity),
        }
    }
    if progress {
        Poll::Ready(None)
    } else {
        Poll::Pending
    }
}

/// Feeds the core's transmits to the sink while it is ready, then flushes once
/// nothing is left; a frame the sink cannot take yet waits in `unsent`.
fn poll_ws_write(
    ws: &mut WsStream,
    core: &mut Core,
    unsent: &mut Option<WsMessage>,
    dirty: &mut bool,
    cx: &mut Context<'_>,
) -> std::result::Result<(), tungstenite::Error> {
    loop {
        let msg = match unsent.take() {
            Some(m) => m,
            None => match core.poll_transmit() {
                Some(Transmit::Text(text)) => WsMessage::text(text),
                // A Phoenix core writes text frames only.
                Some(Transmit::Message(_)) => continue,
                None => break,
            },
        };
        match Pin::new(&mut *ws).poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                Pin::new(&mut *ws).start_send(msg)?;
                *dirty = true;
            }
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => {
                *unsent = Some(msg);
                return Ok(());
            }
        }
    }
    if *dirty {
        match Pin::new(&mut *ws).poll_flush(cx) {
            Poll::Ready(Ok(())) => *dirty = false,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => {}
        }
    }
    Ok(())
}
