//! The operations' handle, [`Operations`], and their one error, [`OpError`]: what
//! every operation file below `ops` implements on and answers with. In a file of its
//! own, beside them, so that they import a sibling, not their facade.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::dispatch::deliver::Deliver;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::permits::Permits;
use crate::error::Error;
use crate::outbox::outcome::AttemptFailure;
use crate::runtime::outbox_series::SeriesRing;
use crate::runtime::trigger_control::TriggerControl;
use crate::store::Store;
use crate::triggers::binding_match::BindingMatcher;
use crate::triggers::live::LiveTriggers;

/// The source id of events that enter through `outbox.enqueue`, `triggers.invoke` and
/// their HTTP twins. Configured source ids cannot contain `@`, so it never collides.
pub(crate) const API_SOURCE: &str = "@api";
/// Most messages one `queue.receive` hands out.
pub(crate) const MAX_RECEIVE: usize = 100;
/// Messages a `queue.receive` hands out when it names no maximum.
pub(crate) const DEFAULT_RECEIVE: usize = 10;
/// Largest page of dead letters.
pub(crate) const MAX_DEAD_LETTER_PAGE: usize = 500;

/// A queue's limits, from `[[queues]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueLimits {
    /// How long a received message stays invisible to other receivers.
    pub visibility: Duration,
    /// Receives after which a message is dead-lettered instead.
    pub max_receives: u32,
}

/// Why an operation failed.
#[derive(Debug)]
pub enum OpError {
    /// The named binding, queue or dead letter does not exist.
    NotFound(String),
    /// The request is malformed or names something that cannot take it.
    Invalid(String),
    /// No permit is free for the binding (its `max_concurrent` or the process's
    /// `max_in_flight`).
    Busy(String),
    /// The store failed; nothing was changed.
    Store(Error),
    /// The synchronous attempt ran and failed.
    Failed(AttemptFailure),
    /// The request conflicts with the current state (a binding id already
    /// registered); nothing was changed.
    Conflict(String),
}

impl OpError {
    /// The HTTP status: 404, 422, 503, 503 (store) or the failure's own status.
    pub fn status(&self) -> u16 {
        match self {
            OpError::NotFound(_) => 404,
            OpError::Conflict(_) => 409,
            OpError::Invalid(_) => 422,
            OpError::Busy(_) | OpError::Store(_) => 503,
            OpError::Failed(f) => f.kind.http_status(),
        }
    }

    /// A stable label for the error body.
    pub fn code(&self) -> &'static str {
        match self {
            OpError::NotFound(_) => "not_found",
            OpError::Conflict(_) => "conflict",
            OpError::Invalid(_) => "validation",
            OpError::Busy(_) => "overloaded",
            OpError::Store(_) => "store_unavailable",
            OpError::Failed(f) => f.kind.as_str(),
        }
    }

    /// What went wrong, for a person.
    pub fn message(&self) -> String {
        match self {
            OpError::NotFound(m)
            | OpError::Invalid(m)
            | OpError::Busy(m)
            | OpError::Conflict(m) => m.clone(),
            OpError::Store(e) => e.to_string(),
            OpError::Failed(f) => f.message.clone(),
        }
    }

    /// As the crate's error, for an execute answer: the remote caller sees its code.
    pub fn into_error(self) -> Error {
        match self {
            OpError::NotFound(m) => Error::NotFound(m),
            OpError::Conflict(m) => Error::Conflict(m),
            OpError::Invalid(m) => Error::Payload(m),
            OpError::Busy(m) => Error::Overloaded(m),
            OpError::Store(e) => e,
            OpError::Failed(f) => Error::Connector(format!("{}: {}", f.kind.as_str(), f.message)),
        }
    }
}

impl From<Error> for OpError {
    /// A store error, except the group commit's "queue full" ([`Error::Overloaded`]),
    /// which is a load signal (503 `overloaded`) rather than a store fault, and the
    /// lifecycle's refusals: an invalid binding (422), an unknown one (404), a
    /// conflicting one (409).
    fn from(e: Error) -> Self {
        match e {
            Error::Overloaded(m) => OpError::Busy(m),
            Error::Config(m) | Error::Payload(m) => OpError::Invalid(m),
            Error::NotFound(m) => OpError::NotFound(m),
            Error::Conflict(m) => OpError::Conflict(m),
            e => OpError::Store(e),
        }
    }
}

/// The operations, over one store, registry and set of handlers.
pub struct Operations {
    pub(crate) store: Store,
    pub(crate) triggers: Arc<LiveTriggers>,
    pub(crate) control: Arc<TriggerControl>,
    /// Ingest's binding matcher: its per-binding counts (received, matched, last
    /// received) and filter breakers (a binding's `breaker_open` state).
    pub(crate) matcher: BindingMatcher,
    pub(crate) deliver: Arc<dyn Deliver>,
    pub(crate) permits: Permits,
    pub(crate) metrics: Arc<DispatchMetrics>,
    pub(crate) queues: HashMap<String, QueueLimits>,
    pub(crate) max_depth: u32,
    pub(crate) retention_ms: i64,
    /// The outbox depth over the last minutes (`outbox_series`), sampled by a task
    /// the runtime starts.
    pub(crate) series: Arc<std::sync::Mutex<SeriesRing>>,
    pub(crate) tenant: String,
    /// Wakes this process's backfill runner when a job is created or resumed.
    pub(crate) backfill_wake: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operations").finish_non_exhaustive()
    }
}
