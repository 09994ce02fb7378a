//! `next_after` in one offset: month ends, leap days, the day-of-month/day-of-week rule, seconds.

use super::*;

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
