//! [`HandleState`]: what a socket's task publishes about one registration (ARN,
//! status, last error, approval progress, counters) for its handles to read.
//!
//! The driver, the approval task and the handles all touch it, so it sits below all
//! three: the task writes through the methods here, the handle
//! (`handle::RegistrationHandle`) reads and waits.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::metrics::HandleMetrics;
use crate::proto::RegistrationStatus;

/// What the driver publishes about a registration.
#[derive(Debug, Default)]
pub(crate) struct StatusReport {
    pub(crate) status: Option<RegistrationStatus>,
    pub(crate) last_error: Option<String>,
    /// The ARN of a registration accepted as PENDING (not executable yet).
    pub(crate) pending_arn: Option<String>,
    /// The approval exchange's last failure.
    pub(crate) approval_error: Option<String>,
}

/// What `wait_registered` waits on: an ARN, or the operator's final refusal.
#[derive(Debug, Default, Clone)]
pub(crate) struct Published {
    pub(crate) arn: Option<String>,
    pub(crate) rejected: Option<String>,
}

/// State shared by a registration's handle(s) and its socket's driver.
#[derive(Debug)]
pub(crate) struct HandleState {
    session: Mutex<StatusReport>,
    /// The ARN of the current successful registration (`None` while unregistered or
    /// pending), or the operator's rejection.
    published: watch::Sender<Published>,
    pub(crate) metrics: Arc<HandleMetrics>,
    removed: AtomicBool,
}

impl HandleState {
    pub(crate) fn new(metrics: Arc<HandleMetrics>) -> Arc<Self> {
        Arc::new(HandleState {
            session: Mutex::default(),
            published: watch::channel(Published::default()).0,
            metrics,
            removed: AtomicBool::new(false),
        })
    }

    /// What the handle reads: status, errors, the pending ARN.
    pub(crate) fn session(&self) -> MutexGuard<'_, StatusReport> {
        self.session.lock().expect("session lock poisoned")
    }

    /// The ARN of the current successful registration, if any.
    pub(crate) fn arn(&self) -> Option<String> {
        self.published.borrow().arn.clone()
    }

    /// A receiver of the published ARN or rejection, for waiting on either.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Published> {
        self.published.subscribe()
    }

    pub(crate) fn registered(&self, arn: String, status: i32) {
        {
            let mut s = self.session();
            s.status = RegistrationStatus::try_from(status).ok();
            s.last_error = None;
            s.pending_arn = None;
        }
        self.published.send_modify(|p| p.arn = Some(arn));
    }

    /// Accepted as PENDING: not registered (no ARN to execute against) until the
    /// operator approves and the exchange's JWT re-registers it.
    pub(crate) fn pending(&self, arn: String) {
        {
            let mut s = self.session();
            s.status = Some(RegistrationStatus::Pending);
            s.pending_arn = Some(arn);
        }
        self.published.send_modify(|p| p.arn = None);
    }

    /// Rejected by the operator: terminal; waiters get [`Error::Rejected`](crate::Error::Rejected).
    pub(crate) fn rejected(&self, reason: String) {
        {
            let mut s = self.session();
            s.status = Some(RegistrationStatus::Rejected);
            s.last_error = Some(format!("rejected: {reason}"));
            s.pending_arn = None;
        }
        self.published.send_modify(|p| {
            p.arn = None;
            p.rejected = Some(reason);
        });
    }

    /// The approval exchange's latest failure (`None` once it succeeded).
    pub(crate) fn approval_error(&self, error: Option<String>) {
        self.session().approval_error = error;
    }

    pub(crate) fn register_failed(&self, error: String) {
        self.session().last_error = Some(error);
    }

    pub(crate) fn unregistered(&self) {
        self.published.send_if_modified(|p| p.arn.take().is_some());
    }

    pub(crate) fn approval(&self, status: i32) {
        self.session().status = RegistrationStatus::try_from(status).ok();
    }

    /// The registration is gone for good (removed, or its socket's driver ended).
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Relaxed);
        self.published.send_modify(|p| p.arn = None);
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Relaxed)
    }
}
