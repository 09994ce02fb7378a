//! Cross-process wake-ups on PostgreSQL: one task per backend holds its own (non-pool)
//! connection in `LISTEN switchboard_outbox` and wakes the backend's
//! [`tokio::sync::Notify`] on every notification, so a dispatcher in any process
//! learns at once that another process enqueued, released or replayed rows. The same
//! connection listens on `switchboard_triggers` ([`TRIGGERS_CHANNEL`]), which every
//! lifecycle commit notifies, and wakes a second `Notify` for it, so every process
//! learns at once that another one changed a binding's versions or pauses.
//!
//! Every outbox write that makes rows due notifies inside its transaction, so the
//! wake-up arrives only once the rows are committed and claimable. A finish's
//! notification carries its backend's own tag, and that backend's listener ignores
//! it ([`Wakes::own`]): it is meant for the other processes. When the listening
//! connection drops (server restart, network cut, `pg_terminate_backend`) the task
//! reconnects with backoff and jitter ([`Backoff`]) and then wakes the dispatcher once,
//! since notifications sent while it was away are lost. It stops when the backend is
//! dropped (its [`DropGuard`] cancels the task's token).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{oneshot, Notify};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::backoff::{Backoff, BackoffPolicy};
use crate::error::{Error, Result};

/// The channel every outbox write notifies and every backend listens on.
pub(super) const CHANNEL: &str = "switchboard_outbox";

/// The channel every lifecycle commit notifies and every backend listens on.
pub(super) const TRIGGERS_CHANNEL: &str = "switchboard_triggers";

/// What the listener wakes: one `Notify` per channel.
#[derive(Clone)]
pub(super) struct Wakes {
    /// Woken on [`CHANNEL`]: the dispatchers.
    pub(super) outbox: Arc<Notify>,
    /// The payload this backend's own finishes notify with ([`FINISH_DONE`]): not a
    /// wake-up for this process, whose claim in the same transaction took the key's
    /// next row already, or whose claim loop looks again after a finish committed on
    /// its own. Woken by it, a claim loop would only claim nothing and ask for the
    /// next due time: two round trips per row of a hot ordering key.
    ///
    /// [`FINISH_DONE`]: super::finish::FINISH_DONE
    pub(super) own: Arc<str>,
    /// Woken on [`TRIGGERS_CHANNEL`]: whoever reloads the binding versions.
    pub(super) lifecycle: Arc<Notify>,
}

impl Wakes {
    /// Wakes both, for when notifications may have been lost.
    fn both(&self) {
        self.outbox.notify_one();
        self.lifecycle.notify_one();
    }
}

/// First reconnect delay: short, so a restarted server is listened to again within a
/// fraction of a second (the dispatcher polls its next due time meanwhile anyway).
pub(crate) const RECONNECT_INITIAL: Duration = Duration::from_millis(200);

/// Longest reconnect delay: a long outage costs at most one connection attempt per
/// 10 s per process.
pub(crate) const RECONNECT_MAX: Duration = Duration::from_secs(10);

/// How long `connect` waits for the first `LISTEN` to be in place.
const FIRST_LISTEN_DEADLINE: Duration = Duration::from_secs(10);

/// The `application_name` of the listening connection, so an operator can tell it
/// apart in `pg_stat_activity`.
pub(crate) const APPLICATION_NAME: &str = "switchboard-outbox-listener";

/// Starts the listener and returns once its first `LISTEN` is in place (so no commit
/// after `connect` returns can go unnoticed), or with an error naming `shown` (the
/// redacted URL) if it cannot be.
pub(super) async fn start(
    mut config: tokio_postgres::Config,
    wake: Wakes,
    shown: &str,
) -> Result<DropGuard> {
    config.application_name(APPLICATION_NAME);
    let stop = CancellationToken::new();
    // Held from the start: whichever way `start` fails, dropping it stops the task.
    let guard = stop.clone().drop_guard();
    let (ready, listening) = oneshot::channel();
    tokio::spawn(run(config, wake, stop, ready));
    let first = tokio::time::timeout(FIRST_LISTEN_DEADLINE, listening).await;
    let failed = |why: String| {
        Error::Store(format!(
            "cannot LISTEN for outbox wake-ups on {shown}: {why}"
        ))
    };
    match first {
        Ok(Ok(Ok(()))) => Ok(guard),
        Ok(Ok(Err(e))) => Err(failed(e)),
        Ok(Err(_)) => Err(failed("the listener task ended".into())),
        Err(_) => Err(failed(format!(
            "not listening after {FIRST_LISTEN_DEADLINE:?}"
        ))),
    }
}

/// Why a listening session ended.
enum Ended {
    /// The backend was dropped.
    Stopped,
    /// The connection failed or closed; reconnect.
    Lost(String),
}

async fn run(
    config: tokio_postgres::Config,
    wake: Wakes,
    stop: CancellationToken,
    ready: oneshot::Sender<std::result::Result<(), String>>,
) {
    let mut ready = Some(ready);
    let mut backoff = Backoff::new(BackoffPolicy::new(RECONNECT_INITIAL, RECONNECT_MAX));
    loop {
        match session(&config, &wake, &stop, &mut ready, &mut backoff).await {
            Ended::Stopped => return,
            Ended::Lost(why) => {
                if let Some(first) = ready.take() {
                    let _ = first.send(Err(why));
                    return;
                }
                let delay = backoff.next_delay(rand::random());
                tracing::warn!(error = %why, retry_in = ?delay, "outbox LISTEN connection lost; reconnecting");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// One connection: LISTEN, then wake on every notification until it drops.
async fn session(
    config: &tokio_postgres::Config,
    wake: &Wakes,
    stop: &CancellationToken,
    ready: &mut Option<oneshot::Sender<std::result::Result<(), String>>>,
    backoff: &mut Backoff,
) -> Ended {
    let connected = tokio::select! {
        _ = stop.cancelled() => return Ended::Stopped,
        c = config.connect(NoTls) => c,
    };
    let (client, mut connection) = match connected {
        Ok(c) => c,
        Err(e) => return Ended::Lost(e.to_string()),
    };
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let sql = format!("LISTEN {CHANNEL}; LISTEN {TRIGGERS_CHANNEL}");
    let listen = client.batch_execute(&sql);
    tokio::pin!(listen);
    // The connection only makes progress while its messages are polled, so the LISTEN
    // is awaited beside them.
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ended::Stopped,
            done = &mut listen => match done {
                Ok(()) => break,
                Err(e) => return Ended::Lost(e.to_string()),
            },
            m = messages.next() => if let Some(ended) = on_message(m, wake) {
                return ended;
            },
        }
    }
    match ready.take() {
        Some(first) => {
            let _ = first.send(Ok(()));
        }
        None => {
            tracing::info!("outbox LISTEN connection restored");
            // Whatever was notified while the connection was down is lost.
            wake.both();
        }
    }
    backoff.reset();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ended::Stopped,
            m = messages.next() => if let Some(ended) = on_message(m, wake) {
                return ended;
            },
        }
    }
}

/// Handles one message of the listening connection; `Some` when it has ended.
fn on_message(
    message: Option<std::result::Result<AsyncMessage, tokio_postgres::Error>>,
    wake: &Wakes,
) -> Option<Ended> {
    match message {
        Some(Ok(AsyncMessage::Notification(n))) => {
            match n.channel() {
                TRIGGERS_CHANNEL => wake.lifecycle.notify_one(),
                _ if n.payload() == &*wake.own => {}
                _ => wake.outbox.notify_one(),
            }
            None
        }
        Some(Ok(_)) => None,
        Some(Err(e)) => Some(Ended::Lost(e.to_string())),
        None => Some(Ended::Lost("connection closed by the server".into())),
    }
}
