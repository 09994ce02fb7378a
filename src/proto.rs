//! Messages generated from `proto/connector.proto` (package `matrix.connectors.v1`).
//!
//! Public because a gateway integrator (or a test acting as one) speaks these messages
//! directly; a connector author never needs them. A file of its own (not a block in
//! `lib.rs`) so that `crate::proto` reads as what it is, the lowest layer, and not as
//! an import of the crate root.
#![allow(missing_docs, unreachable_pub, clippy::all)]
include!(concat!(env!("OUT_DIR"), "/matrix.connectors.v1.rs"));
