//! Dialling the gateway's Phoenix WebSocket: the [`Dialer`]'s TCP (direct or through an
//! HTTP CONNECT proxy) and, for `wss://`, its TLS with ALPN `http/1.1`, then the
//! WebSocket handshake, all under one deadline.
//!
//! This module only opens connections and hands out the WebSocket (a sink and a
//! stream of frames); framing lives in [`crate::phoenix`] and the connection's life
//! (join, heartbeats, demux) in the mux, which polls the socket.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::address::GatewayAddress;
use super::dial::Dialer;
use crate::error::{Error, Result};

/// The client's WebSocket stream.
pub(crate) type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Read buffer per connection. 128 KiB (tungstenite's default) would cost 2.5 GiB for
/// 20,000 idle sockets; 16 KiB still reads a typical burst of frames in one syscall.
const READ_BUFFER: usize = 16 * 1024;

/// The ALPN protocol a WebSocket upgrade rides on (RFC 6455 is HTTP/1.1 only).
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Connects to `url` (a `ws://` or `wss://` URL) through `dialer` within `timeout`.
///
/// `max_message` bounds every inbound message and frame at the WebSocket layer, so
/// tungstenite refuses an oversized one from its header instead of buffering it: a
/// peer cannot make the connector hold more than that per socket. The refusal fails
/// the connection (a stream cannot skip a frame it has not read); the driver counts it
/// as `too_large` and reconnects.
///
/// Errors are [`Error::Connect`] naming `url` (with the dialer's reason: proxy
/// refused, certificate not trusted, ...) or [`Error::Timeout`].
pub(crate) async fn connect(
    url: &str,
    dialer: &Dialer,
    timeout: Duration,
    max_message: usize,
) -> Result<WsStream> {
    let address = GatewayAddress::parse(url)?;
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    let dial = async {
        let stream = if address.tls {
            let tls = dialer
                .tls(&address.host, address.port, &[ALPN_HTTP1])
                .await?;
            MaybeTlsStream::Rustls(tls)
        } else {
            MaybeTlsStream::Plain(dialer.tcp(&address.host, address.port).await?)
        };
        tokio_tungstenite::client_async_with_config(url, stream, Some(config))
            .await
            .map(|(ws, _response)| ws)
            .map_err(|e| Error::Connect {
                url: url.to_owned(),
                reason: format!("WebSocket handshake failed: {e}"),
            })
    };
    match tokio::time::timeout(timeout, dial).await {
        Ok(Ok(ws)) => Ok(ws),
        // The dialer names host:port; the caller knows the gateway by its URL.
        Ok(Err(Error::Connect { reason, .. })) => Err(Error::Connect {
            url: url.to_owned(),
            reason,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::timeout(format!("connection to {url}"), timeout)),
    }
}
