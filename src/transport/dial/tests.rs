//! The dialer's decisions: which proxy a config selects, CA bundle loading, and the
//! wording of TLS failures. Environments are lookup functions, never the process's.

use std::collections::HashMap;

use super::*;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn config(url: &str) -> crate::config::ConnectorConfigBuilder {
    ConnectorConfig::builder(url, "acme").instance_id("i")
}

fn dialer(cfg: crate::config::ConnectorConfigBuilder, vars: &[(&str, &str)]) -> Dialer {
    Dialer::with_lookup(&cfg.build().unwrap(), env(vars)).unwrap()
}

fn proxy_of(d: &Dialer, host: &str, port: u16) -> Option<(String, &'static str)> {
    d.proxy_for(host, port)
        .map(|p| (p.url.to_string(), p.source))
}

const PROXIES: [(&str, &str); 2] = [
    ("HTTPS_PROXY", "http://secure.proxy:3128"),
    ("HTTP_PROXY", "http://plain.proxy:3128"),
];

#[test]
fn wss_gateway_uses_https_proxy_and_ws_gateway_http_proxy() {
    let d = dialer(config("wss://gw.example.com"), &PROXIES);
    assert_eq!(
        proxy_of(&d, "gw.example.com", 443),
        Some(("http://secure.proxy:3128".into(), "HTTPS_PROXY"))
    );
    let d = dialer(config("ws://gw.example.com"), &PROXIES);
    assert_eq!(
        proxy_of(&d, "gw.example.com", 80),
        Some(("http://plain.proxy:3128".into(), "HTTP_PROXY"))
    );
    // grpcs:// is a TLS target too.
    let d = dialer(config("grpcs://gw.example.com"), &PROXIES);
    assert_eq!(
        proxy_of(&d, "gw.example.com", 443).unwrap().1,
        "HTTPS_PROXY"
    );
}

#[test]
fn no_proxy_exempts_environment_proxies_only() {
    let mut vars = PROXIES.to_vec();
    vars.push(("NO_PROXY", ".example.com"));
    let d = dialer(config("wss://gw.example.com"), &vars);
    assert_eq!(proxy_of(&d, "gw.example.com", 443), None);
    assert!(proxy_of(&d, "gw.other.org", 443).is_some());
    let explicit = config("wss://gw.example.com")
        .proxy(ProxySetting::Url("http://u:p@corp.proxy:8080".into()));
    let d = dialer(explicit, &vars);
    assert_eq!(
        proxy_of(&d, "gw.example.com", 443),
        Some(("http://corp.proxy:8080".into(), EXPLICIT_SOURCE))
    );
}

#[test]
fn disabled_proxy_ignores_the_environment() {
    let d = dialer(config("wss://gw").proxy(ProxySetting::Disabled), &PROXIES);
    assert_eq!(proxy_of(&d, "gw", 443), None);
}

#[test]
fn no_environment_means_direct() {
    let d = dialer(config("wss://gw"), &[]);
    assert_eq!(proxy_of(&d, "gw", 443), None);
}

#[test]
fn malformed_proxy_variable_fails_the_dialer_naming_it() {
    let cfg = config("wss://gw").build().unwrap();
    let err = Dialer::with_lookup(&cfg, env(&[("https_proxy", "ftp://x")])).unwrap_err();
    assert_eq!(err.code(), "config");
    assert!(err.to_string().contains("https_proxy"), "{err}");
}

fn bundle_err(contents: Option<&[u8]>) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    if let Some(bytes) = contents {
        std::fs::write(&path, bytes).unwrap();
    }
    let cfg = config("wss://gw").ca_bundle(&path).build().unwrap();
    let err = Dialer::with_lookup(&cfg, env(&[])).unwrap_err();
    assert_eq!(err.code(), "config", "{err}");
    (err.to_string(), path.display().to_string())
}

#[test]
fn missing_ca_bundle_is_a_config_error_naming_the_path() {
    let (msg, path) = bundle_err(None);
    assert!(msg.contains(&path) && msg.contains("cannot read"), "{msg}");
    assert!(msg.contains("SWITCHBOARD_CA_BUNDLE"), "{msg}");
}

#[test]
fn empty_ca_bundle_is_a_config_error_naming_the_path() {
    for contents in [&b""[..], b"not a certificate\n"] {
        let (msg, path) = bundle_err(Some(contents));
        assert!(
            msg.contains(&path) && msg.contains("no certificate"),
            "{msg}"
        );
    }
}

#[test]
fn ca_bundle_certificates_are_added_to_the_webpki_roots() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    let a = rcgen::generate_simple_self_signed(vec!["a.test".into()]).unwrap();
    let b = rcgen::generate_simple_self_signed(vec!["b.test".into()]).unwrap();
    std::fs::write(&path, format!("{}{}", a.cert.pem(), b.cert.pem())).unwrap();
    let roots = root_store(Some(&path)).unwrap();
    assert_eq!(roots.len(), webpki_roots::TLS_SERVER_ROOTS.len() + 2);
    let cfg = config("wss://gw").ca_bundle(&path).build().unwrap();
    assert!(Dialer::with_lookup(&cfg, env(&[])).is_ok());
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

#[test]
fn unknown_issuer_says_to_set_the_ca_bundle() {
    let e = tls_error(rustls::Error::InvalidCertificate(
        CertificateError::UnknownIssuer,
    ));
    let msg = tls_failure_reason("gw.test", &e, None);
    assert!(
        msg.contains("not trusted") && msg.contains("SWITCHBOARD_CA_BUNDLE"),
        "{msg}"
    );
    let msg = tls_failure_reason("gw.test", &e, Some(Path::new("/etc/corp.pem")));
    assert!(
        msg.contains("not trusted") && msg.contains("/etc/corp.pem"),
        "{msg}"
    );
}

#[test]
fn wrong_name_and_expiry_are_told_apart() {
    let e = tls_error(rustls::Error::InvalidCertificate(
        CertificateError::NotValidForName,
    ));
    assert!(tls_failure_reason("gw.test", &e, None).contains("not valid for gw.test"));
    let e = tls_error(rustls::Error::InvalidCertificate(CertificateError::Expired));
    assert!(tls_failure_reason("gw.test", &e, None).contains("expired"));
    let e = io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer");
    assert!(tls_failure_reason("gw.test", &e, None).contains("reset by peer"));
}
