//! HTTP CONNECT proxy decisions, without I/O: which proxy applies to a target (the
//! `*_PROXY` / `NO_PROXY` environment rules), what a proxy URL means, and whether a
//! proxy's answer to `CONNECT` opened a tunnel.
//!
//! The dialer (`super::dial`) moves the bytes; everything it decides lives here as
//! plain functions so that the rules are tested without sockets or a process
//! environment (every environment read goes through a lookup function).
//!
//! The rules, which the README repeats for operators:
//!
//! - **Which variable.** A TLS target (`wss://`, `grpcs://`) uses `HTTPS_PROXY`, then
//!   `ALL_PROXY`; a plain target (`ws://`, `grpc://`) uses `HTTP_PROXY`, then
//!   `ALL_PROXY`. Each name is read in lower case first and upper case second, so the
//!   lower-case one wins when both are set (as curl does). Empty values count as unset.
//! - **Proxy URLs** are `http://[user[:password]@]host[:port][/]`; a missing scheme
//!   means `http://`. The default port is 80, the `http` scheme's own (curl uses 1080;
//!   write the port when your proxy listens elsewhere). Credentials are
//!   percent-decoded and sent as `Proxy-Authorization: Basic`. `https://` and `socks*`
//!   proxies are refused with a clear error rather than misused.
//! - **`NO_PROXY`** (either case, lower case wins) is a comma-separated list. `*`
//!   exempts every host. Other entries are a host name, matched exactly or as a domain
//!   suffix (`example.com` and `.example.com` both exempt `example.com` and
//!   `a.example.com`), or an IP literal (`10.1.2.3`, `::1` or `[::1]`, matched exactly),
//!   each with an optional `:port` that restricts the entry to that port. CIDR ranges
//!   are not understood. `localhost` and `127.0.0.1` are **not** exempt unless listed:
//!   a test harness that tunnels loopback traffic on purpose keeps working, and the
//!   list means exactly what it says.
//! - An explicit proxy (the `proxy` option or `SWITCHBOARD_PROXY`) applies to every
//!   target and ignores `NO_PROXY`: it is a decision about this connector, not an
//!   ambient default.
// Without the `websocket` feature there is no dialer; config validation still parses
// proxy URLs, and the rest waits for a transport to use it.
#![cfg_attr(not(feature = "websocket"), allow(dead_code))]

use std::fmt;
use std::net::IpAddr;

use base64::Engine as _;

use crate::error::{Error, Result};

/// Most bytes of a proxy's `CONNECT` response head that the dialer reads. A proxy's
/// answer is a status line and a few headers (well under 1 KiB); 8 KiB matches common
/// HTTP servers' header limits and stops a broken or hostile proxy from making the
/// connector buffer without bound.
pub(crate) const MAX_CONNECT_RESPONSE: usize = 8 * 1024;

/// Longest part of a proxy's status line quoted in an error message.
const MAX_QUOTED_STATUS: usize = 200;

/// A parsed `http://` proxy URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ProxyUrl {
    /// Host name or IP literal (IPv6 without brackets).
    pub(crate) host: String,
    /// Port, explicit or 80.
    pub(crate) port: u16,
    /// The user name, percent-decoded, when the URL carried credentials.
    user: Option<String>,
    /// The password, percent-decoded (may be empty).
    password: Option<String>,
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl fmt::Display for ProxyUrl {
    /// `http://host:port`, credentials left out: safe for logs and error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", authority(&self.host, self.port))
    }
}

impl ProxyUrl {
    /// Parses `http://[user[:password]@]host[:port][/]`. The error is the reason, for
    /// the caller to wrap with the name of the setting it came from.
    pub(crate) fn parse(input: &str) -> std::result::Result<ProxyUrl, String> {
        let s = input.trim();
        if s.is_empty() {
            return Err("the proxy URL is empty".into());
        }
        let rest = match s.split_once("://") {
            Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
                "http" => rest,
                "https" => {
                    return Err(
                        "https:// proxies (TLS to the proxy itself) are not supported; use the proxy's http:// address"
                            .into(),
                    )
                }
                other => {
                    return Err(format!(
                        "proxy scheme {other:?} is not supported; only http:// (HTTP CONNECT) proxies are"
                    ))
                }
            },
            None => s,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err("a proxy URL has no path, query or fragment; give http://[user:password@]host[:port]".into());
        }
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (name, pass) = match u.split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (u, None),
                };
                if name.is_empty() {
                    return Err("the proxy URL has an '@' but no user name before it".into());
                }
                (
                    Some(percent_decode(name)?),
                    pass.map(percent_decode).transpose()?,
                )
            }
        };
        let (host, port) = split_host_port(hostport)?;
        let port = port.unwrap_or(80);
        if host.is_empty() {
            return Err("the proxy URL names no host".into());
        }
        if host.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err("the proxy host contains whitespace".into());
        }
        Ok(ProxyUrl {
            host,
            port,
            user,
            password,
        })
    }

    /// The `Proxy-Authorization` value (`Basic base64(user:password)`) when the URL
    /// carried credentials.
    pub(crate) fn authorization(&self) -> Option<String> {
        let user = self.user.as_ref()?;
        let pair = format!("{user}:{}", self.password.as_deref().unwrap_or(""));
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        ))
    }
}

/// `host:port`, with brackets around an IPv6 literal.
pub(crate) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`; IPv6 comes back without brackets.
fn split_host_port(s: &str) -> std::result::Result<(String, Option<u16>), String> {
    let parse_port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("port {p:?} is not a number in 1..=65535"))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 literal is missing its closing ']'")?;
        return match after {
            "" => Ok((host.to_owned(), None)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((host.to_owned(), Some(parse_port(p)?))),
                None => Err(format!("unexpected {after:?} after the IPv6 literal")),
            },
        };
    }
    match s.split_once(':') {
        Some((_, p)) if p.contains(':') => {
            Err("put an IPv6 proxy address in brackets, e.g. http://[::1]:3128".into())
        }
        Some((h, p)) => Ok((h.to_owned(), Some(parse_port(p)?))),
        None => Ok((s.to_owned(), None)),
    }
}

/// Decodes `%XX` escapes (user names and passwords with `@`, `:` or `%` in them).
fn percent_decode(s: &str) -> std::result::Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(
                    "the proxy credentials contain a '%' that is not followed by two hex digits",
                )?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the proxy credentials do not decode to UTF-8".into())
}

/// Replaces the password in a proxy URL with `<redacted>`, for `Debug` output and
/// errors; works on strings that do not parse, too. The credentials end at the LAST
/// `@` of the string, not at the first `/` after the scheme: a password may hold `/`,
/// `?` or `#`, and a mistyped scheme (`http;//user:pass@host`) must not show it either.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let redacted = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:<redacted>@{host}"),
            None => rest.to_owned(),
        },
        None => rest.to_owned(),
    };
    match scheme {
        Some(s) => format!("{s}://{redacted}"),
        None => redacted,
    }
}

/// A proxy taken from the environment, with the variable it came from (errors name it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EnvProxy {
    pub(crate) url: ProxyUrl,
    pub(crate) source: &'static str,
}

/// Reads `name` in lower case, then upper case; empty values count as unset.
fn either_case(
    lookup: &impl Fn(&str) -> Option<String>,
    lower: &'static str,
    upper: &'static str,
) -> Option<(&'static str, String)> {
    [lower, upper].into_iter().find_map(|n| {
        lookup(n)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .map(|v| (n, v))
    })
}

/// The environment's proxy for a TLS (`tls = true`) or plain target, per the rules in
/// the module docs; a set but malformed variable is an [`Error::Config`] naming it.
pub(crate) fn proxy_from_env(
    lookup: &impl Fn(&str) -> Option<String>,
    tls: bool,
) -> Result<Option<EnvProxy>> {
    let first = if tls {
        either_case(lookup, "https_proxy", "HTTPS_PROXY")
    } else {
        either_case(lookup, "http_proxy", "HTTP_PROXY")
    };
    let Some((source, value)) = first.or_else(|| either_case(lookup, "all_proxy", "ALL_PROXY"))
    else {
        return Ok(None);
    };
    let url = ProxyUrl::parse(&value).map_err(|reason| {
        Error::Config(format!(
            "{source} is {:?}: {reason}; fix it, or unset it to connect directly",
            redact_url(&value)
        ))
    })?;
    Ok(Some(EnvProxy { url, source }))
}

/// One `NO_PROXY` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum NoProxyEntry {
    /// A host name, lower case, without a leading or trailing dot.
    Domain { name: String, port: Option<u16> },
    /// An IP literal, matched exactly.
    Ip { ip: IpAddr, port: Option<u16> },
}

/// The parsed `NO_PROXY` list: which targets bypass an environment proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NoProxy {
    /// `*`: no target uses the environment's proxy.
    all: bool,
    entries: Vec<NoProxyEntry>,
}

impl NoProxy {
    /// Reads `no_proxy`, then `NO_PROXY`.
    pub(crate) fn from_env(lookup: &impl Fn(&str) -> Option<String>) -> NoProxy {
        either_case(lookup, "no_proxy", "NO_PROXY")
            .map(|(_, v)| NoProxy::parse(&v))
            .unwrap_or_default()
    }

    /// Parses a comma-separated list; entries that mean nothing (empty, a bad port)
    /// are skipped, as curl skips them, rather than failing the connector.
    pub(crate) fn parse(list: &str) -> NoProxy {
        let mut out = NoProxy::default();
        for raw in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if raw == "*" {
                out.all = true;
                continue;
            }
            // A bare IPv6 literal has several colons and no port.
            if let Ok(ip) = raw.parse::<IpAddr>() {
                out.entries.push(NoProxyEntry::Ip { ip, port: None });
                continue;
            }
            let Ok((host, port)) = split_host_port(raw) else {
                continue;
            };
            if let Ok(ip) = host.parse::<IpAddr>() {
                out.entries.push(NoProxyEntry::Ip { ip, port });
                continue;
            }
            let name = host.trim_start_matches('.').trim_end_matches('.');
            if name.is_empty() {
                continue;
            }
            out.entries.push(NoProxyEntry::Domain {
                name: name.to_ascii_lowercase(),
                port,
            });
        }
        out
    }

    /// Whether `host:port` bypasses the proxy. `host` is a name or an IP literal
    /// (IPv6 with or without brackets).
    pub(crate) fn matches(&self, host: &str, port: u16) -> bool {
        if self.all {
            return true;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip = host.parse::<IpAddr>().ok();
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let port_ok = |p: &Option<u16>| p.is_none_or(|p| p == port);
        self.entries.iter().any(|e| match e {
            NoProxyEntry::Ip { ip: want, port: p } => ip == Some(*want) && port_ok(p),
            NoProxyEntry::Domain {
                name: want,
                port: p,
            } => {
                ip.is_none()
                    && port_ok(p)
                    && (name == *want
                        || (name.len() > want.len()
                            && name.ends_with(want.as_str())
                            && name.as_bytes()[name.len() - want.len() - 1] == b'.'))
            }
        })
    }
}

/// The `CONNECT` request for `host:port`, with `Proxy-Authorization` when given.
pub(crate) fn connect_request(host: &str, port: u16, authorization: Option<&str>) -> String {
    let target = authority(host, port);
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = authorization {
        req.push_str("Proxy-Authorization: ");
        req.push_str(auth);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req
}

/// What the bytes read so far say about the proxy's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnectReply {
    /// The head is not complete yet: read more (the parser has already checked the
    /// [`MAX_CONNECT_RESPONSE`] bound).
    Incomplete,
    /// A 2xx answer: the tunnel is open after the first `head_len` bytes, and any
    /// bytes beyond them belong to the tunnel.
    Established {
        /// Length of the response head, including the blank line that ends it.
        head_len: usize,
    },
}

/// Reads a proxy's answer to `CONNECT` from the bytes received so far. Any 2xx opens
/// the tunnel; anything else is an error whose text quotes the status line and, for
/// 407, says what to do about credentials (`sent_credentials` tells which advice
/// applies). A head longer than [`MAX_CONNECT_RESPONSE`] is refused.
pub(crate) fn parse_connect_reply(
    buf: &[u8],
    sent_credentials: bool,
) -> std::result::Result<ConnectReply, String> {
    let window = &buf[..buf.len().min(MAX_CONNECT_RESPONSE)];
    let Some(end) = window.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() >= MAX_CONNECT_RESPONSE {
            return Err(format!(
                "the proxy's response headers exceed {MAX_CONNECT_RESPONSE} bytes; it is not a working HTTP CONNECT proxy"
            ));
        }
        return Ok(ConnectReply::Incomplete);
    };
    let head_len = end + 4;
    let status_line = window[..end]
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    let status_line = String::from_utf8_lossy(status_line);
    let status_line = status_line.trim_end_matches('\r');
    let quoted: String = status_line
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_QUOTED_STATUS)
        .collect();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    let Some(code) = code.filter(|_| version.starts_with("HTTP/1.")) else {
        return Err(format!(
            "the proxy did not answer CONNECT with an HTTP status line (got {quoted:?}); check that the proxy URL points at an HTTP proxy"
        ));
    };
    match code {
        200..=299 => Ok(ConnectReply::Established { head_len }),
        407 if sent_credentials => Err(format!(
            "the proxy refused the credentials in its URL ({quoted}); check the user name and password in http://user:password@host:port"
        )),
        407 => Err(format!(
            "the proxy requires credentials ({quoted}); put them in the proxy URL as http://user:password@host:port"
        )),
        _ => Err(format!("the proxy refused the tunnel: {quoted}")),
    }
}

#[cfg(test)]
mod tests;
