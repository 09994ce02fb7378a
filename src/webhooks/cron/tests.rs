use super::*;

/// No fires.
const NONE: [DateTime<Utc>; 0] = [];

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn sched(expr: &str, tz: &str) -> Schedule {
    Schedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr} in {tz}: {e}"))
}

/// The first `n` fires strictly after `start`.
fn fires(s: &Schedule, start: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::with_capacity(n);
    let mut t = start;
    for _ in 0..n {
        t = s.next_after(t).expect("schedule fires");
        out.push(t);
    }
    out
}

/// Every fire in `(from, to]`.
fn fires_until(s: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(f) = s.next_after(t).filter(|f| *f <= to) {
        assert!(f > t, "next_after({t}) = {f} is not after its argument");
        out.push(f);
        t = f;
    }
    out
}

fn err(expr: &str) -> CronError {
    Schedule::parse(expr, "UTC").expect_err(expr)
}

fn next(expr: &str, tz: &str, after: DateTime<Utc>) -> DateTime<Utc> {
    sched(expr, tz).next_after(after).expect("schedule fires")
}

// ---------------------------------------------------------------- parsing

#[test]
fn parses_every_syntax_form() {
    for expr in [
        "* * * * *",
        "0 0 * * *",
        "*/15 * * * *",
        "0 9-17 * * MON-FRI",
        "0 9-17/2 * * 1-5",
        "5/10 * * * *",
        "0,15,30,45 * * * *",
        "0 0 1,15 * ?",
        "0 0 ? * SUN",
        "0 0 1 jan,Jul *",
        "0 0 * * sat,Sun",
        "0 0 * * 7",
        "0 0 * * 0-7",
        "*/10 * * * * *",
        "30 0 0 1 1 *",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@DAILY",
        "  0   0  *  *  *  ",
    ] {
        sched(expr, "UTC");
    }
}

#[test]
fn timezone_is_returned_as_given() {
    assert_eq!(sched("@daily", "Europe/Berlin").timezone(), "Europe/Berlin");
    assert_eq!(sched("@daily", "UTC").timezone(), "UTC");
}

#[test]
fn macros_mean_the_usual_expressions() {
    let after = utc(2026, 5, 17, 13, 21, 7);
    let pairs = [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ];
    for (mac, expr) in pairs {
        let (a, b) = (sched(mac, "UTC"), sched(expr, "UTC"));
        assert_eq!(fires(&a, after, 3), fires(&b, after, 3), "{mac}");
    }
}

#[test]
fn names_steps_and_lists_select_the_right_values() {
    let s = sched("0 0 * * 1-5", "UTC");
    assert_eq!(s, sched("0 0 * * MON-FRI", "UTC"));
    assert_eq!(sched("0 0 * * 7", "UTC"), sched("0 0 * * 0", "UTC"));
    assert_eq!(sched("0 0 * * sun", "UTC"), sched("0 0 * * 0", "UTC"));
    assert_eq!(sched("0 0 1 DEC *", "UTC"), sched("0 0 1 12 *", "UTC"));
    assert_eq!(
        sched("5/20 * * * *", "UTC"),
        sched("5,25,45 * * * *", "UTC")
    );
    assert_eq!(
        sched("10-30/10 * * * *", "UTC"),
        sched("10,20,30 * * * *", "UTC")
    );
    assert_eq!(
        sched("*/20 * * * *", "UTC"),
        sched("0,20,40 * * * *", "UTC")
    );
    // Day-of-week steps stop at Saturday rather than doubling Sunday through 7.
    assert_eq!(sched("0 0 * * */2", "UTC"), sched("0 0 * * 0,2,4,6", "UTC"));
    assert_eq!(sched("0 0 * * 1/2", "UTC"), sched("0 0 * * 1,3,5", "UTC"));
    // Five fields fire at second 0; six fields put the second first.
    assert_eq!(sched("0 5 * * * *", "UTC"), sched("5 * * * *", "UTC"));
    // `?` is `*`.
    assert_eq!(sched("0 0 ? * *", "UTC"), sched("0 0 * * *", "UTC"));
}

#[test]
fn rejects_bad_field_counts() {
    for (expr, found) in [("* * * *", 4), ("* * * * * * *", 7), ("0", 1)] {
        let e = err(expr);
        assert_eq!(
            e,
            CronError::FieldCount {
                expr: expr.into(),
                found
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("expected 5") && msg.contains(&found.to_string()),
            "{msg}"
        );
    }
    assert_eq!(err(""), CronError::Empty);
    assert_eq!(err("   "), CronError::Empty);
}

/// The field, entry and full message of a field error.
fn field_err(expr: &str) -> (&'static str, String, String) {
    let e = err(expr);
    let msg = e.to_string();
    match e {
        CronError::InvalidField { field, value, .. } => (field, value, msg),
        other => panic!("{expr}: expected a field error, got {other:?}"),
    }
}

#[test]
fn rejects_out_of_range_values_naming_the_field() {
    let cases = [
        ("60 * * * *", "minute", "60", "0-59"),
        ("* 24 * * *", "hour", "24", "0-23"),
        ("* * 0 * *", "day-of-month", "0", "1-31"),
        ("* * 32 * *", "day-of-month", "32", "1-31"),
        ("* * * 13 *", "month", "13", "1-12"),
        ("* * * 0 *", "month", "0", "1-12"),
        ("* * * * 8", "day-of-week", "8", "0-7"),
        ("60 * * * * *", "second", "60", "0-59"),
        ("0-60 * * * *", "minute", "0-60", "0-59"),
    ];
    for (expr, field, value, allowed) in cases {
        let (f, v, msg) = field_err(expr);
        assert_eq!((f, v.as_str()), (field, value), "{expr}");
        assert!(
            msg.contains(field) && msg.contains("out of range") && msg.contains(allowed),
            "{msg}"
        );
    }
}

#[test]
fn rejects_zero_and_malformed_steps() {
    for (expr, field) in [
        ("*/0 * * * *", "minute"),
        ("* */0 * * *", "hour"),
        ("* * * * */x", "day-of-week"),
        ("*/ * * * *", "minute"),
        ("*/-1 * * * *", "minute"),
        ("1-5/0 * * * *", "minute"),
    ] {
        let (f, _, msg) = field_err(expr);
        assert_eq!(f, field, "{expr}");
        assert!(msg.contains(field) && msg.contains("at least 1"), "{msg}");
    }
}

#[test]
fn rejects_bad_names_and_garbage() {
    let (field, value, msg) = field_err("0 0 * FOO *");
    assert_eq!((field, value.as_str()), ("month", "FOO"));
    assert!(msg.contains("month") && msg.contains("JAN-DEC"), "{msg}");
    let (field, _, msg) = field_err("0 0 * * MONDAY");
    assert_eq!(field, "day-of-week");
    assert!(msg.contains("SUN-SAT"), "{msg}");
    // Names belong to their own field only.
    assert_eq!(field_err("0 0 MON * *").0, "day-of-month");
    for expr in [
        "a * * * *",
        "1.5 * * * *",
        "+5 * * * *",
        "-5 * * * *",
        "5- * * * *",
        "0 0 L * *",
    ] {
        let (field, _, msg) = field_err(expr);
        assert!(
            msg.contains("not a valid value") && msg.contains(field),
            "{msg}"
        );
    }
}

#[test]
fn rejects_backwards_ranges_empty_items_and_misplaced_question_marks() {
    let (field, value, msg) = field_err("0 17-9 * * *");
    assert_eq!((field, value.as_str()), ("hour", "17-9"));
    assert!(msg.contains("backwards"), "{msg}");
    let (field, value, msg) = field_err("0,,5 * * * *");
    assert_eq!((field, value.as_str()), ("minute", "0,,5"));
    assert!(msg.contains("comma"), "{msg}");
    let (field, _, msg) = field_err("? * * * *");
    assert_eq!(field, "minute");
    assert!(msg.contains("`?` is only allowed"), "{msg}");
    let e = err("@fortnightly");
    assert_eq!(
        e,
        CronError::UnknownMacro {
            name: "@fortnightly".into()
        }
    );
    assert!(e.to_string().contains("@daily"));
}

#[test]
fn rejects_unknown_time_zone_naming_it() {
    let e = Schedule::parse("@daily", "Mars/Olympus_Mons").unwrap_err();
    assert_eq!(
        e,
        CronError::UnknownTimeZone {
            zone: "Mars/Olympus_Mons".into()
        }
    );
    assert!(e.to_string().contains("Mars/Olympus_Mons"), "{e}");
    assert!(Schedule::parse("@daily", "").is_err());
}

// ---------------------------------------------------------------- next_after, UTC

#[test]
fn next_after_simple_utc_cases() {
    let t = utc(2026, 5, 17, 13, 21, 7);
    assert_eq!(next("* * * * *", "UTC", t), utc(2026, 5, 17, 13, 22, 0));
    assert_eq!(next("*/15 * * * *", "UTC", t), utc(2026, 5, 17, 13, 30, 0));
    assert_eq!(next("0 * * * *", "UTC", t), utc(2026, 5, 17, 14, 0, 0));
    assert_eq!(next("0 9 * * *", "UTC", t), utc(2026, 5, 18, 9, 0, 0));
    assert_eq!(next("@yearly", "UTC", t), utc(2027, 1, 1, 0, 0, 0));
    assert_eq!(next("0 0 * * MON", "UTC", t), utc(2026, 5, 18, 0, 0, 0)); // 17th is a Sunday
    assert_eq!(
        next("0 12 * * 1-5", "UTC", utc(2026, 5, 15, 12, 0, 0)),
        utc(2026, 5, 18, 12, 0, 0)
    );
}

#[test]
fn next_after_is_strictly_after_even_on_a_fire() {
    let s = sched("0 9 * * *", "UTC");
    let fire = utc(2026, 5, 17, 9, 0, 0);
    assert_eq!(s.next_after(fire), Some(utc(2026, 5, 18, 9, 0, 0)));
    let just_before = fire - TimeDelta::milliseconds(1);
    assert_eq!(s.next_after(just_before), Some(fire));
    // Sub-second parts: a fire at :00 after 08:59:59.999, none twice.
    let s = sched("* * * * * *", "UTC");
    let t = utc(2026, 5, 17, 9, 0, 0) + TimeDelta::milliseconds(500);
    assert_eq!(s.next_after(t), Some(utc(2026, 5, 17, 9, 0, 1)));
}

#[test]
fn next_after_handles_month_ends() {
    let s = sched("0 0 31 * *", "UTC");
    assert_eq!(
        fires(&s, utc(2026, 1, 31, 0, 0, 0), 3),
        [
            utc(2026, 3, 31, 0, 0, 0),
            utc(2026, 5, 31, 0, 0, 0),
            utc(2026, 7, 31, 0, 0, 0)
        ]
    );
    let s = sched("59 23 * * *", "UTC");
    assert_eq!(
        s.next_after(utc(2026, 12, 31, 23, 59, 0)),
        Some(utc(2027, 1, 1, 23, 59, 0))
    );
    let s = sched("0 0 1 * *", "UTC");
    assert_eq!(
        s.next_after(utc(2026, 12, 15, 0, 0, 0)),
        Some(utc(2027, 1, 1, 0, 0, 0))
    );
    assert_eq!(
        s.next_after(utc(2026, 2, 28, 23, 59, 59)),
        Some(utc(2026, 3, 1, 0, 0, 0))
    );
}

#[test]
fn leap_day_schedule_skips_to_the_next_leap_year() {
    let s = sched("0 0 29 2 *", "UTC");
    assert_eq!(
        fires(&s, utc(2025, 1, 1, 0, 0, 0), 3),
        [
            utc(2028, 2, 29, 0, 0, 0),
            utc(2032, 2, 29, 0, 0, 0),
            utc(2036, 2, 29, 0, 0, 0)
        ]
    );
    // 2100 is not a leap year: eight years between leap days, still found.
    assert_eq!(
        s.next_after(utc(2096, 3, 1, 0, 0, 0)),
        Some(utc(2104, 2, 29, 0, 0, 0))
    );
}

#[test]
fn day_of_month_or_day_of_week_when_both_are_restricted() {
    // 1st of the month OR any Monday (Vixie cron). May 2026: Mondays 4, 11, 18, 25.
    let s = sched("0 0 1 * MON", "UTC");
    assert_eq!(
        fires(&s, utc(2026, 4, 30, 0, 0, 0), 4),
        [
            utc(2026, 5, 1, 0, 0, 0),
            utc(2026, 5, 4, 0, 0, 0),
            utc(2026, 5, 11, 0, 0, 0),
            utc(2026, 5, 18, 0, 0, 0)
        ]
    );
    // Only one restricted: AND (which is just that one).
    let s = sched("0 0 * * MON", "UTC");
    assert_eq!(
        s.next_after(utc(2026, 4, 30, 0, 0, 0)),
        Some(utc(2026, 5, 4, 0, 0, 0))
    );
    let s = sched("0 0 13 * ?", "UTC");
    assert_eq!(
        s.next_after(utc(2026, 4, 30, 0, 0, 0)),
        Some(utc(2026, 5, 13, 0, 0, 0))
    );
    // Friday the 13th is not expressible: 13 OR Friday. May 2026: Fri 1, 8; 13th Wed.
    let s = sched("0 0 13 * FRI", "UTC");
    assert_eq!(
        fires(&s, utc(2026, 4, 30, 0, 0, 0), 3),
        [
            utc(2026, 5, 1, 0, 0, 0),
            utc(2026, 5, 8, 0, 0, 0),
            utc(2026, 5, 13, 0, 0, 0)
        ]
    );
}

#[test]
fn six_field_schedules_fire_on_seconds() {
    let s = sched("*/20 * * * * *", "UTC");
    assert_eq!(
        fires(&s, utc(2026, 5, 17, 23, 59, 30), 4),
        [
            utc(2026, 5, 17, 23, 59, 40),
            utc(2026, 5, 18, 0, 0, 0),
            utc(2026, 5, 18, 0, 0, 20),
            utc(2026, 5, 18, 0, 0, 40)
        ]
    );
    let s = sched("30 15 10 * * *", "UTC");
    assert_eq!(
        s.next_after(utc(2026, 5, 17, 10, 15, 30)),
        Some(utc(2026, 5, 18, 10, 15, 30))
    );
    assert_eq!(
        s.next_after(utc(2026, 5, 17, 10, 15, 29)),
        Some(utc(2026, 5, 17, 10, 15, 30))
    );
}

#[test]
fn impossible_schedules_return_none_quickly() {
    let start = std::time::Instant::now();
    for expr in ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"] {
        assert_eq!(
            sched(expr, "UTC").next_after(utc(2026, 1, 1, 0, 0, 0)),
            None,
            "{expr}"
        );
        assert_eq!(
            sched(expr, "America/New_York").next_after(utc(2026, 1, 1, 0, 0, 0)),
            None
        );
    }
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn non_utc_zone_uses_local_wall_clock() {
    // Berlin is UTC+2 in summer, UTC+1 in winter.
    let s = sched("0 9 * * *", "Europe/Berlin");
    assert_eq!(
        s.next_after(utc(2026, 7, 1, 0, 0, 0)),
        Some(utc(2026, 7, 1, 7, 0, 0))
    );
    assert_eq!(
        s.next_after(utc(2026, 1, 1, 0, 0, 0)),
        Some(utc(2026, 1, 1, 8, 0, 0))
    );
    // Day fields are local too: Monday 00:30 in Tokyo is Sunday 15:30 UTC.
    let s = sched("30 0 * * MON", "Asia/Tokyo");
    assert_eq!(
        s.next_after(utc(2026, 5, 16, 0, 0, 0)),
        Some(utc(2026, 5, 17, 15, 30, 0))
    );
}

// ---------------------------------------------------------------- daylight saving

const NY: &str = "America/New_York";
const BERLIN: &str = "Europe/Berlin";

#[test]
fn new_york_spring_forward_daily_job_fires_after_the_gap() {
    // 2026-03-08 02:00 EST -> 03:00 EDT at 07:00 UTC; 02:30 does not exist.
    let s = sched("30 2 * * *", NY);
    assert_eq!(
        fires(&s, utc(2026, 3, 7, 0, 0, 0), 3),
        [
            utc(2026, 3, 7, 7, 30, 0), // 02:30 EST
            utc(2026, 3, 8, 7, 0, 0),  // gap: 03:00 EDT, the first instant after it
            utc(2026, 3, 9, 6, 30, 0), // 02:30 EDT
        ]
    );
    // Several skipped times collapsing onto one instant fire once.
    let s = sched("0,15,30,45 2 * * *", NY);
    assert_eq!(
        fires_until(&s, utc(2026, 3, 8, 0, 0, 0), utc(2026, 3, 8, 23, 0, 0)),
        [utc(2026, 3, 8, 7, 0, 0)]
    );
    // A time just after the gap is unaffected.
    let s = sched("0 3 * * *", NY);
    assert_eq!(
        s.next_after(utc(2026, 3, 8, 0, 0, 0)),
        Some(utc(2026, 3, 8, 7, 0, 0))
    );
}

#[test]
fn new_york_fall_back_daily_job_fires_once_at_the_first_occurrence() {
    // 2026-11-01 02:00 EDT -> 01:00 EST at 06:00 UTC; 01:30 happens twice.
    let s = sched("30 1 * * *", NY);
    assert_eq!(
        fires(&s, utc(2026, 10, 31, 12, 0, 0), 2),
        [utc(2026, 11, 1, 5, 30, 0), utc(2026, 11, 2, 6, 30, 0)]
    );
    // Asked from inside the repeated hour, it does not fire again at 01:30 EST.
    assert_eq!(
        s.next_after(utc(2026, 11, 1, 6, 10, 0)),
        Some(utc(2026, 11, 2, 6, 30, 0))
    );
    // An hour-specific minute-level job covers the first 01:xx only.
    let s = sched("*/20 1 * * *", NY);
    assert_eq!(
        fires_until(&s, utc(2026, 11, 1, 0, 0, 0), utc(2026, 11, 1, 12, 0, 0)),
        [
            utc(2026, 11, 1, 5, 0, 0),
            utc(2026, 11, 1, 5, 20, 0),
            utc(2026, 11, 1, 5, 40, 0)
        ]
    );
    // The hour after the overlap still fires normally.
    let s = sched("0 2 * * *", NY);
    assert_eq!(
        s.next_after(utc(2026, 11, 1, 0, 0, 0)),
        Some(utc(2026, 11, 1, 7, 0, 0))
    );
}

#[test]
fn new_york_hourly_job_fires_in_both_occurrences() {
    let s = sched("0 * * * *", NY);
    assert_eq!(
        fires(&s, utc(2026, 11, 1, 3, 30, 0), 4),
        [
            utc(2026, 11, 1, 4, 0, 0), // 00:00 EDT
            utc(2026, 11, 1, 5, 0, 0), // 01:00 EDT
            utc(2026, 11, 1, 6, 0, 0), // 01:00 EST
            utc(2026, 11, 1, 7, 0, 0), // 02:00 EST
        ]
    );
    // And skips the nonexistent 02:00 in spring without a duplicate at 03:00.
    assert_eq!(
        fires(&s, utc(2026, 3, 8, 5, 30, 0), 3),
        [
            utc(2026, 3, 8, 6, 0, 0),
            utc(2026, 3, 8, 7, 0, 0),
            utc(2026, 3, 8, 8, 0, 0)
        ]
    );
    // `30 * * * *` keeps one real hour between fires through the gap.
    let s = sched("30 * * * *", NY);
    assert_eq!(
        fires(&s, utc(2026, 3, 8, 6, 0, 0), 2),
        [utc(2026, 3, 8, 6, 30, 0), utc(2026, 3, 8, 7, 30, 0)]
    );
}

/// Consecutive fires of `expr` in `(from, to]` are exactly `step` apart.
fn assert_evenly_spaced(expr: &str, tz: &str, from: DateTime<Utc>, to: DateTime<Utc>, step: i64) {
    let got = fires_until(&sched(expr, tz), from, to);
    let want: Vec<_> = (1..)
        .map(|i| from + TimeDelta::minutes(step * i))
        .take_while(|t| *t <= to)
        .collect();
    assert_eq!(got, want, "{expr} in {tz}");
}

#[test]
fn half_hourly_job_is_evenly_spaced_across_both_transitions() {
    assert_evenly_spaced(
        "*/30 * * * *",
        NY,
        utc(2026, 3, 8, 4, 0, 0),
        utc(2026, 3, 8, 10, 0, 0),
        30,
    );
    assert_evenly_spaced(
        "*/30 * * * *",
        NY,
        utc(2026, 11, 1, 3, 0, 0),
        utc(2026, 11, 1, 9, 0, 0),
        30,
    );
    assert_evenly_spaced(
        "*/30 * * * *",
        BERLIN,
        utc(2026, 3, 28, 22, 0, 0),
        utc(2026, 3, 29, 4, 0, 0),
        30,
    );
    assert_evenly_spaced(
        "*/30 * * * *",
        BERLIN,
        utc(2026, 10, 24, 22, 0, 0),
        utc(2026, 10, 25, 4, 0, 0),
        30,
    );
    assert_evenly_spaced(
        "*/15 * * * *",
        NY,
        utc(2026, 11, 1, 4, 0, 0),
        utc(2026, 11, 1, 8, 0, 0),
        15,
    );
    // Spelled-out fall-back sequence, with the wall clock in comments.
    let got = fires_until(
        &sched("*/30 * * * *", NY),
        utc(2026, 11, 1, 4, 45, 0),
        utc(2026, 11, 1, 7, 0, 0),
    );
    assert_eq!(
        got,
        [
            utc(2026, 11, 1, 5, 0, 0),  // 01:00 EDT
            utc(2026, 11, 1, 5, 30, 0), // 01:30 EDT
            utc(2026, 11, 1, 6, 0, 0),  // 01:00 EST
            utc(2026, 11, 1, 6, 30, 0), // 01:30 EST
            utc(2026, 11, 1, 7, 0, 0),  // 02:00 EST
        ]
    );
}

#[test]
fn berlin_daily_jobs_across_both_transitions() {
    // 2026-03-29 02:00 CET -> 03:00 CEST at 01:00 UTC.
    let s = sched("30 2 * * *", BERLIN);
    assert_eq!(
        fires(&s, utc(2026, 3, 28, 0, 0, 0), 3),
        [
            utc(2026, 3, 28, 1, 30, 0),
            utc(2026, 3, 29, 1, 0, 0),
            utc(2026, 3, 30, 0, 30, 0)
        ]
    );
    // 2026-10-25 03:00 CEST -> 02:00 CET at 01:00 UTC; 02:30 fires at its CEST occurrence.
    assert_eq!(
        fires(&s, utc(2026, 10, 24, 12, 0, 0), 2),
        [utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0)]
    );
    let s = sched("0 * * * *", BERLIN);
    assert_eq!(
        fires(&s, utc(2026, 10, 24, 23, 30, 0), 3),
        [
            utc(2026, 10, 25, 0, 0, 0),
            utc(2026, 10, 25, 1, 0, 0),
            utc(2026, 10, 25, 2, 0, 0)
        ]
    );
}

#[test]
fn lord_howe_half_hour_shift() {
    // UTC+10:30 standard, +11:00 summer. 2026-04-05 02:00 -> 01:30 at 15:00 UTC (Apr 4);
    // 2026-10-04 02:00 -> 02:30 at 15:30 UTC (Oct 3).
    const LH: &str = "Australia/Lord_Howe";
    assert_evenly_spaced(
        "*/15 * * * *",
        LH,
        utc(2026, 4, 4, 13, 0, 0),
        utc(2026, 4, 4, 17, 0, 0),
        15,
    );
    assert_evenly_spaced(
        "*/15 * * * *",
        LH,
        utc(2026, 10, 3, 14, 0, 0),
        utc(2026, 10, 3, 17, 0, 0),
        15,
    );
    // Daily 01:45 in the autumn overlap: first occurrence only (+11:00).
    let s = sched("45 1 * * *", LH);
    assert_eq!(
        fires(&s, utc(2026, 4, 4, 0, 0, 0), 2),
        [utc(2026, 4, 4, 14, 45, 0), utc(2026, 4, 5, 15, 15, 0)]
    );
    // Daily 02:15 in the spring gap: at 02:30 (+11:00), the end of the gap.
    let s = sched("15 2 * * *", LH);
    assert_eq!(
        fires(&s, utc(2026, 10, 2, 0, 0, 0), 3),
        [
            utc(2026, 10, 2, 15, 45, 0),
            utc(2026, 10, 3, 15, 30, 0),
            utc(2026, 10, 4, 15, 15, 0)
        ]
    );
}

#[test]
fn iteration_is_monotonic_through_a_year_of_transitions() {
    for (expr, tz) in [
        ("*/30 * * * *", NY),
        ("0 * * * *", BERLIN),
        ("30 1 * * *", NY),
        ("15 2 * * *", BERLIN),
        ("0 */2 * * *", NY),
        ("*/10 1-3 * * *", "Australia/Lord_Howe"),
    ] {
        let got = fires_until(
            &sched(expr, tz),
            utc(2026, 1, 1, 0, 0, 0),
            utc(2027, 1, 1, 0, 0, 0),
        );
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{expr} in {tz}");
        assert!(!got.is_empty());
    }
    // Daily jobs fire exactly once per local day, every day, DST or not.
    for (expr, tz) in [
        ("30 2 * * *", NY),
        ("30 1 * * *", NY),
        ("30 2 * * *", BERLIN),
    ] {
        let got = fires_until(
            &sched(expr, tz),
            utc(2026, 1, 1, 12, 0, 0),
            utc(2027, 1, 1, 12, 0, 0),
        );
        assert_eq!(got.len(), 365, "{expr} in {tz}");
    }
    // Hourly jobs fire once per real hour: 8760 in a non-leap year.
    let got = fires_until(
        &sched("0 * * * *", NY),
        utc(2026, 1, 1, 0, 0, 0),
        utc(2027, 1, 1, 0, 0, 0),
    );
    assert_eq!(got.len(), 8760);
}

// ---------------------------------------------------------------- catch-up

#[test]
fn catch_up_parses_and_defaults_to_skip() {
    assert_eq!(CatchUp::default(), CatchUp::Skip);
    assert_eq!("skip".parse(), Ok(CatchUp::Skip));
    assert_eq!("all".parse(), Ok(CatchUp::All));
    assert_eq!("Latest".parse(), Ok(CatchUp::Latest));
    assert_eq!("ALL".parse(), Ok(CatchUp::All));
    let e = "everything".parse::<CatchUp>().unwrap_err();
    assert_eq!(
        e,
        CronError::UnknownCatchUp {
            value: "everything".into()
        }
    );
    assert!(e.to_string().contains("`skip`, `all` or `latest`"), "{e}");
}

#[test]
fn missed_fires_per_mode() {
    let s = sched("0 * * * *", "UTC");
    let last = Some(utc(2026, 5, 17, 9, 0, 0));
    let now = utc(2026, 5, 17, 12, 30, 0);
    let missed = [
        utc(2026, 5, 17, 10, 0, 0),
        utc(2026, 5, 17, 11, 0, 0),
        utc(2026, 5, 17, 12, 0, 0),
    ];
    assert_eq!(missed_fires(&s, last, now, CatchUp::Skip, 10), NONE);
    assert_eq!(missed_fires(&s, last, now, CatchUp::All, 10), missed);
    assert_eq!(missed_fires(&s, last, now, CatchUp::All, 2), missed[1..]);
    assert_eq!(missed_fires(&s, last, now, CatchUp::All, 0), NONE);
    assert_eq!(
        missed_fires(&s, last, now, CatchUp::Latest, 10),
        [missed[2]]
    );
    // A fire exactly at `now` counts; the last fire itself does not.
    let now = utc(2026, 5, 17, 12, 0, 0);
    assert_eq!(missed_fires(&s, last, now, CatchUp::All, 10), missed);
    assert_eq!(
        missed_fires(&s, last, now, CatchUp::Latest, 10),
        [missed[2]]
    );
}

#[test]
fn missed_fires_without_a_gap_or_history_is_empty() {
    let s = sched("0 * * * *", "UTC");
    let now = utc(2026, 5, 17, 12, 30, 0);
    for mode in [CatchUp::Skip, CatchUp::All, CatchUp::Latest] {
        assert_eq!(missed_fires(&s, None, now, mode, 10), NONE, "{mode:?}");
        // Nothing due yet, or a clock that went backwards.
        let recent = Some(utc(2026, 5, 17, 12, 0, 0));
        assert_eq!(missed_fires(&s, recent, now, mode, 10), NONE, "{mode:?}");
        assert_eq!(
            missed_fires(&s, Some(now + TimeDelta::hours(1)), now, mode, 10),
            NONE
        );
    }
    // An impossible schedule misses nothing.
    let never = sched("0 0 30 2 *", "UTC");
    let long_ago = Some(utc(2000, 1, 1, 0, 0, 0));
    assert_eq!(missed_fires(&never, long_ago, now, CatchUp::All, 10), NONE);
    assert_eq!(
        missed_fires(&never, long_ago, now, CatchUp::Latest, 10),
        NONE
    );
}

#[test]
fn missed_fires_all_over_a_huge_gap_is_bounded_and_keeps_the_newest() {
    let start = std::time::Instant::now();
    // Every second, down for ten years: ~315 million missed fires.
    let s = sched("* * * * * *", "UTC");
    let last = Some(utc(2016, 5, 17, 0, 0, 0));
    let now = utc(2026, 5, 17, 12, 0, 0);
    let got = missed_fires(&s, last, now, CatchUp::All, 5);
    let want: Vec<_> = (0..5).rev().map(|i| now - TimeDelta::seconds(i)).collect();
    assert_eq!(got, want);
    // A sparse schedule over a century: the doubling windows still find them.
    let s = sched("0 0 1 1 *", "Europe/Berlin");
    let got = missed_fires(&s, Some(utc(1926, 1, 1, 0, 0, 0)), now, CatchUp::All, 3);
    assert_eq!(
        got,
        [
            utc(2023, 12, 31, 23, 0, 0),
            utc(2024, 12, 31, 23, 0, 0),
            utc(2025, 12, 31, 23, 0, 0)
        ]
    );
    // A `max` above the cap is clamped.
    let s = sched("* * * * * *", "UTC");
    let got = missed_fires(&s, last, now, CatchUp::All, usize::MAX);
    assert_eq!(got.len(), MAX_CATCH_UP_FIRES);
    assert_eq!(got.last(), Some(&now));
    assert!(got.windows(2).all(|w| w[1] - w[0] == TimeDelta::seconds(1)));
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn missed_fires_latest_over_a_huge_gap() {
    let now = utc(2026, 5, 17, 12, 34, 56);
    let long_ago = Some(utc(1990, 1, 1, 0, 0, 0));
    let s = sched("* * * * * *", "UTC");
    assert_eq!(missed_fires(&s, long_ago, now, CatchUp::Latest, 1), [now]);
    let s = sched("*/15 * * * *", NY);
    assert_eq!(
        missed_fires(&s, long_ago, now, CatchUp::Latest, 1),
        [utc(2026, 5, 17, 12, 30, 0)]
    );
    let s = sched("0 0 29 2 *", "UTC");
    assert_eq!(
        missed_fires(&s, long_ago, now, CatchUp::Latest, 0),
        [utc(2024, 2, 29, 0, 0, 0)]
    );
    // Latest in the repeated hour picks the second occurrence for an hourly job.
    let s = sched("0 * * * *", NY);
    let got = missed_fires(
        &s,
        Some(utc(2026, 11, 1, 4, 0, 0)),
        utc(2026, 11, 1, 6, 59, 0),
        CatchUp::Latest,
        1,
    );
    assert_eq!(got, [utc(2026, 11, 1, 6, 0, 0)]);
    let got = missed_fires(
        &s,
        Some(utc(2026, 11, 1, 4, 0, 0)),
        utc(2026, 11, 1, 6, 59, 0),
        CatchUp::All,
        10,
    );
    assert_eq!(got, [utc(2026, 11, 1, 5, 0, 0), utc(2026, 11, 1, 6, 0, 0)]);
}

/// Fires in `[from, to]` by brute force, minute by minute, straight from the rules in the
/// module documentation: every-hour schedules fire whenever the wall clock matches;
/// others fire at instant `t` when a matching wall time lies in `(highest wall clock
/// shown before t, wall clock at t]` (first occurrences, and the end of a gap).
fn brute_force(s: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let matches_in = |lo: i64, hi: i64| s.next_match_wall(lo + 1).is_some_and(|w| w <= hi);
    let (from, to) = (from.timestamp(), to.timestamp());
    let mut highest = s.local(from - 60).unwrap();
    let mut out = Vec::new();
    for t in (from..=to).step_by(60) {
        let wall = s.local(t).unwrap();
        let fires = if s.hours == ALL_HOURS {
            matches_in(wall - 1, wall)
        } else {
            matches_in(highest, wall)
        };
        if fires {
            out.push(DateTime::from_timestamp(t, 0).unwrap());
        }
        highest = highest.max(wall);
    }
    out
}

#[test]
fn next_after_agrees_with_brute_force_around_transitions() {
    let windows = [
        (NY, utc(2026, 3, 7, 12, 0, 0)),
        (NY, utc(2026, 10, 31, 12, 0, 0)),
        (BERLIN, utc(2026, 3, 28, 12, 0, 0)),
        (BERLIN, utc(2026, 10, 24, 12, 0, 0)),
        ("Australia/Lord_Howe", utc(2026, 4, 4, 0, 0, 0)),
        ("Australia/Lord_Howe", utc(2026, 10, 3, 0, 0, 0)),
        // Transitions at midnight: the day itself starts in a gap or repeats.
        ("America/Havana", utc(2026, 3, 7, 12, 0, 0)),
        ("America/Havana", utc(2026, 10, 31, 12, 0, 0)),
        ("America/Santiago", utc(2026, 4, 4, 0, 0, 0)),
        ("America/Santiago", utc(2026, 9, 5, 12, 0, 0)),
        // Samoa skipped 2011-12-30 entirely.
        ("Pacific/Apia", utc(2011, 12, 29, 0, 0, 0)),
    ];
    let exprs = [
        "*/30 * * * *",
        "0 * * * *",
        "17 * * * *",
        "30 1 * * *",
        "30 2 * * *",
        "0 0 * * *",
        "30 23 * * *",
        "*/20 0-2 * * *",
        "0 12 * * *",
        "45 */2 * * *",
    ];
    for (tz, from) in windows {
        let to = from + TimeDelta::hours(60);
        for expr in exprs {
            let s = sched(expr, tz);
            let got = fires_until(&s, from - TimeDelta::seconds(1), to);
            assert_eq!(got, brute_force(&s, from, to), "{expr} in {tz} from {from}");
        }
    }
}

#[test]
fn samoa_skipped_day_does_not_lose_a_daily_job() {
    // Pacific/Apia went from 2011-12-29 23:59:59 (-10:00) to 2011-12-31 00:00 (+14:00).
    let s = sched("0 12 * * *", "Pacific/Apia");
    assert_eq!(
        fires(&s, utc(2011, 12, 29, 12, 0, 0), 3),
        [
            utc(2011, 12, 29, 22, 0, 0), // Dec 29 12:00 -10:00
            utc(2011, 12, 30, 10, 0, 0), // Dec 30 did not exist: Dec 31 00:00 +14:00
            utc(2011, 12, 30, 22, 0, 0), // Dec 31 12:00 +14:00
        ]
    );
}

#[test]
fn extreme_instants_do_not_panic() {
    for (expr, tz) in [
        ("* * * * * *", "UTC"),
        ("30 2 * * *", NY),
        ("0 * * * *", BERLIN),
    ] {
        let s = sched(expr, tz);
        assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
        let early = DateTime::<Utc>::MIN_UTC + TimeDelta::days(2);
        assert!(s.next_after(early).is_some(), "{expr} in {tz}");
        let _ = missed_fires(
            &s,
            Some(DateTime::<Utc>::MIN_UTC),
            DateTime::<Utc>::MAX_UTC,
            CatchUp::Latest,
            1,
        );
    }
}
