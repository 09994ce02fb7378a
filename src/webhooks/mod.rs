//! Inbound webhooks and cron ticks (feature `runtime`): verified, normalised into
//! [`crate::triggers::TriggerEvent`]s, deduplicated and durably stored before the
//! sender gets its 2xx.
//!
//! The pure parts, each testable without I/O: [`signature`] (the providers' signature
//! rules, the clock passed in), [`classify`] (kind and dedupe key), [`redact`] (what
//! may be stored of headers), [`ingest`] (the whole decision for one request),
//! [`rate_limit`] (token buckets) and [`cron`] (schedules and catch-up). The shells:
//! [`source`] (the `[[sources]]` section of switchboard.toml, as written and
//! resolved), [`limits`] (the listener's bounds), `state` (the live sources both HTTP
//! halves share),
//! `server` and `admin` (the HTTP surface, axum; `server` mounts `admin`, and neither
//! imports the other's state),
//! `listener` (connections, with the header and body timeouts), `notion` (bounded
//! token re-checks),
//! [`metrics`], `binding_match` (which trigger bindings an accepted event goes to),
//! `breaker` (a binding's filter circuit breaker, a decision core). The
//! runtime (`crate::runtime`, the layer above) wires them to the store.

pub(crate) mod admin;
pub(crate) mod binding_match;
pub(crate) mod breaker;
pub(crate) mod classify;
pub(crate) mod cron;
pub(crate) mod ingest;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod notion;
pub(crate) mod rate_limit;
pub(crate) mod redact;
pub(crate) mod server;
pub(crate) mod signature;
pub(crate) mod source;
pub(crate) mod state;
pub(crate) mod ticker;
pub use ticker::LAST_FIRE_KEY;
