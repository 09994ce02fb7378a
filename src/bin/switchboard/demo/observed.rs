//! What the deliver section measures and how it is sized: shared by the section that
//! fills them (`deliver`) and the table that prints and checks them (`report`), so
//! neither imports the other's internals.

use std::time::Duration;

use serde_json::Value;

use super::connectors::Visit;
use super::histogram::Scrape;
use super::webhooks::{Delivery, Posted};

/// The tenant of the target connectors and of the runtime's registration: an invoke
/// may only address a registration of its caller's tenant (or a global one).
pub(super) const TENANT: &str = "demo";

/// The section's sizing, from the command line.
pub(super) struct Sizing {
    pub(super) webhooks: u32,
    pub(super) concurrency: usize,
    pub(super) deadline: Duration,
    /// Keep the gateway and the runtime up after the table, until Ctrl-C, so that a
    /// person can look at both consoles.
    pub(super) keep_running: bool,
}

/// What the section saw, for the table and the checks.
pub(super) struct Observed {
    /// The distinct deliveries, in issue order.
    pub(super) deliveries: Vec<Delivery>,
    /// Every POST's answer; the redelivery is the last.
    pub(super) posted: Vec<Posted>,
    /// Every execute the target connectors answered.
    pub(super) visits: Vec<Visit>,
    /// `GET /api/v1/triggers`, after the wait.
    pub(super) triggers: Value,
    /// `GET /api/v1/outbox/stats`, after the wait.
    pub(super) stats: Value,
    /// `GET /metrics`, after the wait.
    pub(super) metrics: Scrape,
    /// From the first POST until the outbox was empty and every delivery had arrived;
    /// `None` if the deadline passed first.
    pub(super) drained_in: Option<Duration>,
    /// Distinct sockets carrying the three target connectors.
    pub(super) connector_sockets: usize,
    /// Sockets the section opened (the connectors' and the runtime's).
    pub(super) sockets: u64,
}
