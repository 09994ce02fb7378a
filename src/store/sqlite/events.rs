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
use crate::triggers::{SignatureStatus, TriggerEvent};

const CLAIM: &str = "INSERT INTO dedupe_claims (source, dedupe_key, event_id, expires_at)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (source, dedupe_key) DO UPDATE
    SET event_id = excluded.event_id, expires_at = excluded.expires_at
    WHERE dedupe_claims.expires_at <= ?5";
const HOLDER: &str = "SELECT event_id FROM dedupe_claims WHERE source = ?1 AND dedupe_key = ?2";
const INSERT_EVENT: &str = "INSERT INTO events (id, source, provider, kind, received_at,
    occurred_at, dedupe_key, trace_id, tenant, headers, body, signature, body_codec)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
const INSERT_REJECTION: &str = "INSERT INTO rejections (source, reason, detail, received_at,
    headers, body_len) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const PUT_STATE: &str = "INSERT INTO source_state (source, key, value) VALUES (?1, ?2, ?3)
    ON CONFLICT (source, key) DO UPDATE SET value = excluded.value";
const DELETE_STATE: &str = "DELETE FROM source_state WHERE source = ?1 AND key = ?2";
const SELECT_EVENTS: &str = "SELECT seq, id, source, provider, kind, received_at, occurred_at,
    dedupe_key, trace_id, tenant, headers, switchboard_body(body_codec, body), signature FROM events
    WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR seq < ?2) AND (?4 IS NULL OR id = ?4)
    ORDER BY seq DESC LIMIT ?3";

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
                            prepared.codec
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

fn row_to_event(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
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
        let q = query.clone();
        Self::with(&self.reader, move |c| {
            let mut stmt = c
                .prepare_cached(SELECT_EVENTS)
                .map_err(sql_err("read events"))?;
            let rows = stmt
                .query_map(
                    params![q.source, q.before_seq, q.limit as i64, q.event_id],
                    row_to_event,
                )
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
