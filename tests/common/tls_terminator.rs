//! [`TlsTerminator`]: a TLS front for a plain test server, as a load balancer or an
//! ingress terminates TLS in front of a real gateway.
//!
//! It listens on an ephemeral loopback port with a fresh rcgen self-signed certificate
//! for `localhost` (so a client must trust it explicitly, through a CA bundle), offers
//! ALPN `h2` and `http/1.1` (the gRPC and WebSocket transports each pick theirs), and
//! forwards the decrypted bytes to a backend address, e.g. a `TestGateway`'s port. It
//! records the ALPN protocol each handshake agreed on and counts failed handshakes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running TLS terminator; stops when dropped.
pub struct TlsTerminator {
    addr: SocketAddr,
    cert_pem: String,
    ca_path: PathBuf,
    _dir: tempfile::TempDir,
    alpn: Arc<Mutex<Vec<Option<Vec<u8>>>>>,
    failed_handshakes: Arc<AtomicUsize>,
    backend: Arc<Mutex<SocketAddr>>,
    task: JoinHandle<()>,
}

impl TlsTerminator {
    /// Starts on `127.0.0.1:0`, forwarding every accepted TLS connection to `backend`.
    pub async fn start(backend: SocketAddr) -> TlsTerminator {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
            .expect("generate a self-signed certificate");
        let cert_pem = certified.cert.pem();
        let cert: CertificateDer<'static> = certified.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("certificate and key match");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let dir = tempfile::tempdir().expect("temp dir");
        let ca_path = dir.path().join("localhost-ca.pem");
        std::fs::write(&ca_path, &cert_pem).expect("write the certificate");

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let alpn = Arc::new(Mutex::new(Vec::new()));
        let failed_handshakes = Arc::new(AtomicUsize::new(0));
        let backend = Arc::new(Mutex::new(backend));
        let (alpn_w, failed_w, backend_r) =
            (alpn.clone(), failed_handshakes.clone(), backend.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, alpn, failed) = (acceptor.clone(), alpn_w.clone(), failed_w.clone());
                let backend = *backend_r.lock().unwrap();
                tokio::spawn(async move {
                    let mut tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    };
                    let agreed = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                    alpn.lock().unwrap().push(agreed);
                    if let Ok(mut upstream) = TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
                    }
                });
            }
        });
        TlsTerminator {
            addr,
            cert_pem,
            ca_path,
            _dir: dir,
            alpn,
            failed_handshakes,
            backend,
            task,
        }
    }

    /// Forwards connections accepted from now on to `backend`: for a server that must
    /// know the terminator's port before it starts (a gateway's public URL).
    pub fn retarget(&self, backend: SocketAddr) {
        *self.backend.lock().unwrap() = backend;
    }

    /// The port clients dial (as `localhost`, the certificate's only name).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The certificate in PEM form.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A PEM file holding the certificate, to pass as a CA bundle; lives as long as
    /// the terminator.
    pub fn ca_bundle(&self) -> &Path {
        &self.ca_path
    }

    /// The ALPN protocol each completed handshake agreed on, in order.
    pub fn alpn_agreed(&self) -> Vec<Option<Vec<u8>>> {
        self.alpn.lock().unwrap().clone()
    }

    /// Handshakes that failed (for example a client that does not trust the certificate).
    pub fn failed_handshakes(&self) -> usize {
        self.failed_handshakes.load(Ordering::SeqCst)
    }
}

impl Drop for TlsTerminator {
    fn drop(&mut self) {
        self.task.abort();
    }
}
