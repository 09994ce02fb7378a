//! Inbound webhooks (feature `runtime`).
//!
//! Today: [`signature`], the providers' signature rules as pure functions (no I/O, the
//! clock passed in), [`classify`], each provider's kind and dedupe-key rule, and [`redact`], what may be
//! stored of a request's headers. Ingress, normalisation into `TriggerEvent`s and durable storage
//! build on them.

pub mod classify;
pub mod redact;
pub mod signature;
