//! The operator's views of a running gateway, for the live console (issue 25) and any
//! CLI: registrations (paged and filtered), tenants, connections (paged) and the live
//! chart's series, plus the task that samples that series once a second.
//!
//! Each view is a method on [`GatewayState`] returning a typed `Serialize` struct.
//! The HTTP API (`http_api.rs`) serves them as JSON; the console's HTML handlers call
//! the same methods rather than their own HTTP API, so both always show the same
//! thing. Query parameters are parsed here too ([`RegistrationsQuery::parse`],
//! [`ConnectionsQuery::parse`]), so a bad one is refused with the same message
//! whichever door it came in by.
//!
//! Listings are keyset-paged: a page holds at most `limit` items after the cursor
//! `after` (the last ARN, or link id, of the previous page), and `next` is the cursor
//! of the following page or `null` on the last. The registry is a `BTreeMap` by ARN,
//! so a page is a range read under the registry's lock, copying only that page's
//! items; with filters, `total` costs one pass over the entries (comparisons, no
//! copies), which stays well under a millisecond at 10,000 registrations.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use super::figures::RegistrationFiguresView;
use super::link::{TRANSPORT_GRPC, TRANSPORT_WEBSOCKET};
use super::registration_info::{RegistrationInfo, RegistrationState};
use super::registry::EntryView;
use super::schemas::CapabilitySchema;
use super::series::{Baseline, Point, SAMPLE_INTERVAL};
use super::state::GatewayState;

/// Items per page when `limit` is not given.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` accepted: a page of 500 is still cheap to render and copy.
pub(crate) const MAX_LIMIT: usize = 500;
/// ARNs listed per connection; the count is always complete.
const ARNS_PER_CONNECTION: usize = 5;
/// Longest `q` accepted, so a search term cannot make each comparison expensive.
const MAX_QUERY_CHARS: usize = 200;

/// A query parameter that cannot be used; the message says which and what is allowed
/// (the HTTP API answers it with 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamError(pub(crate) String);

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `GET /api/v1/registrations`'s query, as given. An empty value means "not given",
/// as an HTML filter form submits its empty fields.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegistrationsQuery {
    pub(crate) tenant: Option<String>,
    pub(crate) status: Option<String>,
    pub(crate) transport: Option<String>,
    pub(crate) q: Option<String>,
    pub(crate) limit: Option<String>,
    pub(crate) after: Option<String>,
}

/// Which registrations to list: the checked form of [`RegistrationsQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegistrationFilter {
    /// Exactly this (sanitised) tenant.
    pub(crate) tenant: Option<String>,
    /// `approved` or `pending`.
    pub(crate) status: Option<&'static str>,
    /// `websocket` or `grpc`.
    pub(crate) transport: Option<&'static str>,
    /// Lower-cased search term, matched case-insensitively within the ARN, which
    /// holds the connector type and instance id.
    pub(crate) q: Option<String>,
    /// Page size, 1 to [`MAX_LIMIT`].
    pub(crate) limit: usize,
    /// The last ARN of the previous page.
    pub(crate) after: Option<String>,
}

impl Default for RegistrationFilter {
    /// The first page of everything.
    fn default() -> Self {
        RegistrationFilter {
            tenant: None,
            status: None,
            transport: None,
            q: None,
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

/// `None` for an absent or empty parameter.
fn given(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// `v` when it is one of `allowed`, else an error naming `name` and the choices.
fn one_of(
    name: &str,
    v: Option<String>,
    allowed: &[&'static str],
) -> Result<Option<&'static str>, ParamError> {
    match given(v) {
        None => Ok(None),
        Some(v) => allowed
            .iter()
            .find(|a| **a == v)
            .map(|a| Some(*a))
            .ok_or_else(|| {
                ParamError(format!(
                    "{name} must be one of {}, got {v:?}",
                    allowed.join(", ")
                ))
            }),
    }
}

/// The page size: [`DEFAULT_LIMIT`] when absent, else 1 to [`MAX_LIMIT`].
fn limit_of(v: Option<String>) -> Result<usize, ParamError> {
    match given(v) {
        None => Ok(DEFAULT_LIMIT),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ParamError(format!(
                    "limit must be a whole number from 1 to {MAX_LIMIT}, got {v:?}"
                ))
            }),
    }
}

impl RegistrationsQuery {
    /// Checks every parameter; the first bad one is the error.
    pub(crate) fn parse(self) -> Result<RegistrationFilter, ParamError> {
        let q = given(self.q);
        if q.as_ref()
            .is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS)
        {
            return Err(ParamError(format!(
                "q must be at most {MAX_QUERY_CHARS} characters"
            )));
        }
        Ok(RegistrationFilter {
            tenant: given(self.tenant),
            status: one_of(
                "status",
                self.status,
                &[
                    RegistrationState::Approved.as_str(),
                    RegistrationState::Pending.as_str(),
                ],
            )?,
            transport: one_of(
                "transport",
                self.transport,
                &[TRANSPORT_WEBSOCKET, TRANSPORT_GRPC],
            )?,
            q: q.map(|q| q.to_lowercase()),
            limit: limit_of(self.limit)?,
            after: given(self.after),
        })
    }
}

impl RegistrationFilter {
    /// Whether any predicate is set (else every registration matches).
    fn filters(&self) -> bool {
        self.tenant.is_some()
            || self.status.is_some()
            || self.transport.is_some()
            || self.q.is_some()
    }

    fn matches(&self, info: &RegistrationInfo) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == info.tenant_id)
            && self.status.is_none_or(|s| s == info.status.as_str())
            && self.transport.is_none_or(|t| t == info.transport)
            && self
                .q
                .as_ref()
                .is_none_or(|q| contains_ignoring_case(&info.arn, q))
    }
}

/// Whether `hay` contains `needle_lower` (already lower-cased), ignoring case; without
/// allocating for ASCII, which sanitised identities are.
fn contains_ignoring_case(hay: &str, needle_lower: &str) -> bool {
    if hay.is_ascii() && needle_lower.is_ascii() {
        let (h, n) = (hay.as_bytes(), needle_lower.as_bytes());
        n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
    } else {
        hay.to_lowercase().contains(needle_lower)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Page<T, C> {
    pub(crate) items: Vec<T>,
    /// The `after` of the next page; `null` on the last page.
    pub(crate) next: Option<C>,
    /// How many items match the filter, over all pages.
    pub(crate) total: usize,
}

/// One registration with its live figures, as `GET /api/v1/registrations` lists it:
/// the fields of `GET /api/v1/connectors`' items plus `since_ms` and the figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct RegistrationItem {
    #[serde(flatten)]
    pub(crate) info: RegistrationInfo,
    /// When it registered on its current link (ms since the epoch).
    pub(crate) since_ms: u64,
    #[serde(flatten)]
    pub(crate) figures: RegistrationFiguresView,
}

impl RegistrationItem {
    fn of(e: &EntryView<'_>) -> Self {
        RegistrationItem {
            info: e.info.clone(),
            since_ms: e.since_ms,
            figures: e.figures.snapshot(),
        }
    }
}

/// One registration in full, as `GET /api/v1/registrations/{arn}` shows it: a listing
/// item plus its capabilities' schemas.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct RegistrationDetail {
    #[serde(flatten)]
    pub(crate) item: RegistrationItem,
    /// Each capability's name, description and input/output JSON Schema as sent at
    /// register time; `null` when none were sent or they exceed
    /// [`super::schemas::MAX_KEPT_SCHEMA_BYTES`] (the ids stay in `capabilities`).
    pub(crate) capability_schemas: Option<Vec<CapabilitySchema>>,
}

/// One tenant, as `GET /api/v1/tenants` lists it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub(crate) struct TenantItem {
    pub(crate) tenant_id: String,
    /// Open links bound to it (a link is bound to the tenant of its first registration).
    pub(crate) connections: usize,
    /// Its registrations, any status.
    pub(crate) registrations: usize,
    pub(crate) approved: usize,
    pub(crate) pending: usize,
}

/// `GET /api/v1/tenants`: every tenant with a registration or a bound link, by id.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct TenantsView {
    pub(crate) items: Vec<TenantItem>,
    /// Open links that have registered nothing yet, so belong to no tenant.
    pub(crate) unbound_connections: usize,
}

/// `GET /api/v1/connections`'s query, as given; empty values mean "not given".
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectionsQuery {
    pub(crate) tenant: Option<String>,
    pub(crate) limit: Option<String>,
    pub(crate) after: Option<String>,
}

/// Which links to list: the checked form of [`ConnectionsQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionFilter {
    /// Links bound to exactly this tenant.
    pub(crate) tenant: Option<String>,
    /// Page size, 1 to [`MAX_LIMIT`].
    pub(crate) limit: usize,
    /// The last link id of the previous page.
    pub(crate) after: Option<u64>,
}

impl Default for ConnectionFilter {
    /// The first page of every link.
    fn default() -> Self {
        ConnectionFilter {
            tenant: None,
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

impl ConnectionsQuery {
    /// Checks every parameter; the first bad one is the error.
    pub(crate) fn parse(self) -> Result<ConnectionFilter, ParamError> {
        let after = match given(self.after) {
            None => None,
            Some(v) => Some(v.parse::<u64>().map_err(|_| {
                ParamError(format!(
                    "after must be a connection id (a whole number), got {v:?}"
                ))
            })?),
        };
        Ok(ConnectionFilter {
            tenant: given(self.tenant),
            limit: limit_of(self.limit)?,
            after,
        })
    }
}

/// One link (a Phoenix socket or a gRPC stream), as `GET /api/v1/connections` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ConnectionItem {
    /// The link id (`socket_id` in registrations).
    pub(crate) id: u64,
    /// `websocket` or `grpc`.
    pub(crate) transport: &'static str,
    /// The tenant it is bound to; `null` before its first registration.
    pub(crate) tenant_id: Option<String>,
    /// The peer's `ip:port`, as accepted; `null` when unknown.
    pub(crate) peer: Option<String>,
    /// When it was accepted (ms since the epoch).
    pub(crate) since_ms: u64,
    /// How many registrations it carries.
    pub(crate) registrations: usize,
    /// The first few of them by ARN (at most five).
    pub(crate) arns: Vec<String>,
    /// Executes it is answering plus invokes it sent, not yet ended.
    pub(crate) in_flight: usize,
    /// Invokes it sent, by outcome.
    pub(crate) invokes_sent: BTreeMap<String, u64>,
}

/// `GET /api/v1/stats/series`: the live chart's points, oldest first.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct SeriesView {
    /// Time between points.
    pub(crate) interval_ms: u64,
    pub(crate) points: Vec<Point>,
}

impl GatewayState {
    /// One page of registrations matching `filter`, ordered by ARN, each with its live
    /// figures (`GET /api/v1/registrations`).
    pub(crate) fn registrations_page(
        &self,
        filter: &RegistrationFilter,
    ) -> Page<RegistrationItem, String> {
        let registry = self.registry();
        let mut items = Vec::with_capacity(filter.limit.min(registry.len()));
        let mut more = false;
        let mut page = |e: &EntryView<'_>| {
            if items.len() < filter.limit {
                items.push(RegistrationItem::of(e));
            } else {
                more = true;
            }
        };
        let total = if filter.filters() {
            // One pass: count every match, keep the page's.
            let mut total = 0;
            for e in registry.entries_after(None) {
                if filter.matches(e.info) {
                    total += 1;
                    if filter
                        .after
                        .as_deref()
                        .is_none_or(|a| e.info.arn.as_str() > a)
                    {
                        page(&e);
                    }
                }
            }
            total
        } else {
            for e in registry
                .entries_after(filter.after.as_deref())
                .take(filter.limit + 1)
            {
                page(&e);
            }
            registry.len()
        };
        let next = more
            .then(|| items.last().map(|i| i.info.arn.clone()))
            .flatten();
        Page { items, next, total }
    }

    /// One registration with its live figures and its capabilities' schemas
    /// (`GET /api/v1/registrations/{arn}`, the console's registration page).
    pub(crate) fn registration(&self, arn: &str) -> Option<RegistrationDetail> {
        self.registry().entry(arn).map(|e| RegistrationDetail {
            item: RegistrationItem::of(&e),
            capability_schemas: e.schemas.map(|s| s.to_vec()),
        })
    }

    /// Every tenant with its connection and registration counts (`GET
    /// /api/v1/tenants`).
    pub(crate) fn tenants(&self) -> TenantsView {
        let registry = self.registry();
        let mut by_tenant: BTreeMap<&str, TenantItem> = BTreeMap::new();
        for e in registry.entries_after(None) {
            let t = by_tenant.entry(&e.info.tenant_id).or_default();
            t.registrations += 1;
            if e.info.status == RegistrationState::Pending {
                t.pending += 1;
            } else {
                t.approved += 1;
            }
        }
        let mut bound = 0;
        for (_, tenant) in registry.socket_tenants() {
            by_tenant.entry(tenant).or_default().connections += 1;
            bound += 1;
        }
        let open = self.sockets.lock().expect("sockets lock").len();
        let items = by_tenant
            .into_iter()
            .map(|(id, t)| TenantItem {
                tenant_id: id.to_owned(),
                ..t
            })
            .collect();
        TenantsView {
            items,
            unbound_connections: open.saturating_sub(bound),
        }
    }

    /// One page of open links matching `filter`, ordered by id (`GET
    /// /api/v1/connections`).
    pub(crate) fn connections_page(&self, filter: &ConnectionFilter) -> Page<ConnectionItem, u64> {
        // Lock order: registry, then sockets (`state.rs`).
        let registry = self.registry();
        let sockets = self.sockets.lock().expect("sockets lock");
        let matches = |id: u64| {
            filter
                .tenant
                .as_deref()
                .is_none_or(|t| registry.tenant_of_socket(id) == Some(t))
        };
        let total = match filter.tenant {
            None => sockets.len(),
            Some(_) => sockets.keys().filter(|id| matches(**id)).count(),
        };
        let from = filter.after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut items = Vec::new();
        let mut more = false;
        for (id, link) in sockets.range((from, Bound::Unbounded)) {
            if !matches(*id) {
                continue;
            }
            if items.len() == filter.limit {
                more = true;
                break;
            }
            let mut arns: Vec<&str> = registry.arns_of_socket(*id).collect();
            let registrations = arns.len();
            arns.sort_unstable();
            arns.truncate(ARNS_PER_CONNECTION);
            items.push(ConnectionItem {
                id: *id,
                transport: link.transport(),
                tenant_id: registry.tenant_of_socket(*id).map(str::to_owned),
                peer: link.peer.map(|p| p.to_string()),
                since_ms: link.since_ms,
                registrations,
                arns: arns.into_iter().map(str::to_owned).collect(),
                in_flight: link.in_flight_now(),
                invokes_sent: link.invokes_sent.snapshot(),
            });
        }
        let next = more.then(|| items.last().map(|i| i.id)).flatten();
        Page { items, next, total }
    }

    /// The live chart's points, oldest first (`GET /api/v1/stats/series`).
    pub(crate) fn stats_series(&self) -> SeriesView {
        SeriesView {
            interval_ms: u64::try_from(SAMPLE_INTERVAL.as_millis()).unwrap_or(u64::MAX),
            points: self.series.lock().expect("series lock").points(),
        }
    }

    /// Takes one point, for the second ending at `at_ms`: the counters' growth since
    /// `baseline` and the latency buckets, which start the next second empty.
    fn sample_series(&self, at_ms: u64, baseline: &mut Baseline) {
        let second = baseline.since(self.counters.totals());
        let latency = self.counters.latency.take();
        self.series
            .lock()
            .expect("series lock")
            .push(at_ms, second, &latency);
    }
}

/// Starts the sampler: a point every [`SAMPLE_INTERVAL`], until the gateway's
/// cancellation token fires. Like the accept loops it is gateway-wide rather than
/// per-connection work, so it is not among the tracked tasks
/// ([`super::Gateway::tracked_tasks`] counts those); the gateway keeps the handle and
/// shutdown awaits it with the accept loops.
pub(crate) fn spawn_sampler(state: &Arc<GatewayState>) -> JoinHandle<()> {
    let state = state.clone();
    // The totals now, so the first point holds only its own second.
    let mut baseline = Baseline::default();
    baseline.since(state.counters.totals());
    tokio::spawn(async move {
        let mut tick = interval_at(Instant::now() + SAMPLE_INTERVAL, SAMPLE_INTERVAL);
        // After a stall, carry on a second at a time rather than burst catch-up
        // points that would each claim a whole second.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                _ = tick.tick() => {
                    let at_ms = u64::try_from(crate::clock::now_ms()).unwrap_or(0);
                    state.sample_series(at_ms, &mut baseline);
                }
            }
        }
    })
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
