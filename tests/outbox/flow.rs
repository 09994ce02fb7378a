//! Flow control in the store, on both backends: claims by priority, debounced rows
//! collapsing to the last, and per-binding dedupe keys. Writes go to
//! `Backend::write_batch` with a commit clock of the test's own, since "due at commit
//! plus window" and "seen within the retention" are about that clock.

use switchboard::__private::outbox::model::{Destination, Enqueue};
use switchboard::__private::store::{append_write, Appended, Write};

use super::fixture::{event, keyed, row, Fixture, B, LEASE, T};
use super::support::{postgres_url, skip_postgres, StoreKind};

on_both_stores!(
    claims_take_higher_priorities_first_then_due_time_then_id,
    a_debounced_key_collapses_to_its_last_row_due_at_commit_plus_window,
    a_binding_dedupe_key_enqueues_nothing_within_its_retention_and_again_after,
);

/// A row of [`B`] with `priority`, first due at `at`.
fn prioritised(priority: i32, at: i64) -> Enqueue {
    Enqueue {
        priority,
        not_before_ms: Some(at),
        ..row(B)
    }
}

/// A row of `binding` debounced on `key` for `window_ms`.
fn debounced(binding: &str, key: &str, window_ms: i64) -> Enqueue {
    Enqueue {
        debounce_key: Some(key.into()),
        debounce_window_ms: Some(window_ms),
        ..row(binding)
    }
}

/// A row of `binding` deduplicated on `key` for `retention_ms`.
fn deduped(binding: &str, key: &str, retention_ms: i64) -> Enqueue {
    Enqueue {
        dedupe: Some((key.into(), retention_ms)),
        ..row(binding)
    }
}

/// An append of a fresh event (delivery `key`) with `rows`.
fn write(key: &str, rows: Vec<Enqueue>) -> Write {
    append_write(event(key, 1_000), T * 2, rows)
}

/// Commits `writes` as one batch at `now`; returns the events' ids.
async fn commit(f: &Fixture, writes: Vec<Write>, now: i64) -> Vec<String> {
    f.backend
        .write_batch(writes, now)
        .await
        .unwrap()
        .into_iter()
        .map(|a| match a {
            Some(Appended::Stored(id)) => id,
            other => panic!("expected a stored event, got {other:?}"),
        })
        .collect()
}

async fn claims_take_higher_priorities_first_then_due_time_then_id(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let rows = [
        ("p0-early", prioritised(0, T - 30)),
        ("p5-late", prioritised(5, T - 10)),
        ("p5-early", prioritised(5, T - 20)),
        ("pm3", prioritised(-3, T - 100)),
        ("p9-not-due", prioritised(9, T + 100)),
        ("p5-tie", prioritised(5, T - 10)),
    ];
    for (key, r) in rows {
        f.append(key, vec![r]).await;
    }
    let order = |claimed: Vec<switchboard::__private::outbox::model::ClaimedRow>| {
        claimed
            .into_iter()
            .map(|r| String::from_utf8(r.payload).unwrap())
            .collect::<Vec<_>>()
    };
    let delivery = |k: &str| format!(r#"{{"delivery":"{k}"}}"#);
    assert_eq!(
        order(f.claim(T, 1, 2).await),
        [delivery("p5-early"), delivery("p5-late")],
        "the highest priority first, by due time within it"
    );
    assert_eq!(
        order(f.claim(T, 2, 10).await),
        [delivery("p5-tie"), delivery("p0-early"), delivery("pm3")],
        "equal priority and due time go by id; a not-due row waits whatever its priority"
    );
    assert_eq!(
        order(f.claim(T + 100, 3, 10).await),
        [delivery("p9-not-due")]
    );

    // The head-of-line rule is unchanged: a later row of a key waits for its head,
    // whatever its priority.
    let f = Fixture::open(&kind).await;
    f.append("head", vec![keyed("K")]).await;
    f.append(
        "urgent",
        vec![Enqueue {
            priority: 9,
            ..keyed("K")
        }],
    )
    .await;
    f.append("other", vec![prioritised(1, T)]).await;
    assert_eq!(
        order(f.claim(T, 4, 10).await),
        [delivery("other"), delivery("head")]
    );
}

async fn a_debounced_key_collapses_to_its_last_row_due_at_commit_plus_window(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let t0 = T - 1_000_000;
    let w = 5_000;
    commit(&f, vec![write("k-1", vec![debounced(B, "K", w)])], t0).await;
    commit(
        &f,
        vec![write("k-2", vec![debounced(B, "K", w)])],
        t0 + 1_000,
    )
    .await;
    commit(
        &f,
        vec![write("l-1", vec![debounced(B, "L", w)])],
        t0 + 1_500,
    )
    .await;
    let last = commit(
        &f,
        vec![write("k-3", vec![debounced(B, "K", w)])],
        t0 + 2_000,
    )
    .await;
    // Another binding's rows of the same key are not this binding's to supersede.
    commit(
        &f,
        vec![write("o-1", vec![debounced("other", "K", w)])],
        t0 + 2_500,
    )
    .await;

    let stats = f.backend.stats(t0 + 2_500).await.unwrap();
    assert_eq!(
        (stats.total.superseded, stats.by_binding[B].superseded),
        (2, 2)
    );
    assert_eq!(stats.by_binding[B].scheduled, 2, "{stats:?}");
    assert_eq!(stats.by_binding["other"].scheduled, 1);

    let early = f.claim(t0 + 6_999, 1, 10).await;
    assert_eq!(early.len(), 1, "only L is due by then");
    assert_eq!(early[0].payload, br#"{"delivery":"l-1"}"#);
    let survivor = f.claim(t0 + 7_000, 2, 10).await;
    assert_eq!(survivor.len(), 1);
    assert_eq!(survivor[0].event_id, last[0]);
    assert_eq!(
        survivor[0].due_at_ms,
        t0 + 7_000,
        "due at its commit plus the window"
    );

    // A row under a live lease has started: a later row of its key leaves it alone.
    // Once the lease has run out it has not, and is superseded.
    let t1 = t0 + 100_000;
    let m = |key: &str| write(key, vec![debounced("m", "M", w)]);
    commit(&f, vec![m("m-1")], t1).await;
    assert_eq!(f.claim_for(&["m"], t1 + w, 3, 10).await.len(), 1);
    commit(&f, vec![m("m-2")], t1 + w + 1).await;
    let stats = f.backend.stats(t1 + w + 1).await.unwrap();
    assert_eq!(stats.total.superseded, 2, "the leased row stays");
    assert_eq!(stats.by_binding["m"].leased, 1);
    commit(&f, vec![m("m-3")], t1 + w + LEASE + 1).await;
    let stats = f.backend.stats(t1 + w + LEASE + 1).await.unwrap();
    assert_eq!(
        stats.total.superseded, 4,
        "the expired lease's row and m-2 go"
    );
    assert_eq!(stats.by_binding["m"].superseded, 2);
    assert_eq!(stats.by_binding["m"].scheduled, 1);

    // Two rows of one key in one batch: the later supersedes the earlier.
    let t2 = t1 + 1_000_000;
    let ids = commit(
        &f,
        vec![
            write("n-1", vec![debounced(B, "N", w)]),
            write("n-2", vec![debounced(B, "N", w)]),
        ],
        t2,
    )
    .await;
    let n = f.claim(t2 + w, 4, 10).await;
    let n_rows: Vec<_> = n.iter().filter(|r| ids.contains(&r.event_id)).collect();
    assert_eq!(n.len(), 3, "N, and K and L again: their leases ran out");
    assert_eq!(n_rows.len(), 1);
    assert_eq!(n_rows[0].event_id, ids[1]);
    assert_eq!(f.backend.stats(t2).await.unwrap().total.superseded, 5);

    // The records go with the event retention.
    let expired = f.backend.expire(t2 + 1, 100).await.unwrap();
    assert_eq!(expired.superseded, 5);
    assert_eq!(f.backend.stats(t2).await.unwrap().total.superseded, 0);
}

async fn a_binding_dedupe_key_enqueues_nothing_within_its_retention_and_again_after(
    kind: StoreKind,
) {
    let f = Fixture::open(&kind).await;
    let t0 = T - 1_000_000;
    let keep = 10_000;
    let first = commit(
        &f,
        vec![write("d-1", vec![deduped(B, "X", keep), row("other")])],
        t0,
    )
    .await;
    let repeat = commit(
        &f,
        vec![write(
            "d-2",
            vec![deduped(B, "X", keep), deduped("c", "X", keep), row("other")],
        )],
        t0 + keep - 1,
    )
    .await;
    let after = commit(
        &f,
        vec![write("d-3", vec![deduped(B, "X", keep)])],
        t0 + keep,
    )
    .await;
    // Within one batch, the second of a key is a repeat too.
    let batch = commit(
        &f,
        vec![
            write("d-4", vec![deduped(B, "Y", keep)]),
            write("d-5", vec![deduped(B, "Y", keep)]),
        ],
        t0 + keep,
    )
    .await;

    let events_of = |binding: &str, rows: &[switchboard::__private::outbox::model::ClaimedRow]| {
        rows.iter()
            .filter(|r| r.binding_id == binding)
            .map(|r| r.event_id.clone())
            .collect::<Vec<_>>()
    };
    let claimed = f.claim_for(&[B, "c", "other"], T, 1, 100).await;
    assert_eq!(
        events_of(B, &claimed),
        [first[0].clone(), after[0].clone(), batch[0].clone()],
        "the repeat within the retention enqueued nothing for the binding; after it, a row again"
    );
    assert_eq!(
        events_of("c", &claimed),
        [repeat[0].clone()],
        "other bindings unaffected"
    );
    assert_eq!(
        events_of("other", &claimed),
        [first[0].clone(), repeat[0].clone()]
    );

    // A queue handler's messages are deduplicated the same way.
    let to_queue = || Enqueue {
        destination: Destination::Queue("q".into()),
        ..deduped("to-q", "Z", keep)
    };
    commit(&f, vec![write("q-1", vec![to_queue()])], t0).await;
    commit(&f, vec![write("q-2", vec![to_queue()])], t0 + 1).await;
    assert_eq!(f.backend.stats(T).await.unwrap().queues["q"].due, 1);

    // The claims are dedupe claims like the sources': the sweep takes the expired ones.
    let swept = f.backend.sweep(t0 + 3 * keep, 0).await.unwrap();
    assert_eq!(
        swept.claims, 4,
        "X of B, X of c, Y of B, Z of to-q; the events' claims live on"
    );
}
