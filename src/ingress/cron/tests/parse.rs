//! Parsing: every syntax form, and errors that name the field or zone.

use super::*;

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
