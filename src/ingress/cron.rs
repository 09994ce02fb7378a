//! Cron schedules evaluated on a time zone's wall clock, and catch-up of fires missed
//! while the process was down.
//!
//! Everything here is pure: no I/O, no clock. The caller passes "now" in, so the rules
//! can be tested exactly and replayed.
//!
//! # Syntax
//!
//! See [`Schedule::parse`]: classic 5-field cron, an optional leading seconds field,
//! names for months and days, the `@daily`-style macros and the Vixie cron rule for
//! day-of-month versus day-of-week.
//!
//! # Time zones and daylight saving
//!
//! Fields are matched against the **local wall clock** of the schedule's IANA zone, so
//! `0 9 * * *` in `Europe/Berlin` fires at 09:00 Berlin time all year. Two kinds of
//! schedule are told apart by the hour field, because they mean different things when
//! the clock jumps:
//!
//! * **Hour-specific** (the hour field does not match all 24 hours, e.g. `30 2 * * *`):
//!   the schedule names moments of the day, and each matching wall-clock time of a day
//!   fires exactly once. A time skipped by a spring-forward gap fires at the first
//!   instant after the gap (02:30 in America/New_York on 2026-03-08 fires at 03:00 EDT,
//!   07:00 UTC), so a daily job is never lost; several skipped times that land on the
//!   same instant fire once. A time repeated by a fall-back overlap fires only at its
//!   first occurrence (01:30 on 2026-11-01 fires at 01:30 EDT, 05:30 UTC).
//! * **Every-hour** (the hour field matches all 24 hours: `*`, `*/1`, `0-23`, …): the
//!   schedule follows real elapsed time. It fires at every real instant whose wall clock
//!   matches, so in an overlap it fires in both occurrences (`0 * * * *` fires at 05:00
//!   and 06:00 UTC on 2026-11-01, both 01:00 in New York) and wall-clock times skipped
//!   by a gap do not fire (the next real hour is just as good). `*/15 * * * *` thus
//!   fires every 15 real minutes straight through both transitions.
//!
//! Either way the fires form one fixed set of instants, and [`Schedule::next_after`]
//! returns the smallest one strictly after its argument, so iterating it is strictly
//! increasing, never repeats and never goes backwards across a transition.
//!
//! Fires are whole seconds. A zone whose history has a wall-clock time occurring more
//! than twice, or offsets beyond ±15 hours, is outside what this module promises.
//!
//! Work is bounded: [`Schedule::next_after`] looks [`SEARCH_YEARS`] ahead at most, and
//! [`missed_fires`] never walks a long outage fire by fire.

use std::collections::VecDeque;
use std::str::FromStr;

use chrono::offset::LocalResult;
use chrono::{
    DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// How many years past a candidate time [`Schedule::next_after`] searches before it
/// concludes that the schedule can never fire (leap days can be eight years apart).
pub(crate) const SEARCH_YEARS: i32 = 9;

/// The most fires [`missed_fires`] returns in [`CatchUp::All`] mode, whatever `max` says,
/// so a misconfigured limit cannot flood a consumer after a long outage.
pub(crate) const MAX_CATCH_UP_FIRES: usize = 10_000;

/// The most [`Schedule::next_after`] evaluations one [`missed_fires`] call spends in
/// [`CatchUp::All`] mode, which bounds its cost however long the outage was.
pub(crate) const CATCH_UP_SCAN_BUDGET: usize = 100_000;

/// Larger than any real UTC offset (-12 h … +14 h): the search window around an instant.
const MAX_OFFSET_SECS: i64 = 15 * 3600;
/// Longest spring-forward gap looked for (Samoa skipped a whole day in 2011).
const MAX_GAP_SECS: i64 = 4 * 86_400;
/// How many gaps in a row one search may step over before giving up.
const MAX_GAP_HOPS: usize = 64;
/// Bit mask of an hour field that matches every hour.
const ALL_HOURS: u64 = (1 << 24) - 1;

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Why an expression, time zone or catch-up mode was rejected. Every message names the
/// field (or zone) and what would have been accepted, so it can be shown to whoever
/// wrote the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The expression was empty or only whitespace, so there is nothing to schedule.
    #[error("cron expression is empty; expected 5 fields `minute hour day-of-month month day-of-week`, 6 with a leading `second`, or a macro such as `@daily`")]
    Empty,
    /// The expression had neither 5 nor 6 whitespace-separated fields.
    #[error("cron expression `{expr}` has {found} fields; expected 5 (`minute hour day-of-month month day-of-week`) or 6 (a leading `second` field first)")]
    FieldCount {
        /// The expression as given, trimmed.
        expr: String,
        /// How many fields it had.
        found: usize,
    },
    /// An `@name` macro that is not one of the supported ones.
    #[error("unknown cron macro `{name}`; expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly")]
    UnknownMacro {
        /// The macro as given, including the `@`.
        name: String,
    },
    /// One field was malformed: a bad number or name, a value out of range, a backwards
    /// range, a zero step, an empty list entry or a misplaced `?`.
    #[error("invalid {field} field `{value}`: {problem}")]
    InvalidField {
        /// Which field: `second`, `minute`, `hour`, `day-of-month`, `month` or `day-of-week`.
        field: &'static str,
        /// The offending list entry (or the whole field).
        value: String,
        /// What is wrong and what would be accepted, e.g. `60 is out of range; allowed: 0-59`.
        problem: String,
    },
    /// The time zone is not an IANA zone name known to the bundled tz database.
    #[error("unknown time zone `{zone}`; use an IANA name such as `Europe/Berlin`, `America/New_York` or `UTC` (names are case-sensitive)")]
    UnknownTimeZone {
        /// The zone as given.
        zone: String,
    },
    /// A catch-up mode other than `skip`, `all` or `latest`.
    #[error("unknown catch-up mode `{value}`; expected `skip`, `all` or `latest`")]
    UnknownCatchUp {
        /// The mode as given.
        value: String,
    },
}

/// What one cron field accepts.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// Upper end of `*` and `a/n`: day-of-week stops at Saturday so Sunday is not doubled.
    open_max: u32,
    allowed: &'static str,
    /// Names for `min`, `min + 1`, … (months and days).
    names: &'static [&'static str],
    /// Whether `?` is accepted (the two day fields).
    question: bool,
}

const SECOND: Field = Field::new("second", 0, 59, "0-59", &[], false);
const MINUTE: Field = Field::new("minute", 0, 59, "0-59", &[], false);
const HOUR: Field = Field::new("hour", 0, 23, "0-23", &[], false);
const DAY_OF_MONTH: Field = Field::new("day-of-month", 1, 31, "1-31, `*` or `?`", &[], true);
const MONTH: Field = Field::new("month", 1, 12, "1-12 or JAN-DEC", &MONTH_NAMES, false);
const DAY_OF_WEEK: Field = Field {
    open_max: 6,
    ..Field::new("day-of-week", 0, 7, DOW_ALLOWED, &DAY_NAMES, true)
};
const DOW_ALLOWED: &str = "0-7 (0 and 7 are Sunday), SUN-SAT, `*` or `?`";

impl Field {
    const fn new(
        name: &'static str,
        min: u32,
        max: u32,
        allowed: &'static str,
        names: &'static [&'static str],
        question: bool,
    ) -> Field {
        let open_max = max;
        Field {
            name,
            min,
            max,
            open_max,
            allowed,
            names,
            question,
        }
    }

    fn error(&self, value: &str, problem: impl Into<String>) -> CronError {
        CronError::InvalidField {
            field: self.name,
            value: value.to_owned(),
            problem: problem.into(),
        }
    }

    /// Parses a whole field; the flag says whether it was unrestricted (`*` or `?`).
    fn parse(&self, text: &str) -> Result<(u64, bool), CronError> {
        if text == "*" || (text == "?" && self.question) {
            return Ok((self.range_mask(self.min, self.open_max, 1), true));
        }
        if text == "?" {
            let problem = "`?` is only allowed in the day-of-month and day-of-week fields; use `*`";
            return Err(self.error(text, problem));
        }
        let mut mask = 0;
        for item in text.split(',') {
            if item.is_empty() {
                return Err(self.error(text, "empty list entry; check for a stray comma"));
            }
            mask |= self.parse_item(item)?;
        }
        Ok((mask, false))
    }

    /// One list entry: `*`, `n`, `a-b`, each optionally followed by `/step`.
    fn parse_item(&self, item: &str) -> Result<u64, CronError> {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => match step.parse::<u32>() {
                Ok(n) if n >= 1 && step.bytes().all(|b| b.is_ascii_digit()) => (base, Some(n)),
                _ => {
                    let problem = "a step must be a whole number of at least 1, as in `*/5`";
                    return Err(self.error(item, problem));
                }
            },
            None => (item, None),
        };
        let (lo, hi) = if base == "*" {
            (self.min, self.open_max)
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b) = (self.value(a, item)?, self.value(b, item)?);
            if a > b {
                let problem = "the range runs backwards; put the smaller value first \
                               (wrap-around ranges are not supported, use a list such as `22-23,0-2`)";
                return Err(self.error(item, problem));
            }
            (a, b)
        } else {
            let v = self.value(base, item)?;
            (v, step.map_or(v, |_| self.open_max.max(v)))
        };
        Ok(self.range_mask(lo, hi, step.unwrap_or(1)))
    }

    fn value(&self, text: &str, item: &str) -> Result<u32, CronError> {
        if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
            return Ok(self.min + i as u32);
        }
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        let (v, allowed) = (text.parse::<u32>().ok().filter(|_| digits), self.allowed);
        match v {
            Some(v) if (self.min..=self.max).contains(&v) => Ok(v),
            Some(v) => Err(self.error(item, format!("{v} is out of range; allowed: {allowed}"))),
            None => Err(self.error(
                item,
                format!("`{text}` is not a valid value; allowed: {allowed}"),
            )),
        }
    }

    fn range_mask(&self, lo: u32, hi: u32, step: u32) -> u64 {
        (lo..=hi)
            .step_by(step as usize)
            // Only day-of-week stops `*` short of its max: 7 is Sunday again, i.e. 0.
            .map(|v| if v > self.open_max { v - 7 } else { v })
            .fold(0, |mask, v| mask | 1 << v)
    }
}

/// A parsed cron schedule bound to an IANA time zone. Parse once, then ask
/// [`Schedule::next_after`] for fire instants; the schedule holds no clock or state, so
/// one value can be shared by any number of callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    tz: Tz,
    tz_name: String,
    seconds: u64,
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Both day fields restricted: a day matches if EITHER matches (Vixie cron).
    day_or: bool,
}

impl Schedule {
    /// Parses `expr` and binds it to the zone `tz`, so configuration errors surface at
    /// load time rather than at the first fire.
    ///
    /// `expr`: 5 fields `minute hour day-of-month month day-of-week`, or 6 fields with a
    /// leading `second` field (5 fields fire at second 0). Each field is `*`, `?`
    /// (day-of-month and day-of-week only, same as `*`), or a comma list of numbers,
    /// ranges `a-b`, and steps `*/n`, `a-b/n` and `a/n` (`a` to the field's end). Months
    /// may be written JAN-DEC and days SUN-SAT, case-insensitively; day-of-week takes
    /// 0-7 with both 0 and 7 meaning Sunday. The macros `@yearly`, `@annually`,
    /// `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly` stand for the usual
    /// expressions.
    ///
    /// Day-of-month and day-of-week: if both are restricted (neither is exactly `*` or
    /// `?`), a day matches when EITHER matches, as in Vixie cron (`0 0 1 * MON` is the
    /// 1st of the month and every Monday); otherwise both must match.
    ///
    /// `tz`: an IANA name like `Europe/Berlin` or `UTC`, matched case-sensitively.
    pub fn parse(expr: &str, tz: &str) -> Result<Schedule, CronError> {
        let trimmed = expr.trim();
        let expanded = match trimmed.strip_prefix('@') {
            Some(name) => match name.to_ascii_lowercase().as_str() {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => {
                    return Err(CronError::UnknownMacro {
                        name: trimmed.into(),
                    })
                }
            },
            None => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (second, rest) = match fields.len() {
            0 => return Err(CronError::Empty),
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            found => {
                return Err(CronError::FieldCount {
                    expr: trimmed.to_owned(),
                    found,
                })
            }
        };
        let (seconds, _) = SECOND.parse(second)?;
        let (minutes, _) = MINUTE.parse(rest[0])?;
        let (hours, _) = HOUR.parse(rest[1])?;
        let (days_of_month, dom_any) = DAY_OF_MONTH.parse(rest[2])?;
        let (months, _) = MONTH.parse(rest[3])?;
        let (days_of_week, dow_any) = DAY_OF_WEEK.parse(rest[4])?;
        let zone: Tz = tz.parse().map_err(|_| CronError::UnknownTimeZone {
            zone: tz.to_owned(),
        })?;
        Ok(Schedule {
            tz: zone,
            tz_name: tz.to_owned(),
            seconds,
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            day_or: !dom_any && !dow_any,
        })
    }

    /// The time zone name as given to [`Schedule::parse`], for display and for storing
    /// next to the expression.
    pub fn timezone(&self) -> &str {
        &self.tz_name
    }

    /// The first fire instant strictly after `after`, so a caller that just fired at `t`
    /// asks for `next_after(t)` and never fires `t` twice. Fires are whole seconds and
    /// follow the daylight-saving rules in the module documentation; iterating this is
    /// strictly increasing across transitions.
    ///
    /// `None` only if the schedule cannot fire within [`SEARCH_YEARS`] years (e.g. Feb
    /// 30), which is detected by checking days, not by looping forever.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Whole-second fires strictly after `after` are exactly those after its floor.
        let t = after.timestamp();
        let lt = self.local(t)?;
        // Smallest wall time first reached after `t` (past the repeated hour, if `t` is
        // inside an overlap). `reach` is monotonic, hence the binary search.
        let reaches_after = |w: i64| self.reach(w).is_none_or(|s| s > t);
        let x = if reaches_after(lt + 1) {
            lt + 1
        } else {
            first_true(lt + 1, t + MAX_OFFSET_SECS, reaches_after)
        };
        let fire = if self.hours == ALL_HOURS {
            // Every real instant whose wall clock matches: first occurrences via `reach`,
            // second occurrences in an overlap via `leave`.
            let first = self.next_existing_match(x).and_then(|w| self.reach(w));
            let lt1 = self.local(t + 1)?;
            let leaves_after = |w: i64| self.leave(w).is_none_or(|s| s > t);
            let y = if leaves_after(lt1 - 1) {
                first_true(t - MAX_OFFSET_SECS, lt1 - 1, leaves_after)
            } else {
                lt1
            };
            let second = self.next_existing_match(y).and_then(|w| self.leave(w));
            first.into_iter().chain(second).min()
        } else {
            self.next_match_wall(x).and_then(|w| self.reach(w))
        }?;
        DateTime::from_timestamp(fire, 0)
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        let dom = has(self.days_of_month, date.day());
        let dow = has(self.days_of_week, date.weekday().num_days_from_sunday());
        (dom && dow) || (self.day_or && (dom || dow))
    }

    /// Earliest `(h, m, s)` at or after the given time of day matching the time fields.
    fn time_at_or_after(&self, (mut h, mut m, mut s): (u32, u32, u32)) -> Option<(u32, u32, u32)> {
        loop {
            let hh = next_bit(self.hours, h)?;
            if hh != h {
                (h, m, s) = (hh, 0, 0);
            }
            let Some(mm) = next_bit(self.minutes, m) else {
                (h, m, s) = (h + 1, 0, 0);
                continue;
            };
            if mm != m {
                (m, s) = (mm, 0);
            }
            match next_bit(self.seconds, s) {
                Some(ss) => return Some((h, m, ss)),
                None => (m, s) = (m + 1, 0),
            }
        }
    }

    /// First wall-clock time at or after `from` matching every field, ignoring the zone.
    /// Wall times are seconds of a naive time read as if it were UTC.
    fn next_match_wall(&self, from: i64) -> Option<i64> {
        let from = naive(from)?;
        let limit = from.year().saturating_add(SEARCH_YEARS);
        let mut date = from.date();
        let mut hms = (from.hour(), from.minute(), from.second());
        while date.year() <= limit {
            if !has(self.months, date.month()) {
                let (year, month) = match next_bit(self.months, date.month() + 1) {
                    Some(month) => (date.year(), month),
                    None => (date.year() + 1, self.months.trailing_zeros()),
                };
                date = NaiveDate::from_ymd_opt(year, month, 1)?;
                hms = (0, 0, 0);
                continue;
            }
            if self.day_matches(date) {
                if let Some((h, m, s)) = self.time_at_or_after(hms) {
                    return Some(date.and_hms_opt(h, m, s)?.and_utc().timestamp());
                }
            }
            date = date.succ_opt()?;
            hms = (0, 0, 0);
        }
        None
    }

    /// Like [`Schedule::next_match_wall`], skipping wall times that do not exist.
    fn next_existing_match(&self, mut from: i64) -> Option<i64> {
        for _ in 0..MAX_GAP_HOPS {
            let w = self.next_match_wall(from)?;
            match self.resolve(w)? {
                LocalResult::None => from = self.gap_end(w)?,
                _ => return Some(w),
            }
        }
        None
    }

    /// Wall seconds shown by the zone's clock at instant `s`.
    fn local(&self, s: i64) -> Option<i64> {
        let utc = DateTime::from_timestamp(s, 0)?.naive_utc();
        let offset = self.tz.offset_from_utc_datetime(&utc).fix();
        Some(s + i64::from(offset.local_minus_utc()))
    }

    fn resolve(&self, w: i64) -> Option<LocalResult<DateTime<Tz>>> {
        Some(self.tz.from_local_datetime(&naive(w)?))
    }

    /// First existing wall time at or after `w` (the end of the gap `w` falls in).
    fn gap_end(&self, w: i64) -> Option<i64> {
        let exists = |x: i64| !matches!(self.resolve(x), Some(LocalResult::None));
        let (mut lo, mut step) = (w, 1);
        while !exists(w + step) {
            if step > MAX_GAP_SECS {
                return None;
            }
            lo = w + step;
            step *= 2;
        }
        Some(first_true(lo, w + step, exists))
    }

    /// The first instant at which the wall clock shows `w` or later: the first occurrence
    /// of an existing time, the end of the gap for a skipped one. Monotonic in `w`.
    fn reach(&self, w: i64) -> Option<i64> {
        let earliest = |r: LocalResult<DateTime<Tz>>| match r {
            LocalResult::Single(x) | LocalResult::Ambiguous(x, _) => Some(x.timestamp()),
            LocalResult::None => None,
        };
        match self.resolve(w)? {
            LocalResult::None => earliest(self.resolve(self.gap_end(w)?)?),
            r => earliest(r),
        }
    }

    /// The last whole-second instant at which the wall clock shows `w` or earlier: the
    /// second occurrence of a repeated time. Monotonic in `w`.
    fn leave(&self, w: i64) -> Option<i64> {
        match self.resolve(w)? {
            LocalResult::Single(x) | LocalResult::Ambiguous(_, x) => Some(x.timestamp()),
            LocalResult::None => Some(self.reach(w)? - 1),
        }
    }
}

fn naive(wall: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp(wall, 0).map(|d| d.naive_utc())
}

fn has(mask: u64, v: u32) -> bool {
    v < 64 && mask & (1 << v) != 0
}

fn next_bit(mask: u64, from: u32) -> Option<u32> {
    let rest = mask.checked_shr(from)?.checked_shl(from)?;
    (rest != 0).then(|| rest.trailing_zeros())
}

/// Smallest `x` in `(lo, hi]` with `pred(x)`, given `!pred(lo)`, `pred(hi)` and `pred`
/// monotonic (false, then true).
fn first_true(mut lo: i64, mut hi: i64, pred: impl Fn(i64) -> bool) -> i64 {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// What to do with fires missed while the process was down: a job that sends a daily
/// report may want only the latest, an ingest job every one, a heartbeat none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CatchUp {
    /// Run nothing that was missed; resume with the next regular fire. The default,
    /// because replaying is a decision a job's author has to make.
    #[default]
    Skip,
    /// Run every missed fire, oldest first, up to the caller's limit.
    All,
    /// Run the most recent missed fire only, once.
    Latest,
}

impl FromStr for CatchUp {
    type Err = CronError;

    /// Accepts `skip`, `all` or `latest` (ASCII case-insensitive), as written in
    /// configuration files.
    fn from_str(s: &str) -> Result<Self, CronError> {
        match s.to_ascii_lowercase().as_str() {
            "skip" => Ok(CatchUp::Skip),
            "all" => Ok(CatchUp::All),
            "latest" => Ok(CatchUp::Latest),
            _ => Err(CronError::UnknownCatchUp { value: s.into() }),
        }
    }
}

/// Missed fires to run now, oldest first: the fires `f` with `last_fire < f <= now`,
/// filtered by `mode`. `last_fire == None` (never fired) gives none, because a new
/// source does not back-fill history; so does `now <= last_fire`.
///
/// * With [`CatchUp::Skip`], none.
/// * With [`CatchUp::All`], all of them, but at most `max` (itself capped at
///   [`MAX_CATCH_UP_FIRES`]), keeping the most recent. The outage is not walked from
///   `last_fire`: windows ending at `now` of 64 s, 128 s, 256 s, … are scanned until one
///   holds the limit or reaches back to `last_fire`, so the cost follows the number of
///   fires returned, not the length of the outage. At most [`CATCH_UP_SCAN_BUDGET`] fires
///   are scanned in all; if that runs out, the fires of the last fully scanned window
///   are returned (still the most recent ones, just fewer).
/// * With [`CatchUp::Latest`], only the most recent, found by binary search over the
///   outage (about 32 [`Schedule::next_after`] calls for a century), ignoring `max`.
pub(crate) fn missed_fires(
    schedule: &Schedule,
    last_fire: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    mode: CatchUp,
    max: usize,
) -> Vec<DateTime<Utc>> {
    let Some(last) = last_fire else {
        return Vec::new();
    };
    if now <= last {
        return Vec::new();
    }
    match mode {
        CatchUp::Skip => Vec::new(),
        CatchUp::Latest => latest_fire(schedule, last, now).into_iter().collect(),
        CatchUp::All => recent_fires(schedule, last, now, max.min(MAX_CATCH_UP_FIRES)),
    }
}

/// The last fire in `(last, now]`, by binary search on the monotonic predicate
/// "`next_after(x) <= now`".
fn latest_fire(
    schedule: &Schedule,
    last: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let next = |x: i64| DateTime::from_timestamp(x, 0).and_then(|d| schedule.next_after(d));
    let fires_by_now = |x: i64| next(x).is_some_and(|f| f <= now);
    // Fires are whole seconds, so flooring `last` and `now` changes nothing.
    let (lo, hi) = (last.timestamp(), now.timestamp());
    if !fires_by_now(lo) {
        return None;
    }
    // `first_true` wants false-then-true; search on the negation and step back one.
    next(first_true(lo, hi, |x| !fires_by_now(x)) - 1)
}

/// The most recent `cap` fires in `(last, now]`, oldest first (see [`missed_fires`]).
fn recent_fires(
    schedule: &Schedule,
    last: DateTime<Utc>,
    now: DateTime<Utc>,
    cap: usize,
) -> Vec<DateTime<Utc>> {
    if cap == 0 {
        return Vec::new();
    }
    let mut budget = CATCH_UP_SCAN_BUDGET;
    let mut complete = VecDeque::new();
    let mut span = Some(TimeDelta::seconds(64));
    loop {
        let start = span
            .and_then(|s| now.checked_sub_signed(s))
            .filter(|s| *s > last)
            .unwrap_or(last);
        let mut window = VecDeque::with_capacity(cap.min(1024));
        let mut cursor = start;
        while let Some(fire) = schedule.next_after(cursor).filter(|f| *f <= now) {
            if budget == 0 {
                return complete.into();
            }
            budget -= 1;
            if window.len() == cap {
                window.pop_front();
            }
            window.push_back(fire);
            cursor = fire;
        }
        if window.len() == cap || start == last {
            return window.into();
        }
        complete = window;
        span = span.and_then(|s| s.checked_mul(2));
    }
}

#[cfg(test)]
mod tests;
