//! Trigger events and bindings: what every ingress path (provider webhooks, cron
//! ticks, `outbox.enqueue`) produces, and which bindings an event goes to.

pub mod binding;
pub mod config;
mod event;
pub mod filter;
pub mod registry;
#[cfg(test)]
pub(crate) mod testing;

pub use event::{new_event_id, trace_id_from, SignatureStatus, TriggerEvent};
