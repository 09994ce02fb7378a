//! Inbound webhooks (feature `runtime`).
//!
//! Today: [`signature`], the providers' signature rules as pure functions (no I/O, the
//! clock passed in). Ingress, normalisation into `TriggerEvent`s and durable storage
//! build on them.

pub mod signature;
