//! `Retry-After` (RFC 9110 §10.2.3): how long an endpoint answering 429 or 503 asks
//! the sender to wait. A pure function of the header's text and the clock, so both
//! forms and every malformed value are plain `#[test]`s.
//!
//! Why honour it: an endpoint that says "come back in 30 s" and is retried after the
//! binding's one-second backoff only fails again, burning an attempt; waiting as told
//! spends the attempt when it can succeed. The outbox caps what it honours
//! (`outbox::outcome::MAX_RETRY_AFTER`), so an endpoint cannot park a row for a week.

use std::time::Duration;

use chrono::NaiveDateTime;

/// The delay `value` asks for at `now_ms` (unix ms): delta-seconds (`"120"`) or an
/// HTTP-date (`"Wed, 21 Oct 2015 07:28:00 GMT"`, and the two obsolete forms RFC 9110
/// says recipients must accept). A date in the past is no delay. `None` when the
/// value is neither, so the caller falls back to its own backoff.
pub(crate) fn parse(value: &str, now_ms: i64) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Longer than u64 seconds is "very long": saturate rather than refuse.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at_ms = http_date_ms(value)?;
    Some(Duration::from_millis(
        u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0),
    ))
}

/// An HTTP-date as unix ms: IMF-fixdate, RFC 850 or asctime, always GMT.
fn http_date_ms(value: &str) -> Option<i64> {
    // asctime pads a one-digit day with a space ("Nov  6"): one space between fields
    // makes the three forms parse alike.
    let text = value.split_whitespace().collect::<Vec<_>>().join(" ");
    const FORMATS: [&str; 3] = [
        "%a, %d %b %Y %H:%M:%S GMT", // IMF-fixdate
        "%A, %d-%b-%y %H:%M:%S GMT", // RFC 850
        "%a %b %e %H:%M:%S %Y",      // asctime
    ];
    FORMATS.iter().find_map(|f| {
        NaiveDateTime::parse_from_str(&text, f)
            .ok()
            .map(|t| t.and_utc().timestamp_millis())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2015-10-21T07:28:00Z in unix ms.
    const AT: i64 = 1_445_412_480_000;

    #[test]
    fn delta_seconds_are_a_delay() {
        assert_eq!(parse("120", AT), Some(Duration::from_secs(120)));
        assert_eq!(parse(" 0 ", AT), Some(Duration::ZERO));
        assert_eq!(
            parse("99999999999999999999999", AT),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn an_http_date_is_a_delay_from_now_in_all_three_forms() {
        let now = AT - 90_000;
        for v in [
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "Wednesday, 21-Oct-15 07:28:00 GMT",
            "Wed Oct 21 07:28:00 2015",
        ] {
            assert_eq!(parse(v, now), Some(Duration::from_secs(90)), "{v}");
        }
        assert_eq!(
            parse("Sun Nov  6 08:49:37 1994", 784_111_717_000),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn a_date_in_the_past_is_no_delay() {
        assert_eq!(
            parse("Wed, 21 Oct 2015 07:28:00 GMT", AT + 5_000),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn anything_else_is_not_understood() {
        for v in [
            "",
            "-5",
            "1.5",
            "soon",
            "Wed, 21 Oct 2015 07:28:00 PST",
            "2015-10-21T07:28:00Z",
        ] {
            assert_eq!(parse(v, AT), None, "{v:?}");
        }
    }
}
