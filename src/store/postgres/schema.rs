//! The PostgreSQL schema: the migrations, the shape of SQLite's (`store::sqlite::schema`
//! says why each table and index is there). The JSON columns are `JSONB` here, so
//! appending an error or an annotation is an SQL expression, not a read-modify-write.
//!
//! Migration 4 ([`VERSIONS`]) adds the binding versions, their append-only lifecycle
//! log, the pauses and `trigger_runs.fingerprint`: the store keeps every version's
//! definition so any process can run a row under the definition its fingerprint
//! names, the log only grows (its newest `seq` tells other processes to reload), and
//! pauses are a table the claim reads. It is numbered as on SQLite, whose migration 3
//! (how event bodies are stored) PostgreSQL has no use for: a number then means the
//! same schema on both, and the migrator applies whatever is above the stored
//! version, so the gap costs nothing (and 3 must never be added here).
//!
//! Migration 5 ([`FLOW_CONTROL`]) adds `outbox.priority`, `outbox.debounce_key` and the
//! `superseded` records, with the same indexes as on SQLite, whose schema module says
//! why the claim gets its own index, `outbox_by_claim (priority DESC, next_attempt_at,
//! id)`, rather than sorting the due rows `outbox_by_due` finds: walked in order with
//! the claim's `LIMIT`, it reads about as many entries as it hands out however large
//! the backlog, where the sort would read every due row on each claim. PostgreSQL
//! picks the index by cost; with the `ORDER BY … LIMIT` matching it, the walk wins
//! whenever more rows are due than a claim takes.
//!
//! Migration 6 ([`CONSOLE`]) adds the console's indexes, as on SQLite:
//! `events_by_kind (kind, seq)`, `events_by_dedupe (dedupe_key, seq)` and
//! `trigger_runs_by_event (event_id)`; migration 9 replaces `events_by_dedupe` with
//! `events_by_delivery` (the key's part after its first `:`, then `seq`).
//!
//! Migration 7 ([`HOLDER`]) adds `outbox.lease_holder`, the identity of the process
//! whose claim leased the row, as on SQLite (whose schema module says what it is for).
//!
//! Several processes may start at once on one database: [`migrate`] runs under a
//! transaction-scoped advisory lock, so one applies what is missing while the others
//! wait for its commit and then find nothing to do (`tests/store_migrations.rs`).

use crate::error::Result;
use crate::store::backend::{newer_schema, store_err};

/// Key of the advisory lock held while migrating ("swbd" in ASCII).
const MIGRATION_LOCK: i64 = 0x7377_6264;

/// Schema versions, applied in order. Never edit a released one: add the next.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE events (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        source TEXT NOT NULL,
        provider TEXT NOT NULL,
        kind TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        occurred_at BIGINT,
        dedupe_key TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        headers TEXT NOT NULL,
        body BYTEA NOT NULL,
        signature TEXT NOT NULL
    );
    CREATE INDEX events_by_source ON events (source, seq);
    CREATE TABLE dedupe_claims (
        source TEXT NOT NULL,
        dedupe_key TEXT NOT NULL,
        event_id TEXT NOT NULL,
        expires_at BIGINT NOT NULL,
        PRIMARY KEY (source, dedupe_key)
    );
    CREATE INDEX dedupe_claims_by_expiry ON dedupe_claims (expires_at);
    CREATE TABLE rejections (
        seq BIGSERIAL PRIMARY KEY,
        source TEXT NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        headers TEXT NOT NULL,
        body_len BIGINT NOT NULL
    );
    CREATE INDEX rejections_by_time ON rejections (received_at);
    CREATE TABLE source_state (
        source TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (source, key)
    );",
    ),
    (2, OUTBOX),
    (4, VERSIONS),
    (5, FLOW_CONTROL),
    (6, CONSOLE),
    (7, HOLDER),
    (8, CLAIM_BY_BINDING),
    (9, DELIVERY_SEARCH),
    (10, TRACE_CONTEXT),
    (11, BACKFILLS),
];

/// Migration 2: the outbox, dead letters, queues, run records and the index retention
/// needs (`events.id` is already unique, so indexed).
const OUTBOX: &str = "CREATE INDEX events_by_received ON events (received_at, seq);
    CREATE TABLE outbox (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        ordering_key TEXT,
        depth INT NOT NULL,
        attempts INT NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        lease_token BIGINT,
        enqueued_at BIGINT NOT NULL,
        due_at BIGINT NOT NULL,
        payload BYTEA,
        dead_letter_id BIGINT,
        errors JSONB NOT NULL DEFAULT '[]'
    );
    CREATE INDEX outbox_by_due ON outbox (next_attempt_at, id);
    CREATE INDEX outbox_by_key ON outbox (binding_id, ordering_key, id)
        WHERE ordering_key IS NOT NULL;
    CREATE INDEX outbox_by_event ON outbox (event_id);
    CREATE TABLE dead_letters (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        attempts INT NOT NULL,
        errors JSONB NOT NULL,
        enqueued_at BIGINT NOT NULL,
        dead_at BIGINT NOT NULL,
        annotations JSONB NOT NULL DEFAULT '[]',
        replays INT NOT NULL DEFAULT 0,
        replayed_at BIGINT,
        queue TEXT,
        ordering_key TEXT,
        depth INT NOT NULL,
        payload BYTEA
    );
    CREATE INDEX dead_letters_by_binding ON dead_letters (binding_id, id);
    CREATE INDEX dead_letters_by_time ON dead_letters (dead_at);
    CREATE INDEX dead_letters_by_event ON dead_letters (event_id);
    CREATE TABLE queue_messages (
        id BIGSERIAL PRIMARY KEY,
        queue TEXT NOT NULL,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        depth INT NOT NULL,
        enqueued_at BIGINT NOT NULL,
        visible_at BIGINT NOT NULL,
        receives INT NOT NULL DEFAULT 0,
        receipt BIGINT,
        payload BYTEA
    );
    CREATE INDEX queue_messages_by_visibility ON queue_messages (queue, visible_at, id);
    CREATE INDEX queue_messages_by_event ON queue_messages (event_id);
    CREATE TABLE trigger_runs (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        abandoned BOOLEAN NOT NULL
    );
    CREATE INDEX trigger_runs_by_binding ON trigger_runs (binding_id, id);
    CREATE INDEX trigger_runs_by_time ON trigger_runs (started_at);";

/// Migration 4: binding versions, their lifecycle log, pauses, and the version a
/// synchronous run used (the module doc says why).
const VERSIONS: &str = "CREATE TABLE trigger_versions (
        binding_id TEXT NOT NULL,
        version BIGINT NOT NULL,
        fingerprint TEXT NOT NULL,
        definition TEXT NOT NULL,
        origin TEXT NOT NULL,
        state TEXT NOT NULL,
        pinned BOOLEAN NOT NULL DEFAULT false,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (binding_id, version),
        UNIQUE (binding_id, fingerprint)
    );
    CREATE TABLE trigger_lifecycle (
        seq BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        version BIGINT NOT NULL,
        fingerprint TEXT NOT NULL,
        event TEXT NOT NULL,
        reason TEXT NOT NULL,
        process TEXT NOT NULL,
        at BIGINT NOT NULL
    );
    CREATE INDEX trigger_lifecycle_by_binding ON trigger_lifecycle (binding_id, seq);
    CREATE TABLE trigger_pauses (
        binding_id TEXT PRIMARY KEY,
        paused_at BIGINT NOT NULL
    );
    ALTER TABLE trigger_runs ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';";

/// Migration 5: priority, debounce and the superseded rows' records (the module doc
/// says why this index).
const FLOW_CONTROL: &str = "ALTER TABLE outbox ADD COLUMN priority INT NOT NULL DEFAULT 0;
    ALTER TABLE outbox ADD COLUMN debounce_key TEXT;
    CREATE INDEX outbox_by_claim ON outbox (priority DESC, next_attempt_at, id);
    CREATE INDEX outbox_by_debounce ON outbox (binding_id, debounce_key)
        WHERE debounce_key IS NOT NULL;
    CREATE TABLE superseded (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        superseded_by_event_id TEXT NOT NULL,
        debounce_key TEXT NOT NULL,
        at BIGINT NOT NULL
    );
    CREATE INDEX superseded_by_time ON superseded (at);";

/// Migration 6: the indexes of the console's event search and detail.
const CONSOLE: &str = "CREATE INDEX events_by_kind ON events (kind, seq);
    CREATE INDEX events_by_dedupe ON events (dedupe_key, seq);
    CREATE INDEX trigger_runs_by_event ON trigger_runs (event_id);";

/// Migration 7: who holds a leased row.
const HOLDER: &str = "ALTER TABLE outbox ADD COLUMN lease_holder TEXT;";

/// Migration 8: the claim reads each binding's rows on their own (`outbox_by_binding`,
/// in claim order within a binding and priority), so a binding's claim and its next-due
/// probe never walk another binding's backlog; the global claim-order index goes.
///
/// And an ordering key's waiting rows are **parked**: a row written while an earlier
/// row of its binding and key exists gets `next_attempt_at` = `i64::MAX`
/// (`store::outbox_rows::PARKED`), so it sits past every claim's range instead of in
/// front of it, and the key's next row is put back at its `due_at` when the row before
/// it leaves the table (a trigger on delete, so every way out — done, dead letter,
/// superseded, retention — does it). A hot key's claim then costs its one head, not a
/// walk over every row queued behind it. The insert's check locks the key's newest row
/// `FOR KEY SHARE SKIP LOCKED`: a finish deleting that row waits for the insert's
/// commit and then sees the new row (so it unparks it), and an insert never waits on a
/// finish (so the two cannot deadlock); a row it skips (being deleted or claimed) leaves
/// the new row unparked, which the claim's head-of-line test still holds back. Rows
/// waiting behind a key at the upgrade are parked by it.
///
/// And the outbox is vacuumed and analysed every 10,000 changed rows whatever its
/// size, at full speed, instead of at a fifth of the table: every claim leaves a dead
/// index entry at the front of its binding's range and every finish one at its end,
/// and the claim walks past them until vacuum removes them (at 1M rows waiting and no
/// vacuum yet, a claim of 100 read 1,900 pages, `benches/backlog.rs`), while a plan
/// made before a burst assumes the table it saw.
const CLAIM_BY_BINDING: &str =
    "CREATE INDEX outbox_by_binding ON outbox (binding_id, priority DESC, next_attempt_at, id);
    DROP INDEX outbox_by_claim;
    CREATE FUNCTION switchboard_outbox_park() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM outbox WHERE binding_id = NEW.binding_id
            AND ordering_key = NEW.ordering_key
            ORDER BY id DESC LIMIT 1 FOR KEY SHARE SKIP LOCKED;
        IF FOUND THEN
            NEW.next_attempt_at := 9223372036854775807;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER outbox_park BEFORE INSERT ON outbox FOR EACH ROW
        WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION switchboard_outbox_park();
    CREATE FUNCTION switchboard_outbox_unpark() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE outbox SET next_attempt_at = due_at
        WHERE id = (SELECT min(id) FROM outbox WHERE binding_id = OLD.binding_id
                AND ordering_key = OLD.ordering_key)
            AND next_attempt_at = 9223372036854775807;
        RETURN NULL;
    END $$;
    CREATE TRIGGER outbox_unpark AFTER DELETE ON outbox FOR EACH ROW
        WHEN (OLD.ordering_key IS NOT NULL) EXECUTE FUNCTION switchboard_outbox_unpark();
    ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0,
        autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_cost_delay = 0,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000);
    UPDATE outbox o SET next_attempt_at = 9223372036854775807
    WHERE o.ordering_key IS NOT NULL AND o.lease_token IS NULL
        AND EXISTS (SELECT 1 FROM outbox p WHERE p.binding_id = o.binding_id
            AND p.ordering_key = o.ordering_key AND p.id < o.id);";

/// Migration 9: the search by delivery id finds an event by the id its provider shows
/// (a GitHub delivery's GUID) as well as by its key as stored, as on SQLite, whose
/// schema module says why. The index keeps `seq` after the key's tail, so a search
/// reads its page newest first.
const DELIVERY_SEARCH: &str = "CREATE INDEX events_by_delivery ON events
        ((substr(dedupe_key, strpos(dedupe_key, ':') + 1)), seq);
    DROP INDEX events_by_dedupe;";

/// Migration 10: the W3C trace context each event was created under
/// ([`crate::triggers::TriggerEvent::traceparent`]), which every attempt to deliver
/// it (and every outbox row made from it, which reads it through its event) traces
/// from. Constant defaults: adding them rewrites no row.
const TRACE_CONTEXT: &str = "ALTER TABLE events ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
    ALTER TABLE events ADD COLUMN tracestate TEXT NOT NULL DEFAULT '';";

/// Migration 11: backfill jobs ([`crate::triggers::backfill`]) and the job that
/// enqueued each outbox row (`switchboard.backfill` in its handler's context). A job
/// row holds its whole state: the request as JSON, its cursor (the last event
/// sequence walked, committed with the rows each step enqueues), its counts and its
/// lease. `backfilled` records each (binding version, event) a backfill enqueued, so
/// a second backfill with `skip_delivered` skips them (live deliveries leave no
/// record; the lifecycle log tells which events a version took at ingest); the
/// retention sweep expires it with the events. The outbox column is nullable with no
/// default: adding it rewrites no row.
const BACKFILLS: &str = "ALTER TABLE outbox ADD COLUMN backfill_id BIGINT;
    CREATE TABLE backfills (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL,
        cursor BIGINT NOT NULL,
        end_seq BIGINT NOT NULL,
        total BIGINT NOT NULL,
        walked BIGINT NOT NULL DEFAULT 0,
        matched BIGINT NOT NULL DEFAULT 0,
        filtered BIGINT NOT NULL DEFAULT 0,
        skipped BIGINT NOT NULL DEFAULT 0,
        enqueued BIGINT NOT NULL DEFAULT 0,
        error TEXT,
        lease_holder TEXT,
        lease_until BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    );
    CREATE INDEX backfills_by_state ON backfills (state, id);
    CREATE TABLE backfilled (
        id BIGSERIAL PRIMARY KEY,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        backfill_id BIGINT NOT NULL,
        at BIGINT NOT NULL,
        UNIQUE (binding_id, fingerprint, event_id)
    );
    CREATE INDEX backfilled_by_time ON backfilled (at);";

/// Applies the migrations this database lacks, in one transaction under an advisory
/// lock, so processes starting together apply each once. `url` (redacted) names the
/// database in errors.
pub(super) async fn migrate(client: &mut deadpool_postgres::Object, url: &str) -> Result<()> {
    let bad = |e| store_err("postgres migrate", super::pg_message::of(&e));
    let tx = client.transaction().await.map_err(bad)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(bad)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )
    .await
    .map_err(bad)?;
    let current: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(bad)?
        .get(0);
    let newest = newest();
    if current > newest {
        return Err(newer_schema(url, current, newest));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.batch_execute(sql).await.map_err(bad)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
            &[version, &crate::clock::now_ms()],
        )
        .await
        .map_err(bad)?;
    }
    tx.commit().await.map_err(bad)
}

/// The newest schema version this build knows.
pub(crate) fn newest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}
