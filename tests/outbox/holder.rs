//! `OutboxStore::release_holder` on both backends: a claim stamps its holder, and the
//! same holder started again gets back exactly the rows it holds under a live lease
//! (due now, the old claim's finish changing nothing, the attempt still counted),
//! while other holders' rows, rows scheduled for a retry and expired leases are left
//! as they are and the other holders are reported.

use switchboard::__private::outbox::model::{ClaimedRow, Finish, HeldRows};

use super::fixture::{claim_request, failure, Fixture, B, LEASE, T};
use super::support::{postgres_url, skip_postgres, StoreKind};

on_both_stores!(
    a_holder_started_again_gets_back_its_leased_rows_and_no_one_elses,
    a_holder_with_nothing_leased_releases_nothing,
);

/// Claims up to `limit` rows of [`B`] at `now` as `holder` under `token`.
async fn claim_as(
    f: &Fixture,
    holder: Option<&str>,
    now: i64,
    token: i64,
    limit: usize,
) -> Vec<ClaimedRow> {
    let mut req = claim_request(&[B], now, now + LEASE, token, limit);
    req.holder = holder.map(str::to_owned);
    f.backend.claim(&req).await.unwrap()
}

async fn a_holder_started_again_gets_back_its_leased_rows_and_no_one_elses(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append_rows(&["d-1", "d-2", "d-3", "d-4", "d-5"]).await;
    let mine = claim_as(&f, Some("host-a"), T, 1, 2).await;
    let theirs = claim_as(&f, Some("host-b"), T, 2, 1).await;
    let anonymous = claim_as(&f, None, T, 3, 1).await;
    let retried = claim_as(&f, Some("host-a"), T, 4, 1).await;
    assert_eq!(
        (mine.len(), theirs.len(), anonymous.len(), retried.len()),
        (2, 1, 1, 1)
    );
    // host-a's fifth row is scheduled for a retry: not leased, so not released.
    let retry = Finish::Retry {
        id: retried[0].id,
        token: 4,
        at_ms: T + 5_000,
        error: failure(1, T, "try later"),
    };
    assert_eq!(f.backend.finish(vec![retry], T).await.unwrap(), 1);

    let now = T + 100;
    let done = f.backend.release_holder("host-a", now).await.unwrap();
    assert_eq!(done.released, 2, "{done:?}");
    assert_eq!(
        done.held_by_others,
        [
            HeldRows {
                holder: None,
                rows: 1,
                until_ms: T + LEASE
            },
            HeldRows {
                holder: Some("host-b".into()),
                rows: 1,
                until_ms: T + LEASE
            },
        ],
        "the other holders, the claim without an identity first"
    );

    // A finish of the claim before the restart changes nothing now.
    let stale = Finish::Done {
        id: mine[0].id,
        token: 1,
    };
    assert_eq!(f.backend.finish(vec![stale], now).await.unwrap(), 0);

    // Due now: claimed again at once, the interrupted attempt still counted.
    let again = claim_as(&f, Some("host-a"), now, 5, 10).await;
    let mut ids: Vec<i64> = again.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    let mut want: Vec<i64> = mine.iter().map(|r| r.id).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "exactly host-a's leased rows");
    assert!(again.iter().all(|r| r.attempt == 2), "{again:?}");

    // Once their leases end, the others' rows are due as ever.
    let later = claim_as(&f, Some("host-c"), T + LEASE, 6, 10).await;
    let mut ids: Vec<i64> = later.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    let mut want = vec![theirs[0].id, anonymous[0].id, retried[0].id];
    want.sort_unstable();
    assert_eq!(ids, want);
}

async fn a_holder_with_nothing_leased_releases_nothing(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append_rows(&["d-1"]).await;
    let done = f.backend.release_holder("host-a", T).await.unwrap();
    assert_eq!(done.released, 0);
    assert!(done.held_by_others.is_empty(), "{done:?}");
    // An expired lease is no one's to release: the row is simply due.
    claim_as(&f, Some("host-a"), T, 1, 1).await;
    let done = f.backend.release_holder("host-a", T + LEASE).await.unwrap();
    assert_eq!(done.released, 0, "expired at its end");
    assert_eq!(claim_as(&f, None, T + LEASE, 2, 1).await.len(), 1);
}
