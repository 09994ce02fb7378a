//! Per-registration and per-socket counters.
//!
//! Counters are atomics written by the tasks that observe the event (the handle for
//! requests, the socket for connection events) and read by
//! [`crate::MultiConnectorRunner::metrics_snapshot`] without stopping anyone.
//! Connection-level figures (disconnects, reconnects, backoff, heartbeat RTT, dropped
//! frames) belong to the socket and appear in the snapshot of every registration on
//! it, because that is what a registration experiences. So do the connection's
//! timestamps (connected since, last disconnect and why), which the connection core
//! records with the `now` it is given.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

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
    /// Answered executes by duration: one counter per bound of
    /// [`EXECUTE_DURATION_BOUNDS_MS`], then one for longer ones (not cumulative).
    pub(crate) duration_buckets: [AtomicU64; EXECUTE_DURATION_BOUNDS_MS.len() + 1],
}

/// Upper bounds (milliseconds) of the execute duration histogram: from a local answer
/// (5 ms) to the default execute timeout (60 s), roughly 2.5x apart.
pub(crate) const EXECUTE_DURATION_BOUNDS_MS: [u64; 12] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000, 30_000, 60_000,
];

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
        let bucket = EXECUTE_DURATION_BOUNDS_MS.partition_point(|le| *le < ms);
        self.duration_buckets[bucket].fetch_add(1, Relaxed);
    }

    /// The histogram as (upper bound in ms, executes at most that long), cumulative;
    /// the last bound is `u64::MAX` (every answered execute).
    fn cumulative_durations(&self) -> Vec<(u64, u64)> {
        let mut total = 0;
        let bounds = EXECUTE_DURATION_BOUNDS_MS.iter().copied().chain([u64::MAX]);
        bounds
            .zip(&self.duration_buckets)
            .map(|(le, n)| {
                total += n.load(Relaxed);
                (le, total)
            })
            .collect()
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
    link: Mutex<LinkTimes>,
}

/// When the socket joined and when and why it last went down (Unix milliseconds).
#[derive(Debug, Default, Clone)]
pub(crate) struct LinkTimes {
    /// Since when the current connection is joined; `None` while down.
    pub(crate) connected_since_ms: Option<u64>,
    pub(crate) last_disconnect_ms: Option<u64>,
    pub(crate) last_disconnect_reason: Option<String>,
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

    /// The connection joined at `unix_ms`.
    pub(crate) fn connected(&self, unix_ms: i64) {
        self.connects.fetch_add(1, Relaxed);
        self.link().connected_since_ms = Some(unix_ms.max(0) as u64);
    }

    /// The connection went down at `unix_ms` for `reason`.
    pub(crate) fn disconnected(&self, unix_ms: i64, reason: &str) {
        let mut link = self.link();
        link.connected_since_ms = None;
        link.last_disconnect_ms = Some(unix_ms.max(0) as u64);
        link.last_disconnect_reason = Some(reason.to_owned());
    }

    /// When the socket joined and when and why it last went down.
    pub(crate) fn link(&self) -> MutexGuard<'_, LinkTimes> {
        self.link.lock().expect("metrics lock")
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
    /// Since when the socket is joined (Unix milliseconds); `None` while it is down.
    pub connected_since_ms: Option<u64>,
    /// When the socket's connection last went down (Unix milliseconds), if it has.
    pub last_disconnect_at_ms: Option<u64>,
    /// Why it last went down (a read or write error, an idle timeout, the gateway's
    /// close, a stop): with the timestamps, what makes a flapping socket visible.
    pub last_disconnect_reason: Option<String>,
    /// Executes the connector answered, by duration: (upper bound in milliseconds,
    /// how many took at most that long), cumulative as in a Prometheus histogram; the
    /// last bound is `u64::MAX`. Timed-out and refused executes are not in it.
    pub execute_duration_buckets: Vec<(u64, u64)>,
}

pub(crate) fn snapshot(h: &HandleMetrics, s: &SocketMetrics) -> ConnectorMetrics {
    let processed = h.requests_processed.load(Relaxed);
    let failed = h.requests_failed.load(Relaxed);
    let total = h.total_duration_ms.load(Relaxed);
    let done = processed + failed;
    let link = s.link().clone();
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
        connected_since_ms: link.connected_since_ms,
        last_disconnect_at_ms: link.last_disconnect_ms,
        last_disconnect_reason: link.last_disconnect_reason,
        execute_duration_buckets: h.cumulative_durations(),
    }
}

/// A point-in-time copy of a socket's own figures (the registration counters zero):
/// what the per-socket series show.
pub(crate) fn socket_snapshot(s: &SocketMetrics) -> ConnectorMetrics {
    snapshot(&HandleMetrics::default(), s)
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
        assert_eq!(snap.execute_duration_buckets[0], (5, 2));
        assert_eq!(snap.execute_duration_buckets.last(), Some(&(u64::MAX, 2)));
    }

    #[test]
    fn durations_fall_in_the_first_bucket_that_holds_them() {
        let h = HandleMetrics::default();
        for ms in [0, 5, 6, 60_000, 60_001] {
            h.record_execute(true, 0, 0, ms);
        }
        let c = h.cumulative_durations();
        assert_eq!(c[0], (5, 2), "0 and 5 ms are at most 5 ms");
        assert_eq!(c[1], (10, 3));
        assert_eq!(c[c.len() - 2], (60_000, 4));
        assert_eq!(c[c.len() - 1], (u64::MAX, 5));
    }

    #[test]
    fn the_link_keeps_when_and_why_it_went_down() {
        let s = SocketMetrics::default();
        s.connected(1_000);
        assert_eq!(
            snapshot(&HandleMetrics::default(), &s).connected_since_ms,
            Some(1_000)
        );
        s.disconnected(2_500, "read failed: reset");
        let snap = snapshot(&HandleMetrics::default(), &s);
        assert_eq!(snap.connected_since_ms, None);
        assert_eq!(snap.last_disconnect_at_ms, Some(2_500));
        assert_eq!(
            snap.last_disconnect_reason.as_deref(),
            Some("read failed: reset")
        );
        assert_eq!(snap.connects, 1);
    }
}
