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
use crate::ingress::cron::{missed_fires, CatchUp, Schedule};

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
                .map_err(|e: crate::ingress::cron::CronError| ctx.invalid(&e.to_string()))?,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-01-01T00:00:30Z: half a minute past a minute boundary.
    const NOW: i64 = 1_704_067_230_000;
    const MINUTE: i64 = 60_000;

    async fn source(options: &str, state: &[(&str, &str)]) -> Box<dyn InboundSource> {
        let options: toml::Table = toml::from_str(options).unwrap();
        let ctx = SourceContext::detached("c", "cron", "t", options, Vec::new());
        for (k, v) in state {
            ctx.state().put(k, Some(v)).await.unwrap();
        }
        Cron.init(ctx).await.unwrap()
    }

    fn at(polled: &Polled) -> Vec<i64> {
        polled
            .events
            .iter()
            .map(|e| e.occurred_at_ms.unwrap())
            .collect()
    }

    #[tokio::test]
    async fn the_first_start_fires_nothing_and_takes_now_as_its_cursor() {
        let s = source("schedule = \"0 * * * * *\"", &[]).await;
        let p = s.poll(None, NOW).await.unwrap();
        assert!(p.events.is_empty());
        assert_eq!(p.cursor.as_deref(), Some(NOW.to_string().as_str()));
        assert_eq!(
            p.next_poll_at_ms,
            Some(NOW + 30_000),
            "the next minute boundary"
        );
    }

    #[tokio::test]
    async fn the_first_poll_catches_up_by_mode_and_later_polls_fire_every_fire() {
        let ten_ago = (NOW - 10 * MINUTE).to_string();
        for (mode, expect) in [("all", 10), ("latest", 1), ("skip", 0)] {
            let s = source(
                &format!("schedule = \"0 * * * * *\"\ncatch_up = \"{mode}\"\npayload = {{ job = \"r\" }}"),
                &[],
            )
            .await;
            let first = s.poll(Some(&ten_ago), NOW).await.unwrap();
            assert_eq!(first.events.len(), expect, "{mode}");
            assert_eq!(
                first.cursor.as_deref(),
                Some(NOW.to_string().as_str()),
                "{mode}"
            );
            // Two minutes later (a slow poll, not an outage): both fires, whatever the mode.
            let later = s
                .poll(first.cursor.as_deref(), NOW + 2 * MINUTE)
                .await
                .unwrap();
            assert_eq!(at(&later), [NOW + 30_000, NOW + 90_000], "{mode}");
            let tick = &later.events[0];
            assert_eq!(tick.kind, "tick");
            assert_eq!(tick.dedupe_key, format!("cron:c:{}", (NOW + 30_000) / 1000));
            assert_eq!(tick.payload["job"], "r");
        }
    }

    #[tokio::test]
    async fn an_older_releases_last_fire_is_the_first_cursor() {
        let last = (NOW - 3 * MINUTE).to_string();
        let s = source(
            "schedule = \"0 * * * * *\"\ncatch_up = \"all\"",
            &[(LAST_FIRE_KEY, &last)],
        )
        .await;
        let p = s.poll(None, NOW).await.unwrap();
        assert_eq!(p.events.len(), 3);
        let shown = s.describe(false).await;
        assert_eq!(shown["last_fire_ms"], NOW - 30_000);
        assert_eq!(shown["catch_up"], "all");
    }

    #[tokio::test]
    async fn options_are_checked() {
        let options: toml::Table = toml::from_str("timezone = \"UTC\"").unwrap();
        let ctx = SourceContext::detached("c", "cron", "t", options, Vec::new());
        let err = Cron.init(ctx).await.err().unwrap().to_string();
        assert!(err.contains("need `schedule`"), "{err}");
        let options: toml::Table = toml::from_str("schedule = \"* * * * *\"").unwrap();
        let ctx = SourceContext::detached(
            "c",
            "cron",
            "t",
            options,
            vec![crate::secret::Secret::new("s")],
        );
        let err = Cron.init(ctx).await.err().unwrap().to_string();
        assert!(err.contains("takes no secret_env"), "{err}");
    }
}
