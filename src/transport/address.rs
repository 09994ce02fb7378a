//! Gateway address parsing (PROTOCOL.md §3).
//!
//! A connector is configured with one string naming its gateway. This module turns that
//! string into a [`GatewayAddress`] once, at configuration time, so that a typo fails
//! `ConnectorConfig::build` with a clear message instead of a dial error minutes later,
//! and so that the WebSocket transport gets a normalised Phoenix URL.
//!
//! Accepted forms:
//!
//! | form | transport | TLS | default port |
//! |---|---|---|---|
//! | `grpc://host[:port]` | gRPC | no | 50061 |
//! | `grpcs://host[:port]` | gRPC | yes | 443 |
//! | `ws://` or `http://host[:port][/path]` | WebSocket | no | 80 |
//! | `wss://` or `https://host[:port][/path]` | WebSocket | yes | 443 |
//! | `host[:port]` (no scheme) | gRPC | no | 50061 |
//!
//! IPv6 literals go in brackets (`ws://[::1]:4000`); [`GatewayAddress::host`] holds them
//! without the brackets.

use std::fmt;

use crate::error::{Error, Result};

/// Default port of a plain gRPC gateway, used when a `grpc://` or bare address has none.
pub(crate) const DEFAULT_GRPC_PORT: u16 = 50061;

/// The Phoenix socket path of the connector endpoint, used when the address names none.
pub(crate) const PHOENIX_SOCKET_PATH: &str = "/socket/connector/websocket";

/// The Phoenix serializer version this crate speaks (v2 array frames).
const PHOENIX_VSN_QUERY: &str = "vsn=2.0.0";

/// Which wire transport an address selects; the runner dispatches on this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Phoenix Channels over WebSocket (`ws`, `wss`, `http`, `https`).
    WebSocket,
    /// One bidirectional gRPC stream per registration (`grpc`, `grpcs`, bare host:port).
    Grpc,
}

/// A parsed gateway address: the result of validating the configured string once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct GatewayAddress {
    /// The transport the scheme selects.
    pub transport: Transport,
    /// Whether the connection uses TLS (`grpcs`, `wss`, `https`).
    pub tls: bool,
    /// Host name or IP literal, IPv6 without brackets.
    pub host: String,
    /// Port, explicit or the scheme's default.
    pub port: u16,
    /// The path as given (may be empty); see [`GatewayAddress::websocket_url`] for how
    /// it is used.
    pub path: String,
}

impl GatewayAddress {
    /// Parses an address in one of the forms listed in the module docs.
    ///
    /// Refuses an empty string, an unknown scheme, a missing host, a port that is not a
    /// number in 1..=65535, an unbracketed IPv6 literal, credentials in the URL (they
    /// belong in `auth_token`) and a query string other than `vsn=2.0.0` (the SDK adds
    /// the query itself, and silently dropping someone's parameters would be worse).
    pub fn parse(s: &str) -> Result<Self> {
        let input = s.trim();
        let fail = |reason: String| Error::InvalidAddress {
            address: s.to_owned(),
            reason,
        };
        if input.is_empty() {
            return Err(fail(
                "the address is empty; set it to the gateway, e.g. wss://gateway.example.com or grpc://host:50061".into(),
            ));
        }
        let (transport, tls, default_port, rest) = match input.split_once("://") {
            Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
                "grpc" => (Transport::Grpc, false, DEFAULT_GRPC_PORT, rest),
                "grpcs" => (Transport::Grpc, true, 443, rest),
                "ws" | "http" => (Transport::WebSocket, false, 80, rest),
                "wss" | "https" => (Transport::WebSocket, true, 443, rest),
                other => {
                    return Err(fail(format!(
                        "unknown scheme {other:?}; use grpc, grpcs, ws, wss, http or https"
                    )))
                }
            },
            None => (Transport::Grpc, false, DEFAULT_GRPC_PORT, input),
        };

        let (before_fragment, fragment) = match rest.split_once('#') {
            Some((b, f)) => (b, Some(f)),
            None => (rest, None),
        };
        if fragment.is_some() {
            return Err(fail(
                "a URL fragment ('#...') has no meaning for a gateway address; remove it".into(),
            ));
        }
        let (before_query, query) = match before_fragment.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (before_fragment, None),
        };
        if let Some(q) = query {
            if !q.is_empty() && q != PHOENIX_VSN_QUERY {
                return Err(fail(format!(
                    "query string {q:?} is not supported; remove it (the SDK adds ?{PHOENIX_VSN_QUERY} itself)"
                )));
            }
        }
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        if authority.contains('@') {
            return Err(fail(
                "credentials in the address are not supported; pass the token as auth_token instead".into(),
            ));
        }
        let (host, port) = split_host_port(authority).map_err(fail)?;
        let port = match port {
            None => default_port,
            Some(p) => parse_port(p).map_err(fail)?,
        };
        Ok(GatewayAddress {
            transport,
            tls,
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    /// The Phoenix WebSocket URL to dial,
    /// `{ws|wss}://host:port/socket/connector/websocket?vsn=2.0.0`.
    ///
    /// A path that already ends in `/websocket` is kept (the gateway is mounted
    /// elsewhere); any other non-empty path is treated as a reverse-proxy prefix and the
    /// socket path is appended to it, so `wss://h/gw` dials `wss://h:443/gw/socket/...`.
    /// A gRPC address is an error: it has no Phoenix socket URL.
    pub fn websocket_url(&self) -> Result<String> {
        if self.transport == Transport::Grpc {
            return Err(Error::InvalidAddress {
                address: self.to_string(),
                reason: "a gRPC address has no WebSocket URL; the runner dials it over gRPC, or use a ws:// or wss:// address for the Phoenix socket".into(),
            });
        }
        let scheme = if self.tls { "wss" } else { "ws" };
        let trimmed = self.path.trim_end_matches('/');
        let path = if trimmed.ends_with("/websocket") {
            trimmed.to_owned()
        } else {
            format!("{trimmed}{PHOENIX_SOCKET_PATH}")
        };
        Ok(format!(
            "{scheme}://{}:{}{path}?{PHOENIX_VSN_QUERY}",
            self.host_for_url(),
            self.port
        ))
    }

    /// The host as it must appear in a URL: IPv6 literals regain their brackets.
    pub fn host_for_url(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

/// The canonical form with an explicit scheme and port, for logs and error messages.
impl fmt::Display for GatewayAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match (self.transport, self.tls) {
            (Transport::Grpc, false) => "grpc",
            (Transport::Grpc, true) => "grpcs",
            (Transport::WebSocket, false) => "ws",
            (Transport::WebSocket, true) => "wss",
        };
        write!(
            f,
            "{scheme}://{}:{}{}",
            self.host_for_url(),
            self.port,
            self.path
        )
    }
}

/// Splits `host[:port]` or `[v6][:port]`; the error is the reason only.
fn split_host_port(authority: &str) -> std::result::Result<(&str, Option<&str>), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "IPv6 literal is missing its closing ']'".to_owned())?;
        if host.is_empty() {
            return Err("the IPv6 literal between '[' and ']' is empty".into());
        }
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!(
                    "unexpected {after:?} after the IPv6 literal; expected ':port'"
                )),
            },
        };
    }
    let (host, port) = match authority.split_once(':') {
        Some((_, p)) if p.contains(':') => {
            return Err("IPv6 literals must be written in brackets, e.g. [::1]:4000".into())
        }
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if host.is_empty() {
        return Err("the host is missing; write e.g. gateway.example.com:4000".into());
    }
    Ok((host, port))
}

fn parse_port(p: &str) -> std::result::Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) => Err("port 0 cannot be dialled; use a port in 1..=65535".into()),
        Ok(port) => Ok(port),
        Err(_) if p.is_empty() => {
            Err("the port after ':' is empty; remove the ':' or give a port".into())
        }
        Err(_) => Err(format!("port {p:?} is not a number in 1..=65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> GatewayAddress {
        GatewayAddress::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn reason(s: &str) -> String {
        match GatewayAddress::parse(s) {
            Err(Error::InvalidAddress { address, reason }) => {
                assert_eq!(address, s);
                reason
            }
            other => panic!("{s}: expected InvalidAddress, got {other:?}"),
        }
    }

    #[test]
    fn grpc_defaults_to_port_50061_without_tls() {
        let a = parse("grpc://gw.example.com");
        assert_eq!(
            (a.transport, a.tls, a.port),
            (Transport::Grpc, false, 50061)
        );
        assert_eq!(a.host, "gw.example.com");
        assert_eq!(parse("grpc://gw:7000").port, 7000);
    }

    #[test]
    fn grpcs_defaults_to_443_with_tls() {
        let a = parse("grpcs://gw.example.com");
        assert_eq!((a.transport, a.tls, a.port), (Transport::Grpc, true, 443));
    }

    #[test]
    fn ws_and_http_are_plain_websocket_on_80() {
        for s in ["ws://gw", "http://gw", "WS://gw"] {
            let a = parse(s);
            assert_eq!(
                (a.transport, a.tls, a.port),
                (Transport::WebSocket, false, 80),
                "{s}"
            );
        }
    }

    #[test]
    fn wss_and_https_are_tls_websocket_on_443() {
        for s in ["wss://gw", "https://gw"] {
            let a = parse(s);
            assert_eq!(
                (a.transport, a.tls, a.port),
                (Transport::WebSocket, true, 443),
                "{s}"
            );
        }
    }

    #[test]
    fn bare_host_port_means_grpc() {
        let a = parse("10.0.0.5:9000");
        assert_eq!((a.transport, a.tls, a.port), (Transport::Grpc, false, 9000));
        assert_eq!(a.host, "10.0.0.5");
        assert_eq!(parse("gateway").port, DEFAULT_GRPC_PORT);
    }

    #[test]
    fn ipv6_literals_in_brackets_keep_host_without_brackets() {
        let a = parse("ws://[::1]:4000");
        assert_eq!((a.host.as_str(), a.port), ("::1", 4000));
        assert_eq!(
            a.websocket_url().unwrap(),
            "ws://[::1]:4000/socket/connector/websocket?vsn=2.0.0"
        );
        assert_eq!(parse("[fe80::2]").port, DEFAULT_GRPC_PORT);
        assert_eq!(parse("grpcs://[2001:db8::1]").host, "2001:db8::1");
    }

    #[test]
    fn empty_address_is_refused() {
        assert!(reason("").contains("empty"));
        assert!(reason("   ").contains("empty"));
    }

    #[test]
    fn unknown_scheme_is_refused_with_the_allowed_list() {
        let r = reason("ftp://gw");
        assert!(r.contains("\"ftp\"") && r.contains("wss"), "{r}");
    }

    #[test]
    fn bad_ports_are_refused() {
        assert!(reason("ws://gw:http").contains("not a number"));
        assert!(reason("ws://gw:70000").contains("not a number"));
        assert!(reason("ws://gw:0").contains("port 0"));
        assert!(reason("ws://gw:").contains("empty"));
    }

    #[test]
    fn malformed_hosts_are_refused() {
        assert!(reason("ws://:4000").contains("host is missing"));
        assert!(reason("ws://::1:4000").contains("brackets"));
        assert!(reason("ws://[::1:4000").contains("closing"));
        assert!(reason("ws://[]:4000").contains("empty"));
        assert!(reason("ws://[::1]x").contains("expected ':port'"));
        assert!(reason("wss://user:pw@gw").contains("auth_token"));
    }

    #[test]
    fn foreign_query_strings_and_fragments_are_refused() {
        assert!(reason("ws://gw/?token=x").contains("not supported"));
        assert!(reason("ws://gw/#x").contains("fragment"));
        assert_eq!(
            parse("ws://gw:4000/socket/connector/websocket?vsn=2.0.0")
                .websocket_url()
                .unwrap(),
            "ws://gw:4000/socket/connector/websocket?vsn=2.0.0"
        );
    }

    #[test]
    fn websocket_url_adds_the_phoenix_path_and_explicit_port() {
        assert_eq!(
            parse("wss://gw.example.com").websocket_url().unwrap(),
            "wss://gw.example.com:443/socket/connector/websocket?vsn=2.0.0"
        );
        assert_eq!(
            parse("http://127.0.0.1:4000/").websocket_url().unwrap(),
            "ws://127.0.0.1:4000/socket/connector/websocket?vsn=2.0.0"
        );
    }

    #[test]
    fn websocket_url_keeps_a_path_ending_in_websocket() {
        assert_eq!(
            parse("ws://gw:4000/custom/websocket/")
                .websocket_url()
                .unwrap(),
            "ws://gw:4000/custom/websocket?vsn=2.0.0"
        );
    }

    #[test]
    fn websocket_url_treats_other_paths_as_a_prefix() {
        assert_eq!(
            parse("https://gw/matrix").websocket_url().unwrap(),
            "wss://gw:443/matrix/socket/connector/websocket?vsn=2.0.0"
        );
    }

    #[test]
    fn websocket_url_for_grpc_says_it_is_a_grpc_address() {
        match parse("grpc://gw").websocket_url() {
            Err(Error::InvalidAddress { address, reason }) => {
                assert_eq!(address, "grpc://gw:50061");
                assert!(
                    reason.contains("gRPC address") && reason.contains("ws://"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn display_is_canonical() {
        assert_eq!(parse("https://gw/x").to_string(), "wss://gw:443/x");
        assert_eq!(parse("[::1]:5").to_string(), "grpc://[::1]:5");
    }
}
