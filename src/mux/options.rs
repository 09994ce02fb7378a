//! [`RunnerOptions`]: the options of a [`MultiConnectorRunner`](super::MultiConnectorRunner)
//! as a whole (per-registration settings live in [`ConnectorConfig`](crate::ConnectorConfig)),
//! their defaults, and the environment variables that set them.

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::{Error, Result};

/// Default for [`RunnerOptions::stop_grace`]: long enough for typical executes, and
/// with the close inside Kubernetes' default 30 s termination grace (after which it
/// sends SIGKILL).
pub(crate) const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(20);

/// Default for [`RunnerOptions::max_streams_per_channel`]: below the 100 concurrent
/// streams many HTTP/2 servers (and proxies in front of them) allow per connection,
/// with room for the occasional stream still closing.
pub(crate) const DEFAULT_MAX_STREAMS_PER_CHANNEL: usize = 80;

/// Options of the runner as a whole (per-registration settings live in
/// [`ConnectorConfig`](crate::ConnectorConfig)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunnerOptions {
    /// Most registrations one socket carries (default 512). The gateway keeps per-socket
    /// state for each; past a few hundred, one slow socket affects too many
    /// registrations, so the runner refuses at admission rather than degrade silently.
    pub max_handlers_per_socket: usize,
    /// Capacity of each socket's command queue (default 1024): invokes, removals and
    /// admissions from the handles to the socket's task. When full, senders await:
    /// backpressure on callers, never loss.
    pub command_queue_capacity: usize,
    /// Largest inbound WebSocket message (default 16 MiB). The WebSocket layer refuses
    /// a larger one from its header, before buffering it, and the socket reconnects
    /// (counted as `too_large`): a peer cannot make a connector hold more than this per
    /// socket.
    pub max_frame_bytes: usize,
    /// Most gRPC streams (registrations) one HTTP/2 connection carries (default 80);
    /// past it another connection opens. 80 stays under the 100 concurrent streams
    /// many servers and proxies allow per connection.
    pub max_streams_per_channel: usize,
    /// How long a stop lets running executes finish (default 20 s). Executes that
    /// arrive or wait in a queue once the stop began are answered at once with a
    /// recoverable `connection_closed` error; those still running at the end of the
    /// grace are cancelled and answered with one that names the grace. Then each
    /// socket leaves its channel and closes, so the gateway forgets the
    /// registrations at once.
    pub stop_grace: Duration,
    /// Where to serve `/healthz`, `/readyz` and `/metrics` over HTTP/1 (default none).
    /// Bound by [`MultiConnectorRunner::new`](super::MultiConnectorRunner::new), so a taken port fails there; port 0
    /// picks a free one ([`MultiConnectorRunner::health_addr`](super::MultiConnectorRunner::health_addr)). Plain HTTP with no
    /// authentication: bind it to an address only the orchestrator and the scraper
    /// reach.
    pub health_listen: Option<SocketAddr>,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            max_handlers_per_socket: 512,
            command_queue_capacity: 1024,
            max_frame_bytes: 16 * 1024 * 1024,
            max_streams_per_channel: DEFAULT_MAX_STREAMS_PER_CHANNEL,
            stop_grace: DEFAULT_STOP_GRACE,
            health_listen: None,
        }
    }
}

impl RunnerOptions {
    /// Sets [`RunnerOptions::max_handlers_per_socket`].
    pub fn with_max_handlers_per_socket(mut self, n: usize) -> Self {
        self.max_handlers_per_socket = n;
        self
    }

    /// Sets [`RunnerOptions::command_queue_capacity`] (at least 1).
    pub fn with_command_queue_capacity(mut self, n: usize) -> Self {
        self.command_queue_capacity = n.max(1);
        self
    }

    /// Sets [`RunnerOptions::max_frame_bytes`].
    pub fn with_max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
        self
    }

    /// Sets [`RunnerOptions::max_streams_per_channel`] (at least 1).
    pub fn with_max_streams_per_channel(mut self, n: usize) -> Self {
        self.max_streams_per_channel = n.max(1);
        self
    }

    /// Sets [`RunnerOptions::stop_grace`].
    pub fn with_stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// Sets [`RunnerOptions::health_listen`].
    pub fn with_health_listen(mut self, addr: SocketAddr) -> Self {
        self.health_listen = Some(addr);
        self
    }

    /// The defaults, with what the process environment sets: `SWITCHBOARD_HEALTH_LISTEN`
    /// (an address such as `0.0.0.0:9090`, see [`RunnerOptions::health_listen`]) and
    /// `SWITCHBOARD_STOP_GRACE_SECS` (whole seconds, see [`RunnerOptions::stop_grace`]).
    /// Empty values count as unset; a malformed one is an error that names it.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut options = RunnerOptions::default();
        if let Some(v) = get("SWITCHBOARD_HEALTH_LISTEN") {
            let addr = v.parse::<SocketAddr>().map_err(|e| {
                Error::Config(format!(
                    "SWITCHBOARD_HEALTH_LISTEN is {v:?} ({e}); set it to an IP address and port, e.g. 0.0.0.0:9090"
                ))
            })?;
            options.health_listen = Some(addr);
        }
        if let Some(v) = get("SWITCHBOARD_STOP_GRACE_SECS") {
            let secs = v.parse::<u64>().map_err(|_| {
                Error::Config(format!(
                    "SWITCHBOARD_STOP_GRACE_SECS is {v:?}; set it to a whole number of seconds, e.g. 20"
                ))
            })?;
            options.stop_grace = Duration::from_secs(secs);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn options(vars: &[(&str, &str)]) -> Result<RunnerOptions> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        RunnerOptions::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn from_env_reads_the_health_listener_and_the_stop_grace() {
        let o = options(&[]).unwrap();
        assert_eq!((o.health_listen, o.stop_grace), (None, DEFAULT_STOP_GRACE));
        let o = options(&[
            ("SWITCHBOARD_HEALTH_LISTEN", "0.0.0.0:9090"),
            ("SWITCHBOARD_STOP_GRACE_SECS", "45"),
        ])
        .unwrap();
        assert_eq!(o.health_listen, Some("0.0.0.0:9090".parse().unwrap()));
        assert_eq!(o.stop_grace, Duration::from_secs(45));
    }

    #[test]
    fn from_env_names_a_malformed_variable() {
        let e = options(&[("SWITCHBOARD_HEALTH_LISTEN", "9090")]).unwrap_err();
        assert!(e.to_string().contains("SWITCHBOARD_HEALTH_LISTEN"), "{e}");
        let e = options(&[("SWITCHBOARD_STOP_GRACE_SECS", "20s")]).unwrap_err();
        assert!(e.to_string().contains("whole number of seconds"), "{e}");
    }
}
