//! The process's stop signals. SIGTERM (what Docker, Kubernetes and systemd send) and
//! SIGINT (Ctrl-C) mean one graceful stop in every binary and in [`crate::run`]: the
//! first starts it, a second one during the stop ends the process at once.
//!
//! Why both, and why the second is fatal: an orchestrator sends SIGTERM and waits
//! `terminationGracePeriodSeconds` (or systemd's `TimeoutStopSec`) before SIGKILL, so
//! a process that hears only SIGINT dies mid-delivery with its claims still leased.
//! An operator who presses Ctrl-C twice means "now": the second signal exits with the
//! shell's convention for death by that signal (128 + its number) after one log line,
//! so a wrapper can tell a forced stop from a clean one (exit 0).
//!
//! The handlers are installed when [`shutdown_signal`] is *called*, not when its
//! future is first polled: a binary calls it before it opens its listener, and a
//! signal that arrives as soon as the port answers finds the handler in place rather
//! than the default action (which would end the process with no stop at all).

use std::future::Future;

/// The `tracing` target of the one line each stop logs (what it finished, what it
/// released), at info: the `switchboard` binary shows it by default, and an embedding
/// program can too with a filter such as `warn,switchboard::stop=info`.
#[cfg_attr(
    not(any(feature = "runtime", feature = "gateway")),
    allow(dead_code, reason = "the SDK runner logs no stop line of its own")
)]
pub(crate) const STOP_LOG_TARGET: &str = "switchboard::stop";

/// Which signal started a graceful stop (see [`shutdown_signal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopSignal {
    /// SIGTERM: an orchestrator or `kill` asks the process to stop.
    Terminate,
    /// SIGINT: Ctrl-C at a terminal.
    Interrupt,
}

impl StopSignal {
    /// The signal's conventional name (`SIGTERM`, `SIGINT`), for log lines.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Interrupt => "SIGINT",
        }
    }

    /// The exit status a shell reports for a process this signal ended (128 + the
    /// signal's number): what a forced stop exits with.
    pub fn exit_code(self) -> i32 {
        match self {
            StopSignal::Terminate => 143,
            StopSignal::Interrupt => 130,
        }
    }
}

impl std::fmt::Display for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Completes at the first SIGTERM or SIGINT and says which; from then on a second
/// one of either ends the process at once (one line on stderr, exit 128 + signal
/// number). Call it before starting what it stops: the handlers are in place when
/// this function returns, before the future is awaited.
///
/// Must be called inside a Tokio runtime. Where no handler can be installed (no
/// signal support), the future never completes, so the process runs until it is
/// stopped some other way rather than stopping at once.
///
/// ```no_run
/// # async fn demo(runner: switchboard::MultiConnectorRunner) -> switchboard::Result<()> {
/// let stop = runner.shutdown_handle();
/// let signal = switchboard::shutdown_signal();
/// tokio::spawn(async move {
///     signal.await;
///     stop.shutdown();
/// });
/// runner.run().await
/// # }
/// ```
pub fn shutdown_signal() -> impl Future<Output = StopSignal> + Send + 'static {
    let installed = Listeners::install();
    async move {
        let mut listeners = match installed {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM/SIGINT; stop this process some other way");
                std::future::pending::<()>().await;
                unreachable!("a pending future never completes")
            }
        };
        let first = listeners.recv().await;
        tracing::warn!(
            signal = first.name(),
            "stopping gracefully; a second SIGTERM or SIGINT ends the process at once"
        );
        tokio::spawn(async move {
            let second = listeners.recv().await;
            eprintln!(
                "{second} during a graceful stop: exiting at once (status {})",
                second.exit_code()
            );
            std::process::exit(second.exit_code());
        });
        first
    }
}

/// The installed listeners for both signals.
#[cfg(unix)]
struct Listeners {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Listeners {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Listeners {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            Some(()) = self.term.recv() => StopSignal::Terminate,
            Some(()) = self.int.recv() => StopSignal::Interrupt,
            else => std::future::pending().await,
        }
    }
}

/// Off Unix only Ctrl-C exists; it plays both parts.
#[cfg(not(unix))]
struct Listeners;

#[cfg(not(unix))]
impl Listeners {
    fn install() -> std::io::Result<Self> {
        Ok(Listeners)
    }

    async fn recv(&mut self) -> StopSignal {
        match tokio::signal::ctrl_c().await {
            Ok(()) => StopSignal::Interrupt,
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forced_stop_exits_as_the_shell_reports_death_by_that_signal() {
        assert_eq!(StopSignal::Terminate.exit_code(), 128 + 15);
        assert_eq!(StopSignal::Interrupt.exit_code(), 128 + 2);
        assert_eq!(StopSignal::Terminate.to_string(), "SIGTERM");
    }
}
