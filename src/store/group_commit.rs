//! Group commit: concurrent writers share one transaction, and so one fsync.
//!
//! Every [`Store::append`] queues its write and waits for the answer. One writer task
//! takes whatever has queued (up to [`MAX_BATCH`]) and hands it to the backend as one
//! batch; while that batch commits, the next one gathers. Under light load a batch is
//! one write and adds no latency; under a burst the cost of a commit is shared by up to
//! [`MAX_BATCH`] requests. SQLite allows one writer at a time anyway, so a single
//! writer task loses nothing there; for PostgreSQL it keeps the claim-then-append order
//! of one batch inside one transaction.
//!
//! The queue is bounded twice: by count ([`QUEUE_CAPACITY`]) and by bytes
//! (`write_queue_max_bytes`, default [`DEFAULT_QUEUE_MAX_BYTES`]). The count alone
//! would let 8192 bodies of 10 MiB each sit in memory (80 GiB) while a slow disk
//! commits; past either bound a write is refused at once with [`Error::Overloaded`]
//! (ingress answers 503 + `Retry-After`) instead of growing memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::backend::{Appended, Backend, Rejected, StateWrite, Write};
use super::body_codec::{BodyCompression, Prepared};
use crate::error::{Error, Result};
use crate::outbox::model::Enqueue;
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

/// Default bound on the bytes (bodies, and audit rows' headers and detail) of writes
/// queued or being committed: 64 MiB, one full batch ([`MAX_BATCH_BYTES`]) gathering
/// while another commits would need twice that, so under a flood of large bodies the
/// queue sheds load rather than the process running out of memory, while 1 KiB events
/// never reach it before the count bound.
pub(crate) const DEFAULT_QUEUE_MAX_BYTES: usize = 64 * 1024 * 1024;

/// How long an append waits for its batch to commit. Past it the caller gets a store
/// error and answers 503; if the write commits after all, the sender's retry finds the
/// claim and is answered as a duplicate, so nothing is lost or doubled.
pub(crate) const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// One caller's writes: never split over two transactions.
struct Job {
    writes: Writes,
    reply: Reply,
    /// [`write_bytes`] of the writes, held against the byte bound until they commit.
    bytes: usize,
}

/// A job's writes. One write (a webhook's append, an audit row) is the hot path and
/// costs no vector of its own.
enum Writes {
    One(Write),
    Group(Vec<Write>),
}

impl Writes {
    fn len(&self) -> usize {
        match self {
            Writes::One(_) => 1,
            Writes::Group(w) => w.len(),
        }
    }
}

/// Who waits for a job's outcome.
enum Reply {
    /// Nobody (an audit row).
    None,
    /// One append's caller.
    One(oneshot::Sender<Result<Appended>>),
    /// A group's caller: one entry per write (`None` for a state write).
    Group(oneshot::Sender<Result<Vec<Option<Appended>>>>),
}

/// The write queue: what every clone of a [`Store`] and its writer task share (the
/// channel, the byte bound and the counters).
struct WriteQueue {
    backend: Arc<dyn Backend>,
    tx: mpsc::Sender<Job>,
    batches: AtomicU64,
    batched_writes: AtomicU64,
    dropped_audit: AtomicU64,
    /// Bytes of the jobs queued or in the batch being committed.
    queued_bytes: AtomicUsize,
    max_queue_bytes: usize,
    /// How the backend wants bodies prepared, applied in the caller's task.
    compression: BodyCompression,
}

impl WriteQueue {
    /// Reserves `bytes` of the byte bound. A write is always admitted into an empty
    /// queue, so a body larger than the bound (a source's `max_body_bytes` may be)
    /// is slow under load rather than never stored.
    fn reserve(&self, bytes: usize) -> bool {
        self.queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q == 0 || q.saturating_add(bytes) <= self.max_queue_bytes).then(|| q + bytes)
            })
            .is_ok()
    }

    fn release(&self, bytes: usize) {
        self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Queues `job` or says why not, never waiting.
    fn enqueue(&self, job: Job) -> Result<()> {
        let bytes = job.bytes;
        if !self.reserve(bytes) {
            return Err(Error::Overloaded(format!(
                "write queue full: {} bytes waiting, the bound (write_queue_max_bytes) is {}",
                self.queued_bytes.load(Ordering::Relaxed),
                self.max_queue_bytes
            )));
        }
        self.tx.try_send(job).map_err(|e| {
            self.release(bytes);
            match e {
                mpsc::error::TrySendError::Full(_) => {
                    Error::Overloaded(format!("write queue full: {QUEUE_CAPACITY} writes waiting"))
                }
                mpsc::error::TrySendError::Closed(_) => Error::Shutdown,
            }
        })
    }
}

/// The store handle: group-committed writes, direct reads. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    queue: Arc<WriteQueue>,
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
    /// Starts the writer task for `backend` with the default byte bound
    /// ([`DEFAULT_QUEUE_MAX_BYTES`]). Must be called inside a tokio runtime; the task
    /// ends when the last clone of the store is dropped.
    pub fn new(backend: Arc<dyn Backend>) -> Store {
        Self::with_max_queue_bytes(backend, DEFAULT_QUEUE_MAX_BYTES)
    }

    /// Like [`Store::new`], with at most `max_queue_bytes` of writes queued or
    /// committing (`write_queue_max_bytes` in switchboard.toml).
    pub fn with_max_queue_bytes(backend: Arc<dyn Backend>, max_queue_bytes: usize) -> Store {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let compression = backend.body_compression();
        let queue = Arc::new(WriteQueue {
            backend,
            tx,
            batches: AtomicU64::new(0),
            batched_writes: AtomicU64::new(0),
            dropped_audit: AtomicU64::new(0),
            queued_bytes: AtomicUsize::new(0),
            max_queue_bytes: max_queue_bytes.max(1),
            compression,
        });
        // A task on the caller's runtime. Tried: a dedicated thread with its own
        // runtime, to spare the writer the HTTP tasks' run queue; no measurable gain,
        // and PostgreSQL connections opened there would die with that thread.
        tokio::spawn(writer(Arc::downgrade(&queue), queue.backend.clone(), rx));
        Store { queue }
    }

    /// The backend, for reads and state.
    pub fn backend(&self) -> &dyn Backend {
        &*self.queue.backend
    }

    /// Claims the event's dedupe key until `claim_expires_at_ms` and appends it, in one
    /// transaction shared with other concurrent writers. Returns once it is durable.
    pub async fn append(&self, event: TriggerEvent, claim_expires_at_ms: i64) -> Result<Appended> {
        self.append_enqueue(event, claim_expires_at_ms, Vec::new())
            .await
    }

    /// Like [`Store::append`], and creates `enqueue`'s outbox rows and queue messages in
    /// the same transaction when (and only when) the event is stored.
    ///
    /// The event's stored form (headers JSON, the body compressed if the backend wants
    /// it) is prepared here, in the caller's task, so that concurrent requests do that
    /// work in parallel rather than in the one writer ([`super::body_codec`]).
    pub async fn append_enqueue(
        &self,
        event: TriggerEvent,
        claim_expires_at_ms: i64,
        enqueue: Vec<Enqueue>,
    ) -> Result<Appended> {
        let (reply, rx) = oneshot::channel();
        let write = self.append_write(event, claim_expires_at_ms, enqueue);
        self.queue
            .enqueue(Job::new(Writes::One(write), Reply::One(reply)))?;
        committed(rx).await
    }

    /// Appends every event of `appends` (each with its claim and outbox rows, as
    /// [`Store::append_enqueue`] does) and writes `state`, all in ONE transaction:
    /// either all of it is durable or none of it. What a batch of events from one
    /// delivery, or a poll's page with its new cursor, needs. Two events with the
    /// same dedupe key: the second is the first's duplicate. Returns one [`Appended`]
    /// per event, in order.
    pub async fn append_group(
        &self,
        appends: Vec<GroupAppend>,
        state: Option<StateWrite>,
    ) -> Result<Vec<Appended>> {
        let events = appends.len();
        let mut writes = Vec::with_capacity(events + usize::from(state.is_some()));
        for a in appends {
            writes.push(self.append_write(a.event, a.claim_expires_at_ms, a.enqueue));
        }
        writes.extend(state.map(Write::PutState));
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, rx) = oneshot::channel();
        self.queue
            .enqueue(Job::new(Writes::Group(writes), Reply::Group(reply)))?;
        let outcomes = committed(rx).await?;
        Ok(outcomes.into_iter().take(events).flatten().collect())
    }

    fn append_write(
        &self,
        mut event: TriggerEvent,
        claim_expires_at_ms: i64,
        enqueue: Vec<Enqueue>,
    ) -> Write {
        let prepared = Prepared::take(&mut event, self.queue.compression);
        Write::Append {
            event: Box::new(event),
            claim_expires_at_ms,
            enqueue,
            prepared,
        }
    }

    /// Queues an audit row without waiting. Audit is best effort under a flood: when
    /// the queue is full (by count or bytes) the row is dropped and counted (the
    /// per-reason counters still count every rejection).
    pub fn reject(&self, rejected: Rejected) {
        let job = Job::new(Writes::One(Write::Reject(rejected)), Reply::None);
        if self.queue.enqueue(job).is_err() {
            self.queue.dropped_audit.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Group-commit counters so far.
    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            batches: self.queue.batches.load(Ordering::Relaxed),
            writes: self.queue.batched_writes.load(Ordering::Relaxed),
            dropped_audit: self.queue.dropped_audit.load(Ordering::Relaxed),
        }
    }
}

/// One event of [`Store::append_group`].
#[derive(Debug)]
pub struct GroupAppend {
    /// The event.
    pub event: TriggerEvent,
    /// When its dedupe claim stops deduplicating (unix ms).
    pub claim_expires_at_ms: i64,
    /// Its outbox rows, created only if the event is new.
    pub enqueue: Vec<Enqueue>,
}

/// Waits for a job's outcome, at most [`WRITE_DEADLINE`].
async fn committed<T>(rx: oneshot::Receiver<Result<T>>) -> Result<T> {
    match tokio::time::timeout(WRITE_DEADLINE, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Error::Shutdown),
        Err(_) => Err(Error::Store(format!(
            "write not committed within {WRITE_DEADLINE:?}"
        ))),
    }
}

impl Job {
    fn new(writes: Writes, reply: Reply) -> Job {
        let bytes = match &writes {
            Writes::One(w) => write_bytes(w),
            Writes::Group(ws) => ws.iter().map(write_bytes).sum(),
        };
        Job {
            bytes,
            writes,
            reply,
        }
    }
}

/// The bytes a write holds that a client chose: a body (as stored) and its headers, or
/// an audit row's headers and detail. What both the batch cut and the queue's byte
/// bound count.
fn write_bytes(write: &Write) -> usize {
    match write {
        Write::Append { prepared, .. } => prepared.body.len() + prepared.headers_json.len(),
        Write::Reject(r) => r.headers_json.len() + r.detail.len(),
        Write::PutState(w) => w.value.as_ref().map_or(0, String::len),
    }
}

async fn writer(
    queue: std::sync::Weak<WriteQueue>,
    backend: Arc<dyn Backend>,
    mut rx: mpsc::Receiver<Job>,
) {
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        let mut pending = std::mem::take(&mut jobs);
        while !pending.is_empty() {
            let rest = pending.split_off(split_point(&pending));
            commit(&queue, &*backend, pending).await;
            pending = rest;
        }
    }
}

/// How many of `jobs` fit one transaction: all of them unless their bodies add up to
/// more than [`MAX_BATCH_BYTES`] (always at least one).
fn split_point(jobs: &[Job]) -> usize {
    let mut bytes = 0;
    for (i, job) in jobs.iter().enumerate() {
        bytes += job.bytes;
        if i > 0 && bytes > MAX_BATCH_BYTES {
            return i;
        }
    }
    jobs.len()
}

/// Commits one batch and answers every writer in it.
async fn commit(queue: &std::sync::Weak<WriteQueue>, backend: &dyn Backend, jobs: Vec<Job>) {
    let mut replies = Vec::with_capacity(jobs.len());
    let held: usize = jobs.iter().map(|j| j.bytes).sum();
    let mut writes: Vec<Write> = Vec::with_capacity(jobs.iter().map(|j| j.writes.len()).sum());
    for job in jobs {
        replies.push((job.reply, job.writes.len()));
        match job.writes {
            Writes::One(w) => writes.push(w),
            Writes::Group(ws) => writes.extend(ws),
        }
    }
    let count = writes.len() as u64;
    let result = backend.write_batch(writes, crate::clock::now_ms()).await;
    if let Some(s) = queue.upgrade() {
        s.release(held);
        s.batches.fetch_add(1, Ordering::Relaxed);
        s.batched_writes.fetch_add(count, Ordering::Relaxed);
    }
    match result {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            for (reply, n) in replies {
                match reply {
                    Reply::None => drop(outcomes.by_ref().nth(n - 1)),
                    Reply::One(tx) => {
                        if let Some(Some(o)) = outcomes.next() {
                            let _ = tx.send(Ok(o));
                        }
                    }
                    Reply::Group(tx) => {
                        let _ = tx.send(Ok(outcomes.by_ref().take(n).collect()));
                    }
                }
            }
        }
        Err(e) => {
            tracing::warn!(backend = backend.name(), error = %e, writes = count, "batch not committed");
            let text = match e {
                Error::Store(text) => text,
                other => other.to_string(),
            };
            for (reply, _) in replies {
                let failed = Error::Store(text.clone());
                match reply {
                    Reply::None => {}
                    Reply::One(tx) => drop(tx.send(Err(failed))),
                    Reply::Group(tx) => drop(tx.send(Err(failed))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(body_len: usize) -> Job {
        let mut event = crate::store::testing::event(vec![0; body_len]);
        let prepared = Prepared::take(&mut event, BodyCompression::None);
        Job::new(
            Writes::One(Write::Append {
                event: Box::new(event),
                claim_expires_at_ms: 0,
                enqueue: Vec::new(),
                prepared,
            }),
            Reply::None,
        )
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
