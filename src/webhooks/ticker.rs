//! The task behind one cron source: catch up on fires missed while the process was
//! down (per the source's mode), then fire on schedule until shutdown.
//!
//! Each fire is a [`TriggerEvent`] (provider `cron`, kind `tick`, `occurred_at` the
//! scheduled instant) stored through the same group commit as webhooks under the key
//! `cron:{source}:{unix seconds}`, so two runtime processes sharing a PostgreSQL store
//! fire each tick once between them, and a tick re-fired after a crash (stored, but
//! the last-fire mark not yet written) is a duplicate, not a second event. The last
//! fire is persisted after each tick. On the very first start the current time is
//! persisted as the baseline, so downtime after that is caught up on even before the
//! first tick.
//!
//! Each tick is matched against the trigger bindings once, before it is stored; its
//! outbox rows commit with it, and a retried store write carries the same rows.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tokio_util::sync::CancellationToken;

use super::binding_match::BindingMatcher;
use super::cron::missed_fires;
use super::source::{CronRule, SourceSpec};
use crate::backoff::{Backoff, BackoffPolicy};
use crate::store::{now_ms, Store};
use crate::triggers::{trace_id_from, SignatureStatus, TriggerEvent};

/// State key of a cron source's last fire (unix ms).
pub const LAST_FIRE_KEY: &str = "last_fire_ms";

/// Most missed fires run by `catch_up = "all"`: a minute schedule down for a week
/// would otherwise flood the store with 10,000 ticks at start.
pub(crate) const MAX_CATCH_UP: usize = 1000;

/// Longest single sleep: the schedule is re-read against the wall clock at least this
/// often, so a clock step (NTP, suspend) delays a fire by at most this much.
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// Retry pacing when the store refuses a tick: 250 ms doubling to 30 s, jittered like
/// reconnects (the crate's one backoff), so the cron sources of several processes
/// sharing a recovering PostgreSQL do not retry in step.
fn retry_policy() -> BackoffPolicy {
    BackoffPolicy::new(Duration::from_millis(250), Duration::from_secs(30))
}

fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
}

/// A cron source and what its ticks need: the store and the trigger router.
pub(crate) struct Ticker {
    /// The source.
    pub(crate) spec: SourceSpec,
    /// Its schedule and payload.
    pub(crate) rule: CronRule,
    /// Where ticks are stored.
    pub(crate) store: Store,
    /// The bindings ticks are matched against.
    pub(crate) router: BindingMatcher,
}

/// Runs a cron source until `cancel` fires.
pub(crate) async fn run(ticker: Ticker, cancel: CancellationToken) {
    let (spec, rule, store) = (&ticker.spec, &ticker.rule, &ticker.store);
    let id = spec.id.clone();
    let Some(last) = retry(&cancel, || store.backend().get_state(&id, LAST_FIRE_KEY)).await else {
        return;
    };
    let now = Utc::now();
    let last = last.and_then(|s| s.parse::<i64>().ok()).map(from_ms);
    let mut cursor = match last {
        None => {
            let baseline = now.timestamp_millis().to_string();
            if retry(&cancel, || {
                store
                    .backend()
                    .put_state(&id, LAST_FIRE_KEY, Some(&baseline))
            })
            .await
            .is_none()
            {
                return;
            }
            now
        }
        Some(last) => {
            for at in missed_fires(&rule.schedule, Some(last), now, rule.catch_up, MAX_CATCH_UP) {
                tracing::info!(source = %id, at = %at, "catching up a missed cron fire");
                if !fire(&ticker, at, &cancel).await {
                    return;
                }
            }
            now.max(last)
        }
    };
    loop {
        let Some(next) = rule.schedule.next_after(cursor) else {
            tracing::warn!(source = %id, schedule = %rule.expression, "the schedule never fires again; the cron source stops");
            return;
        };
        loop {
            let wait = (next - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            if wait.is_zero() {
                break;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait.min(MAX_SLEEP)) => {}
            }
        }
        if !fire(&ticker, next, &cancel).await {
            return;
        }
        cursor = next;
    }
}

/// Stores one tick (with its outbox rows) and then records it as the last fire. False
/// when cancelled first.
async fn fire(ticker: &Ticker, at: DateTime<Utc>, cancel: &CancellationToken) -> bool {
    let Ticker {
        spec,
        rule,
        store,
        router,
    } = ticker;
    let at_ms = at.timestamp_millis();
    let event = TriggerEvent::new(
        &spec.id,
        "cron",
        "tick".into(),
        now_ms(),
        Some(at_ms),
        format!("cron:{}:{}", spec.id, at.timestamp()),
        trace_id_from(None),
        &spec.tenant,
        Default::default(),
        rule.payload.clone().into_bytes(),
        serde_json::from_str(&rule.payload).unwrap_or_default(),
        SignatureStatus::Internal,
    );
    let rows = router.route(&event);
    if retry(cancel, || {
        // The claim runs from now, not from the scheduled time: a tick caught up after
        // an outage longer than the retention must still deduplicate.
        store.append_enqueue(event.clone(), now_ms() + spec.retention_ms, rows.clone())
    })
    .await
    .is_none()
    {
        return false;
    }
    let mark = at_ms.to_string();
    retry(cancel, || {
        store
            .backend()
            .put_state(&spec.id, LAST_FIRE_KEY, Some(&mark))
    })
    .await
    .is_some()
}

/// Runs `op` until it succeeds (backing off between failures) or `cancel` fires.
async fn retry<T, F, Fut>(cancel: &CancellationToken, mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<T>>,
{
    let mut backoff = Backoff::new(retry_policy());
    loop {
        let delay = match op().await {
            Ok(v) => return Some(v),
            Err(e) => {
                let delay = backoff.next_delay(rand::random());
                tracing::warn!(error = %e, retry_in = ?delay, "cron source: store operation failed");
                delay
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
