//! Transports: gateway address parsing and the Phoenix WebSocket connection.

pub mod address;
