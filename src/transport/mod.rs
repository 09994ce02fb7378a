//! Transports: gateway address parsing, the proxy rules, the dialer (TCP, an optional
//! HTTP CONNECT proxy, TLS), the Phoenix WebSocket over it, and the gRPC stream pool.

pub(crate) mod address;
#[cfg(feature = "websocket")]
pub(crate) mod dial;
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
pub(crate) mod proxy;
mod proxy_setting;
#[cfg(feature = "websocket")]
pub(crate) mod websocket;

pub use address::{GatewayAddress, Transport};
pub use proxy_setting::ProxySetting;
