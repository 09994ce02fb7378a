//! The gateway's counters, as JSON (`/api/v1/stats`) and Prometheus text (`/metrics`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use serde::Serialize;

use super::series::{LatencyBuckets, Totals};

/// How an invoke ended, as counted in [`GatewayStats::invokes`] and labelled in
/// `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvokeOutcome {
    /// The target answered with success.
    Ok,
    /// The target answered with a failure (or delivery failed in another way).
    Error,
    /// The target did not answer within the deadline.
    Timeout,
    /// The target address names no registration.
    NotFound,
    /// The target is in another tenant and not global.
    Forbidden,
    /// The caller's or the target's socket has too much in flight.
    Overloaded,
    /// The target's socket or channel closed before it answered.
    Closed,
}

impl InvokeOutcome {
    /// Every outcome, in label order; each has a counter slot at its index.
    pub(crate) const ALL: [InvokeOutcome; 7] = [
        InvokeOutcome::Ok,
        InvokeOutcome::Error,
        InvokeOutcome::Timeout,
        InvokeOutcome::NotFound,
        InvokeOutcome::Forbidden,
        InvokeOutcome::Overloaded,
        InvokeOutcome::Closed,
    ];

    /// The stable label of this outcome (`/metrics`, `/api/v1/stats`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            InvokeOutcome::Ok => "ok",
            InvokeOutcome::Error => "error",
            InvokeOutcome::Timeout => "timeout",
            InvokeOutcome::NotFound => "not_found",
            InvokeOutcome::Forbidden => "forbidden",
            InvokeOutcome::Overloaded => "overloaded",
            InvokeOutcome::Closed => "closed",
        }
    }
}

/// Live counters, written by socket tasks.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) sockets_accepted: AtomicU64,
    pub(crate) sockets_open: AtomicU64,
    pub(crate) grpc_connections_accepted: AtomicU64,
    pub(crate) grpc_connections_open: AtomicU64,
    pub(crate) grpc_streams_accepted: AtomicU64,
    pub(crate) grpc_streams_open: AtomicU64,
    pub(crate) frames_in: AtomicU64,
    pub(crate) frames_out: AtomicU64,
    pub(crate) executes_routed: AtomicU64,
    /// Routed executes that ended (answered, timed out or cut off by their link).
    executes_completed: AtomicU64,
    /// Of those, the ones that did not succeed.
    execute_errors: AtomicU64,
    /// Round trips of the answered executes of the current second (`series.rs`).
    pub(crate) latency: LatencyBuckets,
    invokes: [AtomicU64; InvokeOutcome::ALL.len()],
    dropped: Mutex<BTreeMap<&'static str, u64>>,
    /// Routed executes' round trips by tenant and outcome (`/metrics` only).
    pub(crate) execute_seconds: ExecuteLatency,
}

/// `switchboard_gateway_execute_seconds{tenant, outcome}`: a routed execute's round
/// trip at the gateway, from sending the request to its answer (or its deadline, or
/// its link closing). The labels are bounded: tenants are the registrations', outcomes
/// three (`ok`, `failed`, `timeout`).
#[derive(Debug)]
pub(crate) struct ExecuteLatency(Family<LabelPairs, Histogram, fn() -> Histogram>);

/// A series' labels as `(name, value)` pairs.
type LabelPairs = Vec<(String, String)>;

impl Default for ExecuteLatency {
    fn default() -> Self {
        // 100 µs to about 105 s, quadrupling.
        ExecuteLatency(Family::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 4.0, 11))
        }))
    }
}

impl ExecuteLatency {
    /// Observes one execute of `tenant` that ended with `outcome` after `took`.
    pub(crate) fn observe(&self, tenant: &str, outcome: &str, took: std::time::Duration) {
        self.0
            .get_or_create(&vec![
                ("tenant".to_owned(), tenant.to_owned()),
                ("outcome".to_owned(), outcome.to_owned()),
            ])
            .observe(took.as_secs_f64());
    }

    /// The family in the text format, without `# EOF`, to join the gateway's others.
    pub(crate) fn render(&self) -> String {
        let mut registry =
            prometheus_client::registry::Registry::with_prefix("switchboard_gateway");
        registry.register(
            "execute_seconds",
            "Routed executes' round trips at the gateway, by tenant and outcome",
            self.0.clone(),
        );
        let mut out = String::new();
        encode(&mut out, &registry).expect("writing to a String cannot fail");
        out.trim_end_matches("# EOF\n").to_owned()
    }
}

impl Counters {
    /// Counts one finished invoke.
    pub(crate) fn invoke(&self, outcome: InvokeOutcome) {
        self.invokes[outcome as usize].fetch_add(1, Relaxed);
    }

    /// Counts one routed execute that ended: `answered_in` is its round trip when the
    /// connector answered (the only ones the latency chart shows, so that timeouts do
    /// not pose as latency), `ok` whether it succeeded.
    pub(crate) fn execute_ended(&self, answered_in: Option<std::time::Duration>, ok: bool) {
        self.executes_completed.fetch_add(1, Relaxed);
        if !ok {
            self.execute_errors.fetch_add(1, Relaxed);
        }
        if let Some(took) = answered_in {
            self.latency.record(took);
        }
    }

    /// The cumulative figures the live chart samples: executes and invokes completed,
    /// and those of them that failed.
    pub(crate) fn totals(&self) -> Totals {
        let (mut invokes, mut invoke_errors) = (0, 0);
        for o in InvokeOutcome::ALL {
            let n = self.invokes[o as usize].load(Relaxed);
            invokes += n;
            if o != InvokeOutcome::Ok {
                invoke_errors += n;
            }
        }
        Totals {
            round_trips: self.executes_completed.load(Relaxed) + invokes,
            errors: self.execute_errors.load(Relaxed) + invoke_errors,
        }
    }

    /// Counts a dropped inbound frame under a stable reason.
    pub(crate) fn drop_frame(&self, reason: &'static str) {
        *self
            .dropped
            .lock()
            .expect("stats lock")
            .entry(reason)
            .or_default() += 1;
    }

    /// The counters now, with the registry's count of registrations per transport.
    pub(crate) fn snapshot(&self, by_transport: BTreeMap<String, u64>) -> GatewayStats {
        GatewayStats {
            sockets_accepted: self.sockets_accepted.load(Relaxed),
            sockets_open: self.sockets_open.load(Relaxed),
            grpc_connections_accepted: self.grpc_connections_accepted.load(Relaxed),
            grpc_connections_open: self.grpc_connections_open.load(Relaxed),
            grpc_streams_accepted: self.grpc_streams_accepted.load(Relaxed),
            grpc_streams_open: self.grpc_streams_open.load(Relaxed),
            registrations: by_transport.values().sum(),
            registrations_by_transport: by_transport,
            frames_in: self.frames_in.load(Relaxed),
            frames_out: self.frames_out.load(Relaxed),
            executes_routed: self.executes_routed.load(Relaxed),
            invokes: InvokeOutcome::ALL
                .iter()
                .map(|o| {
                    (
                        o.label().to_owned(),
                        self.invokes[*o as usize].load(Relaxed),
                    )
                })
                .collect(),
            frames_dropped: self
                .dropped
                .lock()
                .expect("stats lock")
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
        }
    }
}

/// A snapshot of the gateway's counters.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewayStats {
    /// WebSocket connections accepted since start.
    pub sockets_accepted: u64,
    /// WebSocket connections open now.
    pub sockets_open: u64,
    /// gRPC (HTTP/2) connections accepted since start.
    pub grpc_connections_accepted: u64,
    /// gRPC connections open now.
    pub grpc_connections_open: u64,
    /// gRPC `Connect` streams accepted since start (one per registration connection).
    pub grpc_streams_accepted: u64,
    /// gRPC `Connect` streams open now.
    pub grpc_streams_open: u64,
    /// Registrations now.
    pub registrations: u64,
    /// Registrations now, by transport (`websocket`, `grpc`); both always present.
    pub registrations_by_transport: BTreeMap<String, u64>,
    /// Messages received: WebSocket messages (text or binary) and gRPC stream messages.
    pub frames_in: u64,
    /// Messages sent, on either transport.
    pub frames_out: u64,
    /// Execute requests sent to connectors (API, test kit and invokes).
    pub executes_routed: u64,
    /// Invokes by outcome (`ok`, `error`, `timeout`, `not_found`, `forbidden`,
    /// `overloaded`, `closed`); every outcome is present, zero included, so that a
    /// dashboard sees a rate of zero rather than a missing series.
    pub invokes: BTreeMap<String, u64>,
    /// Inbound frames dropped, by reason.
    pub frames_dropped: BTreeMap<String, u64>,
}

impl GatewayStats {
    /// Renders the snapshot in the Prometheus text exposition format.
    pub fn to_prometheus(&self) -> String {
        let mut registry =
            prometheus_client::registry::Registry::with_prefix("switchboard_gateway");
        let counter = |v: u64| {
            let c: Counter = Counter::default();
            c.inc_by(v);
            c
        };
        let gauge = |v: u64| {
            let g: Gauge = Gauge::default();
            g.set(v as i64);
            g
        };
        registry.register(
            "sockets_accepted",
            "WebSocket connections accepted",
            counter(self.sockets_accepted),
        );
        registry.register(
            "sockets_open",
            "WebSocket connections open",
            gauge(self.sockets_open),
        );
        registry.register(
            "grpc_connections_accepted",
            "gRPC (HTTP/2) connections accepted",
            counter(self.grpc_connections_accepted),
        );
        registry.register(
            "grpc_connections_open",
            "gRPC (HTTP/2) connections open",
            gauge(self.grpc_connections_open),
        );
        registry.register(
            "grpc_streams_accepted",
            "gRPC Connect streams accepted",
            counter(self.grpc_streams_accepted),
        );
        registry.register(
            "grpc_streams_open",
            "gRPC Connect streams open",
            gauge(self.grpc_streams_open),
        );
        registry.register(
            "registrations",
            "Connector registrations",
            gauge(self.registrations),
        );
        let by_transport = Family::<Vec<(String, String)>, Gauge>::default();
        for (transport, n) in &self.registrations_by_transport {
            by_transport
                .get_or_create(&vec![("transport".to_owned(), transport.clone())])
                .set(*n as i64);
        }
        registry.register(
            "registrations_by_transport",
            "Connector registrations, by transport",
            by_transport,
        );
        registry.register(
            "frames_in",
            "Messages received (WebSocket and gRPC)",
            counter(self.frames_in),
        );
        registry.register(
            "frames_out",
            "Messages sent (WebSocket and gRPC)",
            counter(self.frames_out),
        );
        registry.register(
            "executes_routed",
            "Execute requests sent to connectors",
            counter(self.executes_routed),
        );
        registry.register(
            "invokes",
            "Connector-to-connector invokes, by outcome",
            labelled("outcome", &self.invokes),
        );
        registry.register(
            "frames_dropped",
            "Inbound frames dropped, by reason",
            labelled("reason", &self.frames_dropped),
        );
        registry.register(
            "spans_dropped",
            "Trace spans of this process lost before the collector had them (export queue full, export failed or timed out)",
            counter(crate::telemetry::spans_dropped()),
        );
        let mut out = String::new();
        encode(&mut out, &registry).expect("writing to a String cannot fail");
        out
    }
}

/// A counter family with one series per entry of `values`, labelled `label`.
fn labelled(label: &str, values: &BTreeMap<String, u64>) -> Family<Vec<(String, String)>, Counter> {
    let family = Family::<Vec<(String, String)>, Counter>::default();
    for (value, n) in values {
        family
            .get_or_create(&vec![(label.to_owned(), value.clone())])
            .inc_by(*n);
    }
    family
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_executes_and_invokes_and_count_every_failure() {
        let c = Counters::default();
        c.execute_ended(Some(std::time::Duration::from_millis(1)), true);
        c.execute_ended(Some(std::time::Duration::from_millis(1)), false);
        c.execute_ended(None, false);
        c.invoke(InvokeOutcome::Ok);
        c.invoke(InvokeOutcome::NotFound);
        assert_eq!(
            c.totals(),
            Totals {
                round_trips: 5,
                errors: 3
            }
        );
        assert_eq!(c.latency.take().count(), 2, "only answered executes");
    }

    #[test]
    fn prometheus_text_carries_every_counter_and_drop_reason() {
        let c = Counters::default();
        c.frames_in.fetch_add(7, Relaxed);
        c.drop_frame("not_json");
        c.invoke(InvokeOutcome::Timeout);
        c.invoke(InvokeOutcome::Timeout);
        let by_transport = BTreeMap::from([("websocket".to_owned(), 2), ("grpc".to_owned(), 1)]);
        let text = c.snapshot(by_transport).to_prometheus();
        assert!(
            text.contains("switchboard_gateway_frames_in_total 7"),
            "{text}"
        );
        assert!(
            text.contains("switchboard_gateway_registrations 3"),
            "{text}"
        );
        assert!(
            text.contains(r#"switchboard_gateway_registrations_by_transport{transport="grpc"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"switchboard_gateway_frames_dropped_total{reason="not_json"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"switchboard_gateway_invokes_total{outcome="timeout"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"switchboard_gateway_invokes_total{outcome="forbidden"} 0"#),
            "every outcome is exported, zero included: {text}"
        );
    }
}
