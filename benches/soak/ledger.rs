//! What the soak records, in memory allocated (and touched) before the run starts, so
//! that the bench process's own RSS measures the SDK and not its bookkeeping: one slot
//! per webhook the run may post, and per window three fixed-size latency histograms.
//! The recording connector writes deliveries into the same ledger.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use switchboard::{BaseConnector, Payload};

/// The capability the runtime's binding invokes; anything else is echoed.
pub const RECORD: &str = "record";
/// The field of each webhook body carrying its sequence number.
pub const SEQ_FIELD: &str = "soak_seq";

/// Latency histogram over microseconds: exact below 16 µs, then 16 linear steps per
/// power of two (at most 1/16 = 6 % wide), fixed size.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u32]>,
    total: u64,
    max: u64,
}

const SUB: u32 = 16;
const BUCKETS: usize = 16 + 60 * SUB as usize;

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            max: 0,
        }
    }

    fn index(us: u64) -> usize {
        if us < u64::from(SUB) {
            return us as usize;
        }
        let exp = 63 - us.leading_zeros(); // >= 4
        let sub = (us >> (exp - 4)) & u64::from(SUB - 1);
        (16 + (exp - 4) * SUB) as usize + sub as usize
    }

    /// The middle of bucket `i`, in µs.
    fn value(i: usize) -> u64 {
        if i < 16 {
            return i as u64;
        }
        let (exp, sub) = ((i - 16) as u32 / SUB + 4, (i - 16) as u64 % u64::from(SUB));
        let width = 1u64 << (exp - 4);
        (1u64 << exp) + sub * width + width / 2
    }

    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX >> 4)) as u64;
        self.counts[Self::index(us).min(BUCKETS - 1)] += 1;
        self.total += 1;
        self.max = self.max.max(us);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (bucket middle, capped at the largest value seen).
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = ((self.total as f64 * q).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += u64::from(*c);
            if seen >= rank {
                return Some(Duration::from_micros(Self::value(i).min(self.max)));
            }
        }
        Some(Duration::from_micros(self.max))
    }
}

/// One reporting window's latencies (successes only).
#[derive(Clone)]
pub struct Window {
    /// Webhook POST to its 2xx answer.
    pub post: Histogram,
    /// Gateway HTTP execute to its successful answer.
    pub execute: Histogram,
    /// Webhook POST (start) to the recorder's first receipt of it, by post time.
    pub delivery: Histogram,
}

/// What became of one webhook.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Not posted (yet).
    Unsent,
    /// Sent, no answer yet.
    InFlight,
    /// Answered 2xx: the runtime owes a delivery.
    Accepted,
    /// Refused, failed or never answered (see the error kinds).
    Failed,
}

/// One webhook's record.
#[derive(Clone, Copy)]
pub struct Slot {
    pub outcome: Outcome,
    /// Since the run's start.
    pub posted_at: Duration,
    pub deliveries: u32,
    pub first_delivery: Duration,
}

impl Slot {
    const EMPTY: Slot = Slot {
        outcome: Outcome::Unsent,
        // Non-zero, so `vec![EMPTY; n]` writes (and so maps) every page up front.
        posted_at: Duration::MAX,
        deliveries: 0,
        first_delivery: Duration::MAX,
    };
}

pub struct Inner {
    pub slots: Vec<Slot>,
    pub windows: Vec<Window>,
    /// Deliveries naming no webhook this run posted.
    pub unexpected: u64,
}

/// The run's record, shared by the load generators and the recorder.
#[derive(Clone)]
pub struct Ledger {
    pub start: Instant,
    window: Duration,
    inner: Arc<Mutex<Inner>>,
}

impl Ledger {
    /// Room for `slots` webhooks and `windows` windows of `window` each.
    pub fn new(start: Instant, slots: usize, windows: usize, window: Duration) -> Ledger {
        let inner = Inner {
            slots: vec![Slot::EMPTY; slots],
            windows: vec![
                Window {
                    post: Histogram::new(),
                    execute: Histogram::new(),
                    delivery: Histogram::new(),
                };
                windows
            ],
            unexpected: 0,
        };
        Ledger {
            start,
            window,
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    pub fn capacity(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    fn window_of(&self, inner: &Inner, at: Duration) -> usize {
        ((at.as_secs_f64() / self.window.as_secs_f64()) as usize).min(inner.windows.len() - 1)
    }

    /// Webhook `seq` is being sent now.
    pub fn posting(&self, seq: usize) {
        let at = self.start.elapsed();
        let slot = &mut self.lock().slots[seq];
        slot.outcome = Outcome::InFlight;
        slot.posted_at = at;
    }

    /// Webhook `seq` was answered: accepted after `latency`, or failed.
    pub fn answered(&self, seq: usize, accepted: Option<Duration>) {
        let mut inner = self.lock();
        let at = inner.slots[seq].posted_at;
        let w = self.window_of(&inner, at);
        match accepted {
            Some(latency) => {
                inner.slots[seq].outcome = Outcome::Accepted;
                inner.windows[w].post.record(latency);
            }
            None => inner.slots[seq].outcome = Outcome::Failed,
        }
    }

    /// An execute sent at `sent` (since the start) succeeded after `latency`.
    pub fn executed(&self, sent: Duration, latency: Duration) {
        let mut inner = self.lock();
        let w = self.window_of(&inner, sent);
        inner.windows[w].execute.record(latency);
    }

    /// The recorder received webhook `seq`.
    fn delivered(&self, seq: Option<usize>) {
        let now = self.start.elapsed();
        let mut inner = self.lock();
        let slot = match seq.and_then(|s| inner.slots.get(s).map(|slot| (s, *slot))) {
            Some((s, slot)) if slot.outcome != Outcome::Unsent => (s, slot),
            _ => {
                inner.unexpected += 1;
                return;
            }
        };
        let (seq, slot) = slot;
        inner.slots[seq].deliveries += 1;
        if slot.deliveries == 0 {
            inner.slots[seq].first_delivery = now;
            let w = self.window_of(&inner, slot.posted_at);
            let latency = now.saturating_sub(slot.posted_at);
            inner.windows[w].delivery.record(latency);
        }
    }

    /// Accepted webhooks not delivered yet.
    pub fn undelivered(&self) -> usize {
        self.lock()
            .slots
            .iter()
            .filter(|s| s.outcome == Outcome::Accepted && s.deliveries == 0)
            .count()
    }
}

/// The echo connector of the run: records each delivery of the binding (capability
/// [`RECORD`]) by the webhook's sequence number, and echoes everything else (the
/// executes sent through the gateway's HTTP API).
pub struct Recorder(pub Ledger);

#[async_trait]
impl BaseConnector for Recorder {
    fn connector_type(&self) -> &str {
        "recorder"
    }

    async fn execute(
        &self,
        payload: Payload,
        capability: Option<&str>,
    ) -> switchboard::Result<Payload> {
        if capability != Some(RECORD) {
            return Ok(payload);
        }
        let seq = payload
            .as_json()
            .and_then(|v| v[SEQ_FIELD].as_u64())
            .map(|s| s as usize);
        self.0.delivered(seq);
        Ok(Payload::Json(serde_json::json!({ "ok": true })))
    }
}
