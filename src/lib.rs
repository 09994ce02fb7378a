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
//!
//! ## Layers
//!
//! The modules form one stack, bottom to top; a module imports only modules listed
//! before it (within a layer too), and inside every module the children never import
//! each other in a circle. `tests/layers.rs` checks both rules over every `use` and
//! path on each test run, so the list below is the tree's, not an aspiration.
//!
//! 1. ground: `proto`, `error`, `clock`, `identity`, `encoding`, `backoff`, `duration`, `context_keys`, `trace_context`, `telemetry`, `secret`, `breaker`, `signals`, `check`
//! 2. wire formats and connections: `phoenix`, `transport`
//! 3. the connector's world: `connector`, `auth`
//! 4. the multiplexer: `mux`, `entry`
//! 5. models, no I/O: `outbox`, `triggers`, `inbound`
//! 6. storage: `store`
//! 7. the runtime's parts, and the consoles' kit: `console`, `outbound`, `dispatch`, `ingress`
//! 8. assemblies: `runtime`, `gateway`
//! 9. the benches' and fuzz targets' window on internals: `__private`
//!
//! What each layer holds: the ground is vocabulary every layer speaks (errors, the
//! wall clock, ARNs, payload encodings, reconnect backoff, durations, execute-context
//! keys, the W3C trace context's rules and the spans over it, secrets that never print, the circuit-breaker core, the stop signals, a
//! deploy check's report, the generated messages)
//! and imports nothing of the crate. `phoenix` is the
//! Phoenix v2 codec and channel state; `transport` opens WebSocket and gRPC
//! connections (addresses, dialer, TLS, proxies) and hands out message streams and
//! sinks. `connector` is what an author implements and configures; `auth` is the
//! connector's side of approval. `mux` is the sans-IO connection core, the task that
//! feeds it from either transport, handles and the runner; `entry` is
//! [`run`]. `outbox` holds the outbox's rows, retry schedule, outcome decisions and
//! the store trait they need; `triggers` the events, bindings, filters and binding
//! registry; `inbound` the inbound connectors' public contract (the traits a provider
//! implements, the context it gets, what it returns). `store` implements the store
//! traits, one folder per backend. `outbound`
//! is the runtime's HTTP client for handlers (signing, egress policy, per-endpoint
//! breakers); `dispatch` claims and executes outbox rows; `ingress` hosts the inbound
//! connectors (the built-ins, the HTTP ingress, the poll and stream drivers);
//! `console` is what the gateway's and the runtime's HTML consoles share (sign-in
//! sessions, CSRF, security headers, live regions, charts, assets). `runtime`
//! reads its config file and wires ingest, bindings, outbox and dispatcher onto the
//! mux; `gateway` is the other side of the wire, built on layers 1 to 3 and the
//! console kit.
#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]
// The public API is the list of re-exports below, plus three public modules: `proto`
// (the generated protocol messages, which gateway integrators need), `phoenix` (the
// Phoenix channel v2 frame codec, for raw-protocol peers and tests) and `gateway` (the
// reference gateway and its test kit). Every other module is `pub(crate)`, so an
// internal type is never a semver promise. `__private` (hidden, unstable) exists for
// this crate's own benches and fuzz targets, which measure internals from outside.

#[cfg(feature = "websocket")]
pub(crate) mod auth;
pub(crate) mod backoff;
#[cfg(feature = "runtime")]
pub(crate) mod breaker;
#[cfg(any(feature = "runtime", feature = "gateway"))]
pub(crate) mod check;
pub(crate) mod clock;
pub(crate) mod connector;
#[cfg(any(feature = "runtime", feature = "gateway"))]
pub(crate) mod console;
pub(crate) mod context_keys;
#[cfg(feature = "runtime")]
pub(crate) mod dispatch;
#[cfg(feature = "runtime")]
pub(crate) mod duration;
pub(crate) mod encoding;
#[cfg(feature = "websocket")]
mod entry;
pub(crate) mod error;
#[cfg(feature = "gateway")]
pub mod gateway;
pub(crate) mod identity;
#[cfg(feature = "runtime")]
pub(crate) mod inbound;
#[cfg(feature = "runtime")]
pub(crate) mod ingress;
pub(crate) mod mux;
#[cfg(feature = "runtime")]
pub(crate) mod outbound;
#[cfg(feature = "runtime")]
pub(crate) mod outbox;
pub mod phoenix;
#[cfg(feature = "runtime")]
pub(crate) mod runtime;
#[cfg(any(feature = "runtime", feature = "gateway"))]
pub(crate) mod secret;
pub(crate) mod signals;
#[cfg(feature = "runtime")]
pub(crate) mod store;
pub(crate) mod telemetry;
pub(crate) mod trace_context;
pub(crate) mod transport;
#[cfg(feature = "runtime")]
pub(crate) mod triggers;

pub mod proto;

#[doc(hidden)]
pub mod __private;

// The README's Rust examples compile (and the runnable ones run) as doctests, so the
// first code a user copies cannot rot; so do the guide's.
#[cfg(all(doctest, feature = "gateway"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The guide's pages with Rust examples (docs/guide/), tested the same way.
#[cfg(all(doctest, feature = "gateway"))]
#[doc = include_str!("../docs/guide/connector-authors.md")]
struct ConnectorAuthorsGuideDoctests;

#[cfg(all(doctest, feature = "runtime"))]
#[doc = include_str!("../docs/guide/sources.md")]
struct SourcesGuideDoctests;

pub use backoff::BackoffPolicy;
#[cfg(any(feature = "runtime", feature = "gateway"))]
pub use check::ConfigCheck;
pub use connector::config::{
    ConnectorConfig, ConnectorConfigBuilder, ConnectorScope, HeartbeatSettings, ProxySetting,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXECUTE_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_QUEUED_REQUESTS, DEFAULT_METRICS_INTERVAL, DEFAULT_REGISTER_TIMEOUT,
};
pub use connector::{BaseConnector, Capability, EchoConnector, ExecuteContext, TOOL_SCHEMAS_KEY};
pub use connector::{InvokeOptions, InvokeResponse, DEFAULT_INVOKE_TIMEOUT};
#[cfg(feature = "runtime")]
pub use context_keys::{
    CONTEXT_ATTEMPT, CONTEXT_BACKFILL, CONTEXT_BINDING, CONTEXT_BINDING_VERSION,
    CONTEXT_DEAD_LETTER_ATTEMPTS, CONTEXT_DEAD_LETTER_BINDING, CONTEXT_DEAD_LETTER_ERRORS,
    CONTEXT_DEAD_LETTER_FIRST_ATTEMPT_MS, CONTEXT_DEAD_LETTER_ID,
    CONTEXT_DEAD_LETTER_LAST_ATTEMPT_MS, CONTEXT_DEAD_LETTER_LAST_ERROR,
    CONTEXT_DEAD_LETTER_LAST_ERROR_KIND, CONTEXT_DEPTH, CONTEXT_EVENT_ID, CONTEXT_TRACEPARENT,
    CONTEXT_TRACESTATE, CONTEXT_TRACE_ID,
};
pub use encoding::{decode_payload, encode_payload, Payload, PayloadEncoding};
#[cfg(feature = "websocket")]
pub use entry::{run, run_until};
pub use error::{Error, Result};
pub use identity::{Arn, RegistrationKey};
#[cfg(feature = "runtime")]
pub use inbound::{
    Committed, EventSink, InboundConnector, InboundEvent, InboundRequest, InboundResponse,
    InboundSource, Polled, RateLimit, RateLimiter, Received, Refusal, SourceContext, SourceKind,
    SourceMetrics, SourceState,
};
#[cfg(feature = "websocket")]
pub use mux::{
    ConnectorMetrics, MultiConnectorRunner, Registration, RegistrationHandle, RunnerOptions,
    ShutdownHandle,
};
#[cfg(feature = "runtime")]
pub use runtime::config::{ResolvedConfig, RuntimeConfig};
#[cfg(feature = "runtime")]
pub use runtime::ops::{EnqueueRequest, Enqueued};
#[cfg(feature = "runtime")]
pub use runtime::{ReloadHandle, Runtime, RuntimeBuilder};
#[cfg(any(feature = "runtime", feature = "gateway"))]
pub use secret::Secret;
pub use signals::{shutdown_signal, StopSignal};
#[cfg(feature = "otel")]
pub use telemetry::Telemetry;
pub use transport::{GatewayAddress, Transport};
#[cfg(feature = "runtime")]
pub use triggers::{SignatureStatus, TriggerEvent};
