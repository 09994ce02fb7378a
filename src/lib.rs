//! # switchboard
//!
//! A connector SDK and runtime for the Matrix connector-gateway protocol. A connector
//! author implements [`BaseConnector`]; [`MultiConnectorRunner`] runs any number of
//! registrations, and all registrations of one tenant share ONE Phoenix-channels
//! WebSocket whose inbound frames a demux routes to the right registration by ARN,
//! request id or gateway id (PROTOCOL.md §5). Each socket is one sans-IO connection core
//! driven by one task, which also polls the connectors' execute futures, so nothing a
//! registration does can stall its neighbours. The execute channel runs both ways: a
//! connector calls another through the gateway with [`ExecuteContext::invoke`] (inside
//! an execute) or [`RegistrationHandle::invoke`]. The `gateway` feature adds the other
//! side of the wire: a reference gateway with an HTTP API and an in-process test kit.
#![warn(missing_docs, unreachable_pub)]

#[cfg(feature = "websocket")]
pub(crate) mod auth;
pub mod config;
pub mod connector;
pub mod encoding;
pub mod error;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod identity;
pub mod mux;
#[cfg(feature = "runtime")]
pub mod outbox;
pub mod phoenix;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "runtime")]
pub mod store;
pub mod transport;
#[cfg(feature = "runtime")]
pub mod triggers;
#[cfg(feature = "runtime")]
pub mod webhooks;

pub mod proto {
    //! Messages generated from `proto/connector.proto` (package `matrix.connectors.v1`).
    #![allow(missing_docs, unreachable_pub, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/matrix.connectors.v1.rs"));
}

pub use config::{ConnectorConfig, ConnectorConfigBuilder, HeartbeatSettings, ProxySetting};
pub use connector::{BaseConnector, EchoConnector, ExecuteContext};
pub use encoding::{decode_payload, encode_payload, Payload};
pub use error::{Error, Result};
pub use identity::{Arn, RegistrationKey};
pub use mux::backoff::BackoffPolicy;
#[cfg(feature = "websocket")]
pub use mux::{
    ConnectorMetrics, MultiConnectorRunner, Registration, RegistrationHandle, RunnerOptions,
    ShutdownHandle,
};
pub use mux::{InvokeOptions, InvokeResponse, DEFAULT_INVOKE_TIMEOUT};
#[cfg(feature = "runtime")]
pub use runtime::Runtime;
pub use transport::{GatewayAddress, Transport};
#[cfg(feature = "runtime")]
pub use triggers::TriggerEvent;
#[cfg(feature = "runtime")]
pub use webhooks::config::RuntimeConfig;
