//! Per-registration and per-socket counters.
//!
//! Counters are atomics written by the tasks that observe the event (the handle for
//! requests, the socket for connection events) and read by
//! [`crate::MultiConnectorRunner::metrics_snapshot`] without stopping anyone.
//! Connection-level figures (disconnects, reconnects, backoff, heartbeat RTT, dropped
//! frames) belong to the socket and appear in the snapshot of every registration on
//! it, because that is what a registration experiences.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde::Serialize;

/// Counters of one registration.
#[derive(Debug, Default)]
pub(crate) struct HandleMetrics {
    pub(crate) requests_received: AtomicU64,
    pub(crate) requests_processed: AtomicU64,
    pub(crate) requests_failed: AtomicU64,
    pub(crate) requests_rejected_overloaded: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) total_duration_ms: AtomicU64,
    pub(crate) max_duration_ms: AtomicU64,
    pub(crate) registrations: AtomicU64,
    pub(crate) register_failures: AtomicU64,
    pub(crate) requests_timed_out: AtomicU64,
    /// Wall-clock time of the last execute request, Unix milliseconds.
    pub(crate) last_request_at_ms: AtomicU64,
    pub(crate) invokes_sent: AtomicU64,
    pub(crate) invokes_failed: AtomicU64,
}

impl HandleMetrics {
    /// Records one finished execute.
    pub(crate) fn record_execute(&self, ok: bool, bytes_in: usize, bytes_out: usize, ms: u64) {
        if ok {
            self.requests_processed.fetch_add(1, Relaxed);
        } else {
            self.requests_failed.fetch_add(1, Relaxed);
        }
        self.bytes_received.fetch_add(bytes_in as u64, Relaxed);
        self.bytes_sent.fetch_add(bytes_out as u64, Relaxed);
        self.total_duration_ms.fetch_add(ms, Relaxed);
        self.max_duration_ms.fetch_max(ms, Relaxed);
    }
}

/// Counters of one socket (one tenant's connection).
#[derive(Debug, Default)]
pub(crate) struct SocketMetrics {
    pub(crate) connects: AtomicU64,
    pub(crate) disconnects: AtomicU64,
    pub(crate) reconnect_attempts: AtomicU64,
    pub(crate) current_backoff_ms: AtomicU64,
    pub(crate) heartbeat_rtt_ms: AtomicU64,
    pub(crate) frames_in: AtomicU64,
    pub(crate) frames_out: AtomicU64,
    pub(crate) invokes_timed_out: AtomicU64,
    dropped: Mutex<BTreeMap<&'static str, u64>>,
}

impl SocketMetrics {
    /// Counts one dropped inbound frame under a stable reason label.
    pub(crate) fn drop_frame(&self, reason: &'static str) {
        *self
            .dropped
            .lock()
            .expect("metrics lock")
            .entry(reason)
            .or_default() += 1;
    }

    pub(crate) fn dropped(&self) -> BTreeMap<String, u64> {
        let map = self.dropped.lock().expect("metrics lock");
        map.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }
}

/// A point-in-time copy of one registration's metrics.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[non_exhaustive]
pub struct ConnectorMetrics {
    /// Execute requests delivered to this registration.
    pub requests_received: u64,
    /// Executes the connector answered successfully.
    pub requests_processed: u64,
    /// Executes answered with an error (connector error, bad payload, overload).
    pub requests_failed: u64,
    /// Executes refused at once because the registration's inbound queue was full.
    pub requests_rejected_overloaded: u64,
    /// Payload bytes received in execute requests.
    pub bytes_received: u64,
    /// Payload bytes sent in execute responses.
    pub bytes_sent: u64,
    /// Sum of execute durations, milliseconds.
    pub total_duration_ms: u64,
    /// Longest execute, milliseconds.
    pub max_duration_ms: u64,
    /// Mean execute duration, milliseconds (0 when none ran).
    pub avg_duration_ms: f64,
    /// Successful registers (first and after every reconnect).
    pub registrations: u64,
    /// Registers refused by the gateway or timed out.
    pub register_failures: u64,
    /// Executes answered with a timeout error (the connector did not answer before
    /// `execute_timeout` or the gateway's deadline).
    pub requests_timed_out: u64,
    /// Invokes this registration sent.
    pub invokes_sent: u64,
    /// Invokes that ended in an error (remote error, timeout, disconnect).
    pub invokes_failed: u64,
    /// Times the socket connected and joined.
    pub connects: u64,
    /// Times the socket's connection was lost.
    pub disconnects: u64,
    /// Reconnect attempts scheduled.
    pub reconnect_attempts: u64,
    /// The backoff delay last chosen, milliseconds.
    pub current_backoff_ms: u64,
    /// Round trip of the last application heartbeat, milliseconds.
    pub heartbeat_rtt_ms: u64,
    /// Inbound frames the socket dropped, by reason (socket-wide).
    pub frames_dropped: BTreeMap<String, u64>,
}

pub(crate) fn snapshot(h: &HandleMetrics, s: &SocketMetrics) -> ConnectorMetrics {
    let processed = h.requests_processed.load(Relaxed);
    let failed = h.requests_failed.load(Relaxed);
    let total = h.total_duration_ms.load(Relaxed);
    let done = processed + failed;
    ConnectorMetrics {
        requests_received: h.requests_received.load(Relaxed),
        requests_processed: processed,
        requests_failed: failed,
        requests_rejected_overloaded: h.requests_rejected_overloaded.load(Relaxed),
        bytes_received: h.bytes_received.load(Relaxed),
        bytes_sent: h.bytes_sent.load(Relaxed),
        total_duration_ms: total,
        max_duration_ms: h.max_duration_ms.load(Relaxed),
        avg_duration_ms: if done == 0 {
            0.0
        } else {
            total as f64 / done as f64
        },
        registrations: h.registrations.load(Relaxed),
        register_failures: h.register_failures.load(Relaxed),
        requests_timed_out: h.requests_timed_out.load(Relaxed),
        invokes_sent: h.invokes_sent.load(Relaxed),
        invokes_failed: h.invokes_failed.load(Relaxed),
        connects: s.connects.load(Relaxed),
        disconnects: s.disconnects.load(Relaxed),
        reconnect_attempts: s
            .reconnect_attempts
            .load(std::sync::atomic::Ordering::Acquire),
        current_backoff_ms: s.current_backoff_ms.load(Relaxed),
        heartbeat_rtt_ms: s.heartbeat_rtt_ms.load(Relaxed),
        frames_dropped: s.dropped(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_merges_handle_and_socket_counters() {
        let h = HandleMetrics::default();
        let s = SocketMetrics::default();
        h.record_execute(true, 10, 20, 4);
        h.record_execute(false, 1, 2, 2);
        s.drop_frame("not_json");
        s.drop_frame("not_json");
        s.disconnects.fetch_add(1, Relaxed);
        let snap = snapshot(&h, &s);
        assert_eq!((snap.requests_processed, snap.requests_failed), (1, 1));
        assert_eq!((snap.bytes_received, snap.bytes_sent), (11, 22));
        assert_eq!(snap.avg_duration_ms, 3.0);
        assert_eq!(snap.max_duration_ms, 4);
        assert_eq!(snap.frames_dropped.get("not_json"), Some(&2));
        assert_eq!(snap.disconnects, 1);
    }
}
