//! The outbox rows and queue messages created beside something else, on PostgreSQL:
//! an ingested event's (in the ingest batch's one statement, [`super::events`]) and a
//! dead letter's fan-out ([`INSERT_ROWS`]). Both statements insert them with the same
//! CTEs ([`insert_enqueued`]), written once here, from the rows as parallel arrays
//! ([`EnqueueColumns`]).

use crate::outbox::model::Enqueue;
use crate::store::outbox_rows::{binding_dedupe_source, due_at, queue_of, to_i32};

/// The CTEs that insert the rows of a CTE named `enq` into the outbox (`dispatched`)
/// or their queues (`queued`), in `n` order, due at `not_before` or else at
/// `enqueued_at`, and notify `switchboard_outbox` once if any row went in (`notified`;
/// PostgreSQL delivers the notification at commit). `enq` has the columns `event_id,
/// binding_id, fingerprint, ordering_key, depth, queue, not_before, payload,
/// dead_letter_id, priority, backfill_id, n` and `enqueued_at` (the commit's clock). Rows with a
/// debounce or dedupe key never come this way ([`FLOW_ROW`] writes them). Expands to a string
/// literal, for `concat!`: the caller writes `enq` and a comma before it and its final
/// `SELECT` after.
macro_rules! insert_enqueued {
    () => {
        "dispatched AS (
        INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
            next_attempt_at, enqueued_at, due_at, payload, dead_letter_id, priority, backfill_id)
        SELECT binding_id, fingerprint, event_id, ordering_key, depth,
            COALESCE(not_before, enqueued_at), enqueued_at, COALESCE(not_before, enqueued_at),
            payload, dead_letter_id, priority, backfill_id
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
/// `$10` is the commit's clock, `$11` the priorities, `$12` the backfill ids.
pub(super) const INSERT_ROWS: &str = concat!(
    "WITH enq AS (
        SELECT *, $10::BIGINT AS enqueued_at
        FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::INT[], $6::TEXT[],
            $7::BIGINT[], $8::BYTEA[], $9::BIGINT[], $11::INT[], $12::BIGINT[])
        WITH ORDINALITY AS f(event_id, binding_id, fingerprint, ordering_key, depth, queue,
            not_before, payload, dead_letter_id, priority, backfill_id, n)
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
    pub(super) priorities: Vec<i32>,
    pub(super) backfill_ids: Vec<Option<i64>>,
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
        self.priorities.push(row.priority);
        self.backfill_ids.push(row.backfill);
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
                &c.priorities,
                &c.backfill_ids,
            ],
        )
        .await?;
    Ok(())
}

/// Writes ONE row of a stored event with its flow control, for batches holding a row
/// with a debounce or dedupe key, whose rows are written one statement each, in order,
/// so that each sees what the ones before it wrote. In order:
/// - `claim`: with a dedupe key (`$2`), takes the binding's claim (`$1` is
///   `binding:<id>`) unless a live one holds it; `go` has a row when there is no key
///   or the claim was taken, and nothing below runs without it;
/// - `gone`: with a debounce key (`$6`) and an outbox row, deletes the binding's rows
///   of that key under no live lease, and `recorded` keeps a `superseded` record of
///   each (the statement's snapshot does not hold the row it inserts, so it never
///   supersedes itself);
/// - `dispatched` / `queued`: the row, due at `$12` (computed by
///   `outbox_rows::due_at`), and a notification if it went in.
///
/// Returns (rows written, rows superseded).
pub(super) const FLOW_ROW: &str = "WITH claim AS (
        INSERT INTO dedupe_claims (source, dedupe_key, event_id, expires_at)
        SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::BIGINT WHERE $2::TEXT IS NOT NULL
        ON CONFLICT (source, dedupe_key) DO UPDATE
        SET event_id = EXCLUDED.event_id, expires_at = EXCLUDED.expires_at
        WHERE dedupe_claims.expires_at <= $5
        RETURNING 1
    ), go AS (
        SELECT 1 WHERE $2::TEXT IS NULL OR EXISTS (SELECT 1 FROM claim)
    ), gone AS (
        DELETE FROM outbox o
        WHERE $6::TEXT IS NOT NULL AND $11::TEXT IS NULL AND EXISTS (SELECT 1 FROM go)
            AND o.binding_id = $7 AND o.debounce_key = $6
            AND (o.lease_token IS NULL OR o.next_attempt_at <= $5)
        RETURNING o.id, o.binding_id, o.fingerprint, o.event_id, o.debounce_key
    ), recorded AS (
        INSERT INTO superseded (binding_id, fingerprint, event_id, superseded_by_event_id,
            debounce_key, at)
        SELECT binding_id, fingerprint, event_id, $3, debounce_key, $5 FROM gone ORDER BY id
    ), dispatched AS (
        INSERT INTO outbox (binding_id, fingerprint, event_id, ordering_key, depth,
            next_attempt_at, enqueued_at, due_at, payload, dead_letter_id, priority,
            debounce_key, backfill_id)
        SELECT $7::TEXT, $8::TEXT, $3, $9::TEXT, $10::INT, $12::BIGINT, $5::BIGINT, $12,
            $13::BYTEA, $14::BIGINT, $15::INT, $6, $16::BIGINT
        FROM go WHERE $11::TEXT IS NULL
        RETURNING 1
    ), queued AS (
        INSERT INTO queue_messages (queue, binding_id, fingerprint, event_id, depth,
            enqueued_at, visible_at, payload)
        SELECT $11::TEXT, $7::TEXT, $8::TEXT, $3, $10::INT, $5::BIGINT, $12::BIGINT,
            $13::BYTEA
        FROM go WHERE $11::TEXT IS NOT NULL
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '')
        FROM (SELECT 1 FROM dispatched UNION ALL SELECT 1 FROM queued) AS any_row
    )
    SELECT (SELECT count(*) FROM dispatched) + (SELECT count(*) FROM queued),
        (SELECT count(*) FROM gone), (SELECT count(*) FROM notified)";

/// Writes `row` of the stored event `event_id` with [`FLOW_ROW`] inside `tx`, at the
/// commit's clock `now_ms`; whether it was written (a held dedupe key skips it).
pub(super) async fn write_flow_row(
    tx: &tokio_postgres::Transaction<'_>,
    stmt: &tokio_postgres::Statement,
    event_id: &str,
    row: &Enqueue,
    now_ms: i64,
) -> std::result::Result<bool, tokio_postgres::Error> {
    let (dedupe_key, expires) = match &row.dedupe {
        Some((key, retention)) => (Some(key.as_str()), now_ms.saturating_add(*retention)),
        None => (None, 0),
    };
    let written = tx
        .query_one(
            stmt,
            &[
                &binding_dedupe_source(&row.binding_id),
                &dedupe_key,
                &event_id,
                &expires,
                &now_ms,
                &row.debounce_key,
                &row.binding_id,
                &row.fingerprint,
                &row.ordering_key,
                &to_i32(row.depth),
                &queue_of(row),
                &due_at(row, now_ms),
                &row.payload,
                &row.dead_letter_id,
                &row.priority,
                &row.backfill,
            ],
        )
        .await?;
    let (rows, superseded): (i64, i64) = (written.get(0), written.get(1));
    if rows == 0 {
        tracing::debug!(
            binding = %row.binding_id,
            event_id,
            "a row of this dedupe key was enqueued within the retention; none enqueued"
        );
    } else if superseded > 0 {
        tracing::debug!(binding = %row.binding_id, event_id, superseded, "debounced");
    }
    Ok(rows > 0)
}
