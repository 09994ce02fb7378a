//! Rows waiting behind their ordering key are parked out of the claim's way and put
//! back when the row before them leaves: on both backends, a hot key still runs one
//! row at a time in enqueue order, counts its waiting rows as due, shows their own due
//! time, and every way its head leaves (done, dead letter) frees the next; on
//! PostgreSQL, appends racing the head's finishes from another process never strand
//! a row.

use std::time::{Duration, Instant};

use switchboard::__private::outbox::model::Finish;

use super::fixture::{claim_request, failure, keyed, row, stored, Fixture, B, LEASE, T};
use super::support::{postgres_url, skip_postgres, StoreKind};

on_both_stores!(
    a_hot_keys_rows_run_one_at_a_time_in_order_and_count_as_due,
    a_dead_lettered_head_frees_the_next_row_of_its_key,
);

fn delivery(payload: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
    v["delivery"].as_str().unwrap().to_owned()
}

async fn a_hot_keys_rows_run_one_at_a_time_in_order_and_count_as_due(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let keys: Vec<String> = (0..30).map(|i| format!("h-{i:02}")).collect();
    let mut last = String::new();
    for k in &keys {
        last = stored(f.append(k, vec![keyed("hot")]).await);
    }
    f.append("plain", vec![row(B)]).await;
    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(
        (stats.total.due, stats.total.scheduled),
        (31, 0),
        "rows held behind their key are due, not scheduled"
    );
    let pending = f.backend.event_deliveries(&last).await.unwrap().pending;
    assert_eq!(pending.len(), 1);
    assert!(
        pending[0].next_attempt_at_ms < T,
        "a waiting row shows its own due time, not the parking mark: {}",
        pending[0].next_attempt_at_ms
    );

    let mut order = Vec::new();
    let mut token = 1;
    let mut plain = 0;
    loop {
        token += 1;
        let got = f.claim(T, token, 10).await;
        if got.is_empty() {
            break;
        }
        let hot: Vec<_> = got.iter().filter(|r| r.ordering_key.is_some()).collect();
        assert!(
            hot.len() <= 1,
            "one row of the key at a time, got {}",
            hot.len()
        );
        plain += got.len() - hot.len();
        order.extend(hot.iter().map(|r| delivery(&r.payload)));
        let done = got
            .iter()
            .map(|r| Finish::Done { id: r.id, token })
            .collect();
        f.backend.finish(done, T).await.unwrap();
    }
    assert_eq!(order, keys, "every row of the key, in enqueue order");
    assert_eq!(plain, 1, "the unkeyed row is not held back by the key");
    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(
        (stats.total.due, stats.total.leased, stats.total.scheduled),
        (0, 0, 0)
    );
}

async fn a_dead_lettered_head_frees_the_next_row_of_its_key(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append("k-1", vec![keyed("K")]).await;
    f.append("k-2", vec![keyed("K")]).await;
    let head = f.claim(T, 1, 10).await;
    assert_eq!(head.len(), 1);
    assert!(f.claim(T, 2, 10).await.is_empty(), "k-2 waits for k-1");
    let dead = Finish::DeadLetter {
        id: head[0].id,
        token: 1,
        error: failure(1, T, "gave up"),
        fanout: Vec::new(),
    };
    assert_eq!(f.backend.finish(vec![dead], T).await.unwrap(), 1);
    let next = f.claim(T, 3, 10).await;
    assert_eq!(next.len(), 1);
    assert_eq!(delivery(&next[0].payload), "k-2");
    assert_eq!(
        f.backend.next_due_ms(&[B.into()], T).await.unwrap(),
        Some(T + LEASE),
        "the lease is the next thing due; nothing parked is reported"
    );
}

/// One process appends rows of a hot key, one at a time, while another claims and
/// finishes its heads as they come, so the key's queue stays short and appends keep
/// landing while the only row before them is being deleted: every row is delivered,
/// one at a time, in the key's order, and none is left parked behind a head that is
/// gone. (Without the insert's lock on the key's newest row, this strands a row in
/// about one run of three.)
#[tokio::test]
async fn postgres_appends_racing_a_hot_keys_finishes_never_strand_a_row() {
    let Some(base) = postgres_url() else {
        return skip_postgres("postgres_appends_racing_a_hot_keys_finishes_never_strand_a_row");
    };
    let f = Fixture::open(&StoreKind::Postgres(base)).await;
    let other = f.second_process().await;
    const ROWS: usize = 1_000;
    let store = f.store.clone();
    let appender = tokio::spawn(async move {
        for i in 0..ROWS {
            let ev = super::fixture::event(&format!("r-{i:04}"), 1_000);
            store
                .append_enqueue(ev, T * 2, vec![keyed("hot")])
                .await
                .unwrap();
        }
    });
    let mut order = Vec::new();
    let mut token = 0;
    let mut progress = Instant::now();
    while order.len() < ROWS {
        assert!(
            progress.elapsed() < Duration::from_secs(10),
            "stranded: {} of {ROWS} delivered, nothing claimable for 10 s",
            order.len()
        );
        token += 1;
        let got = other
            .claim(&claim_request(&[B], T, T + LEASE, token, 10))
            .await
            .unwrap();
        assert!(got.len() <= 1, "one row of the key at a time");
        if got.is_empty() {
            tokio::task::yield_now().await;
            continue;
        }
        progress = Instant::now();
        order.push(delivery(&got[0].payload));
        let done = vec![Finish::Done {
            id: got[0].id,
            token,
        }];
        assert_eq!(other.finish(done, T).await.unwrap(), 1);
    }
    appender.await.unwrap();
    let expected: Vec<String> = (0..ROWS).map(|i| format!("r-{i:04}")).collect();
    assert_eq!(order, expected, "in enqueue order");
    f.close().await;
}
