//! Connector configuration: who a registration is, where the gateway is, and the
//! timing and concurrency limits of its connection.
//!
//! [`ConnectorConfig`] is built once, through [`ConnectorConfig::builder`] or
//! [`ConnectorConfig::from_env`], and validated then, so that a bad address or a zero
//! limit is reported at start-up with the field's name and the fix, never as an odd
//! failure deep inside a reconnect loop.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::backoff::BackoffPolicy;
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
pub use crate::proto::ConnectorScope;
use crate::transport::address::GatewayAddress;
#[cfg(feature = "websocket")]
use crate::transport::dial::Dialer;

mod builder;
pub use crate::transport::ProxySetting;
pub use builder::ConnectorConfigBuilder;

/// Default for [`ConnectorConfig::register_timeout`]: long enough for a gateway that
/// validates a JWT against a remote issuer, short enough that a dead peer is noticed.
pub const DEFAULT_REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`ConnectorConfig::connect_timeout`] (TCP, the proxy tunnel if any, TLS
/// and the WebSocket upgrade).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`ConnectorConfig::max_concurrent_requests`]: enough parallelism for
/// I/O-bound connectors while bounding memory if the gateway floods one registration.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 64;
/// Default for [`ConnectorConfig::max_queued_requests`]: as many waiting as running, so
/// a short burst is absorbed, while a registration that falls behind is refused within
/// one round trip instead of letting the gateway's callers time out.
pub const DEFAULT_MAX_QUEUED_REQUESTS: usize = 64;
/// Default for [`ConnectorConfig::execute_timeout`]: twice the reference gateway's 30 s
/// execute deadline, so the gateway's own deadline (sent as `timeout_ms`) normally
/// decides; this bound stops a hung connector call from holding its permit forever
/// when a gateway states no deadline.
pub const DEFAULT_EXECUTE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default for [`ConnectorConfig::metrics_interval`]: often enough for a dashboard,
/// rare enough to cost nothing (one small frame per registration per interval).
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(30);

/// Liveness timing of a socket (PROTOCOL.md §4, "Liveness").
///
/// Grouped apart from [`ConnectorConfig`] because these three values only make sense
/// together: the idle timeout must outlast the heartbeats that feed it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatSettings {
    /// How often a Phoenix `heartbeat` is sent (default 25 s, what Phoenix servers
    /// expect before their 60 s socket timeout).
    pub phoenix_interval: Duration,
    /// How often an application `heartbeat_request` is sent per socket (default 30 s),
    /// to keep the gateway's per-channel idle watchdog quiet.
    pub app_interval: Duration,
    /// No inbound data at all for this long means the peer is dead and the socket is
    /// reconnected (default 60 s: two missed heartbeat replies).
    pub inbound_idle_timeout: Duration,
}

impl Default for HeartbeatSettings {
    fn default() -> Self {
        HeartbeatSettings {
            phoenix_interval: Duration::from_secs(25),
            app_interval: Duration::from_secs(30),
            inbound_idle_timeout: Duration::from_secs(60),
        }
    }
}

impl HeartbeatSettings {
    /// Returns these settings with a different Phoenix heartbeat interval; the struct is
    /// `#[non_exhaustive]`, so `with_*` chains on `default()` are how callers outside
    /// the crate (tests that need fast heartbeats, say) change one value.
    #[must_use]
    pub fn with_phoenix_interval(mut self, interval: Duration) -> Self {
        self.phoenix_interval = interval;
        self
    }

    /// Returns these settings with a different application heartbeat interval.
    #[must_use]
    pub fn with_app_interval(mut self, interval: Duration) -> Self {
        self.app_interval = interval;
        self
    }

    /// Returns these settings with a different dead-peer idle timeout.
    #[must_use]
    pub fn with_inbound_idle_timeout(mut self, timeout: Duration) -> Self {
        self.inbound_idle_timeout = timeout;
        self
    }

    /// Checks the intervals; an idle timeout no longer than the shortest heartbeat
    /// interval would declare a healthy but quiet peer dead.
    pub(crate) fn validate(&self) -> Result<()> {
        for (name, d) in [
            ("heartbeat.phoenix_interval", self.phoenix_interval),
            ("heartbeat.app_interval", self.app_interval),
            ("heartbeat.inbound_idle_timeout", self.inbound_idle_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::Config(format!(
                    "{name} is zero; give it a positive duration"
                )));
            }
        }
        let shortest = self.phoenix_interval.min(self.app_interval);
        if self.inbound_idle_timeout <= shortest {
            return Err(Error::Config(format!(
                "heartbeat.inbound_idle_timeout ({:?}) must be longer than the shortest heartbeat interval ({shortest:?}), \
                 or a quiet but healthy socket is declared dead; raise it (default 60 s)",
                self.inbound_idle_timeout
            )));
        }
        Ok(())
    }
}

/// Everything one registration needs to join a gateway.
///
/// `#[non_exhaustive]` so that new options can be added without breaking callers:
/// construct it with [`ConnectorConfig::builder`] or [`ConnectorConfig::from_env`].
/// `Debug` redacts [`auth_token`](Self::auth_token) and a proxy password so a config
/// can be logged.
#[non_exhaustive]
#[derive(Clone)]
pub struct ConnectorConfig {
    /// The gateway address, in a form [`GatewayAddress::parse`] accepts.
    pub gateway_url: String,
    /// The tenant this registration belongs to; registrations of one tenant share a socket.
    pub tenant_id: String,
    /// This instance's id, unique per tenant and connector type.
    pub instance_id: String,
    /// A human-readable name shown by the gateway (defaults to the instance id).
    pub display_name: String,
    /// Free-form tags sent in the instance metadata, for filtering in the gateway.
    pub tags: Vec<String>,
    /// Free-form key/value pairs sent in the instance metadata.
    pub metadata: HashMap<String, String>,
    /// A JWT sent as `jwt_token` in the register request; `None` registers without
    /// credentials (the gateway may then accept it as PENDING).
    pub auth_token: Option<String>,
    /// Whether the registration is tenant-scoped or global (default: let the gateway
    /// infer it from the tenant).
    pub scope: ConnectorScope,
    /// Delays between reconnect attempts.
    pub reconnect: BackoffPolicy,
    /// Whether a lost connection is redialled (default true). When false, the first
    /// lost connection (or failed connect) ends every registration on the socket with
    /// a `connection_closed` error and `MultiConnectorRunner::run` returns it: for a
    /// process whose supervisor restarts it, so a dropped socket is never silent.
    /// Like the other connection settings, a socket takes it from the first
    /// registration of its tenant.
    pub reconnect_enabled: bool,
    /// Liveness timing of the socket.
    pub heartbeat: HeartbeatSettings,
    /// How long to wait for the `register_response` (default 10 s).
    pub register_timeout: Duration,
    /// How long to wait for the connection to open (default 10 s).
    pub connect_timeout: Duration,
    /// How many execute requests this registration runs at once (default 64); further
    /// requests wait in its queue.
    pub max_concurrent_requests: usize,
    /// How many executes wait for a permit (default 64); beyond it an execute is
    /// answered at once with an `overloaded` error.
    pub max_queued_requests: usize,
    /// The longest one execute may run (default 60 s, or the gateway's `timeout_ms`
    /// when shorter); then its future is dropped and a timeout error is answered.
    pub execute_timeout: Duration,
    /// How often this registration sends a `metrics_report` (default 30 s); zero for
    /// never.
    pub metrics_interval: Duration,
    /// Whether the connection goes through an HTTP CONNECT proxy (default
    /// [`ProxySetting::FromEnvironment`]: the standard `*_PROXY` / `NO_PROXY`
    /// variables). Like the other connection settings, a socket takes it from the
    /// first registration of its tenant.
    pub proxy: ProxySetting,
    /// A PEM file of extra CA certificates trusted for `wss://` and `grpcs://`
    /// gateways, added to the built-in webpki roots (default none: only the webpki
    /// roots). For a gateway whose certificate a private CA signed. An unreadable file,
    /// or one without a certificate, fails when the runner admits the registration.
    pub ca_bundle: Option<PathBuf>,
    /// Where the approval flow keeps the registration's key pair, session token and
    /// JWT, so a restart needs no second approval. `None` (default): the contract's
    /// default, `$SWITCHBOARD_CREDENTIALS_DIR`, else
    /// `$XDG_DATA_HOME/switchboard/credentials`, else
    /// `$HOME/.local/share/switchboard/credentials`.
    pub credentials_dir: Option<PathBuf>,
}

impl fmt::Debug for ConnectorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectorConfig")
            .field("gateway_url", &self.gateway_url)
            .field("tenant_id", &self.tenant_id)
            .field("instance_id", &self.instance_id)
            .field("display_name", &self.display_name)
            .field("tags", &self.tags)
            .field("metadata", &self.metadata)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("scope", &self.scope)
            .field("reconnect", &self.reconnect)
            .field("reconnect_enabled", &self.reconnect_enabled)
            .field("heartbeat", &self.heartbeat)
            .field("register_timeout", &self.register_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("max_queued_requests", &self.max_queued_requests)
            .field("execute_timeout", &self.execute_timeout)
            .field("metrics_interval", &self.metrics_interval)
            .field("proxy", &self.proxy)
            .field("ca_bundle", &self.ca_bundle)
            .field("credentials_dir", &self.credentials_dir)
            .finish()
    }
}

impl ConnectorConfig {
    /// Starts a builder with the two values that have no sensible default.
    pub fn builder(
        gateway_url: impl Into<String>,
        tenant_id: impl Into<String>,
    ) -> ConnectorConfigBuilder {
        ConnectorConfigBuilder::new(gateway_url.into(), tenant_id.into())
    }

    /// Reads the configuration from `SWITCHBOARD_*` environment variables (falling back
    /// to the names other SDKs of this protocol family read), the usual way to
    /// configure a connector in a container. See [`ConnectorConfig::from_lookup`] for
    /// the variables.
    pub fn from_env() -> Result<ConnectorConfig> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Builds a configuration from any name → value lookup; [`ConnectorConfig::from_env`]
    /// passes the process environment, tests and embedders pass a map.
    ///
    /// Variables: `SWITCHBOARD_GATEWAY_URL` and `SWITCHBOARD_TENANT_ID` (required),
    /// `SWITCHBOARD_INSTANCE_ID`, `SWITCHBOARD_DISPLAY_NAME`, `SWITCHBOARD_TAGS`
    /// (comma-separated), `SWITCHBOARD_AUTH_TOKEN`, `SWITCHBOARD_MAX_CONCURRENT_REQUESTS`,
    /// `SWITCHBOARD_PROXY` (a proxy URL, or `none` to ignore the `*_PROXY` variables; see
    /// [`ProxySetting`]), `SWITCHBOARD_CA_BUNDLE` (the path of a PEM file of extra CA
    /// certificates, see [`ConnectorConfig::ca_bundle`]) and
    /// `SWITCHBOARD_CREDENTIALS_DIR` (see [`ConnectorConfig::credentials_dir`]),
    /// `SWITCHBOARD_RECONNECT_ENABLED` (`true`/`false`, see
    /// [`ConnectorConfig::reconnect_enabled`]).
    /// An empty value counts as unset, as shells and orchestrators often export empty
    /// variables.
    ///
    /// So that a connector moves over from another SDK of the family without new
    /// deployment files, each of these falls back to that family's name when the
    /// `SWITCHBOARD_*` one is unset: `TENANT_ID`, `INSTANCE_ID`, `AUTH_TOKEN`,
    /// `CONNECTOR_DISPLAY_NAME`, `CONNECTOR_TAGS`, and for the gateway `MATRIX_HOST` with
    /// `USE_TLS`. `MATRIX_HOST` is a gRPC target: a bare `host[:port]` becomes
    /// `grpcs://…` when `USE_TLS` is true (`true`/`1`/`yes`/`on`), `grpc://…` when it is
    /// false or unset (the family's default is plaintext on a private network); a
    /// `MATRIX_HOST` that already has a scheme is used as written and `USE_TLS` must then
    /// agree with it, so a contradiction is an error instead of a silent guess.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<ConnectorConfig> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        // Ours first, then the family's name for the same setting.
        let get_or = |ours: &str, theirs: &str| get(ours).or_else(|| get(theirs));
        let url = match get("SWITCHBOARD_GATEWAY_URL") {
            Some(url) => url,
            None => match get("MATRIX_HOST") {
                Some(host) => matrix_host_url(&host, get("USE_TLS").as_deref())?,
                None => {
                    return Err(Error::Config(
                        "SWITCHBOARD_GATEWAY_URL is not set (nor MATRIX_HOST); set it to the gateway address, e.g. wss://gateway.example.com".into(),
                    ))
                }
            },
        };
        let tenant = get_or("SWITCHBOARD_TENANT_ID", "TENANT_ID").ok_or_else(|| {
            Error::Config(
                "SWITCHBOARD_TENANT_ID is not set (nor TENANT_ID); set it to the tenant id this connector belongs to".into(),
            )
        })?;
        let mut b = ConnectorConfig::builder(url, tenant);
        if let Some(v) = get_or("SWITCHBOARD_INSTANCE_ID", "INSTANCE_ID") {
            b = b.instance_id(v);
        }
        if let Some(v) = get_or("SWITCHBOARD_DISPLAY_NAME", "CONNECTOR_DISPLAY_NAME") {
            b = b.display_name(v);
        }
        if let Some(v) = get_or("SWITCHBOARD_TAGS", "CONNECTOR_TAGS") {
            b = b.tags(
                v.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned),
            );
        }
        if let Some(v) = get_or("SWITCHBOARD_AUTH_TOKEN", "AUTH_TOKEN") {
            b = b.auth_token(v);
        }
        if let Some(v) = get("SWITCHBOARD_CREDENTIALS_DIR") {
            b = b.credentials_dir(v);
        }
        if let Some(v) = get("SWITCHBOARD_MAX_CONCURRENT_REQUESTS") {
            let n = v.parse::<usize>().map_err(|_| {
                Error::Config(format!(
                    "SWITCHBOARD_MAX_CONCURRENT_REQUESTS is {v:?}; set it to a whole number of at least 1"
                ))
            })?;
            b = b.max_concurrent_requests(n);
        }
        if let Some(v) = get("SWITCHBOARD_PROXY") {
            b = b.proxy(ProxySetting::from_variable(&v));
        }
        if let Some(v) = get("SWITCHBOARD_CA_BUNDLE") {
            b = b.ca_bundle(v);
        }
        if let Some(v) = get("SWITCHBOARD_RECONNECT_ENABLED") {
            let on = flag(&v).ok_or_else(|| {
                Error::Config(format!(
                    "SWITCHBOARD_RECONNECT_ENABLED is {v:?}; set it to true or false"
                ))
            })?;
            b = b.reconnect_enabled(on);
        }
        b.build()
    }

    /// The parsed gateway address; [`ConnectorConfigBuilder::build`] has already checked
    /// that it parses, so this fails only if the field was changed afterwards.
    pub fn address(&self) -> Result<GatewayAddress> {
        GatewayAddress::parse(&self.gateway_url)
    }

    /// The dialer for this registration's gateway, with its proxy setting and CA
    /// bundle; fails on an unreadable bundle or a malformed proxy variable.
    #[cfg(feature = "websocket")]
    pub(crate) fn dialer(&self) -> Result<Dialer> {
        Dialer::new(&self.address()?, &self.proxy, self.ca_bundle.as_deref())
    }

    /// The registration's dot key for a connector of `connector_type`, built from the
    /// sanitised tenant, type and instance id; the socket admits the handle under it.
    pub fn key(&self, connector_type: &str) -> RegistrationKey {
        RegistrationKey::new(&self.tenant_id, connector_type, &self.instance_id)
    }

    /// The credential directory in effect: [`ConnectorConfig::credentials_dir`], else
    /// the default from the process environment; `None` when neither is known (no
    /// `HOME`): the approval flow then keeps nothing across restarts.
    pub fn effective_credentials_dir(&self) -> Option<PathBuf> {
        self.credentials_dir
            .clone()
            .or_else(|| default_credentials_dir(|name| std::env::var(name).ok()))
    }
}

/// A yes/no variable: `true`/`1`/`yes`/`on` or `false`/`0`/`no`/`off`, any case.
fn flag(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The gateway URL from the family's `MATRIX_HOST` and `USE_TLS`; see
/// [`ConnectorConfig::from_lookup`].
fn matrix_host_url(host: &str, use_tls: Option<&str>) -> Result<String> {
    let tls =
        match use_tls {
            None => None,
            Some(v) => Some(flag(v).ok_or_else(|| {
                Error::Config(format!("USE_TLS is {v:?}; set it to true or false"))
            })?),
        };
    match host.split_once("://") {
        None => Ok(format!(
            "{}://{host}",
            if tls == Some(true) { "grpcs" } else { "grpc" }
        )),
        Some((scheme, _)) => {
            let scheme_tls = matches!(
                scheme.to_ascii_lowercase().as_str(),
                "grpcs" | "wss" | "https"
            );
            match tls {
                Some(t) if t != scheme_tls => Err(Error::Config(format!(
                    "MATRIX_HOST is {host:?} but USE_TLS says {}; make them agree (or drop the scheme from MATRIX_HOST)",
                    if t { "true" } else { "false" }
                ))),
                _ => Ok(host.to_owned()),
            }
        }
    }
}

/// The approval contract's default credential directory, from an environment lookup:
/// `$SWITCHBOARD_CREDENTIALS_DIR`, else `$XDG_DATA_HOME/switchboard/credentials`, else
/// `$HOME/.local/share/switchboard/credentials`.
pub(crate) fn default_credentials_dir(lookup: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    if let Some(d) = var("SWITCHBOARD_CREDENTIALS_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = var("XDG_DATA_HOME") {
        return Some(PathBuf::from(d).join("switchboard").join("credentials"));
    }
    var("HOME").map(|h| PathBuf::from(h).join(".local/share/switchboard/credentials"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn config_err(r: Result<ConnectorConfig>) -> String {
        match r {
            Err(Error::Config(msg)) => msg,
            other => panic!("expected Error::Config, got {other:?}"),
        }
    }

    #[test]
    fn heartbeat_with_methods_change_one_value_each() {
        let hb = HeartbeatSettings::default()
            .with_phoenix_interval(Duration::from_millis(100))
            .with_app_interval(Duration::from_millis(50))
            .with_inbound_idle_timeout(Duration::from_secs(30));
        assert_eq!(hb.phoenix_interval, Duration::from_millis(100));
        assert_eq!(hb.app_interval, Duration::from_millis(50));
        assert_eq!(hb.inbound_idle_timeout, Duration::from_secs(30));
        assert!(hb.validate().is_ok());
    }

    #[test]
    fn debug_redacts_the_auth_token() {
        let c = ConnectorConfig::builder("ws://h", "t")
            .auth_token("s3cret-jwt")
            .build()
            .unwrap();
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("s3cret-jwt") && dbg.contains("<redacted>"),
            "{dbg}"
        );
        let b = ConnectorConfig::builder("ws://h", "t").auth_token("s3cret-jwt");
        assert!(!format!("{b:?}").contains("s3cret-jwt"));
    }

    #[test]
    fn from_lookup_reads_every_variable() {
        let c = ConnectorConfig::from_lookup(lookup(&[
            ("SWITCHBOARD_GATEWAY_URL", "wss://gw.example.com"),
            ("SWITCHBOARD_TENANT_ID", "acme"),
            ("SWITCHBOARD_INSTANCE_ID", "pod-7"),
            ("SWITCHBOARD_DISPLAY_NAME", "Pod seven"),
            ("SWITCHBOARD_TAGS", "blue, green,,"),
            ("SWITCHBOARD_AUTH_TOKEN", "jwt"),
            ("SWITCHBOARD_MAX_CONCURRENT_REQUESTS", "8"),
            ("SWITCHBOARD_CREDENTIALS_DIR", "/var/lib/sb/creds"),
        ]))
        .unwrap();
        assert_eq!(
            c.credentials_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/sb/creds"))
        );
        assert_eq!(c.gateway_url, "wss://gw.example.com");
        assert_eq!(c.tenant_id, "acme");
        assert_eq!(c.instance_id, "pod-7");
        assert_eq!(c.display_name, "Pod seven");
        assert_eq!(c.tags, ["blue", "green"]);
        assert_eq!(c.auth_token.as_deref(), Some("jwt"));
        assert_eq!(c.max_concurrent_requests, 8);
        assert!(c.reconnect_enabled, "reconnects are on by default");
    }

    #[test]
    fn reconnect_enabled_reads_a_flag_and_names_a_bad_one() {
        let base = [
            ("SWITCHBOARD_GATEWAY_URL", "ws://h"),
            ("SWITCHBOARD_TENANT_ID", "t"),
        ];
        let off = [&base[..], &[("SWITCHBOARD_RECONNECT_ENABLED", "False")]].concat();
        assert!(
            !ConnectorConfig::from_lookup(lookup(&off))
                .unwrap()
                .reconnect_enabled
        );
        let bad = [&base[..], &[("SWITCHBOARD_RECONNECT_ENABLED", "sometimes")]].concat();
        let msg = config_err(ConnectorConfig::from_lookup(lookup(&bad)));
        assert!(
            msg.contains("SWITCHBOARD_RECONNECT_ENABLED") && msg.contains("true or false"),
            "{msg}"
        );
    }

    #[test]
    fn from_lookup_reads_the_proxy_and_ca_bundle() {
        let base = [
            ("SWITCHBOARD_GATEWAY_URL", "wss://gw.example.com"),
            ("SWITCHBOARD_TENANT_ID", "acme"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars = base.to_vec();
            vars.extend_from_slice(extra);
            ConnectorConfig::from_lookup(lookup(&vars))
        };
        let c = with(&[
            ("SWITCHBOARD_PROXY", "http://u:p@proxy:3128"),
            ("SWITCHBOARD_CA_BUNDLE", "/etc/ssl/corp.pem"),
        ])
        .unwrap();
        assert_eq!(c.proxy, ProxySetting::Url("http://u:p@proxy:3128".into()));
        assert_eq!(c.ca_bundle, Some(PathBuf::from("/etc/ssl/corp.pem")));
        let c = with(&[("SWITCHBOARD_PROXY", "None")]).unwrap();
        assert_eq!(c.proxy, ProxySetting::Disabled);
        let c = with(&[]).unwrap();
        assert_eq!(
            (c.proxy, c.ca_bundle),
            (ProxySetting::FromEnvironment, None)
        );
        let msg = config_err(with(&[("SWITCHBOARD_PROXY", "socks5://proxy:1080")]));
        assert!(msg.contains("SWITCHBOARD_PROXY"), "{msg}");
    }

    #[test]
    fn debug_redacts_the_proxy_password() {
        let b = ConnectorConfig::builder("ws://h", "t")
            .proxy(ProxySetting::Url("http://alice:hunter2@proxy:3128".into()));
        assert!(!format!("{b:?}").contains("hunter2"));
        let c = b.build().unwrap();
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("hunter2") && dbg.contains("alice:<redacted>@proxy:3128"),
            "{dbg}"
        );
    }

    #[test]
    fn from_lookup_requires_url_and_tenant() {
        let msg = config_err(ConnectorConfig::from_lookup(lookup(&[(
            "SWITCHBOARD_TENANT_ID",
            "t",
        )])));
        assert!(
            msg.contains("SWITCHBOARD_GATEWAY_URL") && msg.contains("MATRIX_HOST"),
            "{msg}"
        );
        let msg = config_err(ConnectorConfig::from_lookup(lookup(&[
            ("SWITCHBOARD_GATEWAY_URL", "ws://h"),
            ("SWITCHBOARD_TENANT_ID", ""),
        ])));
        assert!(msg.contains("SWITCHBOARD_TENANT_ID"), "{msg}");
    }

    #[test]
    fn from_lookup_falls_back_to_the_family_names() {
        let c = ConnectorConfig::from_lookup(lookup(&[
            ("MATRIX_HOST", "gw.internal:7000"),
            ("TENANT_ID", "acme"),
            ("INSTANCE_ID", "pod-3"),
            ("AUTH_TOKEN", "tok"),
            ("CONNECTOR_DISPLAY_NAME", "Pod three"),
            ("CONNECTOR_TAGS", "a, b"),
        ]))
        .unwrap();
        assert_eq!(c.gateway_url, "grpc://gw.internal:7000");
        assert_eq!(c.tenant_id, "acme");
        assert_eq!(c.instance_id, "pod-3");
        assert_eq!(c.auth_token.as_deref(), Some("tok"));
        assert_eq!(c.display_name, "Pod three");
        assert_eq!(c.tags, ["a", "b"]);

        // Ours win over theirs, setting by setting.
        let c = ConnectorConfig::from_lookup(lookup(&[
            ("SWITCHBOARD_GATEWAY_URL", "wss://ours.example.com"),
            ("MATRIX_HOST", "theirs:1"),
            ("SWITCHBOARD_TENANT_ID", "ours"),
            ("TENANT_ID", "theirs"),
            ("INSTANCE_ID", "theirs-only"),
        ]))
        .unwrap();
        assert_eq!(c.gateway_url, "wss://ours.example.com");
        assert_eq!(c.tenant_id, "ours");
        assert_eq!(c.instance_id, "theirs-only");
    }

    #[test]
    fn matrix_host_takes_its_scheme_from_use_tls() {
        let url = |host, tls| matrix_host_url(host, tls).map_err(|e| e.to_string());
        assert_eq!(url("gw:443", Some("true")).unwrap(), "grpcs://gw:443");
        assert_eq!(url("gw:443", Some("YES")).unwrap(), "grpcs://gw:443");
        assert_eq!(url("gw", Some("0")).unwrap(), "grpc://gw");
        assert_eq!(url("gw", None).unwrap(), "grpc://gw");
        assert_eq!(url("wss://gw", Some("on")).unwrap(), "wss://gw");
        assert_eq!(url("ws://gw", None).unwrap(), "ws://gw");
        let msg = url("ws://gw", Some("true")).unwrap_err();
        assert!(
            msg.contains("MATRIX_HOST") && msg.contains("USE_TLS"),
            "{msg}"
        );
        let msg = url("gw", Some("maybe")).unwrap_err();
        assert!(msg.contains("USE_TLS") && msg.contains("maybe"), "{msg}");
        // The fallback's result must be an address the builder accepts.
        let c = ConnectorConfig::from_lookup(lookup(&[
            ("MATRIX_HOST", "gw.internal"),
            ("USE_TLS", "true"),
            ("TENANT_ID", "t"),
        ]))
        .unwrap();
        let a = c.address().unwrap();
        assert!(a.tls);
        assert_eq!(a.port, 443);
    }

    #[test]
    fn from_lookup_refuses_a_non_numeric_concurrency_limit() {
        let msg = config_err(ConnectorConfig::from_lookup(lookup(&[
            ("SWITCHBOARD_GATEWAY_URL", "ws://h"),
            ("SWITCHBOARD_TENANT_ID", "t"),
            ("SWITCHBOARD_MAX_CONCURRENT_REQUESTS", "lots"),
        ])));
        assert!(msg.contains("SWITCHBOARD_MAX_CONCURRENT_REQUESTS"), "{msg}");
    }

    #[test]
    fn the_default_credentials_dir_follows_the_contract_order() {
        let all = [
            ("SWITCHBOARD_CREDENTIALS_DIR", "/c"),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(default_credentials_dir(lookup(&all)), Some("/c".into()));
        assert_eq!(
            default_credentials_dir(lookup(&all[1..])),
            Some("/x/switchboard/credentials".into())
        );
        assert_eq!(
            default_credentials_dir(lookup(&all[2..])),
            Some("/h/.local/share/switchboard/credentials".into())
        );
        assert_eq!(default_credentials_dir(lookup(&[("HOME", "")])), None);
    }

    #[test]
    fn an_explicit_credentials_dir_wins_over_the_default() {
        let c = ConnectorConfig::builder("ws://h", "t")
            .credentials_dir("/mine")
            .build()
            .unwrap();
        assert_eq!(c.effective_credentials_dir(), Some("/mine".into()));
    }

    #[test]
    fn address_and_key_derive_from_the_config() {
        let c = ConnectorConfig::builder("wss://gw", "ac.me")
            .instance_id("i:1")
            .build()
            .unwrap();
        assert_eq!(c.address().unwrap().port, 443);
        assert_eq!(c.key("echo").dot_key(), "ac-me.echo.i-1");
    }
}
