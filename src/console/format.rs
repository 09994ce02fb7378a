//! How the console writes times and numbers: UTC timestamps (no time-zone database in
//! the gateway's build) and counts with separators. Times are absolute, never "4 s
//! ago": a relative time changes every second, and a live region whose text changes
//! every second is swapped every second, losing a click or a text selection in it.

/// `YYYY-MM-DD HH:MM:SS` in UTC for milliseconds since the epoch; `—` for 0 or less.
pub(crate) fn time(ms: i64) -> String {
    if ms <= 0 {
        return "—".to_owned();
    }
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The calendar date of a day count since 1970-01-01 (proleptic Gregorian; the
/// well-known era arithmetic).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A count with `,` between thousands.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(time(0), "—");
        assert_eq!(time(1_000), "1970-01-01 00:00:01");
        // 2024-02-29 12:34:56 UTC (a leap day).
        assert_eq!(time(1_709_210_096_000), "2024-02-29 12:34:56");
        assert_eq!(time(1_798_761_600_000), "2027-01-01 00:00:00");
    }

    #[test]
    fn counts_have_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
