//! [`Dialer`]: the one way the SDK's transports open a connection to a gateway — TCP,
//! through an HTTP CONNECT proxy when one applies, then TLS with the webpki roots plus
//! an optional CA bundle.
//!
//! Both transports dial through it (the WebSocket transport with ALPN `http/1.1`, the
//! gRPC transport with `h2`), so a proxy or a private CA is configured once (a
//! connector's `ConnectorConfig::proxy` and `ca_bundle`, which the mux hands over) and
//! behaves the same for both. The proxy rules (which variable,
//! `NO_PROXY`, URL forms) are plain functions in `super::proxy`; this module only does
//! the I/O and turns failures into [`Error::Connect`] reasons a person can act on.
//!
//! TLS always uses rustls' `ring` provider, passed explicitly rather than through the
//! process default: two providers in one process make rustls panic at the first
//! handshake, and an explicit provider cannot pick the wrong one.
//!
//! The caller bounds the whole dial with its connect timeout; the proxy exchange has
//! its own backstop ([`PROXY_HANDSHAKE_TIMEOUT`]) so that `tcp()` never waits forever
//! on a proxy that accepts but never answers, even for a caller without a deadline.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::{CertificateError, ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::address::GatewayAddress;
use super::proxy::{
    authority, connect_request, parse_connect_reply, proxy_from_env, ConnectReply, NoProxy,
    ProxyUrl, MAX_CONNECT_RESPONSE,
};
use super::ProxySetting;
use crate::error::{Error, Result};

/// Longest the proxy part of a dial may take: TCP to the proxy, `CONNECT`, and its
/// answer. The caller's connect timeout (10 s by default) normally ends a dial first;
/// this bound only guarantees that a proxy which accepts and then stays silent cannot
/// hold a caller without a deadline forever.
pub(crate) const PROXY_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the proxy came from, for error messages that tell the reader what to change.
const EXPLICIT_SOURCE: &str = "the proxy option / SWITCHBOARD_PROXY";

/// The proxy a dialer uses, and which targets skip it.
#[derive(Clone, Debug)]
struct Proxy {
    url: ProxyUrl,
    /// `Proxy-Authorization` value, computed once.
    authorization: Option<String>,
    /// The variable or option that named the proxy.
    source: &'static str,
    /// Targets that bypass it (empty for an explicit proxy: it applies to all).
    no_proxy: NoProxy,
}

/// Opens TCP and TLS connections to a gateway the way its settings say: direct or
/// through an HTTP CONNECT proxy, trusting the webpki roots and the configured CA
/// bundle. Cheap to clone (the TLS configuration is shared).
#[derive(Clone, Debug)]
pub(crate) struct Dialer {
    proxy: Option<Arc<Proxy>>,
    /// The TLS client configuration without ALPN; each `tls()` call adds its own.
    tls: Arc<ClientConfig>,
    /// The configured CA bundle, named in certificate errors.
    ca_bundle: Option<PathBuf>,
}

impl Dialer {
    /// Builds the dialer for `gateway`: reads the proxy setting (and, for
    /// [`ProxySetting::FromEnvironment`], the process environment; whether the gateway
    /// is a TLS target picks the variable) and loads the CA bundle. An unreadable or
    /// empty bundle, or a malformed proxy variable, is an [`Error::Config`] naming the
    /// path or variable.
    pub(crate) fn new(
        gateway: &GatewayAddress,
        proxy: &ProxySetting,
        ca_bundle: Option<&Path>,
    ) -> Result<Dialer> {
        Self::with_lookup(gateway, proxy, ca_bundle, |name| std::env::var(name).ok())
    }

    /// [`Dialer::new`] with the environment read through `lookup`, so tests never
    /// touch the process environment.
    pub(crate) fn with_lookup(
        gateway: &GatewayAddress,
        setting: &ProxySetting,
        ca_bundle: Option<&Path>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Dialer> {
        let proxy = match setting {
            ProxySetting::Disabled => None,
            ProxySetting::Url(url) => {
                setting.validate()?;
                let url = ProxyUrl::parse(url).map_err(Error::Config)?;
                Some(proxy(url, EXPLICIT_SOURCE, NoProxy::default()))
            }
            ProxySetting::FromEnvironment => proxy_from_env(&lookup, gateway.tls)?
                .map(|p| proxy(p.url, p.source, NoProxy::from_env(&lookup))),
        };
        let roots = root_store(ca_bundle)?;
        let tls =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?
                .with_root_certificates(roots)
                .with_no_client_auth();
        Ok(Dialer {
            proxy: proxy.map(Arc::new),
            tls: Arc::new(tls),
            ca_bundle: ca_bundle.map(Path::to_path_buf),
        })
    }

    /// The TLS client configuration (webpki roots plus the CA bundle, no ALPN), for
    /// HTTP clients that must trust what the gateway connection trusts.
    pub(crate) fn tls_config(&self) -> ClientConfig {
        (*self.tls).clone()
    }

    /// The proxy that a dial to `host:port` goes through, if any.
    fn proxy_for(&self, host: &str, port: u16) -> Option<&Proxy> {
        self.proxy
            .as_deref()
            .filter(|p| !p.no_proxy.matches(host, port))
    }

    /// TCP to host:port, through the proxy when one applies (NO_PROXY honoured); TCP_NODELAY set.
    pub(crate) async fn tcp(&self, host: &str, port: u16) -> Result<TcpStream> {
        let target = authority(host, port);
        let fail = |reason: String| Error::Connect {
            url: target.clone(),
            reason,
        };
        if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(fail(format!("{host:?} is not a host name")));
        }
        let tcp = match self.proxy_for(host, port) {
            None => TcpStream::connect((host, port))
                .await
                .map_err(|e| fail(format!("TCP connect failed: {e}")))?,
            Some(proxy) => {
                tracing::debug!(%target, proxy = %proxy.url, source = proxy.source, "dialling through proxy");
                match tokio::time::timeout(PROXY_HANDSHAKE_TIMEOUT, tunnel(proxy, host, port))
                    .await
                {
                    Ok(result) => result.map_err(|reason| {
                        fail(format!("via proxy {} (from {}): {reason}", proxy.url, proxy.source))
                    })?,
                    Err(_) => {
                        return Err(fail(format!(
                            "via proxy {} (from {}): no answer to CONNECT within {PROXY_HANDSHAKE_TIMEOUT:?}",
                            proxy.url, proxy.source
                        )))
                    }
                }
            }
        };
        tcp.set_nodelay(true)
            .map_err(|e| fail(format!("setting TCP_NODELAY failed: {e}")))?;
        Ok(tcp)
    }

    /// TLS (server name = host) over `tcp(host, port)`, offering `alpn` (e.g. &[b"h2"] or &[b"http/1.1"]).
    pub(crate) async fn tls(
        &self,
        host: &str,
        port: u16,
        alpn: &[&[u8]],
    ) -> Result<TlsStream<TcpStream>> {
        let target = authority(host, port);
        let name = ServerName::try_from(host.to_owned()).map_err(|_| Error::Connect {
            url: target.clone(),
            reason: format!("{host:?} is not a valid TLS server name"),
        })?;
        let tcp = self.tcp(host, port).await?;
        let mut config = (*self.tls).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| Error::Connect {
                url: target,
                reason: tls_failure_reason(host, &e, self.ca_bundle.as_deref()),
            })
    }
}

fn proxy(url: ProxyUrl, source: &'static str, no_proxy: NoProxy) -> Proxy {
    Proxy {
        authorization: url.authorization(),
        url,
        source,
        no_proxy,
    }
}

/// Opens a tunnel to `host:port` through `proxy`; the error is the reason.
async fn tunnel(proxy: &Proxy, host: &str, port: u16) -> std::result::Result<TcpStream, String> {
    let mut tcp = TcpStream::connect((proxy.url.host.as_str(), proxy.url.port))
        .await
        .map_err(|e| {
            format!("could not reach the proxy: {e}; check its address, or exempt the gateway with NO_PROXY")
        })?;
    let request = connect_request(host, port, proxy.authorization.as_deref());
    tcp.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending CONNECT failed: {e}"))?;
    read_connect_reply(&mut tcp, proxy.authorization.is_some()).await?;
    Ok(tcp)
}

/// Reads the proxy's answer head and consumes exactly it, leaving any tunnel bytes
/// that followed in the socket: bytes are peeked, parsed, and only the head is read.
async fn read_connect_reply(
    tcp: &mut TcpStream,
    sent_credentials: bool,
) -> std::result::Result<(), String> {
    let mut head: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; MAX_CONNECT_RESPONSE];
    loop {
        // The parser refuses a head of MAX_CONNECT_RESPONSE bytes, so there is room.
        let room = MAX_CONNECT_RESPONSE - head.len();
        let n = tcp
            .peek(&mut chunk[..room])
            .await
            .map_err(|e| format!("reading the proxy's answer failed: {e}"))?;
        if n == 0 {
            return Err("the proxy closed the connection before answering CONNECT".into());
        }
        let seen = head.len();
        head.extend_from_slice(&chunk[..n]);
        let reply = parse_connect_reply(&head, sent_credentials)?;
        // Consume what belongs to the head: all of it while incomplete, up to the
        // blank line once complete.
        let take = match reply {
            ConnectReply::Incomplete => n,
            ConnectReply::Established { head_len } => head_len - seen,
        };
        tcp.read_exact(&mut chunk[..take])
            .await
            .map_err(|e| format!("reading the proxy's answer failed: {e}"))?;
        if let ConnectReply::Established { .. } = reply {
            return Ok(());
        }
    }
}

/// The webpki roots plus the certificates of `bundle`.
fn root_store(bundle: Option<&Path>) -> Result<RootCertStore> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let Some(path) = bundle else {
        return Ok(roots);
    };
    let shown = path.display();
    let fix = "point the ca_bundle option (SWITCHBOARD_CA_BUNDLE) at a readable PEM file of CA certificates";
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::Config(format!("CA bundle {shown}: cannot read it ({e}); {fix}")))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Config(format!("CA bundle {shown}: not valid PEM ({e}); {fix}")))?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "CA bundle {shown} contains no certificate (no -----BEGIN CERTIFICATE----- block); {fix}"
        )));
    }
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            Error::Config(format!(
                "CA bundle {shown}: certificate #{} is not a usable CA certificate ({e}); {fix}",
                i + 1
            ))
        })?;
    }
    Ok(roots)
}

/// Why a TLS handshake with `host` failed, with the fix for the common cases.
fn tls_failure_reason(host: &str, e: &io::Error, ca_bundle: Option<&Path>) -> String {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => match ca_bundle {
            None => format!(
                "the TLS certificate of {host} is not trusted (unknown issuer); if a private CA signed it, \
                 set the ca_bundle option (SWITCHBOARD_CA_BUNDLE) to that CA's PEM file"
            ),
            Some(path) => format!(
                "the TLS certificate of {host} is not trusted (unknown issuer): neither the webpki roots \
                 nor the CA bundle {} signed it; add the issuing CA to that file",
                path.display()
            ),
        },
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the TLS certificate presented is not valid for {host}; connect with the name the certificate was issued for"
        ),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => format!("the TLS certificate of {host} has expired; the gateway must renew it"),
        Some(other) => format!("TLS handshake with {host} failed: {other}"),
        None => format!("TLS handshake with {host} failed: {e}"),
    }
}

#[cfg(test)]
mod tests;
