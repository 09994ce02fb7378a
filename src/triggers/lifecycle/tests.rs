use std::collections::HashMap;

use serde_json::json;

use super::*;
use crate::triggers::binding::{DeadLetterScope, Handler};
use crate::triggers::filter::Expression;
use crate::triggers::testing::event;

const T0: i64 = 1_000_000;

fn binding(id: &str, filter: Option<&str>) -> Binding {
    let mut b = Binding::new(
        id,
        Handler::Local {
            connector: "c".into(),
            capability: "run".into(),
        },
    );
    b.filter = filter.map(|f| Expression::compile(id, "filter", f).unwrap());
    b.fingerprint = b.definition_fingerprint();
    b
}

fn events(commit: &LifecycleCommit) -> Vec<String> {
    commit
        .entries
        .iter()
        .map(|e| format!("{}@v{} {}", e.binding_id, e.version, e.event.as_str()))
        .collect()
}

fn states(l: &Lifecycle, id: &str) -> Vec<(u32, VersionState)> {
    l.view()
        .into_iter()
        .find(|b| b.id == id)
        .map(|b| b.versions.iter().map(|v| (v.version, v.state)).collect())
        .unwrap_or_default()
}

/// The store's answer when no draining version of `l` has a row left.
fn none_left(l: &Lifecycle) -> HashMap<(String, String), u64> {
    l.versions()
        .filter(|v| v.record.state == VersionState::Draining)
        .map(|v| {
            (
                (v.record.binding_id.clone(), v.record.fingerprint.clone()),
                0,
            )
        })
        .collect()
}

fn rows(id: &str, fp: &str, n: u64) -> HashMap<(String, String), u64> {
    HashMap::from([((id.to_owned(), fp.to_owned()), n)])
}

fn started(manifest: Vec<Binding>) -> Lifecycle {
    let mut l = Lifecycle::new("host:1");
    l.reload(manifest, T0).unwrap();
    l
}

#[test]
fn a_first_load_registers_and_activates_version_one_of_each_binding() {
    let mut l = Lifecycle::new("host:1");
    let c = l
        .reload(vec![binding("a", None), binding("b", None)], T0)
        .unwrap();
    assert_eq!(
        events(&c),
        [
            "a@v1 registering",
            "a@v1 active",
            "b@v1 registering",
            "b@v1 active"
        ]
    );
    assert!(c
        .entries
        .iter()
        .all(|e| e.process == "host:1" && e.at_ms == T0));
    assert_eq!(c.versions.len(), 2);
    assert!(c.versions.iter().all(|v| v.state == VersionState::Active));
    let a = &c.versions[0];
    assert_eq!(rebuilt_fingerprint(&a.definition), a.fingerprint);
    let ids: Vec<&str> = l
        .routing()
        .bindings()
        .iter()
        .map(|b| b.id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b"]);
}

fn rebuilt_fingerprint(definition: &str) -> String {
    crate::triggers::config::rebuild(definition)
        .unwrap()
        .fingerprint
}

#[test]
fn reloading_the_same_definitions_writes_nothing() {
    let mut l = started(vec![binding("a", Some("true"))]);
    let c = l.reload(vec![binding("a", Some("true"))], T0 + 10).unwrap();
    assert!(c.is_empty(), "{c:?}");
    assert_eq!(states(&l, "a"), [(1, VersionState::Active)]);
}

#[test]
fn a_changed_binding_gets_the_next_version_and_the_old_one_drains_under_its_own_definition() {
    let mut l = started(vec![binding("a", Some("true"))]);
    let old_fp = binding("a", Some("true")).fingerprint;
    let new = binding("a", Some("payload.action == \"opened\""));
    let c = l.reload(vec![new.clone()], T0 + 10).unwrap();
    assert_eq!(
        events(&c),
        ["a@v1 draining", "a@v2 registering", "a@v2 active"]
    );
    assert!(
        c.entries[0].reason.contains("replaced by a@v2"),
        "{}",
        c.entries[0].reason
    );
    assert_eq!(
        states(&l, "a"),
        [(1, VersionState::Draining), (2, VersionState::Active)]
    );
    assert_eq!(l.active("a").unwrap().fingerprint, new.fingerprint);
    // A row of v1 still resolves to v1's definition.
    let v1 = l.resolve("a", &old_fp).unwrap();
    assert_eq!(v1.filter.as_ref().unwrap().source(), "true");
    let claimable: Vec<String> = l.claimable().map(|b| b.fingerprint.clone()).collect();
    assert_eq!(claimable.len(), 2);
    // New events go to v2 only.
    let routed = l
        .routing()
        .route(&event("gh", "issues", json!({"action": "closed"})), 0);
    assert!(routed.enqueue.is_empty());
}

#[test]
fn a_draining_version_terminates_once_nothing_is_left_and_the_settle_time_passed() {
    let mut l = started(vec![binding("a", None)]);
    let fp1 = binding("a", None).fingerprint;
    l.reload(vec![binding("a", Some("true"))], T0 + 10).unwrap();
    let c = l.observe(&rows("a", &fp1, 3), T0 + 10_000);
    assert!(c.is_empty(), "rows left: {c:?}");
    let c = l.observe(&none_left(&l), T0 + 10 + DRAIN_SETTLE_MS - 1);
    assert!(c.is_empty(), "too early: {c:?}");
    let c = l.observe(&none_left(&l), T0 + 10 + DRAIN_SETTLE_MS);
    assert_eq!(events(&c), ["a@v1 terminated"]);
    assert_eq!(c.entries[0].reason, "nothing left to drain");
    assert_eq!(
        states(&l, "a"),
        [(1, VersionState::Terminated), (2, VersionState::Active)]
    );
    assert_eq!(l.claimable().count(), 1);
}

#[test]
fn a_removed_binding_drains_and_takes_no_new_events() {
    let mut l = started(vec![binding("a", None), binding("b", None)]);
    let c = l.reload(vec![binding("b", None)], T0 + 5).unwrap();
    assert_eq!(events(&c), ["a@v1 draining"]);
    assert_eq!(c.entries[0].reason, "removed from the configuration");
    assert!(l.active("a").is_none());
    let routed = l.routing().route(&event("gh", "push", json!({})), 0);
    let to: Vec<&str> = routed
        .enqueue
        .iter()
        .map(|r| r.binding_id.as_str())
        .collect();
    assert_eq!(to, ["b"]);
    assert!(l.resolve("a", &binding("a", None).fingerprint).is_some());
}

#[test]
fn going_back_to_an_earlier_definition_reuses_its_number() {
    let mut l = started(vec![binding("a", None)]);
    l.reload(vec![binding("a", Some("true"))], T0 + 1).unwrap();
    let c = l.reload(vec![binding("a", None)], T0 + 2).unwrap();
    assert_eq!(events(&c), ["a@v2 draining", "a@v1 active"]);
    assert_eq!(l.number("a", &binding("a", None).fingerprint), Some(1));
}

/// What a store would hand back after `l`'s commits: every record and the log.
fn stored(commits: &[LifecycleCommit]) -> (Vec<VersionRecord>, Vec<LifecycleEntry>) {
    let mut records: BTreeMap<(String, u32), VersionRecord> = BTreeMap::new();
    let mut log = Vec::new();
    for c in commits {
        for r in &c.versions {
            records.insert((r.binding_id.clone(), r.version), r.clone());
        }
        log.extend(c.entries.iter().cloned());
    }
    (records.into_values().collect(), log)
}

fn restore(records: Vec<VersionRecord>, log: &[LifecycleEntry]) -> Lifecycle {
    let built = records
        .into_iter()
        .map(|r| {
            let b = crate::triggers::config::rebuild(&r.definition)
                .ok()
                .map(Arc::new);
            (r, b)
        })
        .collect();
    Lifecycle::restore("host:2", built, log, &[], &["a".to_owned()])
}

#[test]
fn after_a_restart_the_same_definition_keeps_its_number_and_a_changed_one_gets_the_next() {
    let mut l = Lifecycle::new("host:1");
    let c1 = l.reload(vec![binding("a", None)], T0).unwrap();
    let c2 = l.reload(vec![binding("a", Some("true"))], T0 + 1).unwrap();
    let (records, log) = stored(&[c1, c2]);

    let mut same = restore(records.clone(), &log);
    let c = same
        .reload(vec![binding("a", Some("true"))], T0 + 100)
        .unwrap();
    assert!(c.is_empty(), "{c:?}");
    assert_eq!(
        same.active("a").unwrap().fingerprint,
        binding("a", Some("true")).fingerprint
    );

    let mut changed = restore(records, &log);
    let c = changed
        .reload(vec![binding("a", Some("false"))], T0 + 100)
        .unwrap();
    assert_eq!(
        events(&c),
        ["a@v2 draining", "a@v3 registering", "a@v3 active"]
    );
}

#[test]
fn only_the_newest_two_terminated_versions_stay_in_memory_and_numbers_are_never_forgotten() {
    let mut l = started(vec![binding("a", Some("0 == 0"))]);
    for i in 1..=5 {
        let now = T0 + i * 10_000;
        l.reload(vec![binding("a", Some(&format!("{i} == {i}")))], now)
            .unwrap();
        l.observe(&none_left(&l), now + DRAIN_SETTLE_MS);
    }
    assert_eq!(
        states(&l, "a"),
        [
            (4, VersionState::Terminated),
            (5, VersionState::Terminated),
            (6, VersionState::Active)
        ]
    );
    // v1's fingerprint is still known: going back gets number 1 again.
    let c = l
        .reload(vec![binding("a", Some("0 == 0"))], T0 + 99_000)
        .unwrap();
    assert_eq!(
        events(&c),
        ["a@v6 draining", "a@v1 registering", "a@v1 active"]
    );
}

#[test]
fn a_pinned_version_survives_collection() {
    let mut l = started(vec![binding("a", Some("0 == 0"))]);
    l.reload(vec![binding("a", Some("1 == 1"))], T0 + 10_000)
        .unwrap();
    l.observe(&none_left(&l), T0 + 20_000);
    let c = l.set_pinned("a", 1, true, "test", T0 + 20_001).unwrap();
    assert!(c.versions[0].pinned);
    assert_eq!(events(&c), ["a@v1 pinned"]);
    for i in 2..=4 {
        let now = T0 + i * 100_000;
        l.reload(vec![binding("a", Some(&format!("{i} == {i}")))], now)
            .unwrap();
        l.observe(&none_left(&l), now + DRAIN_SETTLE_MS);
    }
    let kept: Vec<u32> = states(&l, "a").into_iter().map(|(n, _)| n).collect();
    // v2 went: terminated and older than v3 and v4; v1 is pinned.
    assert_eq!(kept, [1, 3, 4, 5]);
}

#[test]
fn as_of_finds_the_version_active_at_an_instant_and_says_when_it_was_collected() {
    let mut l = started(vec![binding("a", Some("0 == 0"))]);
    for i in 1..=4 {
        let now = T0 + i * 10_000;
        l.reload(vec![binding("a", Some(&format!("{i} == {i}")))], now)
            .unwrap();
        l.observe(&none_left(&l), now + DRAIN_SETTLE_MS);
    }
    // v4 was active from T0+30 000 to T0+40 000; v1 from T0 to T0+10 000 (collected).
    assert_eq!(l.as_of("a", T0 + 35_000), AsOf::Version(4));
    assert_eq!(
        l.version("a", 4).unwrap().filter.as_ref().unwrap().source(),
        "3 == 3"
    );
    assert_eq!(l.as_of("a", T0 + 5_000), AsOf::Collected { number: 1 });
    assert_eq!(l.active("a").unwrap().version, 5);
    assert_eq!(l.as_of("a", T0 - 1), AsOf::NoneThen);
    assert_eq!(l.as_of("nope", T0), AsOf::NoneThen);
}

#[test]
fn as_of_survives_a_restart_through_the_log() {
    let mut l = Lifecycle::new("host:1");
    let c1 = l.reload(vec![binding("a", None)], T0).unwrap();
    let c2 = l.reload(vec![binding("a", Some("true"))], T0 + 50).unwrap();
    let (records, log) = stored(&[c1, c2]);
    let r = restore(records, &log);
    assert_eq!(r.as_of("a", T0 + 10), AsOf::Version(1));
    assert_eq!(r.as_of("a", T0 + 60), AsOf::Version(2));
}

#[test]
fn an_invalid_reload_changes_nothing_and_says_why() {
    let mut l = started(vec![binding("a", None)]);
    let mut dl = binding("dl", None);
    dl.dead_letter_for = DeadLetterScope::Bindings(vec!["missing".into()]);
    dl.filter = None;
    dl.fingerprint = dl.definition_fingerprint();
    let before = format!("{:?}", l.view());
    let e = l
        .reload(vec![binding("a", Some("true")), dl], T0 + 1)
        .unwrap_err();
    assert!(e.to_string().contains("\"missing\""), "{e}");
    let e = l
        .reload(vec![binding("a", Some("true")), binding("a", None)], T0 + 1)
        .unwrap_err();
    assert!(
        e.to_string().contains("two triggers have the id \"a\""),
        "{e}"
    );
    assert_eq!(format!("{:?}", l.view()), before);
}

#[test]
fn dynamic_bindings_refuse_duplicates_unless_replacing_and_never_touch_manifest_ones() {
    let mut l = started(vec![binding("m", None)]);
    let c = l.register(binding("d", None), false, T0 + 1).unwrap();
    assert_eq!(events(&c), ["d@v1 registering", "d@v1 active"]);
    assert!(c.versions.iter().all(|v| v.origin == Origin::Dynamic));
    let e = l
        .register(binding("d", Some("true")), false, T0 + 2)
        .unwrap_err();
    assert!(e.to_string().contains("already registered"), "{e}");
    let c = l
        .register(binding("d", Some("true")), true, T0 + 3)
        .unwrap();
    assert_eq!(
        events(&c),
        ["d@v1 draining", "d@v2 registering", "d@v2 active"]
    );
    let e = l
        .register(binding("m", Some("true")), true, T0 + 4)
        .unwrap_err();
    assert!(e.to_string().contains("configuration file"), "{e}");
    let e = l.deregister("m", T0 + 5).unwrap_err();
    assert!(e.to_string().contains("configuration file"), "{e}");
    // A reload keeps the dynamic binding and refuses to define its id.
    let c = l.reload(vec![binding("m", None)], T0 + 6).unwrap();
    assert!(c.is_empty(), "{c:?}");
    let e = l
        .reload(vec![binding("m", None), binding("d", None)], T0 + 7)
        .unwrap_err();
    assert!(e.to_string().contains("dynamic"), "{e}");
    let c = l.deregister("d", T0 + 8).unwrap();
    assert_eq!(events(&c), ["d@v2 draining"]);
    assert!(l.active("d").is_none());
}

#[test]
fn a_dead_letter_handler_keeps_its_target_from_being_drained_away() {
    let mut dl = binding("dl", None);
    dl.dead_letter_for = DeadLetterScope::Bindings(vec!["a".into()]);
    dl.fingerprint = dl.definition_fingerprint();
    let mut l = started(vec![binding("a", None), dl]);
    let e = l.drain("a", T0 + 1).unwrap_err();
    assert!(e.to_string().contains("dead_letter_for"), "{e}");
    assert!(l.active("a").is_some());
}

#[test]
fn a_paused_binding_still_routes_but_nothing_of_it_is_claimable() {
    let mut l = started(vec![binding("a", None), binding("b", None)]);
    let c = l.set_paused("a", true, T0 + 1).unwrap();
    assert_eq!(events(&c), ["a@v1 paused"]);
    assert_eq!(c.pauses, [("a".to_owned(), true)]);
    assert!(l.set_paused("a", true, T0 + 2).unwrap().is_empty());
    let claimable: Vec<&str> = l.claimable().map(|b| b.id.as_str()).collect();
    assert_eq!(claimable, ["b"]);
    assert_eq!(l.routing().bindings().len(), 2);
    let c = l.set_paused("a", false, T0 + 3).unwrap();
    assert_eq!(events(&c), ["a@v1 resumed"]);
    assert_eq!(l.claimable().count(), 2);
    assert!(l.set_paused("nope", true, T0).is_err());
}

#[test]
fn draining_on_its_own_ends_in_terminated() {
    let mut l = started(vec![binding("a", None)]);
    let c = l.drain("a", T0 + 1).unwrap();
    assert_eq!(events(&c), ["a@v1 draining"]);
    let c = l.observe(&none_left(&l), T0 + 1 + DRAIN_SETTLE_MS);
    assert_eq!(events(&c), ["a@v1 terminated"]);
    assert!(l.drain("a", T0 + 2).is_err());
}

#[test]
fn at_start_the_file_takes_over_a_dynamic_binding_of_the_same_id() {
    let mut l = started(vec![binding("m", None)]);
    l.register(binding("d", None), false, T0 + 1).unwrap();
    let e = l
        .reload(vec![binding("m", None), binding("d", Some("true"))], T0 + 2)
        .unwrap_err();
    assert!(e.to_string().contains("dynamic"), "{e}");
    let c = l
        .start(vec![binding("m", None), binding("d", Some("true"))], T0 + 3)
        .unwrap();
    assert_eq!(
        events(&c),
        ["d@v1 draining", "d@v2 registering", "d@v2 active"]
    );
    assert_eq!(
        l.view().iter().find(|b| b.id == "d").unwrap().origin,
        Origin::Manifest
    );
}

#[test]
fn a_version_the_store_was_not_asked_about_keeps_draining() {
    let mut l = started(vec![binding("a", None), binding("b", None)]);
    l.reload(
        vec![binding("a", Some("true")), binding("b", Some("true"))],
        T0 + 1,
    )
    .unwrap();
    // Only a@v1 was asked about (b@v1 began draining after the question).
    let asked = rows("a", &binding("a", None).fingerprint, 0);
    let c = l.observe(&asked, T0 + 1 + DRAIN_SETTLE_MS);
    assert_eq!(events(&c), ["a@v1 terminated"]);
    assert_eq!(states(&l, "b")[0], (1, VersionState::Draining));
}

#[test]
fn a_collected_version_is_recalled_pinned_from_its_record_and_keeps_its_state() {
    let mut l = started(vec![binding("a", Some("0 == 0"))]);
    for i in 1..=3 {
        let now = T0 + i * 10_000;
        l.reload(vec![binding("a", Some(&format!("{i} == {i}")))], now)
            .unwrap();
        l.observe(&none_left(&l), now + DRAIN_SETTLE_MS);
    }
    let record = |l: &Lifecycle, n: u32| {
        l.versions()
            .find(|v| v.record.version == n)
            .map(|v| v.record.clone())
    };
    assert!(record(&l, 1).is_none(), "v1 was collected");
    assert_eq!(l.as_of("a", T0 + 5_000), AsOf::Collected { number: 1 });
    // What the store keeps of v1: its record, and the definition it builds from.
    let v1 = binding("a", Some("0 == 0"));
    let stored = VersionRecord {
        binding_id: "a".into(),
        version: 1,
        fingerprint: v1.fingerprint.clone(),
        definition: String::new(),
        origin: Origin::Manifest,
        state: VersionState::Terminated,
        pinned: false,
        created_at_ms: T0,
        updated_at_ms: T0 + 10_500,
    };
    let c = l
        .recall(stored.clone(), Arc::new(v1), "replay", T0 + 50_000)
        .unwrap();
    assert_eq!(events(&c), ["a@v1 pinned"]);
    assert!(c.versions[0].pinned && c.versions[0].state == VersionState::Terminated);
    assert_eq!(l.as_of("a", T0 + 5_000), AsOf::Version(1));
    assert_eq!(l.version("a", 1).unwrap().version, 1);
    assert_eq!(
        l.active("a").unwrap().version,
        4,
        "the live version is unchanged"
    );
    // Recalling it again only confirms the pin: nothing to write.
    let again = l
        .recall(
            stored.clone(),
            Arc::new(binding("a", Some("0 == 0"))),
            "replay",
            T0 + 60_000,
        )
        .unwrap();
    assert!(again.is_empty());
    // A definition that builds to another fingerprint is refused, nothing changed.
    let mut other = stored;
    other.version = 2;
    other.fingerprint = "f-unknown".into();
    let mut l2 = l.clone();
    l2.entries.get_mut("a").unwrap().versions.remove(&2);
    let err = l2
        .recall(
            other,
            Arc::new(binding("a", Some("9 == 9"))),
            "replay",
            T0 + 70_000,
        )
        .unwrap_err();
    assert!(err.to_string().contains("a@v2"), "{err}");
}

#[test]
fn a_removed_binding_is_claimable_through_its_pinned_versions_only() {
    let mut l = started(vec![binding("a", Some("0 == 0")), binding("b", None)]);
    l.reload(vec![binding("b", None)], T0 + 10_000).unwrap();
    l.observe(&none_left(&l), T0 + 10_000 + DRAIN_SETTLE_MS);
    let claimable = |l: &Lifecycle| -> Vec<String> {
        l.claimable()
            .map(|b| format!("{}@v{}", b.id, b.version))
            .collect()
    };
    assert_eq!(
        claimable(&l),
        ["b@v1"],
        "a is terminated: nothing of it runs"
    );
    l.set_pinned("a", 1, true, "replay", T0 + 20_000).unwrap();
    assert_eq!(claimable(&l), ["a@v1", "b@v1"]);
    l.set_paused("a", true, T0 + 30_000).unwrap();
    assert_eq!(claimable(&l), ["b@v1"], "paused: none of it starts");
}
