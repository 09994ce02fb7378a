//! Trigger events: what every ingress path (provider webhooks, cron ticks) produces and
//! the store keeps. Binding matching and the outbox build on [`TriggerEvent`] later.

mod event;

pub use event::{new_event_id, trace_id_from, SignatureStatus, TriggerEvent};
