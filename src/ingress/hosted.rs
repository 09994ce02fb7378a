//! Hosting inbound connectors: the registry of providers ([`Connectors`]: the
//! built-ins plus a program's own), the sources started from `[[sources]]`
//! ([`HostedSource`], [`start`]), and the one path by which any source's events
//! become stored events ([`materialise`], [`Committer`]): ids, trace ids, tenant and
//! redacted headers added, bindings matched, and events, claims, outbox rows (and a
//! poll or stream source's cursor) committed in one transaction.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::redact::{redact_headers, REDACTED};
use super::source::SourceSpec;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::inbound::context::SourceSecrets;
use crate::inbound::metrics::CustomCounters;
use crate::inbound::rate_limit::{Buckets, TokenBucket};
use crate::inbound::{
    Commit, Committed, ContextParts, InboundConnector, InboundEvent, InboundSource, SourceContext,
    SourceKind, StateBackend,
};
use crate::store::{Appended, GroupAppend, StateWrite, Store};
use crate::trace_context::TraceParent;
use crate::triggers::binding_match::BindingMatcher;
use crate::triggers::{event_id, root_context, IdSeed, SignatureStatus, TriggerEvent};

/// State key of a poll or stream source's cursor, written with its events.
pub const CURSOR_KEY: &str = "switchboard.cursor";

/// The inbound connectors a runtime knows, by provider id.
#[derive(Clone)]
pub(crate) struct Connectors {
    by_id: BTreeMap<String, Arc<dyn InboundConnector>>,
}

impl Connectors {
    /// No connector yet (`ingress::builtin::registry` makes the default one).
    pub(crate) fn new() -> Connectors {
        Connectors {
            by_id: BTreeMap::new(),
        }
    }

    /// Makes `alias` another provider id of the connector registered as `id`.
    pub(crate) fn alias(&mut self, alias: &str, id: &str) {
        if let Some(c) = self.by_id.get(id).cloned() {
            self.by_id.insert(alias.to_owned(), c);
        }
    }

    /// Adds a program's connector. Its id must be letters, digits and `_`, and not
    /// taken (built-ins included), so no source's behaviour depends on order.
    pub(crate) fn add(&mut self, connector: Arc<dyn InboundConnector>) -> Result<()> {
        let id = connector.provider().to_owned();
        let valid = !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(Error::Config(format!(
                "inbound connector provider id {id:?}: use letters, digits and '_'"
            )));
        }
        if connector.kinds().is_empty() {
            return Err(Error::Config(format!(
                "inbound connector {id:?} supports no kind of source"
            )));
        }
        if self.by_id.contains_key(&id) {
            return Err(Error::Config(format!(
                "an inbound connector with provider id {id:?} is already registered (built-ins included); register yours under another id"
            )));
        }
        self.by_id.insert(id, connector);
        Ok(())
    }

    fn get(&self, provider: &str) -> Option<&Arc<dyn InboundConnector>> {
        self.by_id.get(provider)
    }

    fn ids(&self) -> Vec<&str> {
        self.by_id.keys().map(String::as_str).collect()
    }
}

/// One source at run time.
pub(crate) struct HostedSource {
    pub(crate) spec: SourceSpec,
    /// The provider id its connector reports (`svix` sources store
    /// `standard_webhooks`).
    pub(crate) provider: String,
    pub(crate) kind: SourceKind,
    pub(crate) source: Box<dyn InboundSource>,
    pub(crate) connector: Arc<dyn InboundConnector>,
    pub(crate) ctx: SourceContext,
    /// The secrets the context reads, replaced on reload.
    pub(crate) secrets: SourceSecrets,
    pub(crate) bucket: Option<Mutex<TokenBucket>>,
    pub(crate) audit_bucket: Mutex<TokenBucket>,
}

impl std::fmt::Debug for HostedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedSource")
            .field("id", &self.spec.id)
            .field("provider", &self.provider)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl HostedSource {
    /// The source's id.
    pub(crate) fn id(&self) -> &str {
        &self.spec.id
    }
}

/// The source state backend: the store's `source_state` table.
pub(crate) struct StoreState(pub(crate) Store);

#[async_trait]
impl StateBackend for StoreState {
    async fn get(&self, source: &str, key: &str) -> Result<Option<String>> {
        self.0.backend().get_state(source, key).await
    }

    async fn put(&self, source: &str, key: &str, value: Option<&str>) -> Result<()> {
        self.0.backend().put_state(source, key, value).await
    }

    async fn put_if_absent(&self, source: &str, key: &str, value: &str) -> Result<Option<String>> {
        self.0
            .backend()
            .put_state_if_absent(source, key, value)
            .await
    }

    async fn swap(
        &self,
        source: &str,
        key: &str,
        expected: Option<&str>,
        value: &str,
    ) -> Result<bool> {
        self.0
            .backend()
            .swap_state(source, key, expected, value)
            .await
    }
}

/// Starts every source of `specs` with its connector (`init`), in order. An unknown
/// provider, a kind the connector does not support, or a connector's refusal of the
/// options stops the start with an error naming the source.
pub(crate) async fn start(
    specs: &[SourceSpec],
    connectors: &Connectors,
    state: Arc<dyn StateBackend>,
    counters: &Arc<CustomCounters>,
) -> Result<Vec<Arc<HostedSource>>> {
    let now = now_ms();
    let buckets = Buckets::default();
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let connector = connectors.get(&spec.provider).cloned().ok_or_else(|| {
            Error::Config(format!(
                "source {:?}: unknown provider {:?}; the registered providers are {}",
                spec.id,
                spec.provider,
                connectors.ids().join(", ")
            ))
        })?;
        let secrets = SourceSecrets::new(spec.secrets.clone());
        let ctx = SourceContext::new(ContextParts {
            source: spec.id.clone(),
            provider: spec.provider.clone(),
            tenant: spec.tenant.clone(),
            options: spec.options.clone(),
            secrets: secrets.clone(),
            state: state.clone(),
            counters: counters.clone(),
            clock: now_ms,
            outbound: (
                spec.outbound_rate_limit,
                spec.outbound_max_wait,
                buckets.clone(),
            ),
        });
        let source = connector.init(ctx.clone()).await.map_err(|e| match e {
            Error::Config(m) if m.contains(&format!("{:?}", spec.id)) => Error::Config(m),
            other => ctx.invalid(&other.to_string()),
        })?;
        let kind = source.kind();
        if !connector.kinds().contains(&kind) {
            return Err(ctx.invalid(&format!(
                "the connector made a {} source, which is not among its kinds",
                kind.as_str()
            )));
        }
        out.push(Arc::new(HostedSource {
            provider: connector.provider().to_owned(),
            kind,
            source,
            connector,
            ctx,
            secrets,
            bucket: spec
                .rate_limit
                .map(|r| Mutex::new(TokenBucket::for_limit(r, now))),
            audit_bucket: Mutex::new(TokenBucket::for_limit(spec.rejection_audit_limit, now)),
            spec: spec.clone(),
        }));
    }
    Ok(out)
}

/// Where an event came from, beyond its source: what [`materialise`] needs of the
/// delivery that carried it.
pub(crate) struct Origin<'a> {
    /// Receipt time, unix ms.
    pub(crate) received_at_ms: i64,
    /// The trace context the delivery's events are created under: the sender's
    /// `traceparent` when valid (continued by the ingress's span when spans are
    /// exported); `None` starts a new root per event.
    pub(crate) trace: Option<TraceParent>,
    /// The sender's `tracestate` when valid and beside a valid `traceparent`.
    pub(crate) tracestate: Option<&'a str>,
    /// Verified (a webhook) or internal (a poll, a stream, a tick).
    pub(crate) signature: SignatureStatus,
}

/// What every event of a source is stamped with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp<'a> {
    pub(crate) source: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) tenant: &'a str,
}

impl<'a> Origin<'a> {
    /// An origin without a sender's trace context: a poll, a stream, a tick, a test.
    pub(crate) fn untraced(received_at_ms: i64, signature: SignatureStatus) -> Self {
        Origin {
            received_at_ms,
            trace: None,
            tracestate: None,
            signature,
        }
    }

    /// `self` with the sender's trace context read from its `traceparent` and
    /// `tracestate` headers by the W3C rules: an invalid `traceparent` is ignored (a
    /// new root is started, the request is not refused), and a `tracestate` counts
    /// only beside a valid `traceparent`.
    pub(crate) fn with_sender_context(
        mut self,
        traceparent: Option<&str>,
        tracestate: Option<&'a str>,
    ) -> Self {
        self.trace = traceparent.and_then(TraceParent::parse);
        self.tracestate = self
            .trace
            .and(tracestate)
            .and_then(crate::trace_context::tracestate);
        self
    }
}

impl HostedSource {
    /// This source's stamp.
    pub(crate) fn stamp(&self) -> Stamp<'_> {
        Stamp {
            source: &self.spec.id,
            provider: &self.provider,
            tenant: &self.spec.tenant,
        }
    }
}

/// A delivery's headers as stored: the standard redactions, and `secret` (a source's
/// own secret headers, lower-case) blanked whatever their names.
pub(crate) fn stored_headers(
    pairs: &[(&str, &str)],
    secret: &[String],
) -> BTreeMap<String, String> {
    let mut headers = redact_headers(pairs.iter().copied());
    for name in secret {
        if let Some(v) = headers.get_mut(name.as_str()) {
            *v = REDACTED.to_owned();
        }
    }
    headers
}

/// [`materialise`] for each of one delivery's `events`, with fresh ids. The last event
/// takes `headers` and the others get copies: a delivery is one event far more often
/// than several, and then its headers (a map of a dozen strings) are not copied at all.
pub(crate) fn materialise_each(
    stamp: Stamp<'_>,
    events: Vec<InboundEvent>,
    origin: &Origin<'_>,
    mut headers: BTreeMap<String, String>,
) -> Result<Vec<TriggerEvent>> {
    let last = events.len().saturating_sub(1);
    let mut out = Vec::with_capacity(events.len());
    for (i, event) in events.into_iter().enumerate() {
        let own = if i == last {
            std::mem::take(&mut headers)
        } else {
            headers.clone()
        };
        out.push(materialise(stamp, event, origin, own, IdSeed::random())?);
    }
    Ok(out)
}

/// A source's normalised event as the event the store keeps: the rules for ids,
/// trace ids, tenant and provider, in one place for every kind of source. `headers`
/// are the delivery's stored headers (empty for poll and stream events). `ids` is the
/// randomness, drawn by the caller, so this is a plain function.
pub(crate) fn materialise(
    stamp: Stamp<'_>,
    event: InboundEvent,
    origin: &Origin<'_>,
    headers: BTreeMap<String, String>,
    ids: IdSeed,
) -> Result<TriggerEvent> {
    // PostgreSQL TEXT cannot hold NUL: refuse such an event here rather than fail
    // the whole group-commit batch it would join.
    if event.kind.contains('\0') || event.dedupe_key.contains('\0') {
        return Err(Error::Connector(
            "the kind or dedupe key contains a NUL character".into(),
        ));
    }
    if event.kind.is_empty() || event.dedupe_key.is_empty() {
        return Err(Error::Connector(
            "an event needs a non-empty kind and dedupe key".into(),
        ));
    }
    let trace = origin
        .trace
        .unwrap_or_else(|| root_context(ids.trace, ids.span));
    let body = match event.body {
        Some(b) => b,
        None => serde_json::to_vec(&event.payload)
            .map_err(|e| Error::Connector(format!("the payload cannot be encoded: {e}")))?,
    };
    Ok(TriggerEvent {
        id: event_id(origin.received_at_ms, ids.event),
        source: stamp.source.to_owned(),
        provider: stamp.provider.to_owned(),
        kind: event.kind,
        received_at_ms: origin.received_at_ms,
        occurred_at_ms: event.occurred_at_ms,
        dedupe_key: event.dedupe_key,
        trace_id: trace.trace_id_hex(),
        traceparent: trace.header(),
        tracestate: origin.tracestate.unwrap_or_default().to_owned(),
        tenant: stamp.tenant.to_owned(),
        headers,
        body,
        payload: event.payload,
        signature: origin.signature,
    })
}

/// Stores sources' events: matched against the bindings, then appended with their
/// claims and outbox rows (and a cursor) in one transaction.
#[derive(Clone)]
pub(crate) struct Committer {
    pub(crate) store: Store,
    pub(crate) router: BindingMatcher,
}

impl Committer {
    /// Commits `events` of `source` (and `cursor`, if any, under [`CURSOR_KEY`]);
    /// one [`Appended`] per event.
    pub(crate) async fn commit(
        &self,
        source: &HostedSource,
        events: Vec<TriggerEvent>,
        cursor: Option<String>,
    ) -> Result<Vec<Appended>> {
        let claim_expires_at_ms = now_ms() + source.spec.retention_ms;
        if cursor.is_none() && events.len() == 1 {
            // The webhook hot path: one event, no cursor, no vector of writes.
            let event = events.into_iter().next().expect("one event");
            let rows = self.router.route(&event);
            let one = self
                .store
                .append_enqueue(event, claim_expires_at_ms, rows)
                .await?;
            return Ok(vec![one]);
        }
        let appends = events
            .into_iter()
            .map(|event| GroupAppend {
                enqueue: self.router.route(&event),
                event,
                claim_expires_at_ms,
            })
            .collect();
        let state = cursor.map(|value| StateWrite {
            source: source.spec.id.clone(),
            key: CURSOR_KEY.into(),
            value: Some(value),
        });
        self.store.append_group(appends, state).await
    }
}

/// The [`Commit`] behind a stream source's [`crate::inbound::EventSink`] and the
/// poll driver: materialises without a delivery (no headers, internal signature).
pub(crate) struct SourceCommit {
    pub(crate) source: Arc<HostedSource>,
    pub(crate) committer: Committer,
}

impl SourceCommit {
    /// Materialises `events` as of now.
    pub(crate) fn materialise_all(&self, events: Vec<InboundEvent>) -> Result<Vec<TriggerEvent>> {
        let origin = Origin::untraced(now_ms(), SignatureStatus::Internal);
        materialise_each(self.source.stamp(), events, &origin, BTreeMap::new())
    }
}

#[async_trait]
impl Commit for SourceCommit {
    async fn commit(&self, events: Vec<InboundEvent>, cursor: Option<String>) -> Result<Committed> {
        let events = self.materialise_all(events)?;
        let appended = self.committer.commit(&self.source, events, cursor).await?;
        Ok(appended
            .iter()
            .map(|a| matches!(a, Appended::Stored(_)))
            .collect())
    }
}

/// The sources by id, for lookups by the ingress handler and the admin API.
pub(crate) fn by_id(sources: &[Arc<HostedSource>]) -> HashMap<String, Arc<HostedSource>> {
    sources
        .iter()
        .map(|s| (s.spec.id.clone(), s.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_of_a_delivery_keeps_its_headers_and_gets_its_own_ids() {
        let stamp = Stamp {
            source: "s",
            provider: "github",
            tenant: "default",
        };
        let origin = Origin::untraced(1_000, SignatureStatus::Verified);
        let headers = BTreeMap::from([("x-github-event".to_owned(), "issues".to_owned())]);
        let events = (0..3)
            .map(|i| InboundEvent::new("issues.opened", format!("d{i}"), serde_json::Value::Null))
            .collect();
        let out = materialise_each(stamp, events, &origin, headers.clone()).unwrap();
        assert_eq!(out.len(), 3);
        for (i, e) in out.iter().enumerate() {
            assert_eq!(e.headers, headers, "event {i}");
            assert_eq!(e.dedupe_key, format!("d{i}"));
        }
        assert_ne!(out[0].id, out[1].id);
        assert_ne!(out[1].id, out[2].id);
        let none = materialise_each(stamp, Vec::new(), &origin, headers).unwrap();
        assert!(none.is_empty());
    }
}
