use serde_json::json;

use super::*;
use crate::triggers::binding::Handler;
use crate::triggers::testing::event;

fn spec(json: serde_json::Value) -> BackfillSpec {
    serde_json::from_value(json).unwrap()
}

fn binding(sources: &[&str], filter: Option<&str>) -> Binding {
    let mut b = Binding::new(
        "to-tickets",
        Handler::Local {
            connector: "c".into(),
            capability: "run".into(),
        },
    );
    b.sources = sources.iter().map(|s| s.to_string()).collect();
    b.filter = filter.map(|f| Expression::compile("to-tickets", "filter", f).unwrap());
    b
}

#[test]
fn a_request_gets_live_version_rate_skip_and_a_lower_priority_by_default() {
    let s = spec(json!({"binding": "to-tickets"}));
    assert_eq!(s.version, None);
    assert_eq!(s.rate, DEFAULT_RATE);
    assert!(s.skip_delivered);
    assert_eq!(s.priority, -1);
    assert!(s.check().unwrap().is_none());
    // Unknown keys are refused: a typo must not widen a selection silently.
    assert!(
        serde_json::from_value::<BackfillSpec>(json!({"binding": "b", "source": "gh"})).is_err()
    );
}

#[test]
fn a_bad_rate_window_or_filter_is_refused_with_what_to_fix() {
    for (s, says) in [
        (json!({"binding": "b", "rate": 0.0}), "rate"),
        (json!({"binding": "b", "rate": 0.05}), "rate"),
        (json!({"binding": "b", "rate": -3.0}), "rate"),
        (
            json!({"binding": "b", "since_ms": 5, "until_ms": 5}),
            "since",
        ),
        (json!({"binding": "b", "filter": "payload.("}), "filter"),
    ] {
        let err = spec(s.clone()).check().unwrap_err();
        assert!(err.contains(says), "{s}: {err}");
    }
}

#[test]
fn an_event_is_judged_by_the_selection_then_the_binding_then_what_it_already_handled() {
    let s = spec(json!({"binding": "to-tickets", "kinds": ["issues.*"],
        "filter": "payload.n > 1"}));
    let f = s.check().unwrap();
    let b = binding(&["gh"], Some("payload.n < 10"));
    let judge_n = |kind: &str, source: &str, n: i64, routed: bool, handled: bool| {
        judge(
            &s,
            f.as_ref(),
            &b,
            &event(source, kind, json!({"n": n})),
            routed,
            handled,
        )
    };
    assert_eq!(judge_n("push", "gh", 5, false, false), Verdict::Unselected);
    assert_eq!(
        judge_n("issues.opened", "gh", 1, false, false),
        Verdict::Unselected
    );
    assert_eq!(
        judge_n("issues.opened", "other", 5, false, false),
        Verdict::Filtered
    );
    assert_eq!(
        judge_n("issues.opened", "gh", 50, false, false),
        Verdict::Filtered
    );
    assert_eq!(
        judge_n("issues.opened", "gh", 5, true, false),
        Verdict::Skipped
    );
    assert_eq!(
        judge_n("issues.opened", "gh", 5, false, true),
        Verdict::Skipped
    );
    assert_eq!(
        judge_n("issues.opened", "gh", 5, false, false),
        Verdict::Take
    );
    // skip_delivered off: handled events go again.
    let again = BackfillSpec {
        skip_delivered: false,
        ..s.clone()
    };
    let e = event("gh", "issues.closed", json!({"n": 5}));
    assert_eq!(judge(&again, f.as_ref(), &b, &e, true, true), Verdict::Take);
}

#[test]
fn the_pace_spreads_rows_at_the_rate_and_charges_nothing_for_an_empty_step() {
    let mut p = Pace::new(100.0, 0);
    assert_eq!(p.page(), 100);
    assert_eq!(p.spent(100, 0), 1_000, "100 rows at 100/s: a second");
    assert_eq!(p.spent(0, 400), 600, "the debt is paid by the clock");
    assert_eq!(p.spent(0, 1_000), 0);
    // A step that came late owes only its own rows.
    assert_eq!(p.spent(50, 5_000), 500);
    assert_eq!(Pace::new(2.0, 0).page(), 2);
    assert_eq!(Pace::new(0.5, 0).page(), 1);
    assert_eq!(Pace::new(1e6, 0).page(), PAGE);
}

#[test]
fn states_round_trip() {
    for s in [
        BackfillState::Running,
        BackfillState::Paused,
        BackfillState::Cancelled,
        BackfillState::Done,
        BackfillState::Failed,
    ] {
        assert_eq!(BackfillState::parse(s.as_str()), Some(s));
    }
    assert_eq!(BackfillState::parse("nope"), None);
}
