//! [`ProxySetting`]: how a connector reaches its gateway through an HTTP proxy.
//!
//! It lives with the transport, not with the connector's configuration that carries
//! it (`ConnectorConfig::proxy`), because the dialer is what acts on it: the transport
//! layer takes its settings as its own types and never reads a connector's config.
//! The rules for the environment variables (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`) are in the guide's "TLS and proxies" section (docs/guide/connector-authors.md) and in
//! `super::proxy`, which applies them.

use std::fmt;

use super::proxy::{redact_url, ProxyUrl};
use crate::error::{Error, Result};

/// Whether and how the connector dials its gateway through an HTTP CONNECT proxy.
///
/// `Debug` redacts a password in [`ProxySetting::Url`], so a config can be logged.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxySetting {
    /// The default: use `HTTPS_PROXY` (for `wss://` and `grpcs://` gateways) or
    /// `HTTP_PROXY` (for `ws://` and `grpc://`), then `ALL_PROXY`, either case with the
    /// lower-case name winning, unless `NO_PROXY` exempts the gateway's host. With none
    /// of them set the connector dials directly.
    #[default]
    FromEnvironment,
    /// Always dial directly, whatever the environment says.
    Disabled,
    /// Always dial through this proxy, `http://[user:password@]host[:port]` (port 80
    /// when omitted); `NO_PROXY` does not apply. Credentials are percent-decoded and
    /// sent as `Proxy-Authorization: Basic`.
    Url(String),
}

impl fmt::Debug for ProxySetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxySetting::FromEnvironment => f.write_str("FromEnvironment"),
            ProxySetting::Disabled => f.write_str("Disabled"),
            ProxySetting::Url(url) => f.debug_tuple("Url").field(&redact_url(url)).finish(),
        }
    }
}

impl ProxySetting {
    /// Reads the value of `SWITCHBOARD_PROXY`: `none` (any case) disables proxies,
    /// anything else is a proxy URL, checked at build time.
    pub(crate) fn from_variable(value: &str) -> ProxySetting {
        if value.trim().eq_ignore_ascii_case("none") {
            ProxySetting::Disabled
        } else {
            ProxySetting::Url(value.trim().to_owned())
        }
    }

    /// Checks a [`ProxySetting::Url`]; the others need no checking.
    pub(crate) fn validate(&self) -> Result<()> {
        if let ProxySetting::Url(url) = self {
            ProxyUrl::parse(url).map_err(|reason| {
                Error::Config(format!(
                    "proxy {:?} (the proxy option or SWITCHBOARD_PROXY): {reason}; give http://[user:password@]host[:port], or none to dial directly",
                    redact_url(url)
                ))
            })?;
        }
        Ok(())
    }
}
