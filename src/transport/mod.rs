//! Transports: gateway address parsing, the proxy rules, the dialer (TCP, an optional
//! HTTP CONNECT proxy, TLS) and the Phoenix WebSocket over it.

pub mod address;
#[cfg(feature = "websocket")]
pub(crate) mod dial;
pub(crate) mod proxy;
#[cfg(feature = "websocket")]
pub(crate) mod websocket;

pub use address::{GatewayAddress, Transport};
