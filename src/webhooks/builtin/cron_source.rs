//! `cron`: a poll source whose schedule is its own. Each poll returns the fires due
//! since the cursor (the instant up to which every fire was stored), and asks to be
//! polled again at the next fire; the runtime stores the ticks and the new cursor in
//! one transaction, so a crash between the two is impossible.
//!
//! Each fire is an event of kind `tick` whose `occurred_at` is the scheduled instant,
//! deduplicated under `cron:{source}:{unix seconds}`, so two runtime processes sharing
//! a PostgreSQL store fire each tick once between them, and a tick re-fired after a
//! crash is a duplicate, not a second event. The first poll of a process applies the
//! source's `catch_up` mode to the fires missed while no process ran; later polls fire
//! every fire they find (a late poll is not an outage). On the very first start the
//! current time becomes the cursor, so downtime after that is caught up on even before
//! the first tick.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde::Deserialize;

use crate::error::Result;
use crate::inbound::{
    InboundConnector, InboundEvent, InboundSource, Polled, SourceContext, SourceKind,
};
use crate::webhooks::cron::{missed_fires, CatchUp, Schedule};

/// State key under which releases before inbound connectors kept a cron source's last
/// fire (unix ms); read once, when the source has no cursor yet.
pub const LAST_FIRE_KEY: &str = "last_fire_ms";

/// Most fires one poll returns: a minute schedule down for a week with
/// `catch_up = "all"` would otherwise flood the store with 10,000 ticks at start.
pub(crate) const MAX_CATCH_UP: usize = 1000;

/// The `cron` connector.
pub(crate) struct Cron;

/// A cron source's options.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CronOptions {
    /// The schedule (5 fields, or 6 with seconds first, or `@daily` etc.).
    schedule: Option<String>,
    /// IANA time zone. Default `UTC`.
    timezone: Option<String>,
    /// `skip` (default), `all` or `latest` for fires missed while down.
    catch_up: Option<String>,
    /// A table sent as each tick's payload. Default `{}`.
    payload: Option<toml::Value>,
}

#[async_trait]
impl InboundConnector for Cron {
    fn provider(&self) -> &str {
        "cron"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Poll]
    }

    async fn init(&self, ctx: SourceContext) -> Result<Box<dyn InboundSource>> {
        let o: CronOptions = ctx.options()?;
        super::checks::no_secrets(&ctx)?;
        let expression = o
            .schedule
            .ok_or_else(|| ctx.invalid("cron sources need `schedule`"))?;
        let tz = o.timezone.as_deref().unwrap_or("UTC");
        let schedule = Schedule::parse(&expression, tz).map_err(|e| ctx.invalid(&e.to_string()))?;
        let catch_up = match o.catch_up.as_deref() {
            None => CatchUp::default(),
            Some(s) => s
                .parse()
                .map_err(|e: crate::webhooks::cron::CronError| ctx.invalid(&e.to_string()))?,
        };
        let payload = match &o.payload {
            None => "{}".to_owned(),
            Some(v) => {
                serde_json::to_string(v).map_err(|e| ctx.invalid(&format!("payload: {e}")))?
            }
        };
        Ok(Box::new(CronSource {
            id: ctx.source_id().to_owned(),
            schedule,
            expression,
            catch_up,
            payload_json: serde_json::from_str(&payload).unwrap_or_default(),
            payload,
            legacy: ctx.state().get(LAST_FIRE_KEY).await?,
            caught_up: AtomicBool::new(false),
            last_fire_ms: AtomicI64::new(i64::MIN),
        }))
    }
}

/// A running cron source.
struct CronSource {
    id: String,
    schedule: Schedule,
    expression: String,
    catch_up: CatchUp,
    payload: String,
    payload_json: serde_json::Value,
    /// The last fire an older release stored, used as the first cursor.
    legacy: Option<String>,
    /// Whether this process's first poll (the one that catches up) has run.
    caught_up: AtomicBool,
    /// The last fire this process returned (for the admin view).
    last_fire_ms: AtomicI64,
}

fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
}

impl CronSource {
    fn tick(&self, at: DateTime<Utc>) -> InboundEvent {
        InboundEvent::new(
            "tick",
            format!("cron:{}:{}", self.id, at.timestamp()),
            self.payload_json.clone(),
        )
        .occurred_at(Some(at.timestamp_millis()))
        .with_body(self.payload.as_bytes())
    }

    /// Every fire in `(last, now]`, oldest first, at most [`MAX_CATCH_UP`].
    fn due(&self, last: DateTime<Utc>, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut fires = Vec::new();
        let mut at = last;
        while fires.len() < MAX_CATCH_UP {
            match self.schedule.next_after(at) {
                Some(next) if next <= now => {
                    fires.push(next);
                    at = next;
                }
                _ => break,
            }
        }
        fires
    }
}

#[async_trait]
impl InboundSource for CronSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Poll
    }

    async fn poll(&self, cursor: Option<&str>, now_ms: i64) -> Result<Polled> {
        let now = from_ms(now_ms);
        let last = cursor
            .or(self.legacy.as_deref())
            .and_then(|s| s.parse::<i64>().ok())
            .map(from_ms);
        let fires = match last {
            // The first start: now is the baseline.
            None => Vec::new(),
            Some(last) if !self.caught_up.load(Ordering::Acquire) => {
                let missed =
                    missed_fires(&self.schedule, Some(last), now, self.catch_up, MAX_CATCH_UP);
                for at in &missed {
                    tracing::info!(source = %self.id, at = %at, "catching up a missed cron fire");
                }
                missed
            }
            Some(last) => self.due(last, now),
        };
        self.caught_up.store(true, Ordering::Release);
        // After a catch-up that skipped, the cursor moves to now: the skipped fires
        // are not owed any more.
        let through = match (fires.last(), last) {
            (Some(f), _) if fires.len() == MAX_CATCH_UP => *f,
            (_, Some(l)) => now.max(l),
            (_, None) => now,
        };
        if let Some(f) = fires.last() {
            self.last_fire_ms
                .store(f.timestamp_millis(), Ordering::Release);
        }
        let events = fires.iter().map(|at| self.tick(*at)).collect();
        let polled = Polled::new(events, Some(through.timestamp_millis().to_string()));
        Ok(match self.schedule.next_after(through) {
            _ if fires.len() == MAX_CATCH_UP => polled.more(),
            Some(next) => polled.next_poll_at(next.timestamp_millis()),
            None => {
                tracing::warn!(source = %self.id, schedule = %self.expression, "the schedule never fires again");
                polled.next_poll_at(i64::MAX)
            }
        })
    }

    async fn describe(&self, _full: bool) -> serde_json::Value {
        let last = self.last_fire_ms.load(Ordering::Acquire);
        serde_json::json!({
            "schedule": self.expression,
            "timezone": self.schedule.timezone(),
            "catch_up": format!("{:?}", self.catch_up).to_lowercase(),
            "last_fire_ms": (last != i64::MIN).then_some(last),
        })
    }
}
