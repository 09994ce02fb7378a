//! The runtime's inbound side (feature `runtime`): hosting inbound connectors
//! ([`crate::inbound`]) and the built-in ones. Events are verified, normalised into
//! [`crate::triggers::TriggerEvent`]s, deduplicated and durably stored before a
//! webhook's sender gets its 2xx (or, for a poll source, before its cursor moves).
//!
//! The pure parts, each testable without I/O: [`signature`] (the providers' signature
//! rules, the clock passed in), [`classify`] (kind and dedupe key), [`redact`] (what
//! may be stored of headers), [`ingest`] (the built-in webhook providers' whole
//! decision for one request) and [`cron`] (schedules
//! and catch-up). The shells: [`source`] (the `[[sources]]` section of
//! switchboard.toml, the runtime's half), [`limits`] (the listener's bounds),
//! `builtin` (the built-in connectors), `hosted` (the connector registry, started
//! sources, and the one path from a source's event to a stored one), `state` (what
//! the HTTP halves and the drivers share), `server` and `admin` (the HTTP surface,
//! axum; `server` mounts `admin`, and neither imports the other's state), `poller`
//! (the poll and stream drivers), `lease` (one poller per source across processes), `listener` (connections,
//! with the header and body timeouts), [`metrics`], `binding_match` (which trigger bindings an accepted event
//! goes to), `breaker` (a binding's filter circuit breaker, a decision core). The
//! runtime (`crate::runtime`, the layer above) wires them to the store.

pub(crate) mod binding_match;
pub(crate) mod breaker;
pub(crate) mod builtin;
pub(crate) mod classify;
pub(crate) mod cron;
pub(crate) mod endpoint;
pub(crate) mod event_search;
pub(crate) mod hosted;
pub(crate) mod ingest;
pub(crate) mod lease;
pub(crate) mod limits;
pub(crate) mod metrics;
pub(crate) mod poller;
pub(crate) mod redact;
pub(crate) mod signature;
pub(crate) mod source;
pub(crate) mod state;
pub use builtin::cron_source::LAST_FIRE_KEY;
pub use hosted::CURSOR_KEY;
