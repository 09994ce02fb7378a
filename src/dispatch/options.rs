//! How the dispatcher runs: [`DispatcherOptions`] and the defaults the runtime's
//! `[deliver]` config shares with it. Apart from the dispatcher so that the tasks'
//! module holds only the tasks.

use crate::telemetry::Relationship;
use std::time::Duration;

/// Default attempts in flight per process: enough to keep a few hundred remote
/// handlers busy, few enough that a burst cannot exhaust memory or sockets.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// Default rows per claim: 100. A claim is one statement, and 100 rows keep it in the
/// sub-millisecond range on both stores while amortising its commit, without leasing
/// far more rows than the process can start before the lease runs out.
pub(crate) const DEFAULT_BATCH: usize = 100;
/// Default lease: 30 s, the default attempt timeout; the keeper extends it long before,
/// so a crashed dispatcher's rows are due again about one attempt's length later.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default fallback poll: 1 s. Wake-ups come from the store; the poll only covers a
/// lost notification (a PostgreSQL listener reconnecting) and other processes' retries.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default shutdown grace: 10 s for in-flight attempts before they are abandoned and
/// their rows released.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Finishes committed in one transaction at most.
pub(crate) const MAX_FINISH_BATCH: usize = 1024;

/// How the dispatcher runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatcherOptions {
    /// Attempts in flight at once in this process. Default [`DEFAULT_MAX_IN_FLIGHT`].
    pub max_in_flight: usize,
    /// Rows per claim. Default 100.
    pub batch: usize,
    /// How long a claim holds its rows before another process may take them. Default
    /// 30 s.
    pub lease: Duration,
    /// Fallback wake-up. Default 1 s.
    pub poll_interval: Duration,
    /// How long shutdown waits for attempts in flight. Default 10 s.
    pub shutdown_grace: Duration,
    /// The process's identity, stamped on every row it claims (`lease_holder`), so
    /// the same process started again recognises its rows and makes them due at once
    /// instead of waiting out their lease. Default `None`: rows carry no holder.
    pub process_id: Option<String>,
    /// How each attempt's span relates to its row's creation context
    /// (`[telemetry] span_relationship`); see [`Relationship`]. Default `Child`.
    pub(crate) span_relationship: Relationship,
}

impl Default for DispatcherOptions {
    fn default() -> Self {
        DispatcherOptions {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            batch: DEFAULT_BATCH,
            lease: DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            process_id: None,
            span_relationship: Relationship::default(),
        }
    }
}

impl DispatcherOptions {
    /// Sets how attempt spans relate to their rows' creation context.
    pub(crate) fn with_span_relationship(mut self, r: Relationship) -> Self {
        self.span_relationship = r;
        self
    }

    /// Sets `max_in_flight` (at least 1).
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }
    /// Sets `batch` (at least 1).
    pub fn with_batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }
    /// Sets the lease (at least 100 ms).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(100));
        self
    }
    /// Sets the fallback poll interval.
    pub fn with_poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }
    /// Sets the shutdown grace.
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
    /// Sets the identity stamped on claimed rows (see [`DispatcherOptions::process_id`]).
    pub fn with_process_id(mut self, id: impl Into<String>) -> Self {
        self.process_id = Some(id.into());
        self
    }
}
