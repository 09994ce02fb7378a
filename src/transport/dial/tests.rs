//! The dialer's decisions: which proxy its settings select, CA bundle loading, and the
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

/// What a dialer is built from, as a connector's config hands it over.
struct Settings {
    gateway: GatewayAddress,
    proxy: ProxySetting,
    ca_bundle: Option<PathBuf>,
}

impl Settings {
    fn proxy(mut self, proxy: ProxySetting) -> Self {
        self.proxy = proxy;
        self
    }

    fn ca_bundle(mut self, path: &Path) -> Self {
        self.ca_bundle = Some(path.to_owned());
        self
    }

    fn dial(&self, vars: &[(&str, &str)]) -> Result<Dialer> {
        let ca = self.ca_bundle.as_deref();
        Dialer::with_lookup(&self.gateway, &self.proxy, ca, env(vars))
    }
}

fn config(url: &str) -> Settings {
    Settings {
        gateway: GatewayAddress::parse(url).unwrap(),
        proxy: ProxySetting::default(),
        ca_bundle: None,
    }
}

fn dialer(cfg: Settings, vars: &[(&str, &str)]) -> Dialer {
    cfg.dial(vars).unwrap()
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
    let err = config("wss://gw")
        .dial(&[("https_proxy", "ftp://x")])
        .unwrap_err();
    assert_eq!(err.code(), "config");
    assert!(err.to_string().contains("https_proxy"), "{err}");
}

fn bundle_err(contents: Option<&[u8]>) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    if let Some(bytes) = contents {
        std::fs::write(&path, bytes).unwrap();
    }
    let err = config("wss://gw").ca_bundle(&path).dial(&[]).unwrap_err();
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
    assert!(config("wss://gw").ca_bundle(&path).dial(&[]).is_ok());
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

/// A proxy on loopback that answers the first CONNECT with `reply`, then echoes
/// nothing; returns its URL and the request it received.
async fn one_shot_proxy(
    reply: &'static [u8],
) -> (String, tokio::task::JoinHandle<(Vec<u8>, TcpStream)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") {
            tcp.read_exact(&mut byte).await.unwrap();
            request.push(byte[0]);
        }
        tcp.write_all(reply).await.unwrap();
        (request, tcp)
    });
    (url, task)
}

fn via(url: &str) -> Dialer {
    dialer(
        config("ws://gateway.test").proxy(ProxySetting::Url(url.to_owned())),
        &[],
    )
}

#[tokio::test]
async fn tunnel_bytes_sent_with_the_proxy_answer_are_kept() {
    let (url, proxy) = one_shot_proxy(b"HTTP/1.1 200 OK\r\n\r\nfirst tunnel bytes").await;
    let mut tcp = via(&url).tcp("gateway.test", 4000).await.unwrap();
    assert!(tcp.nodelay().unwrap());
    let mut got = [0u8; 18];
    tcp.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"first tunnel bytes");
    let (request, _) = proxy.await.unwrap();
    assert_eq!(
        String::from_utf8(request).unwrap(),
        "CONNECT gateway.test:4000 HTTP/1.1\r\nHost: gateway.test:4000\r\n\r\n"
    );
}

#[tokio::test]
async fn proxy_refusal_is_a_connect_error_with_the_status_line() {
    let (url, _proxy) = one_shot_proxy(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
    let err = via(&url).tcp("gateway.test", 4000).await.unwrap_err();
    assert_eq!(err.code(), "connect");
    let msg = err.to_string();
    assert!(
        msg.contains("gateway.test:4000") && msg.contains("403 Forbidden"),
        "{msg}"
    );
}

#[tokio::test(start_paused = true)]
async fn silent_proxy_fails_the_dial_instead_of_hanging() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Accepts and holds the connection, never answering.
    let _holder = tokio::spawn(async move {
        let held = listener.accept().await;
        std::future::pending::<()>().await;
        drop(held);
    });
    let err = via(&url).tcp("gateway.test", 4000).await.unwrap_err();
    assert!(err.to_string().contains("no answer to CONNECT"), "{err}");
}
