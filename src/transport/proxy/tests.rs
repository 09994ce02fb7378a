//! The proxy rules, from lookup functions and byte strings: no sockets, no process
//! environment.

use std::collections::HashMap;

use super::*;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn chosen(vars: &[(&str, &str)], tls: bool) -> Option<(String, &'static str)> {
    proxy_from_env(&env(vars), tls)
        .expect("valid proxy variables")
        .map(|p| (p.url.to_string(), p.source))
}

#[test]
fn tls_targets_use_https_proxy_and_plain_targets_use_http_proxy() {
    let vars = [
        ("HTTPS_PROXY", "http://secure:3128"),
        ("HTTP_PROXY", "http://plain:3128"),
    ];
    assert_eq!(
        chosen(&vars, true),
        Some(("http://secure:3128".into(), "HTTPS_PROXY"))
    );
    assert_eq!(
        chosen(&vars, false),
        Some(("http://plain:3128".into(), "HTTP_PROXY"))
    );
}

#[test]
fn all_proxy_is_the_fallback_for_both_kinds() {
    let vars = [("ALL_PROXY", "http://any:8080")];
    assert_eq!(chosen(&vars, true).unwrap().1, "ALL_PROXY");
    assert_eq!(chosen(&vars, false).unwrap().1, "ALL_PROXY");
    let vars = [
        ("ALL_PROXY", "http://any:8080"),
        ("https_proxy", "http://s:1"),
    ];
    assert_eq!(chosen(&vars, true).unwrap().1, "https_proxy");
    assert_eq!(chosen(&vars, false).unwrap().1, "ALL_PROXY");
}

#[test]
fn lower_case_variable_wins_over_upper_case() {
    let vars = [
        ("HTTPS_PROXY", "http://upper:1"),
        ("https_proxy", "http://lower:2"),
    ];
    assert_eq!(
        chosen(&vars, true),
        Some(("http://lower:2".into(), "https_proxy"))
    );
}

#[test]
fn empty_proxy_variables_count_as_unset() {
    assert_eq!(
        chosen(&[("https_proxy", "  "), ("HTTPS_PROXY", "")], true),
        None
    );
    assert_eq!(
        chosen(&[("https_proxy", ""), ("HTTPS_PROXY", "http://u:9")], true)
            .unwrap()
            .1,
        "HTTPS_PROXY"
    );
    assert_eq!(chosen(&[], true), None);
}

#[test]
fn malformed_proxy_variable_is_a_config_error_naming_it_without_the_password() {
    let err = proxy_from_env(&env(&[("HTTPS_PROXY", "socks5://u:hunter2@h:1")]), true).unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.code(), "config");
    assert!(
        msg.contains("HTTPS_PROXY") && msg.contains("socks5"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "{msg}");
}

#[test]
fn proxy_url_with_percent_encoded_credentials_builds_basic_auth() {
    let p = ProxyUrl::parse("http://us%40er:p%3Ass@proxy.example.com:3128/").unwrap();
    assert_eq!((p.host.as_str(), p.port), ("proxy.example.com", 3128));
    let expected = base64::engine::general_purpose::STANDARD.encode("us@er:p:ss");
    assert_eq!(p.authorization(), Some(format!("Basic {expected}")));
    assert!(!format!("{p:?}").contains("p:ss"));
    assert_eq!(p.to_string(), "http://proxy.example.com:3128");
}

#[test]
fn proxy_url_defaults_to_http_and_port_80() {
    let p = ProxyUrl::parse("proxy.internal").unwrap();
    assert_eq!((p.host.as_str(), p.port), ("proxy.internal", 80));
    assert_eq!(p.authorization(), None);
    let p = ProxyUrl::parse("http://[::1]:3128").unwrap();
    assert_eq!((p.host.as_str(), p.port), ("::1", 3128));
    assert_eq!(p.to_string(), "http://[::1]:3128");
}

#[test]
fn proxy_url_user_without_password_sends_an_empty_password() {
    let p = ProxyUrl::parse("http://alice@h:1").unwrap();
    let expected = base64::engine::general_purpose::STANDARD.encode("alice:");
    assert_eq!(p.authorization(), Some(format!("Basic {expected}")));
}

#[test]
fn proxy_url_refuses_what_it_cannot_honour() {
    for bad in [
        "",
        "https://h:1",
        "socks5://h:1",
        "http://h:0",
        "http://h:99999",
        "http://h:1/path",
        "http://:1",
        "http://@h:1",
        "http://u:%zz@h:1",
        "http://::1:3128",
    ] {
        assert!(ProxyUrl::parse(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn redact_url_hides_only_the_password() {
    assert_eq!(
        redact_url("http://user:secret@h:1"),
        "http://user:<redacted>@h:1"
    );
    assert_eq!(redact_url("http://h:1"), "http://h:1");
    assert_eq!(redact_url("user:secret@h:1/x"), "user:<redacted>@h:1/x");
}

#[test]
fn no_proxy_matches_host_exactly_or_as_domain_suffix() {
    for list in ["example.com", ".example.com"] {
        let np = NoProxy::parse(list);
        assert!(np.matches("example.com", 443), "{list}");
        assert!(np.matches("a.example.com", 443), "{list}");
        assert!(np.matches("A.B.Example.COM", 80), "{list}");
        assert!(!np.matches("badexample.com", 443), "{list}");
        assert!(!np.matches("example.com.evil", 443), "{list}");
    }
}

#[test]
fn no_proxy_star_exempts_everything() {
    let np = NoProxy::parse(" * ");
    assert!(np.matches("anything.example", 1));
    assert!(np.matches("10.0.0.1", 1));
}

#[test]
fn no_proxy_port_restricts_the_entry() {
    let np = NoProxy::parse("example.com:8443, 10.0.0.1:443");
    assert!(np.matches("api.example.com", 8443));
    assert!(!np.matches("api.example.com", 443));
    assert!(np.matches("10.0.0.1", 443));
    assert!(!np.matches("10.0.0.1", 80));
}

#[test]
fn no_proxy_ip_literals_match_exactly() {
    let np = NoProxy::parse("10.1.2.3,::1,[fd00::1]:443");
    assert!(np.matches("10.1.2.3", 80));
    assert!(!np.matches("110.1.2.3", 80));
    assert!(!np.matches("10.1.2.33", 80));
    assert!(np.matches("::1", 80));
    assert!(np.matches("[::1]", 80));
    assert!(np.matches("fd00::1", 443));
    assert!(!np.matches("fd00::1", 80));
    // A suffix entry never matches an IP literal by its digits.
    assert!(!NoProxy::parse("2.3").matches("10.1.2.3", 80));
}

#[test]
fn loopback_is_not_exempt_unless_listed() {
    let np = NoProxy::parse("example.com");
    assert!(!np.matches("localhost", 4000));
    assert!(!np.matches("127.0.0.1", 4000));
    assert!(!NoProxy::default().matches("127.0.0.1", 4000));
    let np = NoProxy::parse("localhost,127.0.0.1");
    assert!(np.matches("localhost", 4000));
    assert!(np.matches("127.0.0.1", 4000));
}

#[test]
fn no_proxy_is_read_in_either_case_lower_first_and_skips_junk() {
    let np = NoProxy::from_env(&env(&[
        ("NO_PROXY", "upper.test"),
        ("no_proxy", "lower.test"),
    ]));
    assert!(np.matches("lower.test", 1));
    assert!(!np.matches("upper.test", 1));
    let np = NoProxy::parse(",, .,host:notaport, ok.test");
    assert!(np.matches("ok.test", 1));
    assert!(!np.matches("host", 1));
}

#[test]
fn connect_request_names_the_target_and_carries_credentials() {
    assert_eq!(
        connect_request("gw.example.com", 443, Some("Basic dTpw")),
        "CONNECT gw.example.com:443 HTTP/1.1\r\nHost: gw.example.com:443\r\nProxy-Authorization: Basic dTpw\r\n\r\n"
    );
    assert_eq!(
        connect_request("::1", 8443, None),
        "CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n"
    );
}

#[test]
fn connect_reply_any_2xx_opens_the_tunnel_after_the_head() {
    let head = b"HTTP/1.1 200 Connection established\r\nVia: test\r\n\r\n";
    let mut buf = head.to_vec();
    buf.extend_from_slice(b"tunnel bytes");
    assert_eq!(
        parse_connect_reply(&buf, false),
        Ok(ConnectReply::Established {
            head_len: head.len()
        })
    );
    assert_eq!(
        parse_connect_reply(b"HTTP/1.0 204 No Content\r\n\r\n", false),
        Ok(ConnectReply::Established { head_len: 27 })
    );
}

#[test]
fn connect_reply_incomplete_head_asks_for_more() {
    assert_eq!(
        parse_connect_reply(b"HTTP/1.1 200 OK\r\n", false),
        Ok(ConnectReply::Incomplete)
    );
    assert_eq!(
        parse_connect_reply(b"", false),
        Ok(ConnectReply::Incomplete)
    );
}

#[test]
fn connect_reply_407_says_what_to_do_about_credentials() {
    let reply = b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n";
    let without = parse_connect_reply(reply, false).unwrap_err();
    assert!(
        without.contains("407") && without.contains("requires credentials"),
        "{without}"
    );
    assert!(
        without.contains("http://user:password@host:port"),
        "{without}"
    );
    let with = parse_connect_reply(reply, true).unwrap_err();
    assert!(
        with.contains("407") && with.contains("refused the credentials"),
        "{with}"
    );
}

#[test]
fn connect_reply_other_statuses_are_refused_quoting_the_status_line() {
    let err = parse_connect_reply(b"HTTP/1.1 403 Forbidden\r\n\r\n", false).unwrap_err();
    assert!(err.contains("HTTP/1.1 403 Forbidden"), "{err}");
    let err = parse_connect_reply(b"SSH-2.0-OpenSSH\r\n\r\n", false).unwrap_err();
    assert!(err.contains("HTTP status line"), "{err}");
}

#[test]
fn connect_reply_oversized_head_is_refused() {
    let mut buf = b"HTTP/1.1 200 OK\r\n".to_vec();
    buf.resize(MAX_CONNECT_RESPONSE, b'x');
    let err = parse_connect_reply(&buf, false).unwrap_err();
    assert!(err.contains("exceed"), "{err}");
    // A terminator past the bound does not rescue it.
    buf.extend_from_slice(b"\r\n\r\n");
    assert!(parse_connect_reply(&buf, false).is_err());
}

#[test]
fn redact_url_hides_passwords_holding_url_delimiters_or_behind_a_mistyped_scheme() {
    assert_eq!(
        redact_url("http://user:pa/ss?x#y@proxy:3128"),
        "http://user:<redacted>@proxy:3128"
    );
    assert_eq!(
        redact_url("http;//user:hunter2@proxy:3128"),
        "http;//user:<redacted>@proxy:3128"
    );
}
