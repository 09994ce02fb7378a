//! Delivering the outbox: the dispatcher that claims due rows and runs their attempts,
//! the seam to the handlers that do the work, and the dispatch metrics.
//!
//! - [`dispatcher`]: the tasks that claim, gate, run and finish rows, through the
//!   narrow [`crate::outbox::OutboxStore`] (it needs nothing else of a backend);
//! - [`deliver`]: running one attempt (invoke through the gateway, a local
//!   connector, or an HTTP endpoint);
//! - [`http`]: the `http` handler's request and what its answers mean;
//! - [`metrics`]: its Prometheus metrics;
//! - [`permits`]: the per-version and per-process permit gates;
//! - [`throttle`]: a binding's starts-per-period window, a decision core.
//!
//! It exists apart from `outbox` so that the outbox stays models and decisions without
//! I/O, below both this module and the store that implements its trait: the dispatcher
//! is the one part that runs tasks, talks to handlers and holds a store.

mod attempt_span;
pub(crate) mod deliver;
pub(crate) mod dispatcher;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod options;
pub(crate) mod permits;
pub(crate) mod throttle;
