//! The deliver half of `switchboard.toml`: `[gateway]` (the runtime's own registration,
//! over which `invoke` handlers are delivered) and `[dispatcher]` (how the outbox is
//! drained).
//!
//! ```toml
//! [gateway]
//! url = "ws://127.0.0.1:4000"
//! tenant = "acme"
//! connector_type = "switchboard"          # default
//! instance_id = "runtime-1"               # default "switchboard"
//! token_env = "SWITCHBOARD_GATEWAY_TOKEN" # optional
//!
//! [dispatcher]
//! max_in_flight = 256
//! batch = 100
//! lease = "30s"
//! poll_interval = "1s"
//! max_depth = 8
//! shutdown_grace = "10s"
//! ```

use std::time::Duration;

use serde::Deserialize;

use super::Secret;
use crate::duration::{duration_or, DurationSetting};
use crate::error::{Error, Result};
use crate::transport::GatewayAddress;

/// Default `connector_type` of the runtime's registration.
pub(crate) const DEFAULT_CONNECTOR_TYPE: &str = "switchboard";
/// Default `instance_id` of the runtime's registration.
pub(crate) const DEFAULT_INSTANCE_ID: &str = "switchboard";

// The dispatcher's defaults are the config's defaults: one definition each.
pub(crate) use crate::dispatch::options::{
    DEFAULT_BATCH, DEFAULT_LEASE, DEFAULT_MAX_IN_FLIGHT, DEFAULT_POLL_INTERVAL,
    DEFAULT_SHUTDOWN_GRACE,
};
/// Default handler-hop limit: 8. An event produced by a handler (through
/// `outbox.enqueue`) one hop deeper than this is dropped and counted, so two bindings
/// that trigger each other cannot loop for ever.
pub(crate) const DEFAULT_MAX_DEPTH: u32 = 8;

/// `[gateway]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RuntimeGatewayConfig {
    /// The gateway's address (`ws://`, `wss://`, `grpc://`, …).
    pub url: String,
    /// The tenant the runtime registers under.
    pub tenant: String,
    /// Connector type of the registration. Default [`DEFAULT_CONNECTOR_TYPE`].
    pub connector_type: Option<String>,
    /// Instance id of the registration. Default [`DEFAULT_INSTANCE_ID`].
    pub instance_id: Option<String>,
    /// Environment variable holding the registration's auth token, if it needs one.
    pub token_env: Option<String>,
}

/// The runtime's own registration, resolved.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewaySettings {
    /// The address as written.
    pub url: String,
    /// The address, parsed.
    pub address: GatewayAddress,
    /// Tenant.
    pub tenant: String,
    /// Connector type.
    pub connector_type: String,
    /// Instance id.
    pub instance_id: String,
    /// The auth token read from `token_env`, if one was named.
    pub token: Option<Secret>,
}

impl RuntimeGatewayConfig {
    pub(super) fn resolve(&self, env: &impl Fn(&str) -> Option<String>) -> Result<GatewaySettings> {
        let bad = |what: String| Error::Config(format!("[gateway] {what}"));
        let address = GatewayAddress::parse(&self.url).map_err(|e| bad(format!("url: {e}")))?;
        let text = |option: &str, value: Option<&String>, default: &str| {
            let v = value.map_or(default, String::as_str).trim();
            if v.is_empty() {
                return Err(bad(format!("{option} is empty")));
            }
            Ok(v.to_owned())
        };
        let token = match &self.token_env {
            None => None,
            Some(var) => {
                let value = env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
                    bad(format!("token_env names {var}, which is unset or empty"))
                })?;
                Some(Secret::new(value))
            }
        };
        Ok(GatewaySettings {
            url: self.url.clone(),
            address,
            tenant: text("tenant", Some(&self.tenant), "")?,
            connector_type: text(
                "connector_type",
                self.connector_type.as_ref(),
                DEFAULT_CONNECTOR_TYPE,
            )?,
            instance_id: text(
                "instance_id",
                self.instance_id.as_ref(),
                DEFAULT_INSTANCE_ID,
            )?,
            token,
        })
    }
}

/// `[dispatcher]` as written; every option has a default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DispatcherConfig {
    /// Attempts in flight per process. Default [`DEFAULT_MAX_IN_FLIGHT`].
    pub max_in_flight: Option<usize>,
    /// Rows per claim. Default [`DEFAULT_BATCH`].
    pub batch: Option<usize>,
    /// How long a claim holds its rows. Default [`DEFAULT_LEASE`].
    pub lease: Option<DurationSetting>,
    /// Fallback wake-up. Default [`DEFAULT_POLL_INTERVAL`].
    pub poll_interval: Option<DurationSetting>,
    /// Handler-hop limit. Default [`DEFAULT_MAX_DEPTH`].
    pub max_depth: Option<u32>,
    /// Time for in-flight attempts at shutdown. Default [`DEFAULT_SHUTDOWN_GRACE`].
    pub shutdown_grace: Option<DurationSetting>,
}

/// How the dispatcher drains the outbox, resolved. See the `DEFAULT_*` constants for
/// each default and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatcherSettings {
    /// Attempts in flight per process (at least 1).
    pub max_in_flight: usize,
    /// Rows per claim (at least 1).
    pub batch: usize,
    /// How long a claim holds its rows (positive).
    pub lease: Duration,
    /// Fallback wake-up when no notification arrives (positive).
    pub poll_interval: Duration,
    /// Handler-produced events deeper than this are dropped and counted.
    pub max_depth: u32,
    /// Time for in-flight attempts to finish at shutdown.
    pub shutdown_grace: Duration,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        DispatcherSettings {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            batch: DEFAULT_BATCH,
            lease: DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            max_depth: DEFAULT_MAX_DEPTH,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

impl DispatcherConfig {
    pub(super) fn resolve(&self) -> Result<DispatcherSettings> {
        let bad =
            |option: &str, what: String| Error::Config(format!("[dispatcher] {option}: {what}"));
        let duration = |option: &str, v: &Option<DurationSetting>, default, positive| {
            duration_or(v.as_ref(), default, positive).map_err(|e| bad(option, e))
        };
        let at_least_one = |option: &str, v: Option<usize>, default: usize| match v {
            Some(0) => Err(bad(option, "must be at least 1".into())),
            v => Ok(v.unwrap_or(default)),
        };
        Ok(DispatcherSettings {
            max_in_flight: at_least_one(
                "max_in_flight",
                self.max_in_flight,
                DEFAULT_MAX_IN_FLIGHT,
            )?,
            batch: at_least_one("batch", self.batch, DEFAULT_BATCH)?,
            lease: duration("lease", &self.lease, DEFAULT_LEASE, true)?,
            poll_interval: duration(
                "poll_interval",
                &self.poll_interval,
                DEFAULT_POLL_INTERVAL,
                true,
            )?,
            max_depth: self.max_depth.unwrap_or(DEFAULT_MAX_DEPTH),
            shutdown_grace: duration(
                "shutdown_grace",
                &self.shutdown_grace,
                DEFAULT_SHUTDOWN_GRACE,
                false,
            )?,
        })
    }
}
