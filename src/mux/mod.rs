//! The multiplexer: many registrations of one tenant over one socket.
//!
//! [`routing`] decides which handle gets each inbound frame (no I/O); [`backoff`]
//! computes reconnect delays (no clock). The async shell lives beside them.

pub mod backoff;
pub mod routing;
