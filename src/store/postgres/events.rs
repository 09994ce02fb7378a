//! [`Backend`] on PostgreSQL: ingest, events, audit, state and sweeps.
//!
//! A group-committed batch is ONE statement ([`APPEND_BATCH`]): the appends travel as
//! arrays, and a data-modifying CTE claims every key and inserts the events whose claim
//! it took, so N appends cost one round trip and one commit (measured: about 1.4× the
//! events/s of one pipelined statement per append with 1 KiB bodies, 1.2× with
//! 5 KiB). Two processes racing for one key serialise on the claim row; the loser sees
//! a duplicate.

use async_trait::async_trait;
use futures_util::future::try_join_all;

use super::enqueue::{insert_enqueued, write_flow_row, EnqueueColumns, FLOW_ROW};
use super::{pg_err, PostgresBackend};
use crate::error::{Error, Result};
use crate::outbox::model::Enqueue;
use crate::store::backend::{
    Appended, Backend, EventQuery, Rejected, StateWrite, StoredEvent, Swept, Write,
};
use crate::store::listing::{self, Arg, Dialect};
use crate::triggers::{SignatureStatus, TriggerEvent};

/// One statement per batch: the appends arrive as arrays, a data-modifying CTE claims
/// every key (`ON CONFLICT … DO UPDATE … WHERE expires_at <= now`, so only an expired
/// claim is taken over), inserts the events whose claim was taken, and answers per
/// input row whether it was stored and, if not, which event holds the claim (as seen
/// by the statement's snapshot). Keys are unique within the array: the caller answers
/// repeats within a batch itself.
///
/// The same statement creates the outbox rows and queue messages of the stored events
/// (`$15…$24`, one array entry per row, `$15` naming its event's position in the input
/// arrays), with the CTEs the fan-out uses too ([`insert_enqueued`]): they are joined
/// to `inserted`, so a duplicate enqueues nothing, and they add no statement and no
/// round trip to the batch (empty arrays when nothing is enqueued). If any row went
/// in, it notifies `switchboard_outbox` once; PostgreSQL delivers the notification at
/// commit.
///
/// Except when a row of the batch has a debounce or dedupe key: then the statement gets
/// no rows, and every row of the batch's stored events is written after it, one
/// [`FLOW_ROW`] each, in batch order, so each sees what the ones before wrote (two rows
/// of one key in one batch supersede or deduplicate each other as if committed one
/// after the other) and ids keep the batch's order.
pub(super) const APPEND_BATCH: &str = concat!(
    "WITH input AS (
        SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[],
            $6::BIGINT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::BYTEA[],
            $12::TEXT[], $13::BIGINT[], $25::TEXT[], $26::TEXT[])
        WITH ORDINALITY AS t(id, source, provider, kind, received_at, occurred_at,
            dedupe_key, trace_id, tenant, headers, body, signature, expires_at,
            traceparent, tracestate, ord)
    ), claimed AS (
        INSERT INTO dedupe_claims (source, dedupe_key, event_id, expires_at)
        SELECT source, dedupe_key, id, expires_at FROM input ORDER BY source, dedupe_key
        ON CONFLICT (source, dedupe_key) DO UPDATE
        SET event_id = EXCLUDED.event_id, expires_at = EXCLUDED.expires_at
        WHERE dedupe_claims.expires_at <= $14
        RETURNING event_id
    ), inserted AS (
        INSERT INTO events (id, source, provider, kind, received_at, occurred_at,
            dedupe_key, trace_id, tenant, headers, body, signature, traceparent, tracestate)
        SELECT id, source, provider, kind, received_at, occurred_at, dedupe_key,
            trace_id, tenant, headers, body, signature, traceparent, tracestate
        FROM input WHERE id IN (SELECT event_id FROM claimed) ORDER BY ord
        RETURNING id
    ), enq AS (
        SELECT q.*, i.id AS event_id, $14::BIGINT AS enqueued_at
        FROM unnest($15::BIGINT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::INT[],
            $20::TEXT[], $21::BIGINT[], $22::BYTEA[], $23::BIGINT[], $24::INT[], $27::BIGINT[])
            WITH ORDINALITY AS q(event_ord, binding_id, fingerprint, ordering_key, depth,
                queue, not_before, payload, dead_letter_id, priority, backfill_id, n)
        JOIN input i ON i.ord = q.event_ord
        WHERE i.id IN (SELECT id FROM inserted)
    ), ",
    insert_enqueued!(),
    "
    SELECT i.ord, n.id IS NOT NULL, c.event_id, (SELECT count(*) FROM notified)
    FROM input i
    LEFT JOIN inserted n ON n.id = i.id
    LEFT JOIN dedupe_claims c ON c.source = i.source AND c.dedupe_key = i.dedupe_key
    ORDER BY i.ord"
);
/// Sent before [`APPEND_BATCH`] in its transaction (pipelined, no round trip of its
/// own): plan the batch for the tables as they are now. A generic plan cached while
/// `dedupe_claims` and `events` were small keeps scanning them whole as they grow,
/// until autovacuum next analyses them: `Runtime::enqueue` fell from 16k to 3.5k/s
/// over a 100k-row fill (`benches/drain.rs`). Planning a batch of up to hundreds of
/// appends is a small share of it. `LOCAL`: it ends with the transaction.
const APPEND_PLAN: &str = "SET LOCAL plan_cache_mode = force_custom_plan";
const HOLDER: &str = "SELECT event_id FROM dedupe_claims WHERE source = $1 AND dedupe_key = $2";
const INSERT_REJECTION: &str = "INSERT INTO rejections (source, reason, detail, received_at,
    headers, body_len) VALUES ($1, $2, $3, $4, $5, $6)";
const PUT_STATE: &str = "INSERT INTO source_state (source, key, value) VALUES ($1, $2, $3)
    ON CONFLICT (source, key) DO UPDATE SET value = EXCLUDED.value";
const DELETE_STATE: &str = "DELETE FROM source_state WHERE source = $1 AND key = $2";
/// [`crate::store::backend::delivery_tail`] in SQL, exactly as `events_by_delivery`
/// (migration 9) indexes it, so the planner matches the index.
const DELIVERY_TAIL: &str = "substr(dedupe_key, strpos(dedupe_key, ':') + 1)";

/// PostgreSQL's spellings for the filtered listings.
pub(super) const DIALECT: Dialect = Dialect {
    mark: '$',
    delivery_tail: DELIVERY_TAIL,
    last_error_kind: "errors -> -1 ->> 'kind'",
};

/// A boxed query parameter (the filtered statements' lists are built at run time).
pub(super) type PgArg = Box<dyn tokio_postgres::types::ToSql + Sync + Send>;

/// A listing's parameter as tokio-postgres binds it.
pub(super) fn pg_arg(a: Arg) -> PgArg {
    match a {
        Arg::Text(s) => Box::new(s),
        Arg::Int(i) => Box::new(i),
    }
}
pub(super) const SELECT_EVENTS: &str =
    "SELECT seq, id, source, provider, kind, received_at, occurred_at,
    dedupe_key, trace_id, tenant, headers, body, signature, traceparent, tracestate
    FROM events";

/// The events page's SQL ([`crate::store::listing::events`]: only the filters `q`
/// sets, plain equalities the planner matches to their indexes whatever the values)
/// and its parameters.
fn events_sql(q: &EventQuery) -> (String, Vec<PgArg>) {
    let (sql, args) = listing::events(q, SELECT_EVENTS, &DIALECT);
    (sql, args.into_iter().map(pg_arg).collect())
}

pub(super) fn row_to_event(r: &tokio_postgres::Row) -> Result<StoredEvent> {
    let headers: String = r.get(10);
    let body: Vec<u8> = r.get(11);
    let signature: String = r.get(12);
    let payload = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    Ok(StoredEvent {
        seq: r.get(0),
        event: TriggerEvent {
            id: r.get(1),
            source: r.get(2),
            provider: r.get(3),
            kind: r.get(4),
            received_at_ms: r.get(5),
            occurred_at_ms: r.get(6),
            dedupe_key: r.get(7),
            trace_id: r.get(8),
            traceparent: r.get(13),
            tracestate: r.get(14),
            tenant: r.get(9),
            headers: serde_json::from_str(&headers).unwrap_or_default(),
            body,
            payload,
            signature: SignatureStatus::parse(&signature).ok_or_else(|| {
                Error::Store(format!(
                    "stored event has unknown signature status {signature:?}"
                ))
            })?,
        },
    })
}

/// A batch's appends as parallel arrays for [`APPEND_BATCH`], plus what the statement
/// does not carry: rejections, and repeats of a key already in the batch.
struct Columns<'a> {
    ids: Vec<&'a str>,
    sources: Vec<&'a str>,
    providers: Vec<&'a str>,
    kinds: Vec<&'a str>,
    received: Vec<i64>,
    occurred: Vec<Option<i64>>,
    keys: Vec<&'a str>,
    traces: Vec<&'a str>,
    traceparents: Vec<&'a str>,
    tracestates: Vec<&'a str>,
    tenants: Vec<&'a str>,
    headers: Vec<&'a str>,
    bodies: Vec<&'a [u8]>,
    signatures: Vec<&'static str>,
    expires: Vec<i64>,
    /// Batch position of each array row.
    index: Vec<usize>,
    /// (position, position of the first write with the same key).
    repeats: Vec<(usize, usize)>,
    rejections: Vec<&'a Rejected>,
    /// State values written after the events, in batch order.
    states: Vec<&'a StateWrite>,
    /// The rows to enqueue with the events, keyed by array position (1-based); empty
    /// when `flow` holds them.
    enqueue: EnqueueColumns<'a>,
    /// Whether a row has a debounce or dedupe key, so that the rows are written one by
    /// one after the events ([`FLOW_ROW`]).
    flow: bool,
}

impl<'a> Columns<'a> {
    fn of(writes: &'a [Write]) -> Columns<'a> {
        let mut c = Columns {
            ids: vec![],
            sources: vec![],
            providers: vec![],
            kinds: vec![],
            received: vec![],
            occurred: vec![],
            keys: vec![],
            traces: vec![],
            traceparents: vec![],
            tracestates: vec![],
            tenants: vec![],
            headers: vec![],
            bodies: vec![],
            signatures: vec![],
            expires: vec![],
            index: vec![],
            repeats: vec![],
            rejections: vec![],
            states: vec![],
            enqueue: Default::default(),
            flow: writes.iter().any(|w| match w {
                Write::Append { enqueue, .. } => enqueue.iter().any(Enqueue::has_flow_control),
                Write::Reject(_) | Write::PutState(_) => false,
            }),
        };
        let mut first = std::collections::HashMap::new();
        for (at, w) in writes.iter().enumerate() {
            let (e, expires, enqueue, prepared) = match w {
                Write::Append {
                    event,
                    claim_expires_at_ms,
                    enqueue,
                    prepared,
                } => (event, *claim_expires_at_ms, enqueue, prepared),
                Write::Reject(r) => {
                    c.rejections.push(r);
                    continue;
                }
                Write::PutState(w) => {
                    c.states.push(w);
                    continue;
                }
            };
            if let Some(&earlier) = first.get(&(e.source.as_str(), e.dedupe_key.as_str())) {
                c.repeats.push((at, earlier));
                continue;
            }
            first.insert((e.source.as_str(), e.dedupe_key.as_str()), at);
            c.ids.push(&e.id);
            c.sources.push(&e.source);
            c.providers.push(&e.provider);
            c.kinds.push(&e.kind);
            c.received.push(e.received_at_ms);
            c.occurred.push(e.occurred_at_ms);
            c.keys.push(&e.dedupe_key);
            c.traces.push(&e.trace_id);
            c.traceparents.push(&e.traceparent);
            c.tracestates.push(&e.tracestate);
            c.tenants.push(&e.tenant);
            c.headers.push(&prepared.headers_json);
            c.bodies.push(&prepared.body);
            c.signatures.push(e.signature.as_str());
            c.expires.push(expires);
            c.index.push(at);
            if !c.flow {
                c.enqueue.push_for_ordinal(c.index.len() as i64, enqueue);
            }
        }
        c
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        let found: i64 = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(pg_err("ping"))?
            .get(0);
        let known = super::schema::newest();
        if found > known {
            return Err(crate::store::backend::schema_too_new(found, known));
        }
        Ok(())
    }

    async fn write_batch(&self, writes: Vec<Write>, now_ms: i64) -> Result<Vec<Option<Appended>>> {
        let mut client = self.client().await?;
        let append = client
            .prepare_cached(APPEND_BATCH)
            .await
            .map_err(pg_err("prepare"))?;
        let reject = client
            .prepare_cached(INSERT_REJECTION)
            .await
            .map_err(pg_err("prepare"))?;
        let tx = client.transaction().await.map_err(pg_err("begin"))?;
        let batch = Columns::of(&writes);
        // The rejections are pipelined behind the one append statement.
        let rejections = try_join_all(batch.rejections.iter().map(|r| {
            let (tx, reject) = (&tx, &reject);
            async move {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                    &r.source,
                    &r.reason,
                    &r.detail,
                    &r.received_at_ms,
                    &r.headers_json,
                    &r.body_len,
                ];
                tx.execute(reject, &params).await
            }
        }));
        let appends = async {
            if batch.ids.is_empty() {
                return Ok(Vec::new());
            }
            let c = &batch;
            let q = &c.enqueue;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 27] = [
                &c.ids,
                &c.sources,
                &c.providers,
                &c.kinds,
                &c.received,
                &c.occurred,
                &c.keys,
                &c.traces,
                &c.tenants,
                &c.headers,
                &c.bodies,
                &c.signatures,
                &c.expires,
                &now_ms,
                &q.event_ords,
                &q.binding_ids,
                &q.fingerprints,
                &q.ordering_keys,
                &q.depths,
                &q.queues,
                &q.not_before,
                &q.payloads,
                &q.dead_letter_ids,
                &q.priorities,
                &c.traceparents,
                &c.tracestates,
                &q.backfill_ids,
            ];
            let plan = tx.batch_execute(APPEND_PLAN);
            let append = tx.query(&append, &params);
            let ((), rows) = futures_util::future::try_join(plan, append).await?;
            Ok(rows)
        };
        let (mut rows, _) = futures_util::future::try_join(appends, rejections)
            .await
            .map_err(pg_err("write"))?;
        if batch.flow {
            rows.sort_by_key(|row| row.get::<_, i64>(0));
            let flow_row = tx
                .prepare_cached(FLOW_ROW)
                .await
                .map_err(pg_err("prepare"))?;
            for row in rows.iter().filter(|row| row.get::<_, bool>(1)) {
                let at = batch.index[(row.get::<_, i64>(0) - 1) as usize];
                let Write::Append { event, enqueue, .. } = &writes[at] else {
                    continue;
                };
                for r in enqueue {
                    write_flow_row(&tx, &flow_row, &event.id, r, now_ms)
                        .await
                        .map_err(pg_err("write"))?;
                }
            }
        }
        let mut out: Vec<Option<Appended>> = vec![None; writes.len()];
        for row in rows {
            let ord: i64 = row.get(0);
            let at = batch.index[(ord - 1) as usize];
            let Write::Append { event: e, .. } = &writes[at] else {
                continue;
            };
            let stored: bool = row.get(1);
            out[at] = Some(if stored {
                Appended::Stored(e.id.clone())
            } else {
                match row.get::<_, Option<String>>(2) {
                    Some(holder) => Appended::Duplicate(holder),
                    // Claimed by another process after this statement's snapshot.
                    None => {
                        let row = tx
                            .query_one(HOLDER, &[&e.source, &e.dedupe_key])
                            .await
                            .map_err(pg_err("write"))?;
                        Appended::Duplicate(row.get(0))
                    }
                }
            });
        }
        for &(later, first) in &batch.repeats {
            out[later] = match &out[first] {
                Some(Appended::Stored(id)) | Some(Appended::Duplicate(id)) => {
                    Some(Appended::Duplicate(id.clone()))
                }
                None => None,
            };
        }
        for w in &batch.states {
            match &w.value {
                Some(v) => tx.execute(PUT_STATE, &[&w.source, &w.key, v]).await,
                None => tx.execute(DELETE_STATE, &[&w.source, &w.key]).await,
            }
            .map_err(pg_err("write state"))?;
        }
        tx.commit().await.map_err(pg_err("commit"))?;
        Ok(out)
    }

    async fn events(&self, query: &EventQuery) -> Result<Vec<StoredEvent>> {
        let client = self.client().await?;
        let (sql, args) = events_sql(query);
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            args.iter().map(|a| &**a as _).collect();
        let rows = client
            .query(&sql, &refs)
            .await
            .map_err(pg_err("read events"))?;
        rows.iter().map(row_to_event).collect()
    }

    async fn rejections(&self, source: Option<&str>, limit: usize) -> Result<Vec<Rejected>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT source, reason, detail, received_at, headers, body_len FROM rejections
                 WHERE ($1::TEXT IS NULL OR source = $1) ORDER BY seq DESC LIMIT $2",
                &[&source, &(limit as i64)],
            )
            .await
            .map_err(pg_err("read rejections"))?;
        Ok(rows
            .iter()
            .map(|r| Rejected {
                source: r.get(0),
                reason: r.get(1),
                detail: r.get(2),
                received_at_ms: r.get(3),
                headers_json: r.get(4),
                body_len: r.get(5),
            })
            .collect())
    }

    async fn get_state(&self, source: &str, key: &str) -> Result<Option<String>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT value FROM source_state WHERE source = $1 AND key = $2",
                &[&source, &key],
            )
            .await
            .map_err(pg_err("read state"))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn put_state(&self, source: &str, key: &str, value: Option<&str>) -> Result<()> {
        let client = self.client().await?;
        let result = match value {
            Some(v) => client.execute(PUT_STATE, &[&source, &key, &v]).await,
            None => client.execute(DELETE_STATE, &[&source, &key]).await,
        };
        result.map(drop).map_err(pg_err("write state"))
    }

    async fn put_state_if_absent(
        &self,
        source: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>> {
        let client = self.client().await?;
        let inserted = client
            .execute(
                "INSERT INTO source_state (source, key, value) VALUES ($1, $2, $3)
                 ON CONFLICT (source, key) DO NOTHING",
                &[&source, &key, &value],
            )
            .await
            .map_err(pg_err("write state"))?;
        if inserted == 1 {
            return Ok(None);
        }
        let row = client
            .query_one(
                "SELECT value FROM source_state WHERE source = $1 AND key = $2",
                &[&source, &key],
            )
            .await
            .map_err(pg_err("read state"))?;
        Ok(Some(row.get(0)))
    }

    async fn swap_state(
        &self,
        source: &str,
        key: &str,
        expected: Option<&str>,
        value: &str,
    ) -> Result<bool> {
        let client = self.client().await?;
        let written = match expected {
            None => {
                client
                    .execute(
                        "INSERT INTO source_state (source, key, value) VALUES ($1, $2, $3)
                         ON CONFLICT (source, key) DO NOTHING",
                        &[&source, &key, &value],
                    )
                    .await
            }
            Some(old) => {
                client
                    .execute(
                        "UPDATE source_state SET value = $4
                         WHERE source = $1 AND key = $2 AND value = $3",
                        &[&source, &key, &old, &value],
                    )
                    .await
            }
        };
        Ok(written.map_err(pg_err("write state"))? == 1)
    }

    async fn sweep(&self, now_ms: i64, rejections_before_ms: i64) -> Result<Swept> {
        let client = self.client().await?;
        let claims = client
            .execute(
                "DELETE FROM dedupe_claims WHERE expires_at <= $1",
                &[&now_ms],
            )
            .await
            .map_err(pg_err("sweep claims"))?;
        let rejections = client
            .execute(
                "DELETE FROM rejections WHERE received_at < $1",
                &[&rejections_before_ms],
            )
            .await
            .map_err(pg_err("sweep rejections"))?;
        Ok(Swept { claims, rejections })
    }
}
