//! Transports: gateway address parsing, dialling the Phoenix WebSocket, and the gRPC
//! stream pool.

pub mod address;
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
#[cfg(feature = "websocket")]
pub(crate) mod websocket;

pub use address::{GatewayAddress, Transport};
