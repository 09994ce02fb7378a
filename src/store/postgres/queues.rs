//! Queues, run records and retention on PostgreSQL: the statements of the parts of
//! [`crate::outbox::OutboxStore`] that are not the outbox proper, kept apart so each
//! file holds one concern ([`super::outbox`] has the trait's implementation).
//!
//! A receive is ONE statement, like a claim: the visible messages are picked
//! `FOR UPDATE SKIP LOCKED` (receivers in other processes skip them rather than wait),
//! those past their maximum receives move to the dead letters, the rest are handed
//! out under the receive's receipt. Retention deletes in chunks, each one statement
//! (its own short transaction), so no sweep holds locks that ingest waits on.

/// `$1` queue, `$2` now, `$3` max, `$4` max receives, `$5` invisible until, `$6` the
/// receipt, `$7`/`$8` the dead letter's error kind and message. Always answers at least
/// one row, whose first column counts the dead-lettered messages; a row without an id
/// stands for "none handed out".
pub(super) const RECEIVE: &str = "WITH picked AS (
        SELECT id, receives, visible_at FROM queue_messages
        WHERE queue = $1 AND visible_at <= $2
        ORDER BY visible_at, id LIMIT $3
        FOR UPDATE SKIP LOCKED
    ), dead AS (
        DELETE FROM queue_messages m USING picked p
        WHERE m.id = p.id AND p.receives >= $4
        RETURNING m.queue, m.binding_id, m.fingerprint, m.event_id, m.receives, m.enqueued_at,
            m.depth, m.payload
    ), buried AS (
        INSERT INTO dead_letters (binding_id, fingerprint, event_id, trace_id, attempts, errors,
            enqueued_at, dead_at, queue, depth, payload)
        SELECT d.binding_id, d.fingerprint, d.event_id, COALESCE(e.trace_id, ''), d.receives,
            jsonb_build_array(jsonb_build_object('attempt', d.receives, 'at_ms', $2::BIGINT,
                'kind', $7::TEXT, 'message', $8::TEXT)),
            d.enqueued_at, $2, d.queue, d.depth, d.payload
        FROM dead d LEFT JOIN events e ON e.id = d.event_id
        RETURNING 1
    ), handed AS (
        UPDATE queue_messages m SET receives = m.receives + 1, receipt = $6, visible_at = $5
        FROM picked p
        WHERE m.id = p.id AND p.receives < $4
        RETURNING m.id, m.receives, m.binding_id, m.event_id, m.depth, m.enqueued_at,
            m.payload, p.visible_at AS was_visible
    )
    SELECT (SELECT count(*) FROM buried), h.id, h.receives, h.binding_id, h.event_id,
        COALESCE(e.kind, ''), COALESCE(e.trace_id, ''), h.depth, h.enqueued_at,
        COALESCE(h.payload, e.body, ''::BYTEA)
    FROM (SELECT 1) AS one
    LEFT JOIN (handed h LEFT JOIN events e ON e.id = h.event_id) ON true
    ORDER BY h.was_visible, h.id";

pub(super) const ACK: &str =
    "DELETE FROM queue_messages WHERE queue = $1 AND id = $2 AND receipt = $3";

/// Makes a message visible again (at `$4`) and wakes the receivers.
pub(super) const NACK: &str = "WITH back AS (
        UPDATE queue_messages SET visible_at = $4, receipt = NULL
        WHERE queue = $1 AND id = $2 AND receipt = $3
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('switchboard_outbox', '') FROM back
    )
    SELECT (SELECT count(*) FROM back), (SELECT count(*) FROM notified)";

pub(super) const INSERT_RUN: &str =
    "INSERT INTO trigger_runs (binding_id, event_id, started_at, duration_ms,
    status, error, abandoned, fingerprint) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

pub(super) const SELECT_RUNS: &str =
    "SELECT binding_id, event_id, started_at, duration_ms, status, error,
    abandoned, fingerprint FROM trigger_runs WHERE ($1::TEXT IS NULL OR binding_id = $1)
    ORDER BY id DESC LIMIT $2";

/// One chunk of event retention: the next `$4` events received before `$1`, after the
/// cursor `($2, $3)` in `(received_at, seq)` order, of which those nothing references
/// are deleted. Returns the count and the last candidate (the next cursor), so a chunk
/// of still-referenced events is looked at once, not again by every later chunk.
pub(super) const EXPIRE_EVENTS: &str = "WITH candidates AS (
        SELECT seq, id, received_at FROM events
        WHERE received_at < $1 AND (received_at, seq) > ($2, $3)
        ORDER BY received_at, seq LIMIT $4
    ), gone AS (
        DELETE FROM events e USING candidates c
        WHERE e.seq = c.seq
            AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = c.id)
            AND NOT EXISTS (SELECT 1 FROM queue_messages q WHERE q.event_id = c.id)
            AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = c.id)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), last.received_at, last.seq
    FROM (SELECT 1) AS one
    LEFT JOIN (SELECT received_at, seq FROM candidates
               ORDER BY received_at DESC, seq DESC LIMIT 1) AS last ON true";
