//! The multiplexer: many registrations of one tenant over one socket.
//!
//! Decision cores without I/O: [`routing`] decides which handle gets each inbound frame
//! (PROTOCOL.md §5) and [`backoff`] computes reconnect delays. The async shell around
//! them: `socket` owns a connection, `handle` runs one registration, and
//! [`MultiConnectorRunner`] groups registrations into sockets by tenant.

pub mod backoff;
mod handle;
mod metrics;
pub mod routing;
mod runner;
mod shared;
mod socket;

pub use handle::RegistrationHandle;
pub use metrics::ConnectorMetrics;
pub use runner::{MultiConnectorRunner, Registration, RunnerOptions, ShutdownHandle};
