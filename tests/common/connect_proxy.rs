//! [`ConnectProxy`]: a small HTTP CONNECT proxy, for tests of clients that must reach
//! their gateway through a corporate proxy.
//!
//! It listens on an ephemeral loopback port, optionally requires
//! `Proxy-Authorization: Basic` of one user and password (answering 407 otherwise),
//! opens a tunnel with `200` and forwards bytes both ways. It records the target of
//! every tunnel it opened and counts refusals. It only tunnels to loopback addresses
//! (403 for anything else), so a test can never send traffic off the machine.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Most bytes of a request head the proxy reads before refusing it.
const MAX_HEAD: usize = 8 * 1024;

/// A running CONNECT proxy; stops when dropped.
pub struct ConnectProxy {
    addr: SocketAddr,
    tunnels: Arc<Mutex<Vec<String>>>,
    refusals: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

struct Shared {
    /// The expected `Proxy-Authorization` value, when credentials are required.
    authorization: Option<String>,
    tunnels: Arc<Mutex<Vec<String>>>,
    refusals: Arc<AtomicUsize>,
}

impl ConnectProxy {
    /// Starts on `127.0.0.1:0`; with `credentials`, every CONNECT must carry them.
    pub async fn start(credentials: Option<(&str, &str)>) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let tunnels = Arc::new(Mutex::new(Vec::new()));
        let refusals = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            authorization: credentials.map(|(u, p)| {
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                )
            }),
            tunnels: tunnels.clone(),
            refusals: refusals.clone(),
        });
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, shared.clone()));
            }
        });
        ConnectProxy {
            addr,
            tunnels,
            refusals,
            task,
        }
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://user:password@127.0.0.1:PORT`, the URL a client is configured with.
    pub fn url_with(&self, user: &str, password: &str) -> String {
        format!("http://{user}:{password}@{}", self.addr)
    }

    /// The `host:port` target of every tunnel opened so far, in order.
    pub fn tunnels(&self) -> Vec<String> {
        self.tunnels.lock().unwrap().clone()
    }

    /// CONNECT requests refused (bad credentials, a non-loopback target, junk).
    pub fn refusals(&self) -> usize {
        self.refusals.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let mut client = BufReader::new(client);
    let mut head = Vec::new();
    // Read the request head line by line, bounded.
    loop {
        let before = head.len();
        match client.read_until(b'\n', &mut head).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if head.len() > MAX_HEAD {
            return refuse(&mut client, &shared, "431 Request Header Fields Too Large").await;
        }
        if &head[before..] == b"\r\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next(), parts.next());
    let (Some("CONNECT"), Some(target)) = (method, target) else {
        return refuse(&mut client, &shared, "405 Method Not Allowed").await;
    };
    if let Some(expected) = &shared.authorization {
        let given = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("proxy-authorization")
                .then(|| value.trim().to_owned())
        });
        if given.as_deref() != Some(expected.as_str()) {
            return refuse(&mut client, &shared, "407 Proxy Authentication Required").await;
        }
    }
    let loopback = tokio::net::lookup_host(target)
        .await
        .map(|mut addrs| addrs.all(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    if !loopback {
        return refuse(&mut client, &shared, "403 Forbidden").await;
    }
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        return refuse(&mut client, &shared, "502 Bad Gateway").await;
    };
    shared.tunnels.lock().unwrap().push(target.to_owned());
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

async fn refuse(client: &mut BufReader<TcpStream>, shared: &Shared, status: &str) {
    shared.refusals.fetch_add(1, Ordering::SeqCst);
    let auth = if status.starts_with("407") {
        "Proxy-Authenticate: Basic realm=\"test\"\r\n"
    } else {
        ""
    };
    let reply =
        format!("HTTP/1.1 {status}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = client.write_all(reply.as_bytes()).await;
    let _ = client.shutdown().await;
}
