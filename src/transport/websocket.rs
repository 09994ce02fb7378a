//! Dialling the gateway's Phoenix WebSocket: TCP, optional TLS (rustls with the `ring`
//! provider), the WebSocket handshake, all under one deadline.
//!
//! This module only opens connections; framing lives in [`crate::phoenix`] and the
//! connection's life (join, heartbeats, demux) in `crate::mux::driver` and `crate::mux::core`.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::error::{Error, Result};

/// The client's WebSocket stream.
pub(crate) type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Read buffer per connection. 128 KiB (tungstenite's default) would cost 2.5 GiB for
/// 20,000 idle sockets; 16 KiB still reads a typical burst of frames in one syscall.
const READ_BUFFER: usize = 16 * 1024;

/// Installs rustls' `ring` provider as the process default, once. rustls panics at the
/// first handshake when two providers are compiled in and none is chosen; choosing
/// `ring` explicitly matches tonic's choice so the two can share a process.
fn ensure_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another part of the process already installed one: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Connects to `url` (a `ws://` or `wss://` URL) within `timeout`.
///
/// `max_message` bounds every inbound message and frame at the WebSocket layer, so
/// tungstenite refuses an oversized one from its header instead of buffering it: a
/// peer cannot make the connector hold more than that per socket. The refusal fails
/// the connection (a stream cannot skip a frame it has not read); the driver counts it
/// as `too_large` and reconnects.
pub(crate) async fn connect(url: &str, timeout: Duration, max_message: usize) -> Result<WsStream> {
    ensure_crypto_provider();
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    let dial = tokio_tungstenite::connect_async_with_config(url, Some(config), true);
    match tokio::time::timeout(timeout, dial).await {
        Ok(Ok((ws, _response))) => Ok(ws),
        Ok(Err(e)) => Err(Error::Connect {
            url: url.to_owned(),
            reason: e.to_string(),
        }),
        Err(_) => Err(Error::timeout(format!("connection to {url}"), timeout)),
    }
}
