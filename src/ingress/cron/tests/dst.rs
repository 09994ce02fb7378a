//! Daylight saving: gaps, overlaps, half-hour shifts, skipped days, and agreement with a brute-force reading of the rules.

use super::*;

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
