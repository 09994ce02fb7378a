//! The SQLite schema: the migrations, applied in order at open, each in its own
//! transaction, recorded in `schema_migrations`.
//!
//! Migration 1 holds the events, their dedupe claims, the audit log and per-source
//! state; migration 2 ([`OUTBOX`]) the outbox, with the same shape as PostgreSQL's:
//! - `outbox`: one row per pending delivery. `next_attempt_at` is both the schedule and
//!   the lease (a claim moves it to the lease's end), so one index,
//!   `(next_attempt_at, id)`, serves the claim, and a crashed claimer's rows are due
//!   again when its lease ends. `due_at` keeps when the current attempt became due, for
//!   latency; `payload` overrides the event body (dead-letter fan-out rows); `errors`
//!   is a JSON array of [`crate::outbox::model::AttemptError`]. A partial index on
//!   `(binding_id, ordering_key, id)` answers "is there an earlier row of this key".
//! - `dead_letters`: the exhausted rows with their history, and what a replay needs
//!   (ordering key, depth, payload, the queue of a queue message).
//! - `queue_messages`: pulled by consumers; `visible_at` is their lease as
//!   `next_attempt_at` is the outbox's. Beyond the suggested shape they keep the
//!   binding's `fingerprint` and an optional `payload`, so a queue message's dead
//!   letter is as complete as an outbox row's and a dead-letter handler can have a
//!   queue as its destination.
//! - `trigger_runs`: the audit of synchronous invocations.
//! - indexes on `events (id)` (the claim joins outbox rows to their events; event ids
//!   start with the receive time, so the index grows at its right edge) and
//!   `events (received_at)` (retention), and on `event_id` of the three tables that
//!   reference events (retention keeps what they reference).
//!
//! Migration 4 ([`VERSIONS`]) keeps the binding versions
//! ([`crate::triggers::versions`]):
//! - `trigger_versions`: one record per (binding id, version number), unique per
//!   (binding id, fingerprint) too, with the definition (the JSON of its
//!   `[[triggers]]` table), origin, state and pin. The store keeps every version's
//!   definition, not only the active one's, because a row records the fingerprint it
//!   was enqueued under: whichever process claims it, after any reload or restart, can
//!   build that definition again from here and run the row under it.
//! - `trigger_lifecycle`: the append-only log of every transition. Its `seq` tells a
//!   process that another one changed something (it reloads when the newest seq
//!   moves), and a start replays it to rebuild each binding's history; it is never
//!   updated, only appended to. Indexed by `(binding_id, seq)` for one binding's page.
//! - `trigger_pauses`: the paused bindings, a table rather than a version state so the
//!   claim can read it, whichever version is active.
//! - `trigger_runs.fingerprint`: the version a synchronous run used (`''` for runs
//!   recorded before this migration).
//!
//! Migration 5 ([`FLOW_CONTROL`]) adds the per-binding flow control
//! ([`crate::triggers::flow`]):
//! - `outbox.priority`: claims take due rows by `priority DESC, next_attempt_at, id`.
//!   They are served by a new index `outbox_by_claim (priority DESC, next_attempt_at,
//!   id)`, walked in order: the first rows it yields are the highest priority's due
//!   ones, so a claim of N rows out of a large backlog reads about N entries, as it
//!   did with `outbox_by_due`. Keeping `outbox_by_due` alone would have the claim read
//!   every due row and sort them to find the highest priorities: cheap when a few rows
//!   are due, ruinous for a backlog of a hundred thousand, which is when claims
//!   matter most. The price of the new index: within a priority its not-due rows
//!   (leased, scheduled for a retry, waiting out a debounce) sit after the due ones, so
//!   a claim that finds fewer due rows than it asks for steps over the not-due rows of
//!   every priority on its way down (bounded by what is in flight or waiting, not by
//!   the backlog). `outbox_by_due` stays, for the next-due time and the stats, which
//!   range over `next_attempt_at` regardless of priority. The claim names the index
//!   (`INDEXED BY`) so the planner, which has no statistics, cannot fall back to the
//!   sort.
//! - `outbox.debounce_key` with a partial index `outbox_by_debounce (binding_id,
//!   debounce_key)`: a debounced row's write finds the earlier rows of its binding and
//!   key it supersedes without scanning the binding's other rows.
//! - `superseded`: one record per row a later row of its debounce key replaced
//!   (which event, by which event, when), counted per binding in the stats and
//!   expired with the events, by `at`.
//! - A binding's own dedupe keys (`dedupe_key`) need no table: they are claims in
//!   `dedupe_claims` under the source `binding:<id>`, expired by the same sweep.
//!
//! Migration 6 ([`CONSOLE`]) adds what the console's event search and event detail
//! need, so that neither scans a table of a million events:
//! - `events_by_kind (kind, seq)`: `?kind=` pages walk it newest first, as
//!   `events_by_source` serves `?source=`;
//! - `events_by_dedupe (dedupe_key)` (SQLite appends `seq`, the rowid): the search by
//!   a provider's delivery id (replaced by migration 9's `events_by_delivery`, on the
//!   key's part after its first `:`, so a GitHub GUID finds its event);
//! - `trigger_runs_by_event (event_id)`: an event's run records for its detail (its
//!   outbox rows, queue messages and dead letters have such an index since
//!   migration 2).
//!
//! Migration 7 ([`HOLDER`]) adds `outbox.lease_holder`: the process identity
//! (`process_id`) of the claim that leased the row, stamped by every claim beside
//! the claim token. A process that starts again under the same identity makes the
//! rows it held under a live lease due at once ([`crate::outbox::OutboxStore::release_holder`])
//! instead of waiting their lease out; the column means something only while
//! `lease_token` is set, so a finish or a release leaves it as it is. No index: the
//! release runs once per start and walks `outbox_by_due` past `now` (the leased and
//! scheduled rows, not the backlog).
//!
//! Ids are `AUTOINCREMENT`, never reused: a stale finish naming the id of a deleted
//! row can then never hit a newer row, and "a lower id was enqueued earlier" holds.

use rusqlite::{params, Connection, OpenFlags};

use crate::error::{Error, Result};

/// Schema versions, applied in order. Never edit a released one: add the next.
pub(super) const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL,
        source TEXT NOT NULL,
        provider TEXT NOT NULL,
        kind TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        occurred_at INTEGER,
        dedupe_key TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        headers TEXT NOT NULL,
        body BLOB NOT NULL,
        signature TEXT NOT NULL
    );
    CREATE INDEX events_by_source ON events (source, seq);
    CREATE TABLE dedupe_claims (
        source TEXT NOT NULL,
        dedupe_key TEXT NOT NULL,
        event_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (source, dedupe_key)
    ) WITHOUT ROWID;
    CREATE INDEX dedupe_claims_by_expiry ON dedupe_claims (expires_at);
    CREATE TABLE rejections (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        headers TEXT NOT NULL,
        body_len INTEGER NOT NULL
    );
    CREATE INDEX rejections_by_time ON rejections (received_at);
    CREATE TABLE source_state (
        source TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (source, key)
    ) WITHOUT ROWID;",
    ),
    (2, OUTBOX),
    // How each body is stored (store::body_codec): rows before this version are raw.
    (
        3,
        "ALTER TABLE events ADD COLUMN body_codec INTEGER NOT NULL DEFAULT 0;",
    ),
    (4, VERSIONS),
    (5, FLOW_CONTROL),
    (6, CONSOLE),
    (7, HOLDER),
    (8, CLAIM_BY_BINDING),
    (9, DELIVERY_SEARCH),
    (10, TRACE_CONTEXT),
    (11, BACKFILLS),
];

/// Migration 2: the outbox, dead letters, queues, run records and the indexes
/// retention needs. See the module doc for why each piece is there.
const OUTBOX: &str = "CREATE INDEX events_by_id ON events (id);
    CREATE INDEX events_by_received ON events (received_at);
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        ordering_key TEXT,
        depth INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        lease_token INTEGER,
        enqueued_at INTEGER NOT NULL,
        due_at INTEGER NOT NULL,
        payload BLOB,
        dead_letter_id INTEGER,
        errors TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX outbox_by_due ON outbox (next_attempt_at, id);
    CREATE INDEX outbox_by_key ON outbox (binding_id, ordering_key, id)
        WHERE ordering_key IS NOT NULL;
    CREATE INDEX outbox_by_event ON outbox (event_id);
    CREATE TABLE dead_letters (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        errors TEXT NOT NULL,
        enqueued_at INTEGER NOT NULL,
        dead_at INTEGER NOT NULL,
        annotations TEXT NOT NULL DEFAULT '[]',
        replays INTEGER NOT NULL DEFAULT 0,
        replayed_at INTEGER,
        queue TEXT,
        ordering_key TEXT,
        depth INTEGER NOT NULL,
        payload BLOB
    );
    CREATE INDEX dead_letters_by_binding ON dead_letters (binding_id, id);
    CREATE INDEX dead_letters_by_time ON dead_letters (dead_at);
    CREATE INDEX dead_letters_by_event ON dead_letters (event_id);
    CREATE TABLE queue_messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        depth INTEGER NOT NULL,
        enqueued_at INTEGER NOT NULL,
        visible_at INTEGER NOT NULL,
        receives INTEGER NOT NULL DEFAULT 0,
        receipt INTEGER,
        payload BLOB
    );
    CREATE INDEX queue_messages_by_visibility ON queue_messages (queue, visible_at, id);
    CREATE INDEX queue_messages_by_event ON queue_messages (event_id);
    CREATE TABLE trigger_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        abandoned INTEGER NOT NULL
    );
    CREATE INDEX trigger_runs_by_binding ON trigger_runs (binding_id, id);
    CREATE INDEX trigger_runs_by_time ON trigger_runs (started_at);";

/// Migration 4: binding versions, their lifecycle log, pauses, and the version a
/// synchronous run used. See the module doc for why each piece is there.
const VERSIONS: &str = "CREATE TABLE trigger_versions (
        binding_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        definition TEXT NOT NULL,
        origin TEXT NOT NULL,
        state TEXT NOT NULL,
        pinned INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (binding_id, version),
        UNIQUE (binding_id, fingerprint)
    );
    CREATE TABLE trigger_lifecycle (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        event TEXT NOT NULL,
        reason TEXT NOT NULL,
        process TEXT NOT NULL,
        at INTEGER NOT NULL
    );
    CREATE INDEX trigger_lifecycle_by_binding ON trigger_lifecycle (binding_id, seq);
    CREATE TABLE trigger_pauses (
        binding_id TEXT PRIMARY KEY,
        paused_at INTEGER NOT NULL
    );
    ALTER TABLE trigger_runs ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';";

/// Migration 5: priority, debounce and the superseded rows' records. See the module
/// doc for the choice of index.
const FLOW_CONTROL: &str = "ALTER TABLE outbox ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE outbox ADD COLUMN debounce_key TEXT;
    CREATE INDEX outbox_by_claim ON outbox (priority DESC, next_attempt_at, id);
    CREATE INDEX outbox_by_debounce ON outbox (binding_id, debounce_key)
        WHERE debounce_key IS NOT NULL;
    CREATE TABLE superseded (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        superseded_by_event_id TEXT NOT NULL,
        debounce_key TEXT NOT NULL,
        at INTEGER NOT NULL
    );
    CREATE INDEX superseded_by_time ON superseded (at);";

/// Migration 6: the indexes of the console's event search and detail (module doc).
const CONSOLE: &str = "CREATE INDEX events_by_kind ON events (kind, seq);
    CREATE INDEX events_by_dedupe ON events (dedupe_key);
    CREATE INDEX trigger_runs_by_event ON trigger_runs (event_id);";

/// Migration 7: who holds a leased row (module doc).
const HOLDER: &str = "ALTER TABLE outbox ADD COLUMN lease_holder TEXT;";

/// Migration 8: the claim reads each binding's rows on their own (`outbox_by_binding`,
/// in claim order within a binding and priority), so a binding's claim and its next-due
/// probe never walk another binding's backlog; the global claim-order index goes.
///
/// And an ordering key's waiting rows are **parked** (`next_attempt_at` = `i64::MAX`,
/// `store::outbox_rows::PARKED`), out of every claim's range, and the key's next row is
/// put back at its `due_at` when the row before it leaves the table: triggers, so every
/// way in and out does it (`store::postgres::schema` says why). One writer: no
/// insert can race a delete here. Rows waiting behind a key at the upgrade are parked
/// by it.
const CLAIM_BY_BINDING: &str =
    "CREATE INDEX outbox_by_binding ON outbox (binding_id, priority DESC, next_attempt_at, id);
    DROP INDEX outbox_by_claim;
    CREATE TRIGGER outbox_park AFTER INSERT ON outbox WHEN NEW.ordering_key IS NOT NULL
    BEGIN
        UPDATE outbox SET next_attempt_at = 9223372036854775807
        WHERE id = NEW.id AND EXISTS (SELECT 1 FROM outbox p
            WHERE p.binding_id = NEW.binding_id AND p.ordering_key = NEW.ordering_key
                AND p.id < NEW.id);
    END;
    CREATE TRIGGER outbox_unpark AFTER DELETE ON outbox WHEN OLD.ordering_key IS NOT NULL
    BEGIN
        UPDATE outbox SET next_attempt_at = due_at
        WHERE id = (SELECT min(id) FROM outbox WHERE binding_id = OLD.binding_id
                AND ordering_key = OLD.ordering_key)
            AND next_attempt_at = 9223372036854775807;
    END;
    UPDATE outbox SET next_attempt_at = 9223372036854775807
    WHERE ordering_key IS NOT NULL AND lease_token IS NULL
        AND EXISTS (SELECT 1 FROM outbox p WHERE p.binding_id = outbox.binding_id
            AND p.ordering_key = outbox.ordering_key AND p.id < outbox.id);";

/// Migration 9: the search by delivery id finds an event by the id its provider shows
/// as well as by the key as stored. A GitHub event's key is `{hook id}:{delivery
/// GUID}` (two hooks' copies of one delivery must not dedupe each other), but GitHub's
/// UI and an operator's logs show the GUID alone, which matched nothing. The index on
/// the key is replaced by one on the key's part after its first `:` (the whole key
/// when it has none, [`crate::store::sqlite::events`]'s `DELIVERY_TAIL`), which serves
/// both searches: an event ingest writes still pays one index.
const DELIVERY_SEARCH: &str =
    "CREATE INDEX events_by_delivery ON events (substr(dedupe_key, instr(dedupe_key, ':') + 1));
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
const BACKFILLS: &str = "ALTER TABLE outbox ADD COLUMN backfill_id INTEGER;
    CREATE TABLE backfills (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL,
        cursor INTEGER NOT NULL,
        end_seq INTEGER NOT NULL,
        total INTEGER NOT NULL,
        walked INTEGER NOT NULL DEFAULT 0,
        matched INTEGER NOT NULL DEFAULT 0,
        filtered INTEGER NOT NULL DEFAULT 0,
        skipped INTEGER NOT NULL DEFAULT 0,
        enqueued INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        lease_holder TEXT,
        lease_until INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX backfills_by_state ON backfills (state, id);
    CREATE TABLE backfilled (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        binding_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        backfill_id INTEGER NOT NULL,
        at INTEGER NOT NULL,
        UNIQUE (binding_id, fingerprint, event_id)
    );
    CREATE INDEX backfilled_by_time ON backfilled (at);";

/// Applies the migrations this database lacks, all in ONE `IMMEDIATE` transaction:
/// the version is read under the write lock, so of several processes (or several
/// opens) starting at once on one file the first applies them and the others, which
/// wait for the lock (`busy_timeout`), find them applied. A database stamped with a
/// version this build does not know is refused, never migrated down.
pub(super) fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    let bad = |e: rusqlite::Error| {
        Error::Store(format!(
            "{path:?} is not a usable SQLite database ({e}); move it aside or point `store` elsewhere"
        ))
    };
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(bad)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )
    .map_err(bad)?;
    let current: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(bad)?;
    let newest = newest();
    if current > newest {
        return Err(crate::store::backend::newer_schema(
            &format!("{path:?}"),
            current,
            newest,
        ));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.execute_batch(sql).map_err(bad)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
            params![version, crate::clock::now_ms()],
        )
        .map_err(bad)?;
    }
    tx.commit().map_err(bad)
}

/// The newest schema version this build knows.
pub(crate) fn newest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// The schema version of the existing database at `path`, read through a read-only
/// connection so nothing is created or migrated (`switchboard serve --check`): `None`
/// when it has no `schema_migrations` table yet.
pub(crate) fn read_version(path: &str) -> Result<Option<i64>> {
    let bad = |e: rusqlite::Error| {
        Error::Store(format!(
            "{path:?} is not a usable SQLite database ({e}); move it aside or point `store` elsewhere"
        ))
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(bad)?;
    let has_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')",
            [],
            |r| r.get(0),
        )
        .map_err(bad)?;
    if !has_table {
        return Ok(None);
    }
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )
    .map(Some)
    .map_err(bad)
}
