//! [`Backend`] on SQLite: the group commit's batches (dedupe claims, events, their
//! outbox rows, audit rows) in one `IMMEDIATE` transaction on the writer, and the
//! reads (events, audit, per-source state) on the reader.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::enqueue::Enqueuer;
use super::{sql_err, SqliteBackend};
use crate::error::Result;
use crate::store::backend::{Appended, Backend, EventQuery, Rejected, StoredEvent, Swept, Write};
use crate::store::body_codec::BodyCompression;
use crate::store::listing::{self, Arg, Dialect};
use crate::triggers::{SignatureStatus, TriggerEvent};

const CLAIM: &str = "INSERT INTO dedupe_claims (source, dedupe_key, event_id, expires_at)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (source, dedupe_key) DO UPDATE
    SET event_id = excluded.event_id, expires_at = excluded.expires_at
    WHERE dedupe_claims.expires_at <= ?5";
const HOLDER: &str = "SELECT event_id FROM dedupe_claims WHERE source = ?1 AND dedupe_key = ?2";
const INSERT_EVENT: &str = "INSERT INTO events (id, source, provider, kind, received_at,
    occurred_at, dedupe_key, trace_id, tenant, headers, body, signature, body_codec,
    traceparent, tracestate)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
const INSERT_REJECTION: &str = "INSERT INTO rejections (source, reason, detail, received_at,
    headers, body_len) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const PUT_STATE: &str = "INSERT INTO source_state (source, key, value) VALUES (?1, ?2, ?3)
    ON CONFLICT (source, key) DO UPDATE SET value = excluded.value";
const DELETE_STATE: &str = "DELETE FROM source_state WHERE source = ?1 AND key = ?2";
/// [`crate::store::backend::delivery_tail`] in SQL, exactly as `events_by_delivery`
/// (migration 9) indexes it: SQLite uses an expression index only for the same
/// expression.
const DELIVERY_TAIL: &str = "substr(dedupe_key, instr(dedupe_key, ':') + 1)";

/// SQLite's spellings for the filtered listings.
pub(super) const DIALECT: Dialect = Dialect {
    mark: '?',
    delivery_tail: DELIVERY_TAIL,
    last_error_kind: "json_extract(errors, '$[#-1].kind')",
};

/// A listing's parameter as rusqlite binds it.
pub(super) fn sqlite_arg(a: Arg) -> rusqlite::types::Value {
    match a {
        Arg::Text(s) => rusqlite::types::Value::Text(s),
        Arg::Int(i) => rusqlite::types::Value::Integer(i),
    }
}
pub(super) const SELECT_EVENTS: &str =
    "SELECT seq, id, source, provider, kind, received_at, occurred_at,
    dedupe_key, trace_id, tenant, headers, switchboard_body(body_codec, body), signature,
    traceparent, tracestate FROM events";

/// A page bounded by received time alone reads its window through `events_by_received`
/// (and sorts it) when the window holds fewer events than this, else walks the
/// primary key newest first. See [`window_is_small`].
const SMALL_WINDOW: i64 = 1_000;

/// The events page's SQL ([`crate::store::listing::events`]: only the filters `q`
/// sets, each served by its index) and its parameters. `by_received` reads the rows
/// through `events_by_received` (`INDEXED BY`): the same rows, another plan
/// ([`window_is_small`] says when).
fn events_sql(q: &EventQuery, by_received: bool) -> (String, Vec<rusqlite::types::Value>) {
    let select = if by_received {
        format!("{SELECT_EVENTS} INDEXED BY events_by_received")
    } else {
        SELECT_EVENTS.to_owned()
    };
    let (sql, args) = listing::events(q, &select, &DIALECT);
    (sql, args.into_iter().map(sqlite_arg).collect())
}

/// Whether `q` is bounded by received time alone (no equality filter) and its window,
/// below its cursor, holds fewer than [`SMALL_WINDOW`] events: counted on
/// `events_by_received` alone (the index holds `seq`, the rowid), at most
/// [`SMALL_WINDOW`] entries read.
///
/// Why: alone, a time bound filters the newest-first walk of the primary key, which
/// stops after a page when the window is full of recent events but reads the whole
/// table when the window is empty or sparse (`since` the last minute on a quiet day:
/// a million rows read to answer nothing). A small window is cheaper read through its
/// index and sorted; a large one is cheaper walked, as the LIMIT stops the walk. The
/// answer is the same either way.
fn window_is_small(c: &Connection, q: &EventQuery) -> rusqlite::Result<bool> {
    use rusqlite::types::Value as V;
    let time_only = (q.since_ms.is_some() || q.until_ms.is_some())
        && q.source.is_none()
        && q.kind.is_none()
        && q.dedupe_key.is_none()
        && q.event_id.is_none();
    if !time_only {
        return Ok(false);
    }
    let mut conds = Vec::new();
    let mut args = Vec::new();
    for (cond, v) in [
        ("received_at >= ?", q.since_ms),
        ("received_at < ?", q.until_ms),
        ("seq < ?", q.before_seq),
    ] {
        if let Some(v) = v {
            args.push(V::Integer(v));
            conds.push(cond.replace('?', &format!("?{}", args.len())));
        }
    }
    args.push(V::Integer(SMALL_WINDOW));
    let sql = format!(
        "SELECT count(*) FROM (SELECT 1 FROM events INDEXED BY events_by_received WHERE {} LIMIT ?{})",
        conds.join(" AND "),
        args.len()
    );
    let n: i64 = c
        .prepare_cached(&sql)?
        .query_row(rusqlite::params_from_iter(args), |r| r.get(0))?;
    Ok(n < SMALL_WINDOW)
}

/// Applies a batch; returns each write's result and how many outbox rows and queue
/// messages it created.
fn write_all(
    conn: &mut Connection,
    writes: &[Write],
    now_ms: i64,
) -> rusqlite::Result<(Vec<Option<Appended>>, usize)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut out = Vec::with_capacity(writes.len());
    let created;
    {
        let mut enqueuer = Enqueuer::new(&tx)?;
        let mut claim = tx.prepare_cached(CLAIM)?;
        let mut holder = tx.prepare_cached(HOLDER)?;
        let mut insert = tx.prepare_cached(INSERT_EVENT)?;
        let mut reject = tx.prepare_cached(INSERT_REJECTION)?;
        for w in writes {
            match w {
                Write::Append {
                    event: e,
                    claim_expires_at_ms,
                    enqueue,
                    prepared,
                } => {
                    let claimed = claim.execute(params![
                        e.source,
                        e.dedupe_key,
                        e.id,
                        claim_expires_at_ms,
                        now_ms
                    ])? == 1;
                    if claimed {
                        insert.execute(params![
                            e.id,
                            e.source,
                            e.provider,
                            e.kind,
                            e.received_at_ms,
                            e.occurred_at_ms,
                            e.dedupe_key,
                            e.trace_id,
                            e.tenant,
                            prepared.headers_json,
                            prepared.body,
                            e.signature.as_str(),
                            prepared.codec,
                            e.traceparent,
                            e.tracestate
                        ])?;
                        enqueuer.insert(&e.id, enqueue, now_ms)?;
                        out.push(Some(Appended::Stored(e.id.clone())));
                    } else {
                        let id: String =
                            holder.query_row(params![e.source, e.dedupe_key], |r| r.get(0))?;
                        out.push(Some(Appended::Duplicate(id)));
                    }
                }
                Write::Reject(r) => {
                    reject.execute(params![
                        r.source,
                        r.reason,
                        r.detail,
                        r.received_at_ms,
                        r.headers_json,
                        r.body_len
                    ])?;
                    out.push(None);
                }
                Write::PutState(w) => {
                    match &w.value {
                        Some(v) => tx.execute(PUT_STATE, params![w.source, w.key, v])?,
                        None => tx.execute(DELETE_STATE, params![w.source, w.key])?,
                    };
                    out.push(None);
                }
            }
        }
        created = enqueuer.created;
    }
    tx.commit()?;
    Ok((out, created))
}

pub(super) fn row_to_event(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
    let headers: String = r.get(10)?;
    let body: Vec<u8> = r.get(11)?;
    let signature: String = r.get(12)?;
    let payload = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    Ok(StoredEvent {
        seq: r.get(0)?,
        event: TriggerEvent {
            id: r.get(1)?,
            source: r.get(2)?,
            provider: r.get(3)?,
            kind: r.get(4)?,
            received_at_ms: r.get(5)?,
            occurred_at_ms: r.get(6)?,
            dedupe_key: r.get(7)?,
            trace_id: r.get(8)?,
            traceparent: r.get(13)?,
            tracestate: r.get(14)?,
            tenant: r.get(9)?,
            headers: serde_json::from_str(&headers).unwrap_or_default(),
            body,
            payload,
            signature: SignatureStatus::parse(&signature).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    12,
                    rusqlite::types::Type::Text,
                    format!("unknown signature status {signature:?}").into(),
                )
            })?,
        },
    })
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> Result<()> {
        // On the writer, inside a write transaction that is rolled back: a file that
        // another process holds locked, or that can no longer be written, fails here
        // as the next ingest would (after `busy_timeout`).
        let found = Self::with(&self.writer, |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err("ping"))?;
            let found: i64 = tx
                .query_row(
                    "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql_err("ping"))?;
            tx.rollback().map_err(sql_err("ping"))?;
            Ok(found)
        })
        .await?;
        let known = super::schema::MIGRATIONS.last().map_or(0, |m| m.0);
        if found > known {
            return Err(crate::store::backend::schema_too_new(found, known));
        }
        Ok(())
    }

    fn body_compression(&self) -> BodyCompression {
        self.body_compression
    }

    async fn write_batch(&self, writes: Vec<Write>, now_ms: i64) -> Result<Vec<Option<Appended>>> {
        let (out, created) = Self::with(&self.writer, move |c| {
            write_all(c, &writes, now_ms).map_err(sql_err("write"))
        })
        .await?;
        if created > 0 {
            self.wake.notify_one();
        }
        Ok(out)
    }

    async fn events(&self, query: &EventQuery) -> Result<Vec<StoredEvent>> {
        let query = query.clone();
        Self::with(&self.reader, move |c| {
            let small = window_is_small(c, &query).map_err(sql_err("read events"))?;
            let (sql, args) = events_sql(&query, small);
            let mut stmt = c.prepare_cached(&sql).map_err(sql_err("read events"))?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), row_to_event)
                .map_err(sql_err("read events"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err("read events"))
        })
        .await
    }

    async fn rejections(&self, source: Option<&str>, limit: usize) -> Result<Vec<Rejected>> {
        let source = source.map(str::to_owned);
        Self::with(&self.reader, move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT source, reason, detail, received_at, headers, body_len FROM rejections
                     WHERE (?1 IS NULL OR source = ?1) ORDER BY seq DESC LIMIT ?2",
                )
                .map_err(sql_err("read rejections"))?;
            let rows = stmt
                .query_map(params![source, limit as i64], |r| {
                    Ok(Rejected {
                        source: r.get(0)?,
                        reason: r.get(1)?,
                        detail: r.get(2)?,
                        received_at_ms: r.get(3)?,
                        headers_json: r.get(4)?,
                        body_len: r.get(5)?,
                    })
                })
                .map_err(sql_err("read rejections"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err("read rejections"))
        })
        .await
    }

    async fn get_state(&self, source: &str, key: &str) -> Result<Option<String>> {
        let (source, key) = (source.to_owned(), key.to_owned());
        Self::with(&self.reader, move |c| {
            c.query_row(
                "SELECT value FROM source_state WHERE source = ?1 AND key = ?2",
                params![source, key],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql_err("read state"))
        })
        .await
    }

    async fn put_state(&self, source: &str, key: &str, value: Option<&str>) -> Result<()> {
        let (source, key, value) = (source.to_owned(), key.to_owned(), value.map(str::to_owned));
        Self::with(&self.writer, move |c| {
            match value {
                Some(v) => c.execute(PUT_STATE, params![source, key, v]),
                None => c.execute(DELETE_STATE, params![source, key]),
            }
            .map(drop)
            .map_err(sql_err("write state"))
        })
        .await
    }

    async fn put_state_if_absent(
        &self,
        source: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>> {
        let (source, key, value) = (source.to_owned(), key.to_owned(), value.to_owned());
        Self::with(&self.writer, move |c| {
            let written = c
                .execute(
                    "INSERT INTO source_state (source, key, value) VALUES (?1, ?2, ?3)
                     ON CONFLICT (source, key) DO NOTHING",
                    params![source, key, value],
                )
                .map_err(sql_err("write state"))?;
            if written == 1 {
                return Ok(None);
            }
            c.query_row(
                "SELECT value FROM source_state WHERE source = ?1 AND key = ?2",
                params![source, key],
                |r| r.get(0),
            )
            .map(Some)
            .map_err(sql_err("read state"))
        })
        .await
    }

    async fn swap_state(
        &self,
        source: &str,
        key: &str,
        expected: Option<&str>,
        value: &str,
    ) -> Result<bool> {
        let (source, key) = (source.to_owned(), key.to_owned());
        let (expected, value) = (expected.map(str::to_owned), value.to_owned());
        Self::with(&self.writer, move |c| {
            match expected {
                None => c.execute(
                    "INSERT INTO source_state (source, key, value) VALUES (?1, ?2, ?3)
                     ON CONFLICT (source, key) DO NOTHING",
                    params![source, key, value],
                ),
                Some(old) => c.execute(
                    "UPDATE source_state SET value = ?4
                     WHERE source = ?1 AND key = ?2 AND value = ?3",
                    params![source, key, old, value],
                ),
            }
            .map(|n| n == 1)
            .map_err(sql_err("write state"))
        })
        .await
    }

    async fn sweep(&self, now_ms: i64, rejections_before_ms: i64) -> Result<Swept> {
        Self::with(&self.writer, move |c| {
            let claims = c
                .execute(
                    "DELETE FROM dedupe_claims WHERE expires_at <= ?1",
                    params![now_ms],
                )
                .map_err(sql_err("sweep claims"))? as u64;
            let rejections = c
                .execute(
                    "DELETE FROM rejections WHERE received_at < ?1",
                    params![rejections_before_ms],
                )
                .map_err(sql_err("sweep rejections"))? as u64;
            Ok(Swept { claims, rejections })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan SQLite picks for an events page with `q`'s filters, one line per step.
    fn plan_of(q: &EventQuery, by_received: bool) -> String {
        let mut c = Connection::open_in_memory().unwrap();
        crate::store::body_codec::register_sql_function(&c).unwrap();
        super::super::schema::migrate(&mut c, ":memory:").unwrap();
        let (sql, args) = events_sql(q, by_received);
        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn every_equality_filter_of_the_event_search_walks_its_index() {
        let q = |f: &dyn Fn(&mut EventQuery)| {
            let mut q = EventQuery {
                limit: 50,
                before_seq: Some(1_000),
                ..EventQuery::default()
            };
            f(&mut q);
            plan_of(&q, false)
        };
        let by_source = q(&|q| q.source = Some("gh".into()));
        assert!(by_source.contains("events_by_source"), "{by_source}");
        let by_kind = q(&|q| q.kind = Some("issues.opened".into()));
        assert!(by_kind.contains("events_by_kind"), "{by_kind}");
        let by_delivery = q(&|q| q.dedupe_key = Some("d-1".into()));
        assert!(by_delivery.contains("events_by_delivery"), "{by_delivery}");
        // A full GitHub key (`{hook}:{guid}`): both branches of the OR are lookups of
        // the same index, none a scan.
        let by_full_key = q(&|q| q.dedupe_key = Some("9:d-1".into()));
        assert!(
            by_full_key.contains("events_by_delivery") && !by_full_key.contains("SCAN events"),
            "{by_full_key}"
        );
        let by_id = q(&|q| q.event_id = Some("evt_1".into()));
        assert!(by_id.contains("events_by_id"), "{by_id}");
        // Unfiltered and time-bounded pages walk the primary key newest first: no
        // sort of the table, the LIMIT stops the walk.
        for p in [
            q(&|_| {}),
            q(&|q| q.until_ms = Some(5)),
            q(&|q| q.since_ms = Some(5)),
        ] {
            assert!(!p.contains("TEMP B-TREE"), "{p}");
            assert!(
                !p.contains("SCAN events") || p.contains("PRIMARY KEY"),
                "{p}"
            );
        }
        // Paged by kind, the walk stays in the index's order: no sort either.
        assert!(!by_kind.contains("TEMP B-TREE"), "{by_kind}");
        // A small time window is read through its index instead.
        let q = EventQuery {
            limit: 50,
            since_ms: Some(5),
            ..EventQuery::default()
        };
        let small = plan_of(&q, true);
        assert!(small.contains("events_by_received"), "{small}");
    }

    #[test]
    fn only_a_time_bound_alone_with_few_events_in_its_window_counts_as_small() {
        let mut c = Connection::open_in_memory().unwrap();
        crate::store::body_codec::register_sql_function(&c).unwrap();
        super::super::schema::migrate(&mut c, ":memory:").unwrap();
        c.execute_batch(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})
             INSERT INTO events (id, source, provider, kind, received_at, dedupe_key,
                 trace_id, tenant, headers, body, signature)
             SELECT 'e' || i, 'gh', 'github', 'k', i, 'd' || i, 't', 'x', '{{}}', x'', 'verified'
             FROM n",
            SMALL_WINDOW + 10
        ))
        .unwrap();
        let small = |f: &dyn Fn(&mut EventQuery)| {
            let mut q = EventQuery {
                limit: 50,
                ..EventQuery::default()
            };
            f(&mut q);
            window_is_small(&c, &q).unwrap()
        };
        assert!(!small(&|_| {}));
        assert!(!small(&|q| q.since_ms = Some(1)));
        assert!(small(&|q| q.since_ms = Some(20)));
        assert!(small(&|q| q.until_ms = Some(SMALL_WINDOW)));
        assert!(!small(&|q| q.until_ms = Some(SMALL_WINDOW + 1)));
        assert!(small(&|q| {
            q.since_ms = Some(1);
            q.before_seq = Some(SMALL_WINDOW);
        }));
        assert!(!small(&|q| {
            q.since_ms = Some(20);
            q.kind = Some("k".into());
        }));
    }
}
