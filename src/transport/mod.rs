//! Transports: gateway address parsing and dialling the Phoenix WebSocket.

pub mod address;
#[cfg(feature = "websocket")]
pub(crate) mod websocket;

pub use address::{GatewayAddress, Transport};
