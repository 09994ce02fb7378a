//! Per-binding flow control: `priority`, `debounce`, `dedupe_key` (with
//! `dedupe_retention`), `throttle` and `breaker` of a `[[triggers]]` table, as written
//! and resolved.
//!
//! The first three shape what ingest enqueues and the order claims take it in; the
//! store applies them in the transaction that writes the rows (`store::sqlite::schema`
//! says how). `throttle` shapes how the dispatcher starts attempts
//! (`dispatch::throttle`), `breaker` which bindings ingest evaluates
//! (`ingress::breaker`); both are parsed, checked and fingerprinted here.
//!
//! Each option is absent from a binding's fingerprint while unset (or, for
//! `priority`, 0), so a binding that sets none of them keeps the fingerprint it had
//! before they existed, and the rows recorded under it stay recognisable.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::filter::Expression;
use crate::duration::{duration_or, DurationSetting};

/// The priorities a binding may have; rows of a higher one are claimed first.
pub(crate) const PRIORITY_RANGE: RangeInclusive<i64> = -1000..=1000;

/// Default `dedupe_retention`: a day, long enough for a provider's redelivery storm.
pub(crate) const DEFAULT_DEDUPE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// `debounce`, resolved: rows of one binding with equal keys arriving within `window`
/// collapse to the last one.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Debounce {
    /// A CEL expression over the event giving its debounce key (`null` = the event is
    /// not debounced).
    pub key: Expression,
    /// How long a row waits for a later one of its key to supersede it.
    #[serde(rename = "window_ms", serialize_with = "crate::duration::serialize_ms")]
    pub window: Duration,
}

/// `dedupe_key` and `dedupe_retention`, resolved: an event whose key this binding saw
/// within `retention` enqueues nothing for it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct DedupeRule {
    /// A CEL expression over the event giving its dedupe key (`null` = not deduplicated).
    pub key: Expression,
    /// How long a key is remembered.
    #[serde(
        rename = "retention_ms",
        serialize_with = "crate::duration::serialize_ms"
    )]
    pub retention: Duration,
}

/// `throttle`, resolved: at most `starts` attempts of the binding start in any window
/// of `per`, in each process; the rest wait, due. Applied by the dispatcher
/// (`dispatch::throttle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Throttle {
    /// Attempts that may start in one period (at least 1).
    pub starts: u32,
    /// The period (positive).
    #[serde(rename = "per_ms", serialize_with = "crate::duration::serialize_ms")]
    pub per: Duration,
}

/// `breaker`, resolved: when the binding's filter (or a key expression) fails to
/// evaluate on `errors` events in a row, the binding skips events (counted, not
/// evaluated) for `cool_off`. Applied at ingest (`triggers::filter_breaker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BreakerSettings {
    /// Consecutive failures that open the breaker (at least 1).
    pub errors: u32,
    /// How long it stays open (positive).
    #[serde(
        rename = "cool_off_ms",
        serialize_with = "crate::duration::serialize_ms"
    )]
    pub cool_off: Duration,
}

/// `debounce = { key = '…', window = "5s" }` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DebounceConfig {
    /// CEL debounce key (required).
    pub key: Option<String>,
    /// The window (required, positive).
    pub window: Option<DurationSetting>,
}

/// `throttle = { starts = 10, per = "1s" }` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ThrottleConfig {
    /// Starts per period (required, at least 1).
    pub starts: Option<i64>,
    /// The period (required, positive).
    pub per: Option<DurationSetting>,
}

/// `breaker = { errors = 5, cool_off = "1m" }` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Consecutive failures that open it (required, at least 1).
    pub errors: Option<i64>,
    /// How long it stays open (required, positive).
    pub cool_off: Option<DurationSetting>,
}

/// A required, positive duration `name` of an option table.
fn required_duration(name: &str, d: Option<&DurationSetting>) -> Result<Duration, String> {
    match d {
        None => Err(format!("{name} is required")),
        Some(d) => duration_or(Some(d), Duration::ZERO, true).map_err(|e| format!("{name}: {e}")),
    }
}

/// A required count `name` of an option table, at least 1.
fn required_count(name: &str, n: Option<i64>) -> Result<u32, String> {
    match n {
        None => Err(format!("{name} is required")),
        Some(n) if n < 1 => Err(format!("{name} must be at least 1, not {n}")),
        Some(n) => u32::try_from(n).map_err(|_| format!("{name} {n} is too large")),
    }
}

/// Checks `priority`: an integer in [`PRIORITY_RANGE`].
pub(crate) fn resolve_priority(priority: Option<i64>) -> Result<i32, String> {
    match priority {
        None => Ok(0),
        Some(p) if PRIORITY_RANGE.contains(&p) => Ok(p as i32),
        Some(p) => Err(format!(
            "{p} is outside {}..={}",
            PRIORITY_RANGE.start(),
            PRIORITY_RANGE.end()
        )),
    }
}

impl DebounceConfig {
    /// Resolves the table, compiling the key as option `debounce` of `binding_id`.
    pub(crate) fn resolve(&self, binding_id: &str) -> crate::error::Result<Debounce> {
        let bad = |what: String| {
            crate::error::Error::Config(format!("trigger {binding_id:?}: debounce: {what}"))
        };
        let key = self
            .key
            .as_deref()
            .ok_or_else(|| bad("key is required".into()))?;
        let window = required_duration("window", self.window.as_ref()).map_err(bad)?;
        Ok(Debounce {
            key: Expression::compile(binding_id, "debounce", key)?,
            window,
        })
    }

    /// The table that resolves to `d` again.
    pub(crate) fn of(d: &Debounce) -> DebounceConfig {
        DebounceConfig {
            key: Some(d.key.source().to_owned()),
            window: Some(DurationSetting::millis(d.window)),
        }
    }
}

impl ThrottleConfig {
    /// Resolves the table; `Err` is the reason, for the caller to name the option.
    pub(crate) fn resolve(&self) -> Result<Throttle, String> {
        Ok(Throttle {
            starts: required_count("starts", self.starts)?,
            per: required_duration("per", self.per.as_ref())?,
        })
    }

    /// The table that resolves to `t` again.
    pub(crate) fn of(t: &Throttle) -> ThrottleConfig {
        ThrottleConfig {
            starts: Some(t.starts.into()),
            per: Some(DurationSetting::millis(t.per)),
        }
    }
}

impl BreakerConfig {
    /// Resolves the table; `Err` is the reason, for the caller to name the option.
    pub(crate) fn resolve(&self) -> Result<BreakerSettings, String> {
        Ok(BreakerSettings {
            errors: required_count("errors", self.errors)?,
            cool_off: required_duration("cool_off", self.cool_off.as_ref())?,
        })
    }

    /// The table that resolves to `b` again.
    pub(crate) fn of(b: &BreakerSettings) -> BreakerConfig {
        BreakerConfig {
            errors: Some(b.errors.into()),
            cool_off: Some(DurationSetting::millis(b.cool_off)),
        }
    }
}

/// Resolves `dedupe_key` and `dedupe_retention` of `binding_id`.
pub(crate) fn resolve_dedupe(
    binding_id: &str,
    key: Option<&str>,
    retention: Option<&DurationSetting>,
) -> crate::error::Result<Option<DedupeRule>> {
    let bad = |option: &str, what: String| {
        crate::error::Error::Config(format!("trigger {binding_id:?}: {option}: {what}"))
    };
    let Some(key) = key else {
        return match retention {
            Some(_) => Err(bad(
                "dedupe_retention",
                "needs dedupe_key, the key it remembers".into(),
            )),
            None => Ok(None),
        };
    };
    let retention = duration_or(retention, DEFAULT_DEDUPE_RETENTION, true)
        .map_err(|e| bad("dedupe_retention", e))?;
    Ok(Some(DedupeRule {
        key: Expression::compile(binding_id, "dedupe_key", key)?,
        retention,
    }))
}
