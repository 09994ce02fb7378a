//! [`GatewayState`]: the state every task of the gateway reads: the accept loop and
//! lifecycle (`server.rs`), the Phoenix socket and gRPC stream tasks, the HTTP API,
//! the execute path (`execute.rs`) and the test kit. It lives apart from the
//! [`Gateway`](super::Gateway) so that the dependency arrows run one way: each of those
//! modules uses this one, and this one uses none of them. The test kit's fault
//! switches are not in it but beside it, in [`Faults`] (`faults.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::approvals::Approvals;
use super::config::GatewayConfig;
use super::faults::Faults;
use super::link::ConnectorLink;
use super::registry::Registry;
use super::series::Series;
use super::stats::{Counters, GatewayStats};

/// The state shared by the accept loop, socket tasks, HTTP handlers and the test kit.
pub(crate) struct GatewayState {
    pub(crate) config: GatewayConfig,
    /// The approval mode, keys and credentials (`approvals.rs`).
    pub(crate) approvals: Approvals,
    pub(crate) counters: Counters,
    /// Lock order: `registry` before `sockets` when both are held (the console's
    /// connections view does), never the other way round.
    pub(crate) registry: Mutex<Registry<Arc<ConnectorLink>>>,
    /// Every open link by id; ordered, so the connections view pages by id.
    pub(crate) sockets: Mutex<BTreeMap<u64, Arc<ConnectorLink>>>,
    /// The live chart's last five minutes, one point a second (`views.rs` samples).
    pub(crate) series: Mutex<Series>,
    pub(crate) next_socket: AtomicU64,
    pub(crate) next_request: AtomicU64,
    /// The test kit's switches: read here, written only by the hooks (`hooks.rs`).
    pub(crate) faults: Faults,
    /// The number of visible registrations, for [`super::Gateway::wait_for_registrations`].
    pub(crate) registration_count: watch::Sender<usize>,
    pub(crate) cancel: CancellationToken,
    /// Parent of every accepted gRPC connection's cut switch; replaced when the test
    /// hook cuts them all, so later connections live on.
    pub(crate) grpc_cut: Mutex<CancellationToken>,
    /// Every task the gateway starts: socket readers, writers, invokes.
    pub(crate) tasks: TaskTracker,
    /// Set first when the gateway stops: `/readyz` answers 503, new sockets and new
    /// executes are refused (`server.rs`, [`super::Gateway::shutdown`]).
    stopping: AtomicBool,
    /// One token per execute in flight, so a stop can give them its grace.
    pub(crate) executing: TaskTracker,
}

impl GatewayState {
    /// The state of a gateway starting with `config` and `approvals`: nothing
    /// registered, no link, every fault switch off.
    pub(crate) fn new(config: GatewayConfig, approvals: Approvals) -> Self {
        let cancel = CancellationToken::new();
        GatewayState {
            approvals,
            config,
            counters: Counters::default(),
            registry: Mutex::new(Registry::new()),
            sockets: Mutex::default(),
            series: Mutex::default(),
            next_socket: AtomicU64::new(1),
            next_request: AtomicU64::new(1),
            faults: Faults::default(),
            registration_count: watch::channel(0).0,
            grpc_cut: Mutex::new(cancel.child_token()),
            cancel,
            tasks: TaskTracker::new(),
            stopping: AtomicBool::new(false),
            executing: TaskTracker::new(),
        }
    }

    /// Whether the gateway has begun to stop.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Begins the stop: from now on `/readyz` is 503 and new sockets and executes are
    /// refused. SeqCst pairs with the execute path, which takes its `executing` token
    /// before it reads the flag: an execute either sees the flag or is waited for.
    pub(crate) fn begin_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.executing.close();
    }

    pub(crate) fn registry(&self) -> std::sync::MutexGuard<'_, Registry<Arc<ConnectorLink>>> {
        self.registry.lock().expect("registry lock")
    }

    /// Makes a newly accepted link (socket or stream) reachable by id: by the test
    /// hooks, by `drop_socket`, by shutdown.
    pub(crate) fn add_link(&self, link: Arc<ConnectorLink>) {
        self.sockets
            .lock()
            .expect("sockets lock")
            .insert(link.id, link);
    }

    /// Forgets a closed link: its registrations are removed and its pending executes
    /// fail at once. Dropping the waiters fails every waiting execute; closing the map
    /// makes an execute that raced this teardown fail instead of waiting out its
    /// deadline. Returns how many registrations went with it.
    pub(crate) fn forget_link(&self, link: &ConnectorLink) -> usize {
        self.sockets.lock().expect("sockets lock").remove(&link.id);
        let removed = self.registry().remove_socket(link.id);
        self.publish_registration_count();
        let failed = link.pending.lock().expect("pending lock").close();
        drop(failed);
        removed
    }

    /// The counters with the registry's counts.
    pub(crate) fn stats(&self) -> GatewayStats {
        let by_transport = self.registry().count_by_transport();
        self.counters.snapshot(by_transport)
    }

    /// `/metrics`: the counters' snapshot and the execute latency histogram.
    pub(crate) fn metrics_text(&self) -> String {
        let text = self.stats().to_prometheus();
        let body = text.trim_end_matches("# EOF\n");
        format!("{body}{}# EOF\n", self.counters.execute_seconds.render())
    }

    pub(crate) fn publish_registration_count(&self) {
        let n = self.registry().len();
        self.registration_count.send_replace(n);
    }
}
