//! [`ConnectorConfigBuilder`]: defaults, setters and the validation that makes a bad
//! configuration fail at start-up with the field's name and the fix.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    ConnectorConfig, ConnectorScope, HeartbeatSettings, ProxySetting, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_EXECUTE_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_MAX_QUEUED_REQUESTS,
    DEFAULT_METRICS_INTERVAL, DEFAULT_REGISTER_TIMEOUT,
};
use crate::backoff::BackoffPolicy;
use crate::error::{Error, Result};
use crate::transport::address::GatewayAddress;

/// Builds a [`ConnectorConfig`]; every setter documents its default and
/// [`build`](Self::build) validates the whole.
#[derive(Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct ConnectorConfigBuilder {
    gateway_url: String,
    tenant_id: String,
    instance_id: Option<String>,
    display_name: Option<String>,
    tags: Vec<String>,
    metadata: HashMap<String, String>,
    auth_token: Option<String>,
    scope: ConnectorScope,
    reconnect: BackoffPolicy,
    reconnect_enabled: bool,
    heartbeat: HeartbeatSettings,
    register_timeout: Duration,
    connect_timeout: Duration,
    max_concurrent_requests: usize,
    max_queued_requests: usize,
    execute_timeout: Duration,
    metrics_interval: Duration,
    proxy: ProxySetting,
    ca_bundle: Option<PathBuf>,
    credentials_dir: Option<PathBuf>,
}

impl fmt::Debug for ConnectorConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectorConfigBuilder")
            .field("gateway_url", &self.gateway_url)
            .field("tenant_id", &self.tenant_id)
            .field("instance_id", &self.instance_id)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("proxy", &self.proxy)
            .field("ca_bundle", &self.ca_bundle)
            .finish_non_exhaustive()
    }
}

impl ConnectorConfigBuilder {
    /// The builder with every default; [`ConnectorConfig::builder`] is the public way in.
    pub(super) fn new(gateway_url: String, tenant_id: String) -> Self {
        ConnectorConfigBuilder {
            gateway_url,
            tenant_id,
            instance_id: None,
            display_name: None,
            tags: Vec::new(),
            metadata: HashMap::new(),
            auth_token: None,
            scope: ConnectorScope::Unspecified,
            reconnect: BackoffPolicy::default(),
            reconnect_enabled: true,
            heartbeat: HeartbeatSettings::default(),
            register_timeout: DEFAULT_REGISTER_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_queued_requests: DEFAULT_MAX_QUEUED_REQUESTS,
            execute_timeout: DEFAULT_EXECUTE_TIMEOUT,
            metrics_interval: DEFAULT_METRICS_INTERVAL,
            proxy: ProxySetting::FromEnvironment,
            ca_bundle: None,
            credentials_dir: None,
        }
    }

    /// Sets where the approval flow keeps this registration's key and tokens (one
    /// subdirectory per dot key). Default: `$SWITCHBOARD_CREDENTIALS_DIR`, else
    /// `$XDG_DATA_HOME/switchboard/credentials`, else
    /// `$HOME/.local/share/switchboard/credentials`.
    pub fn credentials_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.credentials_dir = Some(dir.into());
        self
    }

    /// Sets the instance id. Default: `{hostname or "local"}-{8 random hex digits}`,
    /// unique enough that two processes on one host do not collide; set it explicitly
    /// when the gateway should recognise the instance across restarts.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Sets the display name. Default: the instance id.
    pub fn display_name(mut self, name: impl Into<String>) -> Self {
        self.display_name = Some(name.into());
        self
    }

    /// Adds one tag. Default: no tags.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Adds several tags.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// Adds one instance-metadata entry, replacing an earlier value for `key`.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets the JWT sent as `jwt_token`. Default: none.
    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        self.auth_token = Some(token.into());
        self
    }

    /// Sets the scope. Default: `ConnectorScope::Unspecified` (the gateway infers it).
    pub fn scope(mut self, scope: ConnectorScope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets the reconnect backoff. Default: `BackoffPolicy::default()`.
    pub fn reconnect(mut self, policy: BackoffPolicy) -> Self {
        self.reconnect = policy;
        self
    }

    /// Sets whether a lost connection is redialled (default true); see
    /// [`ConnectorConfig::reconnect_enabled`].
    pub fn reconnect_enabled(mut self, on: bool) -> Self {
        self.reconnect_enabled = on;
        self
    }

    /// Sets the heartbeat timing. Default: `HeartbeatSettings::default()`.
    pub fn heartbeat(mut self, heartbeat: HeartbeatSettings) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// Sets the register timeout. Default: [`DEFAULT_REGISTER_TIMEOUT`].
    pub fn register_timeout(mut self, timeout: Duration) -> Self {
        self.register_timeout = timeout;
        self
    }

    /// Sets the connect timeout. Default: [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the execute concurrency limit. Default: [`DEFAULT_MAX_CONCURRENT_REQUESTS`].
    pub fn max_concurrent_requests(mut self, n: usize) -> Self {
        self.max_concurrent_requests = n;
        self
    }

    /// Sets how many executes wait for a permit before further ones are refused as
    /// overloaded. Default: [`DEFAULT_MAX_QUEUED_REQUESTS`]; 0 refuses at once whenever
    /// every permit is taken.
    pub fn max_queued_requests(mut self, n: usize) -> Self {
        self.max_queued_requests = n;
        self
    }

    /// Sets the longest an execute may run before it is cancelled and answered with a
    /// timeout error (the gateway's `timeout_ms` applies when shorter). Default:
    /// [`DEFAULT_EXECUTE_TIMEOUT`].
    pub fn execute_timeout(mut self, timeout: Duration) -> Self {
        self.execute_timeout = timeout;
        self
    }

    /// Sets how often a `metrics_report` is sent; zero turns reports off. Default:
    /// [`DEFAULT_METRICS_INTERVAL`].
    pub fn metrics_interval(mut self, interval: Duration) -> Self {
        self.metrics_interval = interval;
        self
    }

    /// Sets whether the connection goes through an HTTP CONNECT proxy. Default:
    /// [`ProxySetting::FromEnvironment`] (`HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY`
    /// and `NO_PROXY`). A [`ProxySetting::Url`] is checked by [`build`](Self::build).
    pub fn proxy(mut self, proxy: ProxySetting) -> Self {
        self.proxy = proxy;
        self
    }

    /// Trusts the CA certificates in this PEM file for TLS gateways, in addition to
    /// the built-in webpki roots. Default: none. The file is read when the runner
    /// admits the registration, so an unreadable one fails there, naming the path.
    pub fn ca_bundle(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_bundle = Some(path.into());
        self
    }

    /// Validates and builds the configuration. Errors are [`Error::Config`] (or
    /// [`Error::InvalidAddress`] for the gateway URL) naming the field and the fix.
    pub fn build(self) -> Result<ConnectorConfig> {
        let tenant_id = self.tenant_id.trim().to_owned();
        if tenant_id.is_empty() {
            return Err(Error::Config(
                "tenant_id is empty; pass the tenant this connector belongs to".into(),
            ));
        }
        GatewayAddress::parse(&self.gateway_url)?;
        let instance_id = match self.instance_id {
            Some(id) if id.trim().is_empty() => {
                return Err(Error::Config(
                    "instance_id is empty; pass a unique id or leave it unset to generate one"
                        .into(),
                ))
            }
            Some(id) => id.trim().to_owned(),
            None => generated_instance_id(),
        };
        if self.max_concurrent_requests == 0 {
            return Err(Error::Config(
                "max_concurrent_requests is 0, so no request could ever run; set it to at least 1"
                    .into(),
            ));
        }
        for (name, d) in [
            ("register_timeout", self.register_timeout),
            ("connect_timeout", self.connect_timeout),
            ("execute_timeout", self.execute_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::Config(format!(
                    "{name} is zero; give it a positive duration"
                )));
            }
        }
        self.heartbeat.validate()?;
        validate_backoff(&self.reconnect)?;
        self.proxy.validate()?;
        Ok(ConnectorConfig {
            gateway_url: self.gateway_url.trim().to_owned(),
            display_name: self.display_name.unwrap_or_else(|| instance_id.clone()),
            tenant_id,
            instance_id,
            tags: self.tags,
            metadata: self.metadata,
            auth_token: self.auth_token,
            scope: self.scope,
            reconnect: self.reconnect,
            reconnect_enabled: self.reconnect_enabled,
            heartbeat: self.heartbeat,
            register_timeout: self.register_timeout,
            connect_timeout: self.connect_timeout,
            max_concurrent_requests: self.max_concurrent_requests,
            max_queued_requests: self.max_queued_requests,
            execute_timeout: self.execute_timeout,
            metrics_interval: self.metrics_interval,
            proxy: self.proxy,
            ca_bundle: self.ca_bundle,
            credentials_dir: self.credentials_dir,
        })
    }
}

/// Refuses backoff policies that would spin (zero delay) or never grow back down to a
/// sane schedule; the backoff engine itself trusts its policy.
fn validate_backoff(p: &BackoffPolicy) -> Result<()> {
    if p.initial.is_zero() {
        return Err(Error::Config(
            "reconnect.initial is zero, which would reconnect in a tight loop; give it a positive duration".into(),
        ));
    }
    if p.max < p.initial {
        return Err(Error::Config(format!(
            "reconnect.max ({:?}) is below reconnect.initial ({:?}); raise max",
            p.max, p.initial
        )));
    }
    if !(p.multiplier.is_finite() && p.multiplier >= 1.0) {
        return Err(Error::Config(format!(
            "reconnect.multiplier is {}; it must be a finite number of at least 1.0",
            p.multiplier
        )));
    }
    if !(0.0..=1.0).contains(&p.jitter) {
        return Err(Error::Config(format!(
            "reconnect.jitter is {}; it must be a fraction between 0.0 and 1.0",
            p.jitter
        )));
    }
    Ok(())
}

/// `{first label of the hostname, or "local"}-{8 hex}`; the random part keeps two
/// processes on one host apart, the hostname keeps the id readable in the gateway.
fn generated_instance_id() -> String {
    let host = ["HOSTNAME", "COMPUTERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().split('.').next().unwrap_or_default().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "local".to_owned());
    format!("{host}-{:08x}", rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_err(r: Result<ConnectorConfig>) -> String {
        match r {
            Err(Error::Config(msg)) => msg,
            other => panic!("expected Error::Config, got {other:?}"),
        }
    }

    #[test]
    fn builder_defaults_are_the_documented_ones() {
        let c = ConnectorConfig::builder("ws://localhost:4000", "acme")
            .build()
            .unwrap();
        assert_eq!(c.register_timeout, Duration::from_secs(10));
        assert_eq!(c.connect_timeout, Duration::from_secs(10));
        assert_eq!(c.max_concurrent_requests, 64);
        assert_eq!(c.heartbeat, HeartbeatSettings::default());
        assert_eq!(c.heartbeat.phoenix_interval, Duration::from_secs(25));
        assert_eq!(c.heartbeat.app_interval, Duration::from_secs(30));
        assert_eq!(c.heartbeat.inbound_idle_timeout, Duration::from_secs(60));
        assert_eq!(c.scope, ConnectorScope::Unspecified);
        assert_eq!(c.display_name, c.instance_id);
        assert!(c.auth_token.is_none());
    }

    #[test]
    fn generated_instance_ids_end_in_eight_hex_digits_and_differ() {
        let a = ConnectorConfig::builder("ws://h", "t")
            .build()
            .unwrap()
            .instance_id;
        let b = ConnectorConfig::builder("ws://h", "t")
            .build()
            .unwrap()
            .instance_id;
        let (_, hex) = a.rsplit_once('-').unwrap();
        assert_eq!(hex.len(), 8);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn builder_setters_are_applied() {
        let c = ConnectorConfig::builder("wss://gw", "acme")
            .instance_id("i-1")
            .display_name("Echo one")
            .tag("a")
            .tags(["b", "c"])
            .metadata("region", "eu")
            .auth_token("jwt")
            .scope(ConnectorScope::Global)
            .register_timeout(Duration::from_secs(3))
            .connect_timeout(Duration::from_secs(4))
            .max_concurrent_requests(2)
            .build()
            .unwrap();
        assert_eq!(c.instance_id, "i-1");
        assert_eq!(c.display_name, "Echo one");
        assert_eq!(c.tags, ["a", "b", "c"]);
        assert_eq!(c.metadata["region"], "eu");
        assert_eq!(c.auth_token.as_deref(), Some("jwt"));
        assert_eq!(c.scope, ConnectorScope::Global);
        assert_eq!(
            (c.register_timeout, c.connect_timeout),
            (Duration::from_secs(3), Duration::from_secs(4))
        );
        assert_eq!(c.max_concurrent_requests, 2);
    }

    #[test]
    fn empty_tenant_is_refused_naming_the_field() {
        assert!(config_err(ConnectorConfig::builder("ws://h", "  ").build()).contains("tenant_id"));
    }

    #[test]
    fn unparsable_address_is_refused_at_build() {
        let err = ConnectorConfig::builder("ftp://h", "t")
            .build()
            .unwrap_err();
        assert_eq!(err.code(), "invalid_address");
    }

    #[test]
    fn zero_limits_and_intervals_are_refused_naming_the_field() {
        let b = || ConnectorConfig::builder("ws://h", "t");
        assert!(
            config_err(b().max_concurrent_requests(0).build()).contains("max_concurrent_requests")
        );
        assert!(
            config_err(b().register_timeout(Duration::ZERO).build()).contains("register_timeout")
        );
        assert!(config_err(b().connect_timeout(Duration::ZERO).build()).contains("connect_timeout"));
        assert!(config_err(b().instance_id(" ").build()).contains("instance_id"));
        let hb = HeartbeatSettings {
            app_interval: Duration::ZERO,
            ..HeartbeatSettings::default()
        };
        assert!(config_err(b().heartbeat(hb).build()).contains("heartbeat.app_interval"));
    }

    #[test]
    fn idle_timeout_shorter_than_heartbeats_is_refused() {
        let hb = HeartbeatSettings {
            inbound_idle_timeout: Duration::from_secs(20),
            ..HeartbeatSettings::default()
        };
        let msg = config_err(
            ConnectorConfig::builder("ws://h", "t")
                .heartbeat(hb)
                .build(),
        );
        assert!(msg.contains("inbound_idle_timeout"), "{msg}");
    }

    #[test]
    fn zero_backoff_is_refused() {
        let policy = BackoffPolicy {
            initial: Duration::ZERO,
            ..BackoffPolicy::default()
        };
        let msg = config_err(
            ConnectorConfig::builder("ws://h", "t")
                .reconnect(policy)
                .build(),
        );
        assert!(msg.contains("reconnect.initial"), "{msg}");
    }
}
