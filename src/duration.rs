//! Durations as `switchboard.toml` writes them: `"250ms"`, `"30s"`, `"5m"`, `"1h"`,
//! `"7d"`, or a bare integer meaning seconds. One parser for every option that takes a
//! duration, so they all read and fail the same way.
//!
//! Parsing keeps the text until `RuntimeConfig::resolve` (and each section's own resolve),
//! where the caller turns a bad value into an error naming its section and option.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A duration as written: a string with a unit, or an integer number of seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum DurationSetting {
    /// A bare integer: seconds. Signed so a negative value gets this module's message
    /// rather than the TOML decoder's.
    Seconds(i64),
    /// A number and a unit: `ms`, `s`, `m`, `h` or `d`.
    Text(String),
}

impl DurationSetting {
    /// The duration, or why the value is not one (for the caller to prefix with the
    /// option's name).
    pub fn get(&self) -> Result<Duration, String> {
        match self {
            DurationSetting::Seconds(s) => u64::try_from(*s)
                .map(Duration::from_secs)
                .map_err(|_| format!("{s} is negative; a duration is zero or more")),
            DurationSetting::Text(t) => parse_duration(t),
        }
    }
}

impl DurationSetting {
    /// `d` as a setting in whole milliseconds (`"1500ms"`): how stored definitions
    /// write durations, so they resolve to the same value again.
    pub(crate) fn millis(d: Duration) -> DurationSetting {
        DurationSetting::Text(format!("{}ms", d.as_millis()))
    }
}

/// Serialises a duration as whole milliseconds (`#[serde(serialize_with)]`), the unit
/// the admin API and fingerprints use.
pub(crate) fn serialize_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// `setting`'s duration, or `default` when the option is not given. `Err` is the
/// reason, for the caller to prefix with the option: a malformed value, or zero where
/// `positive` is asked for (a timeout or a lease of zero would never let anything run).
pub(crate) fn duration_or(
    setting: Option<&DurationSetting>,
    default: Duration,
    positive: bool,
) -> Result<Duration, String> {
    let d = setting.map_or(Ok(default), DurationSetting::get)?;
    if positive && d.is_zero() {
        return Err("must be positive".into());
    }
    Ok(d)
}

/// Parses `"250ms"`, `"30s"`, `"5m"`, `"1h"`, `"7d"` (a whole number and one unit;
/// surrounding spaces are ignored).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{text:?} is not a duration; write a whole number and a unit, like \"250ms\", \"30s\", \"5m\", \"1h\" or \"7d\", or an integer of seconds"
        )
    };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let millis_per: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(millis_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long a duration"))
}

/// Longest duration in seconds a `*_secs` option may name: ten years. Far beyond any
/// sensible retention or tolerance, and small enough that milliseconds of it, added to
/// a current timestamp, cannot overflow an `i64` (the fuzzer found options that did).
pub(crate) const MAX_SECS: i64 = 10 * 365 * 86_400;

/// `secs` of option `name` in milliseconds, refused past [`MAX_SECS`].
pub(crate) fn secs_to_ms(name: &str, secs: i64) -> crate::error::Result<i64> {
    if secs > MAX_SECS {
        return Err(crate::error::Error::Config(format!(
            "{name} = {secs}: at most {MAX_SECS} (10 years)"
        )));
    }
    Ok(secs * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_bare_seconds_parse() {
        for (text, ms) in [
            ("250ms", 250),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("7d", 604_800_000),
            (" 0s ", 0),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        assert_eq!(
            DurationSetting::Seconds(90).get(),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            DurationSetting::Text("2h".into()).get(),
            Ok(Duration::from_secs(7200))
        );
    }

    #[test]
    fn malformed_negative_and_overflowing_durations_say_what_to_write() {
        for text in ["", "30", "s", "1.5s", "5 m", "-3s", "10w", "3sec"] {
            let e = parse_duration(text).unwrap_err();
            assert!(e.contains("\"30s\""), "{text:?}: {e}");
        }
        assert!(DurationSetting::Seconds(-1)
            .get()
            .unwrap_err()
            .contains("negative"));
        assert_eq!(
            duration_or(None, Duration::from_secs(3), true),
            Ok(Duration::from_secs(3))
        );
        let zero = DurationSetting::Seconds(0);
        assert_eq!(
            duration_or(Some(&zero), Duration::ZERO, false),
            Ok(Duration::ZERO)
        );
        assert_eq!(
            duration_or(Some(&zero), Duration::ZERO, true).unwrap_err(),
            "must be positive"
        );
        let huge = parse_duration("99999999999999999d").unwrap_err();
        assert!(huge.contains("too long"), "{huge}");
    }
}
