//! The runtime's operations, shared by the admin API (HTTP), the runtime's own
//! registration (its capabilities, executed through the gateway), the CLI and the
//! runtime console, so a caller gets the same answer whichever way it came. Each
//! answers with a type (the admin API serialises it, the console renders it); each
//! failure is an [`OpError`], which each front end translates into its own status.
//!
//! - [`base`]: the handle, [`Operations`], and [`OpError`];
//! - [`enqueue`]: enqueue, and one synchronous attempt of a binding;
//! - [`queues`]: queue receive, ack, nack, and the dead-letter listing;
//! - [`triggers`]: reload, register, deregister, pause, resume, drain, pin, history;
//! - [`replay`]: an event, a dead letter, or every dead letter a selection takes;
//! - [`backfills`]: backfill jobs (start, dry run, list, pause, resume, cancel);
//! - [`inspect`]: the outbox report, the bindings report, the depth series, one event
//!   in full;
//! - [`sources`]: the sources' report (what each hosts, and its traffic since start).

pub(crate) mod backfills;
pub(crate) mod base;
pub(crate) mod enqueue;
pub(crate) mod inspect;
pub(crate) mod queues;
pub(crate) mod replay;
pub(crate) mod sources;
pub(crate) mod triggers;

pub(crate) use base::{OpError, Operations, QueueLimits, MAX_DEAD_LETTER_PAGE, MAX_RECEIVE};
pub(crate) use enqueue::ApiTrace;
pub use enqueue::{EnqueueRequest, Enqueued};
pub(crate) use inspect::OutboxReport;
pub(crate) use triggers::HistoryPage;
