//! Group commit: concurrent writers share one transaction, and so one fsync.
//!
//! Every [`Store::append`] queues its write and waits for the answer. One writer task
//! takes whatever has queued (up to [`MAX_BATCH`]) and hands it to the backend as one
//! batch; while that batch commits, the next one gathers. Under light load a batch is
//! one write and adds no latency; under a burst the cost of a commit is shared by up to
//! [`MAX_BATCH`] requests. SQLite allows one writer at a time anyway, so a single
//! writer task loses nothing there; for PostgreSQL it keeps the claim-then-append order
//! of one batch inside one transaction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{Appended, Backend, Rejected, Write};
use crate::error::{Error, Result};
use crate::triggers::TriggerEvent;

/// Most writes in one transaction. Large enough that a burst of a few hundred
/// concurrent requests commits in one go; small enough that one batch's transaction
/// stays in the low milliseconds.
pub(crate) const MAX_BATCH: usize = 512;

/// Most body bytes in one transaction: 64 MiB. A burst of large deliveries (the body
/// limit is 10 MiB) is split over several transactions rather than sent to PostgreSQL
/// as one array value near its 1 GB limit, or held in SQLite's page cache at once.
pub(crate) const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// Writes that may wait for the writer. When the queue is full, [`Store::append`]
/// refuses at once (ingress answers 503 + Retry-After) rather than queueing without
/// bound; audit writes are dropped and counted.
pub(crate) const QUEUE_CAPACITY: usize = 8192;

/// How long an append waits for its batch to commit. Past it the caller gets a store
/// error and answers 503; if the write commits after all, the sender's retry finds the
/// claim and is answered as a duplicate, so nothing is lost or doubled.
pub(crate) const WRITE_DEADLINE: Duration = Duration::from_secs(10);

struct Job {
    write: Write,
    reply: Option<oneshot::Sender<Result<Appended>>>,
}

struct Shared {
    backend: Arc<dyn Backend>,
    tx: mpsc::Sender<Job>,
    batches: AtomicU64,
    batched_writes: AtomicU64,
    dropped_audit: AtomicU64,
}

/// The store handle: group-committed writes, direct reads. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

/// Counters of the group commit, for `/metrics` and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Transactions committed (or attempted).
    pub batches: u64,
    /// Writes carried by those transactions.
    pub writes: u64,
    /// Audit rows dropped because the queue was full.
    pub dropped_audit: u64,
}

impl Store {
    /// Starts the writer task for `backend`. Must be called inside a tokio runtime; the
    /// task ends when the last clone of the store is dropped.
    pub fn new(backend: Arc<dyn Backend>) -> Store {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared {
            backend,
            tx,
            batches: AtomicU64::new(0),
            batched_writes: AtomicU64::new(0),
            dropped_audit: AtomicU64::new(0),
        });
        // A task on the caller's runtime. Tried: a dedicated thread with its own
        // runtime, to spare the writer the HTTP tasks' run queue; no measurable gain,
        // and PostgreSQL connections opened there would die with that thread.
        tokio::spawn(writer(Arc::downgrade(&shared), shared.backend.clone(), rx));
        Store { shared }
    }

    /// The backend, for reads and state.
    pub fn backend(&self) -> &dyn Backend {
        &*self.shared.backend
    }

    /// Claims the event's dedupe key until `claim_expires_at_ms` and appends it, in one
    /// transaction shared with other concurrent writers. Returns once it is durable.
    pub async fn append(&self, event: TriggerEvent, claim_expires_at_ms: i64) -> Result<Appended> {
        self.append_enqueue(event, claim_expires_at_ms, Vec::new())
            .await
    }

    /// Like [`Store::append`], and creates `enqueue`'s outbox rows and queue messages in
    /// the same transaction when (and only when) the event is stored.
    pub async fn append_enqueue(
        &self,
        event: TriggerEvent,
        claim_expires_at_ms: i64,
        enqueue: Vec<crate::outbox::model::Enqueue>,
    ) -> Result<Appended> {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            write: Write::Append {
                event: Box::new(event),
                claim_expires_at_ms,
                enqueue,
            },
            reply: Some(reply),
        };
        self.shared.tx.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                Error::Store(format!("write queue full ({QUEUE_CAPACITY} waiting)"))
            }
            mpsc::error::TrySendError::Closed(_) => Error::Shutdown,
        })?;
        match tokio::time::timeout(WRITE_DEADLINE, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Shutdown),
            Err(_) => Err(Error::Store(format!(
                "write not committed within {WRITE_DEADLINE:?}"
            ))),
        }
    }

    /// Queues an audit row without waiting. Audit is best effort under a flood: when
    /// the queue is full the row is dropped and counted (the per-reason counters still
    /// count every rejection).
    pub fn reject(&self, rejected: Rejected) {
        let job = Job {
            write: Write::Reject(rejected),
            reply: None,
        };
        if self.shared.tx.try_send(job).is_err() {
            self.shared.dropped_audit.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Group-commit counters so far.
    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            batches: self.shared.batches.load(Ordering::Relaxed),
            writes: self.shared.batched_writes.load(Ordering::Relaxed),
            dropped_audit: self.shared.dropped_audit.load(Ordering::Relaxed),
        }
    }
}

async fn writer(
    shared: std::sync::Weak<Shared>,
    backend: Arc<dyn Backend>,
    mut rx: mpsc::Receiver<Job>,
) {
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        let mut pending = std::mem::take(&mut jobs);
        while !pending.is_empty() {
            let rest = pending.split_off(split_point(&pending));
            commit(&shared, &*backend, pending).await;
            pending = rest;
        }
    }
}

/// How many of `jobs` fit one transaction: all of them unless their bodies add up to
/// more than [`MAX_BATCH_BYTES`] (always at least one).
fn split_point(jobs: &[Job]) -> usize {
    let mut bytes = 0;
    for (i, job) in jobs.iter().enumerate() {
        bytes += match &job.write {
            Write::Append { event, .. } => event.body.len(),
            Write::Reject(r) => r.headers_json.len() + r.detail.len(),
        };
        if i > 0 && bytes > MAX_BATCH_BYTES {
            return i;
        }
    }
    jobs.len()
}

/// Commits one batch and answers every writer in it.
async fn commit(shared: &std::sync::Weak<Shared>, backend: &dyn Backend, jobs: Vec<Job>) {
    let mut replies = Vec::with_capacity(jobs.len());
    let writes: Vec<Write> = jobs
        .into_iter()
        .map(|j| {
            replies.push(j.reply);
            j.write
        })
        .collect();
    let count = writes.len() as u64;
    let result = backend.write_batch(writes, crate::store::now_ms()).await;
    if let Some(s) = shared.upgrade() {
        s.batches.fetch_add(1, Ordering::Relaxed);
        s.batched_writes.fetch_add(count, Ordering::Relaxed);
    }
    match result {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                if let (Some(reply), Some(o)) = (reply, outcome) {
                    let _ = reply.send(Ok(o));
                }
            }
        }
        Err(e) => {
            tracing::warn!(backend = backend.name(), error = %e, writes = count, "batch not committed");
            let text = match e {
                Error::Store(text) => text,
                other => other.to_string(),
            };
            for reply in replies.into_iter().flatten() {
                let _ = reply.send(Err(Error::Store(text.clone())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(body_len: usize) -> Job {
        let event = crate::triggers::TriggerEvent::new(
            "s",
            "github",
            "k".into(),
            0,
            None,
            "d".into(),
            "t".into(),
            "default",
            Default::default(),
            vec![0; body_len],
            serde_json::Value::Null,
            crate::triggers::SignatureStatus::Verified,
        );
        Job {
            write: Write::Append {
                event: Box::new(event),
                claim_expires_at_ms: 0,
                enqueue: Vec::new(),
            },
            reply: None,
        }
    }

    #[test]
    fn batches_are_cut_by_body_bytes_but_never_empty() {
        let small: Vec<Job> = (0..10).map(|_| job(1024)).collect();
        assert_eq!(split_point(&small), 10);
        let ten_mib = 10 * 1024 * 1024;
        let big: Vec<Job> = (0..10).map(|_| job(ten_mib)).collect();
        assert_eq!(split_point(&big), MAX_BATCH_BYTES / ten_mib);
        let huge = vec![job(MAX_BATCH_BYTES * 2), job(1)];
        assert_eq!(
            split_point(&huge),
            1,
            "one oversized write still goes alone"
        );
    }
}
