//! The durable outbox through the public store API (`open_backend`,
//! `Store::append_enqueue`, `OutboxStore`): enqueue with ingest, claims and leases,
//! ordering keys, finishes, a restarted holder's release, dead letters and replays,
//! queues, stats, retention and wake-ups. Every case runs on SQLite and, when
//! `SWITCHBOARD_TEST_POSTGRES_URL` is set, on PostgreSQL (otherwise the PostgreSQL
//! variants say they were skipped). The clock
//! is an input of the store, so leases and schedules are driven by the `now` each call
//! is given, never by sleeping.
#![cfg(feature = "runtime")]

#[macro_use]
#[path = "ingest/support.rs"]
mod support;
#[path = "outbox/fixture.rs"]
mod fixture;
#[path = "outbox/flow.rs"]
mod flow;
#[path = "outbox/group.rs"]
mod group;
#[path = "outbox/holder.rs"]
mod holder;
#[path = "outbox/parked.rs"]
mod parked;

use std::collections::HashSet;

use fixture::{
    claim_request, due_at, event, failure, keyed, message, row, stored, Fixture, B, LEASE, T,
};
use support::{postgres_url, skip_postgres, StoreKind, DEADLINE};
use switchboard::__private::outbox::model::{DeadLetterQuery, Finish, ReceiveRequest, RunRecord};
use switchboard::__private::store::{Appended, EventQuery};

on_both_stores!(
    an_accepted_event_enqueues_one_row_per_binding_and_a_duplicate_enqueues_nothing,
    claims_go_by_due_time_then_id_and_stop_at_the_limit,
    a_lease_hides_rows_until_it_expires_and_a_stale_token_changes_nothing,
    an_ordering_key_holds_later_rows_until_its_head_is_gone,
    finishes_folded_into_a_claim_apply_first_and_free_the_next_head,
    release_gives_rows_back_due_now_with_the_attempt_restored,
    retry_keeps_the_error_and_schedules_the_next_attempt,
    a_dead_letter_keeps_the_history_and_fans_out_rows_that_carry_it,
    a_failed_dead_letter_handler_annotates_the_dead_letter,
    replay_enqueues_the_dead_letter_again_from_attempt_one,
    a_received_message_is_hidden_until_its_visibility_ends_and_acks_need_the_receipt,
    a_nack_with_a_delay_hides_the_message_until_then,
    a_message_past_its_max_receives_becomes_a_dead_letter_and_replays_to_its_queue,
    stats_count_due_leased_scheduled_queues_and_dead_letters,
    expire_deletes_old_unreferenced_events_in_chunks_and_keeps_referenced_ones,
    wake_fires_after_an_enqueueing_commit,
    two_claimers_on_a_thousand_rows_never_receive_the_same_row,
    time_bounded_pages_are_exact_whatever_the_window_holds,
);

async fn an_accepted_event_enqueues_one_row_per_binding_and_a_duplicate_enqueues_nothing(
    kind: StoreKind,
) {
    let f = Fixture::open(&kind).await;
    let first = f
        .append("d-1", vec![row("a"), row("b"), message("q")])
        .await;
    let id = stored(first);
    let again = f
        .append("d-1", vec![row("a"), row("b"), message("q")])
        .await;
    assert_eq!(again, Appended::Duplicate(id.clone()));

    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(stats.total.due, 2, "{stats:?}");
    assert_eq!(stats.by_binding["a"].due, 1);
    assert_eq!(stats.by_binding["b"].due, 1);
    assert_eq!(stats.queues["q"].due, 1);

    let rows = f.claim_for(&["a", "b"], T, 1, 10).await;
    assert_eq!(rows.len(), 2);
    let r = &rows[0];
    assert_eq!(
        (r.binding_id.as_str(), r.fingerprint.as_str()),
        ("a", "fp-a")
    );
    assert_eq!(r.event_id, id);
    assert_eq!(
        (r.source.as_str(), r.kind.as_str()),
        ("gh", "issues.opened")
    );
    assert_eq!(r.tenant, "acme");
    assert_eq!(r.trace_id, format!("{:032x}", 4));
    assert_eq!(r.payload, br#"{"delivery":"d-1"}"#);
    assert_eq!((r.attempt, r.token, r.depth), (1, 1, 0));
    assert!(r.errors.is_empty() && r.dead_letter_id.is_none());
    assert_eq!(rows[1].binding_id, "b");
}

async fn claims_go_by_due_time_then_id_and_stop_at_the_limit(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append("late", vec![due_at(T + 30)]).await;
    f.append("early-1", vec![due_at(T + 10)]).await;
    f.append("early-2", vec![due_at(T + 10)]).await;
    f.append("future", vec![due_at(T + 1_000)]).await;

    let first = f.claim(T + 100, 1, 2).await;
    let payloads: Vec<_> = first.iter().map(|r| r.payload.clone()).collect();
    assert_eq!(
        payloads,
        [
            br#"{"delivery":"early-1"}"#.to_vec(),
            br#"{"delivery":"early-2"}"#.to_vec()
        ]
    );
    assert!(first[0].id < first[1].id);
    assert_eq!(first[0].due_at_ms, T + 10);
    let second = f.claim(T + 100, 2, 2).await;
    assert_eq!(second.len(), 1, "the row due later than now stays");
    assert_eq!(second[0].payload, br#"{"delivery":"late"}"#);
    assert!(f.claim(T + 999, 3, 2).await.is_empty());
    assert_eq!(
        f.backend.next_due_ms(&[B.into()], T).await.unwrap(),
        Some(T + 1_000)
    );
    assert!(
        f.claim_for(&["other"], T + 5_000, 4, 10).await.is_empty(),
        "only the bindings asked for"
    );
}

async fn a_lease_hides_rows_until_it_expires_and_a_stale_token_changes_nothing(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append_rows(&["d-1"]).await;
    let lease_end = T + 1_000;
    let held = f
        .backend
        .claim(&claim_request(&[B], T, lease_end, 1, 10))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    assert!(f.claim(T + 999, 2, 10).await.is_empty(), "within the lease");

    let again = f.claim(lease_end, 3, 10).await;
    assert_eq!(
        again.len(),
        1,
        "a crashed claimer's row is due when its lease ends"
    );
    assert_eq!((again[0].id, again[0].attempt), (held[0].id, 2));
    let stale = Finish::Done {
        id: held[0].id,
        token: 1,
    };
    assert_eq!(f.backend.finish(vec![stale], lease_end).await.unwrap(), 0);
    let extended = f
        .backend
        .extend(&[(held[0].id, 1), (held[0].id, 3)], lease_end + 5_000)
        .await
        .unwrap();
    assert_eq!(extended, 1, "only the live token extends");
    let done = Finish::Done {
        id: held[0].id,
        token: 3,
    };
    assert_eq!(f.backend.finish(vec![done], lease_end).await.unwrap(), 1);
    assert_eq!(f.backend.stats(T).await.unwrap().by_binding.len(), 0);
}

async fn an_ordering_key_holds_later_rows_until_its_head_is_gone(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append("a-1", vec![keyed("A")]).await;
    f.append("a-2", vec![keyed("A")]).await;
    f.append("b-1", vec![keyed("B")]).await;
    let other_binding = switchboard::__private::outbox::model::Enqueue {
        ordering_key: Some("A".into()),
        ..row("other")
    };
    f.append("o-1", vec![other_binding]).await;

    let first = f.claim_for(&[B, "other"], T, 1, 10).await;
    let got: Vec<_> = first
        .iter()
        .map(|r| (r.binding_id.as_str(), r.payload.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (B, br#"{"delivery":"a-1"}"#.to_vec()),
            (B, br#"{"delivery":"b-1"}"#.to_vec()),
            ("other", br#"{"delivery":"o-1"}"#.to_vec()),
        ],
        "a-2 waits for a-1; key B and the other binding's key A are not held back"
    );
    assert!(f.claim_for(&[B, "other"], T, 2, 10).await.is_empty());
    assert_eq!(
        f.backend.next_due_ms(&[B.into()], T).await.unwrap(),
        Some(T + LEASE),
        "a held row does not count as due"
    );

    let retry = Finish::Retry {
        id: first[0].id,
        token: 1,
        at_ms: T + 10,
        error: failure(1, T, "down"),
    };
    assert_eq!(f.backend.finish(vec![retry], T).await.unwrap(), 1);
    assert!(
        f.claim(T + 5, 3, 10).await.is_empty(),
        "a rescheduled head still holds its key"
    );
    let head = f.claim(T + 10, 4, 10).await;
    assert_eq!(head.len(), 1);
    assert_eq!(head[0].id, first[0].id);
    let done = Finish::Done {
        id: head[0].id,
        token: 4,
    };
    assert_eq!(f.backend.finish(vec![done], T + 10).await.unwrap(), 1);
    let next = f.claim(T + 10, 5, 10).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].payload, br#"{"delivery":"a-2"}"#);
}

/// The dispatcher folds a batch's finishes into its next claim: one transaction, the
/// finishes first, so the row a delivered head held back is claimed by the same call;
/// a stale finish is skipped, not an error.
async fn finishes_folded_into_a_claim_apply_first_and_free_the_next_head(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append("a-1", vec![keyed("A")]).await;
    f.append("a-2", vec![keyed("A")]).await;
    f.append("c-1", vec![row(B)]).await;
    let first = f.claim(T, 1, 10).await;
    assert_eq!(first.len(), 2, "a-1 and c-1; a-2 waits for a-1");
    let head = first.iter().find(|r| r.ordering_key.is_some()).unwrap();
    let other = first.iter().find(|r| r.ordering_key.is_none()).unwrap();
    let finishes = vec![
        Finish::Done {
            id: head.id,
            token: 1,
        },
        Finish::Done {
            id: other.id,
            token: 99,
        },
    ];
    let (applied, next) = f
        .backend
        .finish_and_claim(finishes, T, &claim_request(&[B], T, T + LEASE, 2, 10))
        .await
        .unwrap();
    assert_eq!(applied, 1, "the finish under a stale token is skipped");
    assert_eq!(
        next.len(),
        1,
        "a-2 became the head within the same transaction"
    );
    assert_eq!(next[0].payload, br#"{"delivery":"a-2"}"#.to_vec());
    assert_eq!(next[0].token, 2);

    // Without finishes it is a plain claim; with no bindings it still applies them.
    let (applied, none) = f
        .backend
        .finish_and_claim(Vec::new(), T, &claim_request(&[B], T, T + LEASE, 3, 10))
        .await
        .unwrap();
    assert_eq!((applied, none.len()), (0, 0), "c-1 and a-2 are leased");
    let done = vec![Finish::Done {
        id: other.id,
        token: 1,
    }];
    let (applied, none) = f
        .backend
        .finish_and_claim(done, T, &claim_request(&[], T, T + LEASE, 4, 10))
        .await
        .unwrap();
    assert_eq!((applied, none.len()), (1, 0));
    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(stats.total.leased, 1, "only a-2 is left");
}

async fn release_gives_rows_back_due_now_with_the_attempt_restored(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append("d-1", vec![due_at(T - 50)]).await;
    let held = f.claim(T, 1, 10).await;
    assert_eq!(held[0].attempt, 1);
    assert_eq!(f.backend.release(&[(held[0].id, 99)], T).await.unwrap(), 0);
    assert_eq!(
        f.backend.release(&[(held[0].id, 1)], T + 5).await.unwrap(),
        1
    );
    assert!(
        f.claim(T + 4, 2, 10).await.is_empty(),
        "due at the release time"
    );
    let again = f.claim(T + 5, 3, 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 1, "a released row was never started");
    assert_eq!(
        again[0].due_at_ms,
        T - 50,
        "latency still counts from the first due"
    );
}

async fn retry_keeps_the_error_and_schedules_the_next_attempt(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append_rows(&["d-1"]).await;
    let held = f.claim(T, 1, 10).await;
    let error = failure(1, T, "handler said no");
    let retry = Finish::Retry {
        id: held[0].id,
        token: 1,
        at_ms: T + 5_000,
        error: error.clone(),
    };
    assert_eq!(f.backend.finish(vec![retry], T).await.unwrap(), 1);
    assert_eq!(
        f.backend.next_due_ms(&[B.into()], T).await.unwrap(),
        Some(T + 5_000)
    );
    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(
        (stats.total.due, stats.total.leased, stats.total.scheduled),
        (0, 0, 1)
    );
    assert!(f.claim(T + 4_999, 2, 10).await.is_empty());
    let again = f.claim(T + 5_000, 3, 10).await;
    assert_eq!(again[0].attempt, 2);
    assert_eq!(again[0].errors, vec![error]);
    assert_eq!(again[0].due_at_ms, T + 5_000);
}

/// Fails `B`'s one row twice, the second time for good, with one dead-letter handler
/// row for `"dlh"`; returns the dead letter's id.
async fn dead_letter_the_row(f: &Fixture) -> i64 {
    let held = f.claim(T, 1, 10).await;
    let retry = Finish::Retry {
        id: held[0].id,
        token: 1,
        at_ms: T + 10,
        error: failure(1, T, "first"),
    };
    assert_eq!(f.backend.finish(vec![retry], T).await.unwrap(), 1);
    let held = f.claim(T + 10, 2, 10).await;
    let dead = Finish::DeadLetter {
        id: held[0].id,
        token: 2,
        error: failure(2, T + 20, "second"),
        fanout: vec![row("dlh")],
    };
    assert_eq!(f.backend.finish(vec![dead], T + 20).await.unwrap(), 1);
    let letters = f
        .backend
        .dead_letters(&DeadLetterQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
    letters[0].id
}

async fn a_dead_letter_keeps_the_history_and_fans_out_rows_that_carry_it(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let event_id = stored(f.append("d-1", vec![keyed("K")]).await);
    let id = dead_letter_the_row(&f).await;

    let dl = f.backend.dead_letter(id).await.unwrap().unwrap();
    assert_eq!(dl.binding_id, B);
    assert_eq!(dl.fingerprint, format!("fp-{B}"));
    assert_eq!(dl.event_id, event_id);
    assert_eq!(dl.trace_id, format!("{:032x}", 4));
    assert_eq!(dl.attempts, 2);
    assert_eq!(
        dl.errors,
        vec![failure(1, T, "first"), failure(2, T + 20, "second")]
    );
    assert_eq!(dl.dead_at_ms, T + 20);
    assert!(dl.annotations.is_empty() && dl.queue.is_none() && dl.replays == 0);
    assert!(f.claim(T + 100, 3, 10).await.is_empty(), "the row is gone");

    let handler = f.claim_for(&["dlh"], T + 20, 4, 10).await;
    assert_eq!(handler.len(), 1);
    assert_eq!(handler[0].dead_letter_id, Some(id));
    assert_eq!(handler[0].event_id, event_id);
    let payload: serde_json::Value = serde_json::from_slice(&handler[0].payload).unwrap();
    assert_eq!(payload["dead_letter"]["id"], id);
    assert_eq!(payload["dead_letter"]["errors"][1]["message"], "second");
    assert_eq!(payload["event"]["delivery"], "d-1");
    let other_page = f
        .backend
        .dead_letters(&DeadLetterQuery {
            binding_id: Some("nobody".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(other_page.is_empty());
}

async fn a_failed_dead_letter_handler_annotates_the_dead_letter(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append_rows(&["d-1"]).await;
    let id = dead_letter_the_row(&f).await;
    let handler = f.claim_for(&["dlh"], T + 20, 4, 10).await;
    let annotate = Finish::Annotate {
        id: handler[0].id,
        token: 4,
        dead_letter_id: id,
        binding_id: "dlh".into(),
        error: failure(1, T + 30, "pager down"),
    };
    assert_eq!(f.backend.finish(vec![annotate], T + 30).await.unwrap(), 1);
    let dl = f.backend.dead_letter(id).await.unwrap().unwrap();
    assert_eq!(dl.annotations, vec!["dlh: handler: pager down".to_owned()]);
    assert!(f.claim_for(&["dlh"], T + LEASE * 2, 5, 10).await.is_empty());
    assert_eq!(
        f.backend.stats(T).await.unwrap().total.dead_letters,
        1,
        "no second dead letter"
    );
}

async fn replay_enqueues_the_dead_letter_again_from_attempt_one(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    let event_id = stored(f.append("d-1", vec![keyed("K")]).await);
    let id = dead_letter_the_row(&f).await;
    assert_eq!(
        f.backend.replay(id + 1_000, T + 50, None).await.unwrap(),
        None
    );
    let new_id = f.backend.replay(id, T + 50, None).await.unwrap().unwrap();

    let again = f.claim(T + 50, 5, 10).await;
    assert_eq!(again.len(), 1);
    let r = &again[0];
    assert_eq!((r.id, r.attempt, r.due_at_ms), (new_id, 1, T + 50));
    assert_eq!(r.event_id, event_id);
    assert_eq!(r.ordering_key.as_deref(), Some("K"));
    assert!(r.errors.is_empty());
    let dl = f.backend.dead_letter(id).await.unwrap().unwrap();
    assert_eq!((dl.replays, dl.replayed_at_ms), (1, Some(T + 50)));
}

fn receive(queue: &str, now: i64, max_receives: u32) -> ReceiveRequest {
    ReceiveRequest {
        queue: queue.into(),
        max: 10,
        now_ms: now,
        visibility_ms: 1_000,
        max_receives,
    }
}

async fn a_received_message_is_hidden_until_its_visibility_ends_and_acks_need_the_receipt(
    kind: StoreKind,
) {
    let f = Fixture::open(&kind).await;
    let event_id = stored(f.append("d-1", vec![message("q"), message("other")]).await);
    let got = f.backend.receive(&receive("q", T, 5)).await.unwrap();
    assert_eq!(got.messages.len(), 1);
    let m = &got.messages[0];
    assert_eq!(
        (m.queue.as_str(), m.receives, m.binding_id.as_str()),
        ("q", 1, B)
    );
    assert_eq!(m.event_id, event_id);
    assert_eq!((m.kind.as_str(), m.depth), ("issues.opened", 0));
    assert_eq!(m.payload, br#"{"delivery":"d-1"}"#);
    assert!(f
        .backend
        .receive(&receive("q", T + 999, 5))
        .await
        .unwrap()
        .messages
        .is_empty());

    let again = f
        .backend
        .receive(&receive("q", T + 1_000, 5))
        .await
        .unwrap();
    let m2 = &again.messages[0];
    assert_eq!((m2.id, m2.receives), (m.id, 2));
    assert_ne!(m2.receipt, m.receipt);
    assert!(
        !f.backend.ack("q", m.id, m.receipt).await.unwrap(),
        "a stale receipt"
    );
    assert!(
        !f.backend.ack("other", m.id, m2.receipt).await.unwrap(),
        "another queue"
    );
    assert!(f.backend.ack("q", m.id, m2.receipt).await.unwrap());
    assert!(f
        .backend
        .receive(&receive("q", T + 5_000, 5))
        .await
        .unwrap()
        .messages
        .is_empty());
    assert_eq!(
        f.backend
            .receive(&receive("other", T, 5))
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
}

async fn a_nack_with_a_delay_hides_the_message_until_then(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    f.append("d-1", vec![message("q")]).await;
    let m = f
        .backend
        .receive(&receive("q", T, 5))
        .await
        .unwrap()
        .messages[0]
        .clone();
    assert!(!f.backend.nack("q", m.id, m.receipt + 1, T).await.unwrap());
    assert!(f
        .backend
        .nack("q", m.id, m.receipt, T + 5_000)
        .await
        .unwrap());
    let stats = f.backend.stats(T).await.unwrap();
    assert_eq!(stats.queues["q"].scheduled, 1, "{stats:?}");
    assert!(f
        .backend
        .receive(&receive("q", T + 4_999, 5))
        .await
        .unwrap()
        .messages
        .is_empty());
    let back = f
        .backend
        .receive(&receive("q", T + 5_000, 5))
        .await
        .unwrap();
    assert_eq!((back.messages[0].id, back.messages[0].receives), (m.id, 2));
    assert!(
        !f.backend.ack("q", m.id, m.receipt).await.unwrap(),
        "the nacked receipt is spent"
    );
}

async fn a_message_past_its_max_receives_becomes_a_dead_letter_and_replays_to_its_queue(
    kind: StoreKind,
) {
    let f = Fixture::open(&kind).await;
    let event_id = stored(f.append("d-1", vec![message("q")]).await);
    for (n, now) in [(1, T), (2, T + 1_000)] {
        let got = f.backend.receive(&receive("q", now, 2)).await.unwrap();
        assert_eq!(got.messages[0].receives, n);
    }
    let third = f
        .backend
        .receive(&receive("q", T + 2_000, 2))
        .await
        .unwrap();
    assert!(third.messages.is_empty());
    assert_eq!(third.dead_lettered, 1);

    let letters = f
        .backend
        .dead_letters(&DeadLetterQuery {
            binding_id: Some(B.into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let dl = &letters[0];
    assert_eq!(dl.queue.as_deref(), Some("q"));
    assert_eq!((dl.attempts, dl.event_id.as_str()), (2, event_id.as_str()));
    assert_eq!(dl.errors.len(), 1);
    assert_eq!(dl.errors[0].kind, "max_receives");
    assert_eq!(dl.errors[0].at_ms, T + 2_000);
    let stats = f.backend.stats(T + 2_000).await.unwrap();
    assert_eq!(stats.queues["q"].dead_letters, 1);

    f.backend
        .replay(dl.id, T + 3_000, None)
        .await
        .unwrap()
        .unwrap();
    let back = f
        .backend
        .receive(&receive("q", T + 3_000, 2))
        .await
        .unwrap();
    assert_eq!(back.messages.len(), 1);
    assert_eq!(back.messages[0].receives, 1, "a replay starts over");
    assert_eq!(back.messages[0].payload, br#"{"delivery":"d-1"}"#);
}

async fn stats_count_due_leased_scheduled_queues_and_dead_letters(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    // Rows are stamped with the wall clock when committed; the oldest is this one.
    let before = switchboard::__private::now_ms();
    f.append("leased", vec![due_at(T - 300)]).await;
    let after = switchboard::__private::now_ms();
    f.append("expired", vec![due_at(T - 200)]).await;
    f.append("due", vec![due_at(T - 100)]).await;
    f.append("scheduled", vec![due_at(T + 10_000)]).await;
    let dead_event = stored(f.append("dead", vec![row("b")]).await);
    let queued_event = stored(f.append("queued", vec![message("q"), message("q")]).await);

    let leased = f
        .backend
        .claim(&claim_request(&[B], T, T + 500, 1, 1))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    let expired = f
        .backend
        .claim(&claim_request(&[B], T, T - 1, 2, 1))
        .await
        .unwrap();
    assert_eq!(expired.len(), 1);
    let held = f.claim_for(&["b"], T, 3, 1).await;
    let dead = Finish::DeadLetter {
        id: held[0].id,
        token: 3,
        error: failure(1, T, "no"),
        fanout: vec![],
    };
    assert_eq!(f.backend.finish(vec![dead], T).await.unwrap(), 1);
    f.backend
        .receive(&ReceiveRequest {
            max: 1,
            ..receive("q", T, 5)
        })
        .await
        .unwrap();

    let s = f.backend.stats(T).await.unwrap();
    let a = &s.by_binding[B];
    assert_eq!(
        (a.due, a.leased, a.scheduled),
        (2, 1, 1),
        "an expired lease counts as due"
    );
    let oldest = a.oldest_age_ms.unwrap();
    assert!(
        (T - after..=T - before).contains(&oldest),
        "the age at T of the first row enqueued: {oldest}"
    );
    assert_eq!(
        (
            s.total.due,
            s.total.leased,
            s.total.scheduled,
            s.total.dead_letters
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(s.by_binding["b"].dead_letters, 1);
    assert_eq!((s.by_binding["b"].due, s.by_binding["b"].leased), (0, 0));
    let q = &s.queues["q"];
    assert_eq!((q.due, q.leased, q.scheduled), (1, 1, 0));
    assert_eq!(
        s.total.oldest_age_ms,
        Some(oldest),
        "the oldest of every binding"
    );
    // The chart's cheap totals agree with the full stats.
    let d = f.backend.depth(T).await.unwrap();
    assert_eq!(
        (d.due, d.leased, d.dead_letters),
        (s.total.due, s.total.leased, s.total.dead_letters)
    );
    // One event's deliveries: the dead letter with its history; the queue messages,
    // one of them received.
    let dead = f.backend.event_deliveries(&dead_event).await.unwrap();
    assert!(dead.pending.is_empty() && dead.queued.is_empty());
    assert_eq!(dead.dead.len(), 1);
    assert_eq!(dead.dead[0].errors.len(), 1);
    let queued = f.backend.event_deliveries(&queued_event).await.unwrap();
    assert_eq!(queued.queued.len(), 2);
    assert_eq!(queued.queued.iter().filter(|m| m.received).count(), 1);
    let nothing = f.backend.event_deliveries("evt_none").await.unwrap();
    assert_eq!(nothing, Default::default());
}

/// A page bounded by received time alone is the same whether the store walks the
/// primary key (a window of many events) or reads the window through its index (few
/// events: under SQLite's probe threshold of 1,000, or none at all), including with
/// received times out of `seq` order and paging by the cursor.
async fn time_bounded_pages_are_exact_whatever_the_window_holds(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    const N: i64 = 1_500;
    // Received times out of insertion order: 10 ms apart, shuffled by a stride.
    let writes = (0..N)
        .map(|i| {
            let at = 100_000 + (i * 7_919 % N) * 10;
            switchboard::__private::store::append_write(event(&format!("w-{i}"), at), T * 2, vec![])
        })
        .collect();
    f.backend.write_batch(writes, T).await.unwrap();
    let mut all = Vec::new();
    let mut before = None;
    loop {
        let page = f
            .backend
            .events(&EventQuery {
                limit: 500,
                before_seq: before,
                ..Default::default()
            })
            .await
            .unwrap();
        all.extend(page.iter().map(|e| (e.seq, e.event.received_at_ms)));
        match page.last() {
            Some(last) if page.len() == 500 => before = Some(last.seq),
            _ => break,
        }
    }
    assert_eq!(all.len(), N as usize);
    let end = 100_000 + N * 10;
    for (since, until) in [
        (Some(end - 100), None),        // 10 events: the index
        (Some(end + 1), None),          // none
        (Some(100_000 + 500), None),    // 1,450: the primary key
        (None, Some(100_000 + 200)),    // 20
        (None, Some(end - 200)),        // 1,480
        (Some(100_500), Some(105_000)), // 450
        (Some(100_500), Some(114_000)), // 1,350
    ] {
        let want: Vec<i64> = all
            .iter()
            .filter(|(_, at)| since.is_none_or(|s| *at >= s) && until.is_none_or(|u| *at < u))
            .map(|(seq, _)| *seq)
            .collect();
        for limit in [7, 500] {
            let mut got = Vec::new();
            let mut before = None;
            loop {
                let page = f
                    .backend
                    .events(&EventQuery {
                        limit,
                        before_seq: before,
                        since_ms: since,
                        until_ms: until,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                got.extend(page.iter().map(|e| e.seq));
                match page.last() {
                    Some(last) if page.len() == limit => before = Some(last.seq),
                    _ => break,
                }
            }
            assert_eq!(got, want, "since {since:?} until {until:?} limit {limit}");
        }
    }
}

async fn expire_deletes_old_unreferenced_events_in_chunks_and_keeps_referenced_ones(
    kind: StoreKind,
) {
    let f = Fixture::open(&kind).await;
    let old = 1_000;
    let before = 10_000;
    for i in 0..5 {
        f.append_event(event(&format!("old-{i}"), old + i), vec![])
            .await;
    }
    let pending = stored(f.append_event(event("pending", old), vec![row(B)]).await);
    let queued = stored(
        f.append_event(event("queued", old), vec![message("q")])
            .await,
    );
    let dead = stored(f.append_event(event("dead", old), vec![row("b")]).await);
    let recent = stored(f.append_event(event("recent", before + 100), vec![]).await);
    let held = f.claim_for(&["b"], T, 1, 1).await;
    let letter = Finish::DeadLetter {
        id: held[0].id,
        token: 1,
        error: failure(1, before + 5, "no"),
        fanout: vec![],
    };
    f.backend.finish(vec![letter], before + 5).await.unwrap();
    for (started, event_id) in [(old, "evt_old"), (before + 1, "evt_new")] {
        let run = RunRecord {
            binding_id: B.into(),
            event_id: event_id.into(),
            started_at_ms: started,
            duration_ms: 3,
            status: "ok".into(),
            error: None,
            abandoned: false,
            fingerprint: format!("fp-{event_id}"),
        };
        f.backend.record_run(&run).await.unwrap();
    }

    let expired = f.backend.expire(before, 2).await.unwrap();
    assert_eq!(
        (expired.events, expired.dead_letters, expired.runs),
        (5, 0, 1)
    );
    let left: HashSet<String> = f
        .backend
        .events(&EventQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event.id)
        .collect();
    assert_eq!(left, HashSet::from([pending, queued, dead.clone(), recent]));
    let runs = f.backend.runs(Some(B), 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].event_id, "evt_new");

    let later = f.backend.expire(before + 10, 1).await.unwrap();
    assert_eq!(
        (later.events, later.dead_letters),
        (1, 1),
        "the dead letter goes, and with it the event only it kept"
    );
    let dead_left = f
        .backend
        .events(&EventQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(dead_left.iter().all(|e| e.event.id != dead));
}

async fn wake_fires_after_an_enqueueing_commit(kind: StoreKind) {
    let Some(f) = Fixture::open_alone(&kind, "wake_fires_after_an_enqueueing_commit").await else {
        return;
    };
    // On SQLite the writer's own backend is the one woken (one process per file); on
    // PostgreSQL a second backend instance hears it through LISTEN/NOTIFY.
    let listener = match kind {
        StoreKind::Sqlite => f.backend.clone(),
        StoreKind::Postgres(_) => f.second_process().await,
    };
    let wake = listener.wake();
    assert!(
        futures_util::FutureExt::now_or_never(wake.notified()).is_none(),
        "nothing notified it yet"
    );
    f.append_rows(&["d-1"]).await;
    tokio::time::timeout(DEADLINE, wake.notified())
        .await
        .expect("woken after the enqueueing commit");
    assert_eq!(
        listener
            .claim(&claim_request(&[B], T, T + LEASE, 1, 10))
            .await
            .unwrap()
            .len(),
        1
    );
    drop(listener);
    f.close().await;
}

async fn two_claimers_on_a_thousand_rows_never_receive_the_same_row(kind: StoreKind) {
    let f = Fixture::open(&kind).await;
    for batch in 0..10 {
        let rows = (0..100).map(|_| row(B)).collect();
        f.append(&format!("d-{batch}"), rows).await;
    }
    let claimers = [f.backend.clone(), f.second_process().await];
    let tasks = claimers.into_iter().enumerate().map(|(n, backend)| {
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for round in 0.. {
                let token = (n as i64 + 1) * 1_000_000 + round;
                let got = backend
                    .claim(&claim_request(&[B], T, T + LEASE, token, 37))
                    .await
                    .unwrap();
                if got.is_empty() {
                    return ids;
                }
                ids.extend(got.iter().map(|r| r.id));
            }
            ids
        })
    });
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 1_000, "every row claimed");
    assert_eq!(unique.len(), 1_000, "no row claimed twice");
}

#[tokio::test]
async fn postgres_going_away_gives_store_errors_and_the_listener_wakes_once_it_is_back() {
    use futures_util::FutureExt as _;
    let Some(base) = postgres_url() else {
        return skip_postgres(
            "postgres_going_away_gives_store_errors_and_the_listener_wakes_once_it_is_back",
        );
    };
    let Some((_, rest)) = base.split_once('@') else {
        return skip_postgres(
            "SWITCHBOARD_TEST_POSTGRES_URL must have the form postgres://user@host:port/db",
        );
    };
    let target = rest.split('/').next().unwrap().to_owned();
    let proxy = support::Proxy::start(target.clone()).await;
    // A database of its own: no other test's commit can wake it.
    let test = "postgres_going_away_gives_store_errors_and_the_listener_wakes_once_it_is_back";
    let Some(db_url) = fixture::fresh_postgres_database(&base, test).await else {
        return;
    };
    let through_proxy = db_url.replacen(&target, &proxy.addr.to_string(), 1);
    let backend = switchboard::__private::store::open_backend(&through_proxy, &Default::default())
        .await
        .unwrap();
    let wake = backend.wake();
    assert!(
        wake.notified().now_or_never().is_none(),
        "nothing notified it yet"
    );

    proxy.down();
    let claim = claim_request(&[B], T, T + LEASE, 1, 10);
    let err = backend
        .claim(&claim)
        .await
        .expect_err("no database, no claim");
    assert!(
        matches!(err, switchboard::Error::Store(_)) && err.to_string().contains("ostgre"),
        "{err}"
    );

    proxy.up();
    tokio::time::timeout(DEADLINE, wake.notified())
        .await
        .expect("the listener reconnects and wakes the dispatcher once");
    assert!(backend.claim(&claim).await.unwrap().is_empty());
    drop(backend);
    fixture::drop_postgres_database(&base, &db_url).await;
}

/// PostgreSQL only (SQLite has one process per file): when a delivered row held an
/// ordering key, the key's next row became claimable, and another process hears it at
/// once instead of at its next poll.
#[tokio::test]
async fn postgres_finishing_an_ordering_keys_head_wakes_other_processes() {
    let Some(base) = postgres_url() else {
        skip_postgres("postgres_finishing_an_ordering_keys_head_wakes_other_processes");
        return;
    };
    use futures_util::FutureExt as _;
    let test = "postgres_finishing_an_ordering_keys_head_wakes_other_processes";
    let Some(f) = Fixture::open_alone(&StoreKind::Postgres(base), test).await else {
        return;
    };
    f.append("a-1", vec![keyed("A")]).await;
    f.append("a-2", vec![keyed("A")]).await;
    let head = f.claim_for(&[B], T, 1, 10).await;
    assert_eq!(head.len(), 1, "a-2 waits behind a-1");
    // It listens from here on, in a database no other test writes to: the appends'
    // notifications went before it listened, so the next wake-up is the finish's.
    let other = f.second_process().await;
    let wake = other.wake();
    assert!(
        wake.notified().now_or_never().is_none(),
        "nothing notified it yet"
    );
    let done = Finish::Done {
        id: head[0].id,
        token: head[0].token,
    };
    assert_eq!(f.backend.finish(vec![done], T).await.unwrap(), 1);
    tokio::time::timeout(DEADLINE, wake.notified())
        .await
        .expect("woken by the head's finish");
    assert_eq!(
        other
            .claim(&claim_request(&[B], T, T + LEASE, 2, 10))
            .await
            .unwrap()
            .len(),
        1
    );
    drop(other);
    f.close().await;
}
