//! The multiplexer: many registrations of one tenant over one socket.
//!
//! Bottom to top (each part imports only parts listed before it):
//!
//! - Decision cores without I/O: [`routing`] decides which registration gets each
//!   inbound frame (PROTOCOL.md §5), and `core` is the whole connection of one socket
//!   as a state machine (channel, registrations, executes, invokes, deadlines);
//!   `metrics` holds the counters both write, and `exposition` writes a snapshot of
//!   them in the Prometheus text format.
//! - What the shell publishes and keeps per registration: `handle_state` (ARN,
//!   status, errors, for the handles) and `auth_context` (the approval flow's
//!   credential store and stored keys).
//! - `socket`: the vocabulary of a socket's task (its commands, the handle its
//!   handles hold, its per-registration data, its core type, its clock).
//! - Parts that talk to a socket's task: `approval` (a registration's approval task),
//!   `socket_invoker` (a registration's invokes, the connector layer's `Invoker`) and
//!   `socket_io` (the open connection of either transport, feeding the core).
//! - `health`: a small HTTP/1 listener for `/healthz`, `/readyz` and `/metrics`,
//!   asking whoever runs it (a `Probe`) for the answers.
//! - `options`: [`RunnerOptions`], their defaults and environment variables.
//! - `driver`, the one task per socket that drives a core; `handle`, the user's view
//!   of a registration; and [`MultiConnectorRunner`], which groups registrations into
//!   sockets by tenant.

#[cfg(feature = "websocket")]
mod approval;
#[cfg(feature = "websocket")]
mod auth_context;
#[cfg(feature = "websocket")]
pub(crate) mod core;
#[cfg(feature = "websocket")]
mod driver;
#[cfg(feature = "websocket")]
mod exposition;
#[cfg(feature = "websocket")]
mod handle;
#[cfg(feature = "websocket")]
mod handle_state;
#[cfg(feature = "websocket")]
mod health;
#[cfg(feature = "websocket")]
pub(crate) mod metrics;
#[cfg(feature = "websocket")]
mod options;
pub(crate) mod routing;
#[cfg(feature = "websocket")]
mod runner;
#[cfg(feature = "websocket")]
mod socket;
#[cfg(feature = "websocket")]
mod socket_invoker;
#[cfg(feature = "websocket")]
mod socket_io;

#[cfg(feature = "websocket")]
pub use handle::RegistrationHandle;
#[cfg(feature = "websocket")]
pub use metrics::ConnectorMetrics;
#[cfg(feature = "websocket")]
pub use options::RunnerOptions;
#[cfg(feature = "websocket")]
pub use runner::{MultiConnectorRunner, Registration, ShutdownHandle};
