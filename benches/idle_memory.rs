//! Client memory per idle registration: 10,000 registrations over 20 tenants (20
//! sockets), measured as live heap bytes (a counting allocator) and RSS growth, beside
//! a baseline measured in the same run: one plain tokio-tungstenite connection per
//! registration, idle, which is what running each registration on its own socket costs.
//!
//! The gateway runs in a child process (`switchboard gateway`) so that its memory is not
//! counted. `cargo bench --bench idle_memory --all-features`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use switchboard::{
    ConnectorConfig, EchoConnector, MultiConnectorRunner, Registration, RunnerOptions,
};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn rss() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: isize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Starts `switchboard gateway` on a free port; returns the child and its ws URL.
async fn gateway_process() -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["gateway", "--listen", &format!("127.0.0.1:{port}")])
        .kill_on_drop(true)
        .spawn()
        .expect("spawn gateway");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gateway did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, format!("ws://127.0.0.1:{port}"))
}

fn kib(b: f64) -> String {
    format!("{:.1}", b / 1024.0)
}

#[tokio::main]
async fn main() {
    let (_gw, url) = gateway_process().await;
    let (tenants, per_tenant) = (20usize, 500usize);
    let n = tenants * per_tenant;

    let (heap0, rss0) = (LIVE.load(Ordering::Relaxed), rss());
    let connector: Arc<dyn switchboard::BaseConnector> = Arc::new(EchoConnector);
    let mut regs = Vec::with_capacity(n);
    for t in 0..tenants {
        for i in 0..per_tenant {
            let cfg = ConnectorConfig::builder(url.clone(), format!("tenant-{t}"))
                .instance_id(format!("idle-{i}"))
                .build()
                .unwrap();
            regs.push(Registration::shared(cfg, connector.clone()));
        }
    }
    let runner = Arc::new(MultiConnectorRunner::new(RunnerOptions::default(), regs).unwrap());
    let run = tokio::spawn({
        let r = runner.clone();
        async move { r.run().await }
    });
    runner
        .wait_registered(Duration::from_secs(120))
        .await
        .unwrap();
    let heap_mux = (LIVE.load(Ordering::Relaxed) - heap0) as f64 / n as f64;
    let rss_mux = (rss() - rss0) as f64 / n as f64;
    runner.shutdown_handle().shutdown();
    run.await.unwrap().unwrap();

    // Baseline: one idle WebSocket per registration, joined, nothing else.
    let baseline_n = 500usize;
    let (heap1, rss1) = (LIVE.load(Ordering::Relaxed), rss());
    let mut sockets = Vec::with_capacity(baseline_n);
    for _ in 0..baseline_n {
        let (ws, _) =
            tokio_tungstenite::connect_async(format!("{url}/socket/connector/websocket?vsn=2.0.0"))
                .await
                .unwrap();
        sockets.push(ws);
    }
    let heap_base = (LIVE.load(Ordering::Relaxed) - heap1) as f64 / baseline_n as f64;
    let rss_base = (rss() - rss1) as f64 / baseline_n as f64;
    drop(sockets);

    println!("{n} idle registrations over {tenants} tenants ({tenants} sockets); baseline: {baseline_n} idle plain WebSocket connections");
    println!();
    println!("| measure | switchboard per registration (KiB) | one socket per registration (KiB) | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| live heap | {} | {} | {:.3} |",
        kib(heap_mux),
        kib(heap_base),
        heap_mux / heap_base
    );
    println!(
        "| RSS growth | {} | {} | {:.3} |",
        kib(rss_mux),
        kib(rss_base),
        rss_mux / rss_base
    );
}
