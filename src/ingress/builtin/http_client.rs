//! What the HTTP-reading built-ins (`http_poll`, `sse`) share: the source's URL
//! checked, its headers read from the environment variables the options name, and
//! one `reqwest` client per source that follows redirects only within the
//! configured origin.
//!
//! These URLs are the operator's (written in `switchboard.toml`), not a user's, so the
//! `[outbound]` egress policy of the `http` handler does not apply to them: a poll of
//! an internal API on a private address is the point. What is guarded instead is where
//! the source's headers go, since they usually carry credentials: a redirect, or a
//! `Link` to a next page, to another origin is not followed.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::redirect::Policy;
use reqwest::Url;

use crate::error::{Error, Result};
use crate::inbound::SourceContext;

/// Connect timeout of every source's client.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 10;

/// Checks option `url`: absolute, `http` or `https`.
pub(crate) fn parse_url(ctx: &SourceContext, url: &str) -> Result<Url> {
    let parsed = Url::parse(url).map_err(|e| ctx.invalid(&format!("url {url:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ctx.invalid(&format!("url {url:?}: an http or https URL is needed")));
    }
    Ok(parsed)
}

/// Option `headers` (header name → name of the environment variable holding its
/// value), read through `env` now. Errors name the header and the variable, never
/// the value; the values are marked sensitive, so no debug output shows them.
pub(crate) fn headers_from_env(
    ctx: &SourceContext,
    headers: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (name, var) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ctx.invalid(&format!("headers: {name:?} is not a header name")))?;
        let value = env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
            ctx.invalid(&format!(
                "headers: {name} names the environment variable {var}, which is unset or empty"
            ))
        })?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            ctx.invalid(&format!(
                "headers: the value of {var} (for {name}) is not a valid header value"
            ))
        })?;
        value.set_sensitive(true);
        map.insert(header, value);
    }
    Ok(map)
}

/// Whether `a` and `b` have the same scheme, host and port.
pub(crate) fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// A client for one source: `headers` on every request, redirects followed (at most
/// 10) only within the origin of the request that was redirected, `timeout` over a
/// whole exchange when given (a poll), none for a stream.
pub(crate) fn client(headers: HeaderMap, timeout: Option<Duration>) -> Result<reqwest::Client> {
    let policy = Policy::custom(|attempt| {
        let first = attempt.previous().first().cloned();
        match first {
            _ if attempt.previous().len() > MAX_REDIRECTS => attempt.error("too many redirects"),
            Some(first) if !same_origin(&first, attempt.url()) => attempt.stop(),
            _ => attempt.follow(),
        }
    });
    let mut builder = reqwest::Client::builder()
        .default_headers(headers)
        .redirect(policy)
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")));
    if let Some(t) = timeout {
        builder = builder.timeout(t);
    }
    builder
        .build()
        .map_err(|e| Error::Config(format!("the source's HTTP client: {e}")))
}

/// The process environment, as the headers read it.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A failed request as the source's error: what was asked and why, without the
/// query (which may carry a cursor token) beyond the path.
pub(crate) fn request_error(url: &Url, e: &reqwest::Error) -> Error {
    let what = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "failed".to_owned()
    };
    Error::Connector(format!(
        "GET {}: {what}: {}",
        shown(url),
        std::error::Error::source(e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| e.to_string())
    ))
}

/// A URL as logs and errors show it: scheme, host, port and path (no credentials,
/// query or fragment).
pub(crate) fn shown(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}
