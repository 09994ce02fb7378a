//! The sweeper: every `sweep_interval` it deletes expired dedupe claims and old audit
//! rows, and, past `event_retention`, events that nothing references any more, dead
//! letters and sync-invocation records. Retention deletes run in chunks of
//! [`EXPIRE_CHUNK`] rows, each its own short transaction on the store's connection,
//! never through the group-commit queue, so a large sweep never stalls ingest.

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::store::Store;

/// Rows one retention statement deletes at most: small enough that the writer is
/// held for a millisecond or two, large enough that a day's backlog clears in seconds.
pub(crate) const EXPIRE_CHUNK: usize = 1000;

/// How long things are kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retention {
    /// Rejection audit rows.
    pub(crate) rejections_ms: i64,
    /// Events, dead letters and run records.
    pub(crate) events_ms: i64,
}

pub(crate) async fn run(
    store: Store,
    retention: Retention,
    every: std::time::Duration,
    cancel: CancellationToken,
) {
    loop {
        let now = now_ms();
        match store
            .backend()
            .sweep(now, now - retention.rejections_ms)
            .await
        {
            Ok(s) if s.claims + s.rejections > 0 => {
                tracing::info!(
                    claims = s.claims,
                    rejections = s.rejections,
                    "swept expired dedupe claims and old audit rows"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweep failed; will retry next period"),
        }
        match store
            .backend()
            .expire(now - retention.events_ms, EXPIRE_CHUNK)
            .await
        {
            Ok(x) if x.events + x.dead_letters + x.runs + x.backfilled > 0 => tracing::info!(
                events = x.events,
                dead_letters = x.dead_letters,
                runs = x.runs,
                backfilled = x.backfilled,
                "expired events and finished records past the retention"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention sweep failed; will retry next period"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
