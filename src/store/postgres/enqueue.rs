//! The outbox rows and queue messages created beside something else, on PostgreSQL:
//! an ingested event's (in the ingest batch's one statement, [`super::events`]) and a
//! dead letter's fan-out ([`INSERT_ROWS`]). Both statements insert them with the same
//! CTEs ([`insert_enqueued`]), written once here, from the rows as parallel arrays
//! ([`EnqueueColumns`]).

use crate::outbox::model::Enqueue;
use crate::store::outbox_rows::{queue_of, to_i32};

/// The CTEs that insert the rows of a CTE named `enq` into the outbox (`dispatched`)
/// or their queues (`queued`), in `n` order, due at `not_before` or else at
/// `enqueued_at`, and notify `switchboard_outbox` once if any row went in (`notified`;
/// PostgreSQL delivers the notification at commit). `enq` has the columns `event_id,
/// binding_id, fingerprint, ordering_key, depth, queue, not_before, payload,
/// dead_letter_id, n` and `enqueued_at` (the commit's clock). Expands to a string
/// literal, for `concat!`: the caller writes `enq` and a comma before it and its final
/// `SELECT` after.
macro_rules! insert_enqueued {
    () => {
        "dispatched AS (
        INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
            next_attempt_at, enqueued_at, due_at, payload, dead_letter_id)
        SELECT binding_id, fingerprint, event_id, ordering_key, depth,
            COALESCE(not_before, enqueued_at), enqueued_at, COALESCE(not_before, enqueued_at),
            payload, dead_letter_id
        FROM enq WHERE queue IS NULL ORDER BY n
        RETURNING 1
    ), queued AS (
        INSERT INTO queue_messages (queue, binding_id, fingerprint, event_id, depth,
            enqueued_at, visible_at, payload)
        SELECT queue, binding_id, fingerprint, event_id, depth, enqueued_at,
            COALESCE(not_before, enqueued_at), payload
        FROM enq WHERE queue IS NOT NULL ORDER BY n
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '')
        FROM (SELECT 1 FROM dispatched UNION ALL SELECT 1 FROM queued LIMIT 1) AS any_row
    )"
    };
}
pub(super) use insert_enqueued;

/// Inserts rows given as arrays (dead-letter fan-out) into the outbox or their queues;
/// `$10` is the commit's clock.
pub(super) const INSERT_ROWS: &str = concat!(
    "WITH enq AS (
        SELECT *, $10::BIGINT AS enqueued_at
        FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::INT[], $6::TEXT[],
            $7::BIGINT[], $8::BYTEA[], $9::BIGINT[])
        WITH ORDINALITY AS f(event_id, binding_id, fingerprint, ordering_key, depth, queue,
            not_before, payload, dead_letter_id, n)
    ), ",
    insert_enqueued!(),
    "
    SELECT (SELECT count(*) FROM notified)"
);

/// Rows to enqueue as parallel arrays, for [`INSERT_ROWS`] and the ingest batch
/// statement (`events::APPEND_BATCH`). Each row names its event by id (`event_ids`)
/// or, in the ingest batch, by its position in that statement's input arrays
/// (`event_ords`).
#[derive(Default)]
pub(super) struct EnqueueColumns<'a> {
    pub(super) event_ords: Vec<i64>,
    pub(super) event_ids: Vec<&'a str>,
    pub(super) binding_ids: Vec<&'a str>,
    pub(super) fingerprints: Vec<&'a str>,
    pub(super) ordering_keys: Vec<Option<&'a str>>,
    pub(super) depths: Vec<i32>,
    pub(super) queues: Vec<Option<&'a str>>,
    pub(super) not_before: Vec<Option<i64>>,
    pub(super) payloads: Vec<Option<&'a [u8]>>,
    pub(super) dead_letter_ids: Vec<Option<i64>>,
}

impl<'a> EnqueueColumns<'a> {
    fn push(&mut self, row: &'a Enqueue) {
        self.binding_ids.push(&row.binding_id);
        self.fingerprints.push(&row.fingerprint);
        self.ordering_keys.push(row.ordering_key.as_deref());
        self.depths.push(to_i32(row.depth));
        self.queues.push(queue_of(row));
        self.not_before.push(row.not_before_ms);
        self.payloads.push(row.payload.as_deref());
        self.dead_letter_ids.push(row.dead_letter_id);
    }

    /// Adds the rows of the event at 1-based position `ordinal` of the ingest batch.
    pub(super) fn push_for_ordinal(&mut self, ordinal: i64, rows: &'a [Enqueue]) {
        for row in rows {
            self.event_ords.push(ordinal);
            self.push(row);
        }
    }

    pub(super) fn push_for_event(&mut self, event_id: &'a str, row: &'a Enqueue) {
        self.event_ids.push(event_id);
        self.push(row);
    }
}

/// Inserts `rows`, each for the event it names, with `insert` ([`INSERT_ROWS`],
/// prepared) on `client` (a transaction), due at the commit's clock `now_ms`.
pub(super) async fn insert_rows(
    client: &tokio_postgres::Transaction<'_>,
    insert: &tokio_postgres::Statement,
    rows: &[(String, Enqueue)],
    now_ms: i64,
) -> Result<(), tokio_postgres::Error> {
    let mut c = EnqueueColumns::default();
    for (event_id, row) in rows {
        c.push_for_event(event_id, row);
    }
    client
        .query_one(
            insert,
            &[
                &c.event_ids,
                &c.binding_ids,
                &c.fingerprints,
                &c.ordering_keys,
                &c.depths,
                &c.queues,
                &c.not_before,
                &c.payloads,
                &c.dead_letter_ids,
                &now_ms,
            ],
        )
        .await?;
    Ok(())
}
