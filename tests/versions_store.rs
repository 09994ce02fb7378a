//! Binding versions through the public store API (`open_backend`, `VersionStore`):
//! version records and their updates, conflicts that write nothing, the lifecycle log
//! and its paging, pauses (the claim reads them), which versions still hold rows, stranded rows dead-lettered,
//! the fingerprint of a run record, and the cross-process wake-up of a lifecycle
//! commit. Every case runs on SQLite and, when `SWITCHBOARD_TEST_POSTGRES_URL` is set,
//! on PostgreSQL (otherwise the PostgreSQL variants say they were skipped). The clock
//! is an input of the store, so leases are driven by the `now` each call is given,
//! never by sleeping.
#![cfg(feature = "runtime")]

#[macro_use]
#[path = "ingest/support.rs"]
mod support;
#[path = "outbox/fixture.rs"]
mod fixture;

use fixture::{event, row, stored, Fixture, LEASE, T};
use support::{postgres_url, skip_postgres, StoreKind, DEADLINE};
use switchboard::__private::outbox::model::{DeadLetterQuery, Enqueue, RunRecord};
use switchboard::__private::triggers::versions::{
    LifecycleCommit, LifecycleEntry, LifecycleEvent, Origin, VersionRecord, VersionState,
};
use switchboard::Error;

on_both_stores!(
    committed_versions_read_back_by_binding_then_number,
    a_recommitted_version_changes_its_state_pin_and_time_only,
    a_conflicting_version_fails_the_whole_commit_and_writes_nothing,
    history_is_oldest_first_per_binding_and_pages_after_a_seq,
    pauses_are_set_once_cleared_and_read_by_the_claim,
    with_rows_names_the_versions_that_still_hold_a_row_leased_or_not,
    strand_dead_letters_rows_of_unknown_fingerprints_once_no_lease_holds_them,
    a_run_record_keeps_its_fingerprint,
    a_lifecycle_commit_wakes_other_processes,
);

fn version(binding: &str, n: u32, fingerprint: &str, state: VersionState) -> VersionRecord {
    VersionRecord {
        binding_id: binding.into(),
        version: n,
        fingerprint: fingerprint.into(),
        definition: format!(r#"{{"id":"{binding}","v":{n}}}"#),
        origin: Origin::Manifest,
        state,
        pinned: false,
        created_at_ms: 100 + i64::from(n),
        updated_at_ms: 100 + i64::from(n),
    }
}

fn entry(binding: &str, n: u32, event: LifecycleEvent, at_ms: i64) -> LifecycleEntry {
    LifecycleEntry {
        seq: 0,
        binding_id: binding.into(),
        version: n,
        fingerprint: format!("fp-{binding}-{n}"),
        event,
        reason: format!("{} at {at_ms}", event.as_str()),
        process: "host:1".into(),
        at_ms,
    }
}

fn versions(records: Vec<VersionRecord>) -> LifecycleCommit {
    LifecycleCommit {
        versions: records,
        ..Default::default()
    }
}

fn entries(list: Vec<LifecycleEntry>) -> LifecycleCommit {
    LifecycleCommit {
        entries: list,
        ..Default::default()
    }
}

async fn committed_versions_read_back_by_binding_then_number(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    assert!(f.backend.versions().await.unwrap().is_empty());
    let mut dynamic = version("b", 1, "fp-b-1", VersionState::Registering);
    dynamic.origin = Origin::Dynamic;
    dynamic.pinned = true;
    let written = vec![
        version("a", 2, "fp-a-2", VersionState::Active),
        dynamic,
        version("a", 1, "fp-a-1", VersionState::Draining),
    ];
    assert_eq!(
        f.backend
            .commit_lifecycle(&versions(written.clone()))
            .await
            .unwrap(),
        0
    );

    let read = f.backend.versions().await.unwrap();
    assert_eq!(
        read,
        vec![written[2].clone(), written[0].clone(), written[1].clone()]
    );
}

async fn a_recommitted_version_changes_its_state_pin_and_time_only(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let first = version("a", 1, "fp-a-1", VersionState::Active);
    f.backend
        .commit_lifecycle(&versions(vec![first.clone()]))
        .await
        .unwrap();

    let again = VersionRecord {
        definition: "something else".into(),
        origin: Origin::Dynamic,
        state: VersionState::Terminated,
        pinned: true,
        created_at_ms: 999,
        updated_at_ms: 500,
        ..first.clone()
    };
    f.backend
        .commit_lifecycle(&versions(vec![again]))
        .await
        .unwrap();

    let read = f.backend.versions().await.unwrap();
    let want = VersionRecord {
        state: VersionState::Terminated,
        pinned: true,
        updated_at_ms: 500,
        ..first
    };
    assert_eq!(read, vec![want]);
}

async fn a_conflicting_version_fails_the_whole_commit_and_writes_nothing(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let first = version("a", 1, "fp-a-1", VersionState::Active);
    let seq = f
        .backend
        .commit_lifecycle(&LifecycleCommit {
            versions: vec![first.clone()],
            entries: vec![entry("a", 1, LifecycleEvent::Active, 1)],
            pauses: vec![],
        })
        .await
        .unwrap();
    assert!(seq > 0);

    // The same number with another fingerprint, then the same fingerprint with another
    // number: each in a commit that would also write a valid version, an entry and a
    // pause, none of which may be left behind.
    for clash in [
        version("a", 1, "fp-other", VersionState::Registering),
        version("a", 3, "fp-a-1", VersionState::Registering),
    ] {
        let step = LifecycleCommit {
            versions: vec![version("a", 2, "fp-a-2", VersionState::Registering), clash],
            entries: vec![entry("a", 2, LifecycleEvent::Registering, 2)],
            pauses: vec![("a".into(), true)],
        };
        let err = f.backend.commit_lifecycle(&step).await.unwrap_err();
        assert!(matches!(err, Error::Conflict(_)), "{err:?}");
        assert!(err.to_string().contains("a@v"), "{err}");

        assert_eq!(f.backend.versions().await.unwrap(), vec![first.clone()]);
        assert_eq!(f.backend.lifecycle_seq().await.unwrap(), seq);
        assert_eq!(f.backend.lifecycle().await.unwrap().len(), 1);
        assert!(f.backend.pauses().await.unwrap().is_empty());
    }
}

async fn history_is_oldest_first_per_binding_and_pages_after_a_seq(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    assert_eq!(f.backend.lifecycle_seq().await.unwrap(), 0);
    let first = f
        .backend
        .commit_lifecycle(&entries(vec![
            entry("a", 1, LifecycleEvent::Registering, 10),
            entry("b", 1, LifecycleEvent::Registering, 11),
            entry("a", 1, LifecycleEvent::Active, 12),
        ]))
        .await
        .unwrap();
    assert_eq!(f.backend.lifecycle_seq().await.unwrap(), first);
    let second = f
        .backend
        .commit_lifecycle(&entries(vec![
            entry("a", 1, LifecycleEvent::Draining, 13),
            entry("a", 1, LifecycleEvent::Terminated, 14),
        ]))
        .await
        .unwrap();
    assert!(second > first, "{second} > {first}");
    assert_eq!(f.backend.lifecycle_seq().await.unwrap(), second);

    let all = f.backend.history("a", None, 10).await.unwrap();
    let times: Vec<i64> = all.iter().map(|e| e.at_ms).collect();
    assert_eq!(times, [10, 12, 13, 14]);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    let mut want = entry("a", 1, LifecycleEvent::Draining, 13);
    want.seq = all[2].seq;
    assert_eq!(all[2], want);
    assert_eq!(all.last().unwrap().seq, second);

    let page = f.backend.history("a", Some(all[0].seq), 2).await.unwrap();
    assert_eq!(page, all[1..3].to_vec());
    let rest = f.backend.history("a", Some(page[1].seq), 2).await.unwrap();
    assert_eq!(rest, all[3..].to_vec());
    assert!(f
        .backend
        .history("a", Some(second), 2)
        .await
        .unwrap()
        .is_empty());

    let log = f.backend.lifecycle().await.unwrap();
    let times: Vec<i64> = log.iter().map(|e| e.at_ms).collect();
    assert_eq!(times, [10, 11, 12, 13, 14]);
    assert_eq!(log[1].binding_id, "b");
}

async fn pauses_are_set_once_cleared_and_read_by_the_claim(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let pause = |list: &[(&str, bool)]| LifecycleCommit {
        pauses: list.iter().map(|(b, p)| (b.to_string(), *p)).collect(),
        entries: vec![entry("a", 1, LifecycleEvent::Paused, 5)],
        ..Default::default()
    };
    f.backend
        .commit_lifecycle(&pause(&[("b", true), ("a", true)]))
        .await
        .unwrap();
    assert_eq!(f.backend.pauses().await.unwrap(), ["a", "b"]);
    f.backend
        .commit_lifecycle(&pause(&[("a", true)]))
        .await
        .unwrap();
    assert_eq!(f.backend.pauses().await.unwrap(), ["a", "b"]);
    f.backend
        .commit_lifecycle(&pause(&[("a", false), ("c", false)]))
        .await
        .unwrap();
    assert_eq!(f.backend.pauses().await.unwrap(), ["b"]);

    // The claim reads the pauses itself: b's rows wait, a's are claimed.
    f.append("k1", vec![row("a"), row("b")]).await;
    let claimed = f.claim_for(&["a", "b"], T, 1, 10).await;
    let bindings: Vec<&str> = claimed.iter().map(|r| r.binding_id.as_str()).collect();
    assert_eq!(bindings, ["a"]);
    f.backend
        .commit_lifecycle(&pause(&[("b", false)]))
        .await
        .unwrap();
    let claimed = f.claim_for(&["a", "b"], T, 2, 10).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].binding_id, "b");
}

async fn with_rows_names_the_versions_that_still_hold_a_row_leased_or_not(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let asked = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(b, fp)| (b.to_string(), fp.to_string()))
            .collect()
    };
    let all = asked(&[("a", "fp-a"), ("a", "fp-new"), ("b", "fp-b"), ("c", "fp-c")]);
    assert!(f.backend.with_rows(&all).await.unwrap().is_empty());
    f.append("k1", vec![row("a"), row("b")]).await;
    f.append("k2", vec![row("a"), Enqueue::dispatch("a", "fp-new")])
        .await;
    // b's only row is leased: it still counts.
    assert_eq!(f.claim_for(&["b"], T, 1, 10).await.len(), 1);
    let mut found = f.backend.with_rows(&all).await.unwrap();
    found.sort();
    assert_eq!(
        found,
        asked(&[("a", "fp-a"), ("a", "fp-new"), ("b", "fp-b")])
    );
    // Only what was asked about is answered.
    assert_eq!(
        f.backend
            .with_rows(&asked(&[("a", "fp-new")]))
            .await
            .unwrap(),
        asked(&[("a", "fp-new")])
    );
    assert!(f.backend.with_rows(&[]).await.unwrap().is_empty());
}

async fn strand_dead_letters_rows_of_unknown_fingerprints_once_no_lease_holds_them(
    kind: StoreKind,
) {
    let f = Fixture::open(&kind).await;
    let known = version("a", 1, "fp-a", VersionState::Active);
    f.backend
        .commit_lifecycle(&versions(vec![known]))
        .await
        .unwrap();
    f.append("known", vec![row("a")]).await;
    let old = stored(
        f.append("old", vec![Enqueue::dispatch("a", "fp-old")])
            .await,
    );
    let later = Enqueue {
        not_before_ms: Some(T * 3),
        ..Enqueue::dispatch("a", "0123456789abcdef-later")
    };
    f.append("later", vec![later]).await;
    let leased = stored(f.append("leased", vec![row("c")]).await);
    assert_eq!(f.claim_for(&["c"], T, 7, 10).await.len(), 1);

    // The row of fp-old and the scheduled one go; the known row and the one under a
    // live lease stay.
    assert_eq!(f.backend.strand(T).await.unwrap(), 2);
    let every: Vec<(String, String)> = [
        ("a", "fp-a"),
        ("a", "fp-old"),
        ("a", "0123456789abcdef-later"),
        ("c", "fp-c"),
    ]
    .iter()
    .map(|(b, fp)| (b.to_string(), fp.to_string()))
    .collect();
    let left = f.backend.with_rows(&every).await.unwrap();
    assert_eq!(
        left,
        [("a".into(), "fp-a".into()), ("c".into(), "fp-c".into())]
    );
    let query = DeadLetterQuery {
        limit: 10,
        ..Default::default()
    };
    let dead = f.backend.dead_letters(&query).await.unwrap();
    assert_eq!(dead.len(), 2);
    let stale = dead.iter().find(|d| d.fingerprint == "fp-old").unwrap();
    assert_eq!(
        (stale.binding_id.as_str(), stale.event_id.as_str()),
        ("a", old.as_str())
    );
    assert_eq!(stale.trace_id, format!("{:032x}", "old".len() + 1));
    assert_eq!((stale.attempts, stale.dead_at_ms), (0, T));
    let error = stale.errors.last().unwrap();
    assert_eq!((error.kind.as_str(), error.at_ms), ("stranded", T));
    assert!(
        error
            .message
            .contains("binding a has no version with fingerprint fp-old"),
        "{}",
        error.message
    );
    let scheduled = dead
        .iter()
        .find(|d| d.fingerprint.ends_with("later"))
        .unwrap();
    assert!(
        scheduled.errors[0]
            .message
            .contains("fingerprint 0123456789ab:"),
        "{}",
        scheduled.errors[0].message
    );

    // Once its lease has run out, the claimed row of a binding with no version goes too.
    assert_eq!(f.backend.strand(T + LEASE - 1).await.unwrap(), 0);
    assert_eq!(f.backend.strand(T + LEASE).await.unwrap(), 1);
    let dead = f.backend.dead_letters(&query).await.unwrap();
    let c = dead.iter().find(|d| d.binding_id == "c").unwrap();
    assert_eq!((c.event_id.as_str(), c.attempts), (leased.as_str(), 1));
    assert_eq!(
        (c.errors[0].kind.as_str(), c.errors[0].attempt),
        ("stranded", 1)
    );
    assert_eq!(
        f.backend.with_rows(&every).await.unwrap(),
        [("a".into(), "fp-a".into())]
    );
    assert_eq!(f.backend.strand(T * 4).await.unwrap(), 0);
}

async fn a_run_record_keeps_its_fingerprint(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let run = RunRecord {
        binding_id: "a".into(),
        event_id: stored(f.append_event(event("run", 1_000), vec![]).await),
        started_at_ms: T,
        duration_ms: 4,
        status: "ok".into(),
        error: None,
        abandoned: false,
        fingerprint: "fp-a-7".into(),
    };
    f.backend.record_run(&run).await.unwrap();
    assert_eq!(f.backend.runs(Some("a"), 10).await.unwrap(), vec![run]);
}

async fn a_lifecycle_commit_wakes_other_processes(kind: StoreKind) {
    let test = "a_lifecycle_commit_wakes_other_processes";
    let Some(f) = Fixture::open_alone(&kind, test).await else {
        return;
    };
    let other = f.second_process().await;
    match kind {
        // One process per SQLite file: it polls the seq, nothing to wake.
        StoreKind::Sqlite => assert!(other.lifecycle_wake().is_none()),
        StoreKind::Postgres(_) => {
            let wake = other
                .lifecycle_wake()
                .expect("PostgreSQL wakes other processes");
            assert!(
                futures_util::FutureExt::now_or_never(wake.notified()).is_none(),
                "nothing notified it yet"
            );
            let seq = f
                .backend
                .commit_lifecycle(&entries(vec![entry("a", 1, LifecycleEvent::Active, 1)]))
                .await
                .unwrap();
            tokio::time::timeout(DEADLINE, wake.notified())
                .await
                .expect("woken after the lifecycle commit");
            assert_eq!(other.lifecycle_seq().await.unwrap(), seq);
        }
    }
    drop(other);
    f.close().await;
}
