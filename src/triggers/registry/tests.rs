use serde_json::json;

use super::*;
use crate::triggers::filter::Expression;
use crate::triggers::testing::event;

fn queue(name: &str) -> Handler {
    Handler::Queue { queue: name.into() }
}

fn local() -> Handler {
    Handler::Local {
        connector: "audit".into(),
        capability: "record".into(),
    }
}

/// A local-handler binding shaped by `shape`, its fingerprint recomputed.
fn binding(id: &str, shape: impl FnOnce(&mut Binding)) -> Binding {
    let mut b = Binding::new(id, local());
    shape(&mut b);
    b.fingerprint = b.definition_fingerprint();
    b
}

fn expr(option: &str, source: &str) -> Option<Expression> {
    Some(Expression::compile("test", option, source).unwrap())
}

fn registry(bindings: Vec<Binding>) -> TriggerRegistry {
    TriggerRegistry::new(bindings).unwrap()
}

fn matched(r: &TriggerRegistry, source: &str, kind: &str) -> Vec<String> {
    let routed = r.route(&event(source, kind, json!({"action": "opened"})), 0);
    assert!(routed.errors.is_empty(), "{:?}", routed.errors);
    routed.enqueue.into_iter().map(|e| e.binding_id).collect()
}

#[test]
fn event_patterns_match_exactly_or_by_a_trailing_star_prefix() {
    let r = registry(vec![
        binding("exact", |b| b.events = vec!["issues.opened".into()]),
        binding("prefix", |b| b.events = vec!["issues.*".into()]),
        binding("star", |b| b.events = vec!["*".into()]),
        binding("any", |_| {}),
        binding("pr", |b| {
            b.events = vec!["pull_request".into(), "push".into()]
        }),
    ]);
    assert_eq!(
        matched(&r, "gh", "issues.opened"),
        ["exact", "prefix", "star", "any"]
    );
    assert_eq!(
        matched(&r, "gh", "issues.closed"),
        ["prefix", "star", "any"]
    );
    assert_eq!(matched(&r, "gh", "push"), ["star", "any", "pr"]);
    assert_eq!(
        matched(&r, "gh", "issues"),
        ["star", "any"],
        "issues.* needs the dot"
    );
}

#[test]
fn sources_restrict_a_binding_and_empty_means_every_source() {
    let r = registry(vec![
        binding("main-only", |b| b.sources = vec!["github-main".into()]),
        binding("both", |b| {
            b.sources = vec!["github-main".into(), "github-forks".into()]
        }),
        binding("all", |_| {}),
    ]);
    assert_eq!(
        matched(&r, "github-main", "push"),
        ["main-only", "both", "all"]
    );
    assert_eq!(matched(&r, "github-forks", "push"), ["both", "all"]);
    assert_eq!(matched(&r, "stripe", "push"), ["all"]);
}

#[test]
fn a_filter_that_is_false_skips_and_one_that_errors_is_reported_while_others_match() {
    let r = registry(vec![
        binding("opened", |b| {
            b.filter = expr("filter", r#"payload.action == "opened""#)
        }),
        binding("closed", |b| {
            b.filter = expr("filter", r#"payload.action == "closed""#)
        }),
        binding("broken", |b| {
            b.filter = expr("filter", "payload.repository.name == \"x\"")
        }),
        binding("not-bool", |b| b.filter = expr("filter", "payload.action")),
        binding("plain", |_| {}),
    ]);
    let routed = r.route(
        &event("gh", "issues.opened", json!({"action": "opened"})),
        0,
    );
    let ids: Vec<_> = routed
        .enqueue
        .iter()
        .map(|e| e.binding_id.as_str())
        .collect();
    assert_eq!(ids, ["opened", "plain"]);
    let failed: Vec<_> = routed.errors.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(failed, ["broken", "not-bool"]);
    assert!(
        routed.errors[0].1.starts_with("filter: "),
        "{:?}",
        routed.errors
    );
    assert!(
        routed.errors[0].1.contains("repository"),
        "{:?}",
        routed.errors
    );
}

#[test]
fn dead_letter_handlers_never_match_ingest_events() {
    let r = registry(vec![
        binding("work", |_| {}),
        binding("dl-all", |b| b.dead_letter_for = DeadLetterScope::All),
        binding("dl-work", |b| {
            b.dead_letter_for = DeadLetterScope::Bindings(vec!["work".into()])
        }),
    ]);
    assert_eq!(matched(&r, "gh", "push"), ["work"]);
    let handlers: Vec<_> = r
        .dead_letter_handlers("work")
        .map(|b| b.id.as_str())
        .collect();
    assert_eq!(handlers, ["dl-all", "dl-work"]);
}

#[test]
fn rows_carry_the_fingerprint_depth_ordering_key_and_queue_destination() {
    let r = registry(vec![
        binding("keyed", |b| {
            b.ordering_key = expr("ordering_key", "payload.repository.full_name")
        }),
        binding("queued", |b| b.handler = queue("work")),
    ]);
    let ev = event(
        "gh",
        "push",
        json!({"repository": {"full_name": "acme/api"}}),
    );
    let routed = r.route(&ev, 3);
    assert!(routed.errors.is_empty());
    let [keyed, queued] = routed.enqueue.as_slice() else {
        panic!("{routed:?}")
    };
    assert_eq!(keyed.ordering_key.as_deref(), Some("acme/api"));
    assert_eq!(keyed.destination, Destination::Dispatch);
    assert_eq!(keyed.fingerprint, r.get("keyed").unwrap().fingerprint);
    assert_eq!((keyed.depth, queued.depth), (3, 3));
    assert_eq!(queued.destination, Destination::Queue("work".into()));
    assert_eq!(queued.ordering_key, None);
}

#[test]
fn an_ordering_key_that_fails_skips_its_binding_with_the_option_named() {
    let r = registry(vec![
        binding("keyed", |b| {
            b.ordering_key = expr("ordering_key", "payload.nope")
        }),
        binding("plain", |_| {}),
    ]);
    let routed = r.route(&event("gh", "push", json!({})), 0);
    assert_eq!(routed.enqueue.len(), 1);
    assert_eq!(routed.errors[0].0, "keyed");
    assert!(
        routed.errors[0].1.starts_with("ordering_key: "),
        "{:?}",
        routed.errors
    );
}

#[test]
fn enqueue_for_ignores_sources_events_and_filter_but_evaluates_the_key() {
    let r = registry(vec![binding("named", |b| {
        b.sources = vec!["elsewhere".into()];
        b.filter = expr("filter", "false");
        b.ordering_key = expr("ordering_key", "kind");
        b.handler = queue("q");
    })]);
    let ev = event("gh", "push", json!({}));
    assert!(r.route(&ev, 0).enqueue.is_empty());
    let row = r.enqueue_for(r.get("named").unwrap(), &ev, 2).unwrap();
    assert_eq!(row.ordering_key.as_deref(), Some("push"));
    assert_eq!(
        (row.depth, row.destination),
        (2, Destination::Queue("q".into()))
    );
}

#[test]
fn the_registry_refuses_duplicate_ids_and_dead_letter_scopes_it_cannot_honour() {
    let refuse = |bindings: Vec<Binding>| TriggerRegistry::new(bindings).unwrap_err().to_string();
    let twice = refuse(vec![binding("a", |_| {}), binding("a", |_| {})]);
    assert!(twice.contains("two triggers have the id \"a\""), "{twice}");
    let scope =
        |ids: &[&str]| DeadLetterScope::Bindings(ids.iter().map(|s| s.to_string()).collect());
    let unknown = refuse(vec![binding("dl", |b| {
        b.dead_letter_for = scope(&["ghost"])
    })]);
    assert!(
        unknown.contains(
            "trigger \"dl\": dead_letter_for names \"ghost\", which is not a configured trigger"
        ),
        "{unknown}"
    );
    let own = refuse(vec![binding("dl", |b| b.dead_letter_for = scope(&["dl"]))]);
    assert!(own.contains("itself"), "{own}");
    let chained = refuse(vec![
        binding("dl-a", |b| b.dead_letter_for = DeadLetterScope::All),
        binding("dl-b", |b| b.dead_letter_for = scope(&["dl-a"])),
    ]);
    assert!(chained.contains("a dead-letter handler"), "{chained}");
}

#[test]
fn fingerprints_are_stable_and_change_with_the_definition_but_not_the_id() {
    let a = binding("a", |b| b.filter = expr("filter", "true"));
    let again = binding("a", |b| b.filter = expr("filter", "true"));
    assert_eq!(a.fingerprint, again.fingerprint);
    assert_eq!(a.fingerprint.len(), 64);
    assert_eq!(
        binding("renamed", |b| b.filter = expr("filter", "true")).fingerprint,
        a.fingerprint
    );
    let changes: Vec<Binding> = vec![
        binding("a", |b| b.filter = expr("filter", "false")),
        binding("a", |b| b.filter = None),
        binding("a", |b| {
            b.filter = expr("filter", "true");
            b.max_concurrent = 3
        }),
        binding("a", |b| {
            b.filter = expr("filter", "true");
            b.retry.jitter = 0.5
        }),
        binding("a", |b| {
            b.filter = expr("filter", "true");
            b.handler = queue("q")
        }),
    ];
    for changed in changes {
        assert_ne!(changed.fingerprint, a.fingerprint, "{changed:?}");
    }
}

#[test]
fn rows_carry_priority_and_the_debounce_and_dedupe_keys_and_a_failing_key_skips_its_binding() {
    use crate::triggers::flow::{Debounce, DedupeRule};
    use std::time::Duration;
    let debounce = |source: &str| Debounce {
        key: expr("debounce", source).unwrap(),
        window: Duration::from_secs(5),
    };
    let dedupe = |source: &str| DedupeRule {
        key: expr("dedupe_key", source).unwrap(),
        retention: Duration::from_secs(60),
    };
    let r = registry(vec![
        binding("flow", |b| {
            b.priority = 3;
            b.debounce = Some(debounce("payload.action"));
            b.dedupe = Some(dedupe("payload.n"));
        }),
        binding("null-keys", |b| {
            b.debounce = Some(debounce("null"));
            b.dedupe = Some(dedupe("null"));
        }),
        binding("bad-debounce", |b| {
            b.debounce = Some(debounce("payload.missing"))
        }),
        binding("bad-dedupe", |b| b.dedupe = Some(dedupe("payload.labels"))),
    ]);
    let routed = r.route(
        &event(
            "gh",
            "issues.opened",
            json!({"action": "opened", "n": 7, "labels": ["a"]}),
        ),
        0,
    );
    let flow = &routed.enqueue[0];
    assert_eq!(flow.binding_id, "flow");
    assert_eq!(flow.priority, 3);
    assert_eq!(
        (flow.debounce_key.as_deref(), flow.debounce_window_ms),
        (Some("opened"), Some(5_000))
    );
    assert_eq!(flow.dedupe, Some(("7".to_owned(), 60_000)));
    let plain = &routed.enqueue[1];
    assert_eq!(plain.binding_id, "null-keys");
    assert_eq!(
        (&plain.debounce_key, plain.debounce_window_ms, &plain.dedupe),
        (&None, None, &None),
        "a null key means no debounce and no dedupe"
    );
    assert_eq!(routed.enqueue.len(), 2);
    let failed: Vec<_> = routed
        .errors
        .iter()
        .map(|(b, e)| (b.as_str(), e.split(':').next().unwrap()))
        .collect();
    assert_eq!(
        failed,
        [("bad-debounce", "debounce"), ("bad-dedupe", "dedupe_key")]
    );
}
