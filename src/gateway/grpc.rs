//! The gateway's gRPC server: `ConnectorService.Connect` (PROTOCOL.md §3), one bidi
//! stream per registration, on its own port (`GatewayConfig::grpc_listen`).
//!
//! Each accepted stream is a [`ConnectorLink`] with an [`Outbound::Grpc`]: the registry binds
//! registrations to it, executes and invokes reach it, and its messages are handled
//! by `connector_messages.rs`, exactly as a Phoenix socket's, so registrations of both
//! transports are listed, executed and invoked side by side. The stream's reader task
//! has the same idle timeout as a socket; its writer is the response stream, which
//! ends (with status OK) when the link is killed or its reader stops.
//!
//! Accepted TCP connections are wrapped so that they are counted (connections
//! accepted and open, in `/metrics` and [`super::GatewayStats`]) and can be cut by the
//! test hooks, as a failed network path would. Inbound messages are bounded by
//! `max_frame_bytes` in tonic's decoder: a larger one fails its stream with
//! `OutOfRange` before it is buffered whole, counted as `too_large`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::{Code, Request, Response, Status, Streaming};

use super::link::{ConnectorLink, Outbound};
use super::state::GatewayState;
use crate::proto::connector_service_server::{ConnectorService, ConnectorServiceServer};
use crate::proto::StreamMessage;

/// Messages queued to one stream's response side. When full, whoever pushes awaits,
/// as on a socket's writer queue.
const WRITER_QUEUE: usize = 1024;

/// Serves `ConnectorService` on `listener` until the gateway is cancelled.
pub(crate) async fn serve(state: Arc<GatewayState>, listener: TcpListener) {
    let service = ConnectorServiceServer::new(Service {
        state: state.clone(),
    })
    .max_decoding_message_size(state.config.max_frame_bytes)
    .max_encoding_message_size(state.config.max_frame_bytes);
    let incoming =
        futures_util::stream::unfold((listener, state.clone()), |(listener, state)| async move {
            let accepted = tokio::select! {
                _ = state.cancel.cancelled() => return None,
                r = listener.accept() => r,
            };
            let item = accepted.map(|(tcp, _)| CountedIo::new(&state, tcp));
            Some((item, (listener, state)))
        });
    let cancel = state.cancel.clone();
    let result = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "gRPC server failed");
    }
}

struct Service {
    state: Arc<GatewayState>,
}

#[tonic::async_trait]
impl ConnectorService for Service {
    type ConnectStream = BoxStream<'static, Result<StreamMessage, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<StreamMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let state = self.state.clone();
        let id = state.next_socket.fetch_add(1, Relaxed);
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let kill = state.cancel.child_token();
        let link = Arc::new(ConnectorLink::new(
            id,
            Outbound::Grpc { tx },
            state.config.max_in_flight_per_socket,
            kill.clone(),
            request.remote_addr(),
        ));
        state.add_link(link.clone());
        state.counters.grpc_streams_accepted.fetch_add(1, Relaxed);
        state.counters.grpc_streams_open.fetch_add(1, Relaxed);
        tracing::debug!(link_id = id, "gRPC stream accepted");
        state
            .tasks
            .spawn(read_loop(state.clone(), link, request.into_inner()));
        let counters = state.clone();
        let out = futures_util::stream::unfold(Some((rx, kill)), move |open| {
            let state = counters.clone();
            async move {
                let (mut rx, kill) = open?;
                let msg = tokio::select! {
                    biased;
                    m = rx.recv() => m?,
                    _ = kill.cancelled() => {
                        // A stopping gateway ends the stream with UNAVAILABLE, which
                        // the client reads as "reconnect now" (tonic's graceful
                        // shutdown then sends GOAWAY on the connection).
                        return state.is_stopping().then(|| {
                            (Err(Status::unavailable("the gateway is stopping; reconnect")), None)
                        });
                    }
                };
                state.counters.frames_out.fetch_add(1, Relaxed);
                Some((Ok(msg), Some((rx, kill))))
            }
        });
        Ok(Response::new(out.boxed()))
    }
}

/// Reads one stream until it ends, fails, idles out or is killed; then forgets its
/// link as a closing socket does, which also ends the response side.
async fn read_loop(
    state: Arc<GatewayState>,
    link: Arc<ConnectorLink>,
    mut inbound: Streaming<StreamMessage>,
) {
    let idle_timeout = state.config.idle_timeout;
    let mut last_inbound = Instant::now();
    let idle = sleep_until(last_inbound + idle_timeout);
    tokio::pin!(idle);
    loop {
        tokio::select! {
            _ = link.kill.cancelled() => break,
            _ = &mut idle => {
                let due = last_inbound + idle_timeout;
                if Instant::now() >= due {
                    tracing::info!(link_id = link.id, ?idle_timeout, "closing idle gRPC stream");
                    break;
                }
                idle.as_mut().reset(due);
            }
            msg = inbound.message() => {
                last_inbound = Instant::now();
                match msg {
                    Ok(Some(msg)) => {
                        state.counters.frames_in.fetch_add(1, Relaxed);
                        super::connector_messages::on_message(&state, &link, msg).await;
                    }
                    Ok(None) => break,
                    Err(status) => {
                        if status.code() == Code::OutOfRange {
                            tracing::warn!(
                                link_id = link.id,
                                limit = state.config.max_frame_bytes,
                                "closing a gRPC stream that sent an oversized message"
                            );
                            state.counters.drop_frame("too_large");
                        } else {
                            tracing::debug!(link_id = link.id, %status, "gRPC stream failed");
                        }
                        break;
                    }
                }
            }
        }
    }
    link.kill.cancel();
    let removed = state.forget_link(&link);
    state.counters.grpc_streams_open.fetch_sub(1, Relaxed);
    tracing::debug!(link_id = link.id, removed, "gRPC stream closed");
}

/// An accepted TCP connection, counted while open and cut when its token fires (the
/// gateway's shutdown or [`super::Gateway::drop_grpc_connections`]).
pub(crate) struct CountedIo {
    tcp: TcpStream,
    state: Arc<GatewayState>,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl CountedIo {
    fn new(state: &Arc<GatewayState>, tcp: TcpStream) -> Self {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on a gRPC connection");
        }
        state
            .counters
            .grpc_connections_accepted
            .fetch_add(1, Relaxed);
        state.counters.grpc_connections_open.fetch_add(1, Relaxed);
        let token: CancellationToken = state.grpc_cut.lock().expect("grpc cut lock").child_token();
        CountedIo {
            tcp,
            state: state.clone(),
            cut: Box::pin(token.cancelled_owned()),
        }
    }

    fn is_cut(&mut self, cx: &mut Context<'_>) -> bool {
        self.cut.poll_unpin(cx).is_ready()
    }
}

impl Drop for CountedIo {
    fn drop(&mut self) {
        self.state
            .counters
            .grpc_connections_open
            .fetch_sub(1, Relaxed);
    }
}

fn cut_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "connection cut by the gateway",
    )
}

impl AsyncRead for CountedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.is_cut(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.is_cut(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// The connection's addresses, so that `Request::remote_addr` names the peer each
/// stream's link records for `GET /api/v1/connections`.
impl tonic::transport::server::Connected for CountedIo {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::TcpConnectInfo {
            local_addr: self.tcp.local_addr().ok(),
            remote_addr: self.tcp.peer_addr().ok(),
        }
    }
}
