//! The multiplexer: many registrations of one tenant over one socket.
//!
//! Decision cores without I/O: [`routing`] decides which handle gets each inbound frame
//! (PROTOCOL.md §5) and [`backoff`] computes reconnect delays. The async shell around
//! them: `socket` owns a connection, `handle` runs one registration, and
//! [`MultiConnectorRunner`] groups registrations into sockets by tenant.

pub mod backoff;
#[cfg(feature = "websocket")]
mod handle;
#[cfg(feature = "websocket")]
mod metrics;
pub mod routing;
#[cfg(feature = "websocket")]
mod runner;
#[cfg(feature = "websocket")]
mod shared;
#[cfg(feature = "websocket")]
mod socket;

#[cfg(feature = "websocket")]
pub use handle::RegistrationHandle;
#[cfg(feature = "websocket")]
pub use metrics::ConnectorMetrics;
#[cfg(feature = "websocket")]
pub use runner::{MultiConnectorRunner, Registration, RunnerOptions, ShutdownHandle};
