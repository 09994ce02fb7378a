//! A TCP proxy in the test process that can be taken down (every connection cut, new
//! ones refused) and brought back: a database or gateway going away under a running
//! process, without touching the real server other tests share.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A TCP proxy to PostgreSQL that can be taken down and brought back.
pub struct Proxy {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    up: Arc<AtomicBool>,
    /// Cancelled to cut every open connection; replaced on `bring_up`.
    cut: Arc<std::sync::Mutex<CancellationToken>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` while up.
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let (u, c) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if !u.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let token = c.lock().unwrap().clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut a, mut b) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                        _ = token.cancelled() => {}
                    }
                });
            }
        });
        Proxy { port, up, cut }
    }

    /// Cuts every open connection and refuses new ones.
    pub fn take_down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.lock().unwrap().cancel();
    }

    /// Forwards again.
    pub fn bring_up(&self) {
        *self.cut.lock().unwrap() = CancellationToken::new();
        self.up.store(true, Ordering::SeqCst);
    }
}
