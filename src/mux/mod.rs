//! The multiplexer: many registrations of one tenant over one socket.
//!
//! Decision cores without I/O: [`routing`] decides which registration gets each
//! inbound frame (PROTOCOL.md §5), and `core`
//! is the whole connection of one socket as a state machine (channel, registrations,
//! executes, invokes, deadlines). The async shell around them: `driver` is the one
//! task per socket that drives a core, `handle` is the user's view of a registration,
//! and [`MultiConnectorRunner`] groups registrations into sockets by tenant.

#[cfg(feature = "websocket")]
mod approval;
#[cfg(feature = "websocket")]
pub(crate) mod core;
#[cfg(feature = "websocket")]
pub(crate) mod driver;
#[cfg(feature = "websocket")]
mod handle;
pub(crate) mod invoke;
#[cfg(feature = "websocket")]
pub(crate) mod invoker;
#[cfg(feature = "websocket")]
pub(crate) mod metrics;
pub(crate) mod routing;
#[cfg(feature = "websocket")]
mod runner;
#[cfg(feature = "websocket")]
mod wire;

#[cfg(feature = "websocket")]
pub use handle::RegistrationHandle;
pub use invoke::{InvokeOptions, InvokeResponse, DEFAULT_INVOKE_TIMEOUT};
#[cfg(feature = "websocket")]
pub use metrics::ConnectorMetrics;
#[cfg(feature = "websocket")]
pub use runner::{MultiConnectorRunner, Registration, RunnerOptions, ShutdownHandle};
