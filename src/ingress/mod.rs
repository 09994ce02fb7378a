//! The runtime's ingress (feature `runtime`): hosting inbound connectors
//! ([`crate::inbound`]), the built-in ones, and the one route they are reached by.
//! Events are verified, normalised into [`crate::triggers::TriggerEvent`]s,
//! deduplicated and durably stored before a webhook's sender gets its 2xx (or, for a
//! poll source, before its cursor moves). Only ingress: the listener, the root router
//! and the admin API are the runtime's (`runtime::http`); which bindings an event
//! goes to, and their filter breakers, are the triggers' (`triggers::binding_match`).
//!
//! The pure parts, each testable without I/O: [`signature`] (the providers' signature
//! rules, the clock passed in), [`classify`] (kind and dedupe key), [`redact`] (what
//! may be stored of headers), [`ingest`] (the built-in webhook providers' whole
//! decision for one request) and [`cron`] (schedules and catch-up). The shells:
//! [`source`] (the `[[sources]]` section of switchboard.toml, the runtime's half),
//! [`limits`] (the listener's bounds, and the body deadline the endpoint reads),
//! `builtin` (the built-in connectors), `hosted` (the connector registry, started
//! sources, and the one path from a source's event to a stored one), `state` (what
//! the endpoint, the drivers and the runtime's views share), `endpoint` (`POST
//! /hooks/{id}`, axum), `poller` (the poll and stream drivers), `lease` (one poller
//! per source across processes), `event_search` (the stored events' search, which
//! the admin API and the console both call) and [`metrics`].

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
