//! The connector author's trait, [`BaseConnector`], and the glue that turns a connector
//! into protocol messages: its capabilities, its register request, and the answer to
//! one execute request.
//!
//! The invoke vocabulary ([`InvokeOptions`], [`InvokeResponse`]) lives here too, with
//! the [`ExecuteContext`] that uses it: a connector calls another connector in these
//! terms, and the multiplexer that carries the call implements `invoke::Invoker`.
//!
//! A connector author writes `execute` and nothing else; everything here that touches
//! the wire is `pub(crate)` and called by the registration handle, so the trait can stay
//! small and stable while the protocol plumbing evolves.

mod base;
mod capability;
pub(crate) mod config;
mod context;
mod echo;
mod execute;
mod invoke;
mod register;

pub use base::{BaseConnector, TOOL_SCHEMAS_KEY};
pub use capability::Capability;
pub use context::ExecuteContext;
pub use echo::EchoConnector;
#[cfg(feature = "websocket")]
pub(crate) use execute::run_execute;
#[cfg(feature = "websocket")]
pub(crate) use invoke::Invoker;
pub use invoke::{InvokeOptions, InvokeResponse, DEFAULT_INVOKE_TIMEOUT};
#[cfg(feature = "websocket")]
pub(crate) use register::register_request;
