//! The deliver half: a durable outbox written in the ingest transaction, and the
//! dispatcher that claims its rows and delivers them through the execute channel.
//!
//! - [`model`]: the data (rows to enqueue, claimed rows, finishes, dead letters, stats);
//! - [`store`]: [`OutboxStore`], what a backend provides (claims under a lease, finishes,
//!   queues, dead letters, retention), implemented by SQLite and PostgreSQL;
//! - [`retry`]: the retry schedule, a pure function;
//! - [`outcome`]: how an attempt's result becomes a finish (retry, dead letter,
//!   annotation), a pure function;
//! - [`deliver`]: running one attempt (invoke through the gateway, or a local
//!   connector);
//! - [`dispatcher`]: the tasks that claim, gate, run and finish rows;
//! - [`metrics`]: its Prometheus metrics.
//!
//! Public like [`crate::store`], whose [`crate::store::Backend`] has [`OutboxStore`] as
//! a supertrait; the curated API (issue 11) narrows both together.

pub(crate) mod deliver;
pub(crate) mod dispatcher;
pub(crate) mod metrics;
pub(crate) mod model;
pub(crate) mod outcome;
pub(crate) mod retry;
pub(crate) mod store;

pub(crate) use store::OutboxStore;
