//! The test kit's fault switches: what the hooks (`hooks.rs`) turn on to make the
//! gateway misbehave on purpose, kept apart from the state every message reads
//! (`state.rs`), so that the production path only ever reads them and a grep for the
//! setters finds the one module that writes them.
//!
//! The switches: refuse every register, drop the connection instead of answering a
//! register, leave Phoenix or application heartbeats unanswered, and hold register
//! responses before they are queued (a held registration is not visible yet: see
//! [`Faults::hold_register`]).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The fault switches of one gateway. Read by the session and socket tasks; written
/// only by the test hooks on [`super::Gateway`].
#[derive(Debug)]
pub(crate) struct Faults {
    refuse_registers: AtomicBool,
    drop_on_register: AtomicBool,
    answer_phoenix_heartbeats: AtomicBool,
    answer_app_heartbeats: AtomicBool,
    /// While true, each register waits in [`Faults::hold_register`].
    hold_registers: watch::Sender<bool>,
    /// How many registers wait there now.
    held_registers: watch::Sender<usize>,
}

impl Default for Faults {
    /// The gateway's own behaviour: every switch off, heartbeats answered.
    fn default() -> Self {
        Faults {
            refuse_registers: AtomicBool::new(false),
            drop_on_register: AtomicBool::new(false),
            answer_phoenix_heartbeats: AtomicBool::new(true),
            answer_app_heartbeats: AtomicBool::new(true),
            hold_registers: watch::channel(false).0,
            held_registers: watch::channel(0).0,
        }
    }
}

/// Counts one held register for as long as it lives, however its wait ends.
struct Held<'a>(&'a watch::Sender<usize>);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Faults {
    /// Whether every register is to be refused.
    pub(crate) fn refuse_registers(&self) -> bool {
        self.refuse_registers.load(Relaxed)
    }

    /// Whether a register is to close its connection instead of being answered.
    pub(crate) fn drop_on_register(&self) -> bool {
        self.drop_on_register.load(Relaxed)
    }

    /// Whether Phoenix heartbeats are answered.
    pub(crate) fn answer_phoenix_heartbeats(&self) -> bool {
        self.answer_phoenix_heartbeats.load(Relaxed)
    }

    /// Whether application `heartbeat_request`s are answered.
    pub(crate) fn answer_app_heartbeats(&self) -> bool {
        self.answer_app_heartbeats.load(Relaxed)
    }

    /// Waits here, once a register is decided and before its response is queued (and
    /// so before its registration is visible), while registers are held; returns when
    /// they are released or `link_kill` fires. No wait at all when not held.
    pub(crate) async fn hold_register(&self, link_kill: &CancellationToken) {
        let mut hold = self.hold_registers.subscribe();
        if !*hold.borrow_and_update() {
            return;
        }
        self.held_registers.send_modify(|n| *n += 1);
        let _held = Held(&self.held_registers);
        tokio::select! {
            _ = hold.wait_for(|on| !*on) => {}
            _ = link_kill.cancelled() => {}
        }
    }

    pub(crate) fn set_refuse_registers(&self, on: bool) {
        self.refuse_registers.store(on, Relaxed);
    }

    pub(crate) fn set_drop_on_register(&self, on: bool) {
        self.drop_on_register.store(on, Relaxed);
    }

    pub(crate) fn set_answer_phoenix_heartbeats(&self, on: bool) {
        self.answer_phoenix_heartbeats.store(on, Relaxed);
    }

    pub(crate) fn set_answer_app_heartbeats(&self, on: bool) {
        self.answer_app_heartbeats.store(on, Relaxed);
    }

    /// Holds (true) or releases (false) register responses.
    pub(crate) fn set_hold_registers(&self, on: bool) {
        self.hold_registers.send_replace(on);
    }

    /// Waits until at least `n` registers are held, at most `deadline`.
    pub(crate) async fn wait_for_held_registers(&self, n: usize, deadline: Duration) -> bool {
        let mut held = self.held_registers.subscribe();
        tokio::time::timeout(deadline, held.wait_for(|h| *h >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}
