//! `Store::append_group` on both backends: the events of one delivery (a batch) or one
//! poll page, each with its claim and outbox rows, and the source's new cursor commit
//! in ONE transaction, so a crash can neither keep the cursor without the events nor
//! the events without the cursor.

use switchboard::__private::store::{Appended, GroupAppend, StateWrite};

use super::fixture::{event, row, stored, Fixture, B, T};
use super::support::{postgres_url, skip_postgres, StoreKind};

on_both_stores!(
    a_group_commits_its_events_their_rows_and_the_cursor_together,
    a_failed_group_stores_neither_events_nor_cursor,
    swap_state_writes_only_over_the_expected_value,
);

fn page(keys: &[&str]) -> Vec<GroupAppend> {
    keys.iter()
        .map(|k| GroupAppend {
            event: event(k, 1_000),
            claim_expires_at_ms: T * 2,
            enqueue: vec![row(B)],
        })
        .collect()
}

fn cursor(value: &str) -> Option<StateWrite> {
    Some(StateWrite {
        source: "gh".into(),
        key: "cursor".into(),
        value: Some(value.into()),
    })
}

async fn a_group_commits_its_events_their_rows_and_the_cursor_together(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let first = f
        .store
        .append_group(page(&["p1-a", "p1-b", "p1-a"]), cursor("page-2"))
        .await
        .unwrap();
    assert_eq!(first.len(), 3, "one answer per event: {first:?}");
    let a = stored(first[0].clone());
    stored(first[1].clone());
    assert_eq!(
        first[2],
        Appended::Duplicate(a.clone()),
        "a key repeated inside the group is the first one's duplicate"
    );
    assert_eq!(
        f.backend
            .get_state("gh", "cursor")
            .await
            .unwrap()
            .as_deref(),
        Some("page-2")
    );
    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(
        stats.total.due, 2,
        "one row per new event, none for the duplicate"
    );

    // The same page read again (a crash after the commit, before the next poll saw
    // the cursor): every event is a duplicate, nothing is enqueued twice.
    let again = f
        .store
        .append_group(page(&["p1-a", "p1-b"]), cursor("page-2"))
        .await
        .unwrap();
    assert!(
        matches!(again[0], Appended::Duplicate(ref id) if *id == a),
        "{again:?}"
    );
    assert!(matches!(again[1], Appended::Duplicate(_)), "{again:?}");
    assert_eq!(f.backend.stats(T).await.unwrap().total.due, 2);

    // A state write alone, and a deletion.
    assert!(f
        .store
        .append_group(vec![], cursor("page-3"))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        f.backend
            .get_state("gh", "cursor")
            .await
            .unwrap()
            .as_deref(),
        Some("page-3")
    );
    let delete = StateWrite {
        value: None,
        ..cursor("").unwrap()
    };
    f.store.append_group(vec![], Some(delete)).await.unwrap();
    assert_eq!(f.backend.get_state("gh", "cursor").await.unwrap(), None);
    f.close().await;
}

async fn a_failed_group_stores_neither_events_nor_cursor(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.backend
        .put_state("gh", "cursor", Some("page-1"))
        .await
        .unwrap();
    // The state table gone (a broken database): the cursor's write fails, and with
    // it the events written before it in the same transaction.
    f.execute_sql("ALTER TABLE source_state RENAME TO source_state_away")
        .await;
    let err = f
        .store
        .append_group(page(&["g-a", "g-b"]), cursor("page-2"))
        .await
        .expect_err("a group whose cursor cannot be written fails whole");
    assert!(err.to_string().contains("state"), "{err}");
    f.execute_sql("ALTER TABLE source_state_away RENAME TO source_state")
        .await;
    assert_eq!(
        f.backend
            .get_state("gh", "cursor")
            .await
            .unwrap()
            .as_deref(),
        Some("page-1"),
        "the cursor did not move"
    );
    let events = f
        .backend
        .events(&switchboard::__private::store::EventQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        events.is_empty(),
        "no event of the group was kept: {events:?}"
    );
    assert_eq!(f.backend.stats(T).await.unwrap().total.due, 0);
    // The keys were not claimed either: the page stores normally afterwards.
    let ok = f
        .store
        .append_group(page(&["g-a", "g-b"]), cursor("page-2"))
        .await
        .unwrap();
    stored(ok[0].clone());
    stored(ok[1].clone());
    f.close().await;
}

async fn swap_state_writes_only_over_the_expected_value(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let b = &f.backend;
    assert!(b.swap_state("gh", "lease", None, "a 10").await.unwrap());
    assert!(
        !b.swap_state("gh", "lease", None, "b 20").await.unwrap(),
        "absent was expected, a value is there"
    );
    assert!(!b
        .swap_state("gh", "lease", Some("a 9"), "b 20")
        .await
        .unwrap());
    assert!(b
        .swap_state("gh", "lease", Some("a 10"), "b 20")
        .await
        .unwrap());
    assert_eq!(
        b.get_state("gh", "lease").await.unwrap().as_deref(),
        Some("b 20")
    );
    // Another process's backend sees the same value and races on it.
    let other = f.second_process().await;
    assert!(!other
        .swap_state("gh", "lease", Some("a 10"), "c")
        .await
        .unwrap());
    assert!(other
        .swap_state("gh", "lease", Some("b 20"), "c 30")
        .await
        .unwrap());
    f.close().await;
}
