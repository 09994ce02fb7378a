//! Trigger events and bindings: what every ingress path (provider webhooks, cron
//! ticks, `outbox.enqueue`) produces, and which bindings an event goes to.

pub(crate) mod backfill;
pub(crate) mod binding;
pub(crate) mod binding_match;
pub(crate) mod config;
mod event;
pub(crate) mod filter;
pub(crate) mod filter_breaker;
pub(crate) mod flow;
pub(crate) mod lifecycle;
pub(crate) mod live;
pub(crate) mod match_metrics;
pub(crate) mod registry;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod versions;

pub(crate) use event::{event_id, new_event_id, root_context, IdSeed};
pub use event::{trace_id_from, SignatureStatus, TriggerEvent};
