//! [`GatewayConfig`]: the gateway's settings, and with them every bound it puts on what
//! its clients may make it hold (frame size, deadlines, requests in flight).

use std::time::Duration;

/// Settings of a gateway.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Close a socket after this long without inbound data (default 60 s, as the
    /// protocol family's gateways do; clients heartbeat every 25 s).
    pub idle_timeout: Duration,
    /// Deadline of an execute when the caller names none (default 30 s).
    pub default_execute_timeout: Duration,
    /// The longest deadline any execute or invoke may have, whatever its caller asks
    /// for (default 300 s). A deadline is how long the gateway holds the request's
    /// pending entry, its in-flight slot and, for the HTTP API, the caller's
    /// connection; an invoke's `timeout_ms` alone could otherwise pin them for 24 days
    /// (`i32::MAX` ms). Five minutes covers slow tool calls while bounding that.
    pub max_execute_timeout: Duration,
    /// Largest inbound WebSocket message and frame (default 16 MiB). The limit is
    /// enforced by the WebSocket layer from the frame header, before the payload is
    /// buffered, so that unauthenticated clients cannot make the gateway hold more than
    /// this per socket; a socket that sends more is closed and counted as `too_large`.
    pub max_frame_bytes: usize,
    /// Most executes and invokes one socket may have in flight at once, counted on
    /// the socket that answers an execute and on the socket that sent an invoke
    /// (default 4096). Each holds a pending entry, a waiter and, for an invoke, a
    /// task until it is answered or times out; without a cap a client that never
    /// answers, or that floods invokes, grows the gateway without bound. 4096 is
    /// four writer queues' worth, far more than a healthy connector has outstanding.
    /// Beyond it an execute fails at once with `Error::Overloaded` (HTTP 503) and an
    /// invoke is answered with code `overloaded`.
    pub max_in_flight_per_socket: usize,
    /// Where to serve gRPC (`ConnectorService`), beside the Phoenix socket's port;
    /// `None` (the default) serves no gRPC. Port 0 picks a free port
    /// ([`super::Gateway::grpc_addr`] tells which). gRPC streams share the other
    /// limits: `max_frame_bytes` per message, `idle_timeout` and
    /// `max_in_flight_per_socket` per stream.
    pub grpc_listen: Option<std::net::SocketAddr>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            idle_timeout: Duration::from_secs(60),
            default_execute_timeout: Duration::from_secs(30),
            max_execute_timeout: Duration::from_secs(300),
            max_frame_bytes: 16 * 1024 * 1024,
            max_in_flight_per_socket: 4096,
            grpc_listen: None,
        }
    }
}

impl GatewayConfig {
    /// Sets [`GatewayConfig::idle_timeout`].
    pub fn with_idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::default_execute_timeout`].
    pub fn with_default_execute_timeout(mut self, t: Duration) -> Self {
        self.default_execute_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::max_execute_timeout`].
    pub fn with_max_execute_timeout(mut self, t: Duration) -> Self {
        self.max_execute_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::max_frame_bytes`].
    pub fn with_max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
        self
    }

    /// Sets [`GatewayConfig::max_in_flight_per_socket`].
    pub fn with_max_in_flight_per_socket(mut self, n: usize) -> Self {
        self.max_in_flight_per_socket = n;
        self
    }

    /// Sets [`GatewayConfig::grpc_listen`].
    pub fn with_grpc_listen(mut self, addr: std::net::SocketAddr) -> Self {
        self.grpc_listen = Some(addr);
        self
    }

    /// The deadline an execute gets: the requested one unless absent or zero (then
    /// [`GatewayConfig::default_execute_timeout`]), never above
    /// [`GatewayConfig::max_execute_timeout`].
    pub(crate) fn effective_timeout(&self, requested: Option<Duration>) -> Duration {
        requested
            .filter(|t| !t.is_zero())
            .unwrap_or(self.default_execute_timeout)
            .min(self.max_execute_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_timeout_defaults_zero_and_caps_at_the_maximum() {
        let c = GatewayConfig::default()
            .with_default_execute_timeout(Duration::from_secs(30))
            .with_max_execute_timeout(Duration::from_secs(300));
        let s = Duration::from_secs;
        assert_eq!(c.effective_timeout(None), s(30));
        assert_eq!(c.effective_timeout(Some(s(0))), s(30));
        assert_eq!(c.effective_timeout(Some(s(5))), s(5));
        assert_eq!(c.effective_timeout(Some(s(3600))), s(300));
        let low_cap = c.with_max_execute_timeout(s(10));
        assert_eq!(
            low_cap.effective_timeout(None),
            s(10),
            "the default is capped too"
        );
    }
}
