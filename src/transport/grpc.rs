//! The gRPC transport, client side (PROTOCOL.md §3): one `ConnectorService.Connect`
//! bidi stream per registration, streams sharing HTTP/2 connections.
//!
//! [`ChannelPool`] holds the HTTP/2 connections to one gateway. A registration takes
//! a [`Lease`] on a connection that carries fewer than `max_streams` streams (the
//! runner's `max_streams_per_channel`); when none has room, a new connection is
//! dialled, and every registration that asked meanwhile waits for that one dial
//! instead of dialling its own. A stream that fails with a transport error marks its
//! connection broken: it leaves the pool, so the next streams dial a fresh one, each
//! after its registration's reconnect backoff (the driver's, the same as for a
//! WebSocket). tonic's own reconnect is never relied on.
//!
//! [`GrpcStream`] is one open stream: a sink of the messages to send (an mpsc queue
//! tonic reads from) and a stream of the messages received (tonic's `Streaming`).
//! The first message can be sent before the response headers arrive, since a gateway
//! may send none until it has read it. What the messages mean is the mux's business;
//! this module only carries them.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, Sink, Stream, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, OnceCell};
use tokio_util::sync::PollSender;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status, Streaming};

use crate::error::{Error, Result};
use crate::proto::connector_service_client::ConnectorServiceClient;
use crate::proto::StreamMessage;
use crate::transport::dial::Dialer;

/// Messages queued on a stream's request side before the driver's writes wait: a
/// burst of execute responses fits, and a gateway that stops reading stalls only this
/// stream.
const OUTBOUND_QUEUE: usize = 256;

/// Where the pool's connections go.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct GrpcTarget {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) tls: bool,
}

impl fmt::Debug for GrpcTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "grpcs" } else { "grpc" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

impl GrpcTarget {
    fn url(&self) -> String {
        format!("{self:?}")
    }
}

/// HTTP/2 connections to one gateway, shared by the streams of many registrations.
pub(crate) struct ChannelPool {
    target: GrpcTarget,
    dialer: Dialer,
    max_streams: usize,
    connect_timeout: Duration,
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    next_id: u64,
    live: Vec<Slot>,
}

struct Slot {
    id: u64,
    /// Filled by the first lease's dial with its outcome; every lease of the slot
    /// waits for that one dial and shares its result, a failure included (the slot
    /// then leaves the pool, and each lease retries after its own backoff).
    channel: Arc<OnceCell<std::result::Result<Channel, String>>>,
    streams: usize,
}

impl fmt::Debug for ChannelPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelPool")
            .field("target", &self.target)
            .field("max_streams", &self.max_streams)
            .finish_non_exhaustive()
    }
}

impl ChannelPool {
    /// A pool with no connection yet.
    pub(crate) fn new(
        target: GrpcTarget,
        dialer: Dialer,
        max_streams: usize,
        connect_timeout: Duration,
    ) -> Self {
        ChannelPool {
            target,
            dialer,
            max_streams: max_streams.max(1),
            connect_timeout,
            slots: Mutex::default(),
        }
    }

    /// A stream's share of a connection with room, dialling one if none has.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<Lease> {
        let (slot, cell) = {
            let mut slots = self.slots.lock().expect("pool lock");
            let max = self.max_streams;
            match slots.live.iter_mut().find(|s| s.streams < max) {
                Some(s) => {
                    s.streams += 1;
                    (s.id, s.channel.clone())
                }
                None => {
                    slots.next_id += 1;
                    let id = slots.next_id;
                    let channel = Arc::new(OnceCell::new());
                    slots.live.push(Slot {
                        id,
                        channel: channel.clone(),
                        streams: 1,
                    });
                    (id, channel)
                }
            }
        };
        let mut lease = Lease {
            pool: self.clone(),
            slot,
            channel: None,
        };
        let dial = || async {
            self.dial().await.map_err(|e| match e {
                Error::Connect { reason, .. } => reason,
                other => other.to_string(),
            })
        };
        match cell.get_or_init(dial).await {
            Ok(channel) => {
                lease.channel = Some(channel.clone());
                Ok(lease)
            }
            Err(reason) => {
                lease.broken();
                Err(Error::Connect {
                    url: self.target.url(),
                    reason: reason.clone(),
                })
            }
        }
    }

    async fn dial(&self) -> Result<Channel> {
        let url = self.target.url();
        let fail = |reason: String| Error::Connect {
            url: url.clone(),
            reason,
        };
        // The scheme only names the authority here: the connector below makes the
        // TCP (and TLS) connection itself, so tonic's own TLS is never involved.
        let endpoint = Endpoint::from_shared(format!(
            "http://{}:{}",
            host_for_uri(&self.target.host),
            self.target.port
        ))
        .map_err(|e| fail(e.to_string()))?;
        let (target, dialer) = (self.target.clone(), self.dialer.clone());
        let connector = tower::service_fn(move |_: Uri| {
            let (target, dialer) = (target.clone(), dialer.clone());
            async move { connect_io(&target, &dialer).await.map(TokioIo::new) }
        });
        tracing::debug!(target = ?self.target, "dialling a gRPC connection");
        match tokio::time::timeout(
            self.connect_timeout,
            endpoint.connect_with_connector(connector),
        )
        .await
        {
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(e)) => Err(fail(error_chain(&e))),
            Err(_) => Err(Error::timeout(
                format!("gRPC connection to {url}"),
                self.connect_timeout,
            )),
        }
    }

    fn release(&self, slot: u64, broken: bool) {
        let mut slots = self.slots.lock().expect("pool lock");
        if let Some(i) = slots.live.iter().position(|s| s.id == slot) {
            if broken {
                slots.live.remove(i);
            } else {
                let s = &mut slots.live[i];
                s.streams -= 1;
                if s.streams == 0 {
                    // The last stream closed: close the connection with it, as a
                    // socket whose last registration is removed does.
                    slots.live.remove(i);
                }
            }
        }
    }
}

/// What an HTTP/2 connection runs over: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

/// The TCP (through the proxy, if one applies) and, for `grpcs://`, TLS with ALPN
/// `h2` under one HTTP/2 connection.
async fn connect_io(target: &GrpcTarget, dialer: &Dialer) -> std::io::Result<Box<dyn Io>> {
    let io: Box<dyn Io> = if target.tls {
        Box::new(
            dialer
                .tls(&target.host, target.port, &[b"h2"])
                .await
                .map_err(std::io::Error::other)?,
        )
    } else {
        Box::new(
            dialer
                .tcp(&target.host, target.port)
                .await
                .map_err(std::io::Error::other)?,
        )
    };
    Ok(io)
}

fn host_for_uri(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// An error and its sources, for a reason line: tonic's transport error alone says
/// only "transport error".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// One stream's share of a pooled connection; dropping it gives the share back.
pub(crate) struct Lease {
    pool: Arc<ChannelPool>,
    slot: u64,
    channel: Option<Channel>,
}

impl Lease {
    /// The connection failed under this stream: take it out of the pool, so the next
    /// stream dials a fresh one.
    fn broken(&mut self) {
        self.pool.release(self.slot, true);
        self.slot = 0;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.slot != 0 {
            self.pool.release(self.slot, false);
        }
    }
}

/// One open `Connect` stream: a [`Sink`] of the messages to send (the request side,
/// a queue tonic reads from) and a [`Stream`] of the messages received (the response
/// side, once its headers arrived).
pub(crate) struct GrpcStream {
    lease: Lease,
    out: PollSender<StreamMessage>,
    /// The call until its response headers arrive.
    call: Option<
        BoxFuture<'static, std::result::Result<tonic::Response<Streaming<StreamMessage>>, Status>>,
    >,
    inbound: Option<Streaming<StreamMessage>>,
}

/// The stream's request side is gone: nothing more can be sent on it.
#[derive(Debug)]
pub(crate) struct RequestSideClosed;

impl fmt::Display for RequestSideClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the stream's request side closed")
    }
}

/// The stream's response side failed: the reason line, and whether it failed on a
/// message over the size limit.
#[derive(Debug)]
pub(crate) struct StreamFailed {
    pub(crate) reason: String,
    pub(crate) too_large: bool,
    /// The server ended the stream UNAVAILABLE: it is stopping, come back at once.
    pub(crate) going_away: bool,
}

impl GrpcStream {
    /// Opens a stream on a connection of `pool`. The call is started but not awaited:
    /// the stream counts as open at once, so the first message sent goes first.
    pub(crate) async fn open(pool: &Arc<ChannelPool>, max_message: usize) -> Result<GrpcStream> {
        let lease = pool.acquire().await?;
        let channel = lease
            .channel
            .clone()
            .expect("an acquired lease has a channel");
        let mut client = ConnectorServiceClient::new(channel)
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message);
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let requests =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let call = async move { client.connect(tonic::Request::new(requests)).await }.boxed();
        Ok(GrpcStream {
            lease,
            out: PollSender::new(tx),
            call: Some(call),
            inbound: None,
        })
    }

    /// The reason line for a failed stream; a transport failure also takes its
    /// connection out of the pool.
    fn failed(&mut self, status: &Status) -> String {
        // A status the gateway sent has no source; one tonic made of an I/O or HTTP/2
        // failure has.
        let transport =
            status.code() == Code::Unavailable || std::error::Error::source(status).is_some();
        if transport {
            self.lease.broken();
        }
        let mut why = format!("stream failed: {:?}: {}", status.code(), status.message());
        if let Some(source) = std::error::Error::source(status) {
            why.push_str(": ");
            why.push_str(&error_chain(source));
        }
        why
    }

    /// Sends `rest`, ends the request side, and waits for the gateway to end the
    /// response side (it does once it has read the end of the request), so that the
    /// last messages are not cut off by a stream reset. The caller bounds the wait.
    pub(crate) async fn finish(mut self, rest: impl IntoIterator<Item = StreamMessage>) {
        if let Some(tx) = self.out.get_ref().cloned() {
            self.out.close();
            for m in rest {
                if tx.send(m).await.is_err() {
                    break;
                }
            }
        }
        if let Some(call) = self.call.take() {
            match call.await {
                Ok(resp) => self.inbound = Some(resp.into_inner()),
                Err(_) => return,
            }
        }
        if let Some(inbound) = self.inbound.as_mut() {
            while let Ok(Some(_)) = inbound.message().await {}
        }
    }
}

impl Stream for GrpcStream {
    type Item = std::result::Result<StreamMessage, StreamFailed>;

    /// Pending until the response headers arrive (the request side works meanwhile);
    /// then the gateway's messages, `None` once it ended the stream.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(call) = this.call.as_mut() {
            match call.poll_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(resp)) => {
                    this.call = None;
                    this.inbound = Some(resp.into_inner());
                }
                Poll::Ready(Err(status)) => {
                    this.call = None;
                    let reason = this.failed(&status);
                    return Poll::Ready(Some(Err(StreamFailed {
                        reason,
                        too_large: false,
                        going_away: false,
                    })));
                }
            }
        }
        let Some(inbound) = this.inbound.as_mut() else {
            return Poll::Pending;
        };
        match inbound.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Ok(msg))) => Poll::Ready(Some(Ok(msg))),
            Poll::Ready(Some(Err(status))) => {
                let too_large = status.code() == Code::OutOfRange
                    || status.message().contains("message length too large");
                let going_away = status.code() == Code::Unavailable;
                let reason = this.failed(&status);
                Poll::Ready(Some(Err(StreamFailed {
                    reason,
                    too_large,
                    going_away,
                })))
            }
        }
    }
}

impl Sink<StreamMessage> for GrpcStream {
    type Error = RequestSideClosed;

    fn poll_ready(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::result::Result<(), Self::Error>> {
        self.get_mut()
            .out
            .poll_reserve(cx)
            .map_err(|_| RequestSideClosed)
    }

    fn start_send(
        self: Pin<&mut Self>,
        item: StreamMessage,
    ) -> std::result::Result<(), Self::Error> {
        self.get_mut()
            .out
            .send_item(item)
            .map_err(|_| RequestSideClosed)
    }

    /// Nothing to flush: tonic takes each message from the queue as it can.
    fn poll_flush(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<std::result::Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<std::result::Result<(), Self::Error>> {
        self.get_mut().out.close();
        Poll::Ready(Ok(()))
    }
}
