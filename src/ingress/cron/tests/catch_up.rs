//! Catch-up after downtime: each mode, and bounds over huge gaps.

use super::*;

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
