//! The outbox's models and decisions, without I/O: what a delivery row is, when it is
//! tried again, how an attempt's result becomes a finish, and what a backend must
//! provide to hold the rows.
//!
//! - [`model`]: the data (rows to enqueue, claimed rows, finishes, dead letters, stats);
//! - [`store`]: [`OutboxStore`], what a backend provides (claims under a lease, finishes,
//!   queues, dead letters, retention); the SQLite and PostgreSQL backends (`store`)
//!   implement it;
//! - [`retry`]: the retry schedule, a pure function;
//! - [`outcome`]: how an attempt's result becomes a finish (retry, dead letter,
//!   annotation), a pure function.
//!
//! Nothing here runs anything: the dispatcher that claims and delivers rows is
//! `dispatch`, the SQL is `store`'s. Both import this module; it imports neither.

pub(crate) mod model;
pub(crate) mod outcome;
pub(crate) mod retry;
pub(crate) mod store;

pub(crate) use store::OutboxStore;
