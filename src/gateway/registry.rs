//! Who is registered where: ARNs, their sockets, each socket's tenant binding, each
//! registration's scope, approval status and latest metrics report. Plain data; the
//! server holds it behind one short lock. A pending registration is listed but not
//! executable ([`Registry::lookup_executable`], [`Resolved::pending`]); it goes with
//! its socket like any other, so the operator only ever sees pending registrations
//! that can be told of their approval.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use serde::Serialize;

use super::figures::RegistrationFigures;
use super::registration_info::SCOPE_GLOBAL;
use super::registration_info::{RegistrationInfo, RegistrationState};
use super::report::ReportedMetrics;
use super::schemas::{schemas_of, CapabilitySchema, SchemaPool};
use crate::error::Error;
use crate::identity::{sanitize, Arn, RegistrationKey};
use crate::proto::{MetricsReport, RegisterConnectorRequest};

/// A registration found by [`Registry::resolve`]: what an invoke needs to route to it
/// and to decide whether the caller may.
#[derive(Debug, Clone)]
pub(crate) struct Resolved<S> {
    pub(crate) arn: String,
    pub(crate) tenant: String,
    pub(crate) global: bool,
    /// Awaiting approval: an invoke must not reach it.
    pub(crate) pending: bool,
    pub(crate) socket: S,
    /// Its live figures, counted by the invoke without another look-up.
    pub(crate) figures: Arc<RegistrationFigures>,
}

/// One registration as the console's paged listing reads it, borrowed from the
/// registry under its lock ([`Registry::entries_after`]).
pub(crate) struct EntryView<'a> {
    /// Its capabilities' schemas, when they fit [`MAX_KEPT_SCHEMA_BYTES`].
    pub(crate) schemas: Option<&'a Arc<[CapabilitySchema]>>,
    pub(crate) info: &'a RegistrationInfo,
    pub(crate) figures: &'a RegistrationFigures,
    /// When it registered on its current link (ms since the epoch).
    pub(crate) since_ms: u64,
}

/// One pending registration, as `GET /api/v1/approvals` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct PendingInfo {
    pub(crate) arn: String,
    pub(crate) tenant_id: String,
    pub(crate) connector_type: String,
    pub(crate) instance_id: String,
    pub(crate) transport: String,
    /// When it was first registered pending (ms since the epoch); kept across
    /// re-registers of the same identity.
    pub(crate) requested_at_ms: u64,
}

/// The answer to a register request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RegisterOutcome {
    /// Registered (or re-registered) under this ARN.
    Accepted { arn: String },
    /// Refused; the ARN it would have had rides along so the client's demux can route
    /// the refusal to the right registration on a shared socket.
    Refused { arn: String, reason: String },
}

/// Registrations by ARN plus socket bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct Registry<S> {
    by_arn: BTreeMap<String, Entry<S>>,
    socket_tenant: HashMap<u64, String>,
    socket_arns: HashMap<u64, HashSet<String>>,
    schemas: SchemaPool,
}

/// One registration: what the API shows, and the socket it points at.
#[derive(Debug)]
struct Entry<S> {
    info: RegistrationInfo,
    socket: S,
    /// When it became pending (ms since the epoch); meaningless once approved.
    requested_at_ms: u64,
    /// When it registered on its current link (ms since the epoch).
    since_ms: u64,
    /// Executes, errors, in flight, invokes: shared with the execute and invoke paths.
    figures: Arc<RegistrationFigures>,
    /// Its capabilities' schemas, shared with every registration that sent the same.
    schemas: Option<Arc<[CapabilitySchema]>>,
}

impl<S: Clone> Registry<S> {
    pub(crate) fn new() -> Self {
        Registry {
            by_arn: BTreeMap::new(),
            socket_tenant: HashMap::new(),
            socket_arns: HashMap::new(),
            schemas: SchemaPool::default(),
        }
    }

    /// Registers `req` on `socket_id` (a link of `transport`), approved, as
    /// [`Registry::register_as`] does.
    #[cfg(test)]
    pub(crate) fn register(
        &mut self,
        socket_id: u64,
        transport: &str,
        req: &RegisterConnectorRequest,
        socket: S,
    ) -> RegisterOutcome {
        self.register_as(
            socket_id,
            transport,
            req,
            socket,
            RegistrationState::Approved,
            0,
        )
    }

    /// Why `req` cannot be registered on `socket_id` at all, whatever its
    /// credentials: an incomplete identity, or another tenant than the socket's.
    pub(crate) fn refusal(&self, socket_id: u64, key: &RegistrationKey) -> Option<String> {
        if key.tenant().is_empty()
            || key.connector_type().is_empty()
            || key.instance_id().is_empty()
        {
            return Some("tenant_id, connector_type and instance_id are all required".into());
        }
        match self.socket_tenant.get(&socket_id) {
            Some(bound) if bound != key.tenant() => Some(format!(
                "this socket is bound to tenant {bound:?}; open another socket for tenant {:?}",
                key.tenant()
            )),
            _ => None,
        }
    }

    /// Registers `req` on `socket_id` (a link of `transport`) with `status`, at `now_ms`.
    /// A socket is bound to the tenant of its first successful registration; the same
    /// ARN from another socket replaces the old entry (the newest connection wins, as
    /// after a client reconnect the gateway has not noticed yet). A pending
    /// re-register of a pending ARN keeps its request time.
    pub(crate) fn register_as(
        &mut self,
        socket_id: u64,
        transport: &str,
        req: &RegisterConnectorRequest,
        socket: S,
        status: RegistrationState,
        now_ms: u64,
    ) -> RegisterOutcome {
        let key = RegistrationKey::new(&req.tenant_id, &req.connector_type, &req.instance_id);
        let arn = Arn::for_key(&key).to_string();
        if let Some(reason) = self.refusal(socket_id, &key) {
            return RegisterOutcome::Refused { arn, reason };
        }
        // A register without credentials must not take an approved registration
        // away from the live connection that holds it (the newest connection wins only
        // with credentials): it would make the real connector unexecutable, and an
        // operator approving the "reconnect" would hand the intruder a one-time token.
        // Once that connection closes, its entry goes and a bare register pends.
        if status == RegistrationState::Pending {
            if let Some(old) = self.by_arn.get(&arn) {
                if old.info.status == RegistrationState::Approved && old.info.socket_id != socket_id
                {
                    return RegisterOutcome::Refused {
                        arn,
                        reason: format!(
                            "{} is registered and approved on another live connection; a second \
                             connection must present its session token or JWT",
                            key.dot_key()
                        ),
                    };
                }
            }
        }
        let mut requested_at_ms = now_ms;
        // A re-register on the same socket (after approval, say) keeps its report; one
        // from another socket is a new connection and keeps nothing of the old one.
        // So do its registration time and live figures.
        let mut metrics = None;
        let (mut since_ms, mut figures) = (now_ms, Arc::default());
        if let Some(old) = self.by_arn.remove(&arn) {
            if old.info.status == RegistrationState::Pending {
                requested_at_ms = old.requested_at_ms;
            }
            if old.info.socket_id == socket_id {
                metrics = old.info.metrics;
                (since_ms, figures) = (old.since_ms, old.figures);
            } else if let Some(set) = self.socket_arns.get_mut(&old.info.socket_id) {
                set.remove(&arn);
            }
        }
        self.socket_tenant
            .entry(socket_id)
            .or_insert_with(|| key.tenant().to_owned());
        self.socket_arns
            .entry(socket_id)
            .or_default()
            .insert(arn.clone());
        let info = RegistrationInfo::of(req, &key, &arn, status, transport, socket_id, metrics);
        let entry = Entry {
            info,
            socket,
            requested_at_ms,
            since_ms,
            figures,
            schemas: schemas_of(req).and_then(|(list, bytes)| self.schemas.share(list, bytes)),
        };
        self.by_arn.insert(arn.clone(), entry);
        RegisterOutcome::Accepted { arn }
    }

    /// The pending registrations, ordered by ARN.
    pub(crate) fn pending(&self) -> Vec<PendingInfo> {
        self.pending_first(usize::MAX).0
    }

    /// The first `limit` pending registrations by ARN, and how many are pending: the
    /// console's overview shows a few and links to the paged list, since pending
    /// registrations come from connectors nobody approved yet.
    pub(crate) fn pending_first(&self, limit: usize) -> (Vec<PendingInfo>, usize) {
        let mut first = Vec::new();
        let mut total = 0;
        for e in self
            .by_arn
            .values()
            .filter(|e| e.info.status == RegistrationState::Pending)
        {
            total += 1;
            if first.len() < limit {
                first.push(PendingInfo {
                    arn: e.info.arn.clone(),
                    tenant_id: e.info.tenant_id.clone(),
                    connector_type: e.info.connector_type.clone(),
                    instance_id: e.info.instance_id.clone(),
                    transport: e.info.transport.clone(),
                    requested_at_ms: e.requested_at_ms,
                });
            }
        }
        (first, total)
    }

    /// Approves the pending registration `arn`; returns its identity and socket, or
    /// `None` when no registration with that ARN is pending.
    pub(crate) fn approve(&mut self, arn: &str) -> Option<(RegistrationKey, S)> {
        let e = self
            .by_arn
            .get_mut(arn)
            .filter(|e| e.info.status == RegistrationState::Pending)?;
        e.info.status = RegistrationState::Approved;
        Some((key_of(&e.info), e.socket.clone()))
    }

    /// Removes the pending registration `arn` (the operator rejected it); returns its
    /// identity and socket, or `None` when no registration with that ARN is pending.
    pub(crate) fn remove_pending(&mut self, arn: &str) -> Option<(RegistrationKey, S)> {
        if self.by_arn.get(arn)?.info.status != RegistrationState::Pending {
            return None;
        }
        let e = self.by_arn.remove(arn)?;
        if let Some(set) = self.socket_arns.get_mut(&e.info.socket_id) {
            set.remove(arn);
        }
        Some((key_of(&e.info), e.socket))
    }

    /// Forgets a socket and every registration it carried; returns how many.
    pub(crate) fn remove_socket(&mut self, socket_id: u64) -> usize {
        let n = self.clear_socket(socket_id);
        self.socket_tenant.remove(&socket_id);
        self.socket_arns.remove(&socket_id);
        n
    }

    /// Removes every registration of a socket whose channel closed while the socket
    /// stays open; its tenant binding stays too. Returns how many were removed.
    pub(crate) fn clear_socket(&mut self, socket_id: u64) -> usize {
        let arns = self
            .socket_arns
            .get_mut(&socket_id)
            .map(std::mem::take)
            .unwrap_or_default();
        for arn in &arns {
            self.by_arn.remove(arn);
        }
        arns.len()
    }

    /// The socket of the registration with this ARN.
    #[cfg(test)]
    pub(crate) fn lookup(&self, arn: &str) -> Option<S> {
        self.by_arn.get(arn).map(|e| e.socket.clone())
    }

    /// The socket and live figures of the registration with this ARN, if it may be
    /// executed: [`Error::NotFound`] when there is none, [`Error::PendingApproval`]
    /// while it awaits the operator.
    pub(crate) fn lookup_executable(
        &self,
        arn: &str,
    ) -> crate::Result<(S, Arc<RegistrationFigures>)> {
        match self.by_arn.get(arn) {
            None => Err(Error::NotFound(format!("no registration with ARN {arn}"))),
            Some(e) if e.info.status == RegistrationState::Pending => {
                Err(Error::PendingApproval(pending_message(arn)))
            }
            Some(e) => Ok((e.socket.clone(), e.figures.clone())),
        }
    }

    /// The registration an invoke's `target_address` names: an ARN
    /// (`matrix:tenant:type:instance`, exact) or a dot key (`tenant.type.instance`,
    /// whose parts are sanitised as a register's are). `None` when the address is
    /// neither or names nobody registered.
    pub(crate) fn resolve(&self, address: &str) -> Option<Resolved<S>> {
        let arn = arn_of_address(address)?;
        let entry = self.by_arn.get(&arn)?;
        Some(Resolved {
            arn,
            tenant: entry.info.tenant_id.clone(),
            global: entry.info.scope == SCOPE_GLOBAL,
            pending: entry.info.status == RegistrationState::Pending,
            socket: entry.socket.clone(),
            figures: entry.figures.clone(),
        })
    }

    /// Whether `socket_id` carries at least one approved registration (in manual
    /// approval mode, what a socket needs before it may invoke).
    pub(crate) fn socket_has_approved(&self, socket_id: u64) -> bool {
        self.socket_arns.get(&socket_id).is_some_and(|arns| {
            arns.iter().any(|a| {
                self.by_arn
                    .get(a)
                    .is_some_and(|e| e.info.status == RegistrationState::Approved)
            })
        })
    }

    /// The tenant a socket is bound to, once it registered anything.
    pub(crate) fn tenant_of_socket(&self, socket_id: u64) -> Option<&str> {
        self.socket_tenant.get(&socket_id).map(String::as_str)
    }

    /// Keeps `report` as the latest of its registration, if that registration is on
    /// `socket_id`; false otherwise (a socket may only report for itself).
    pub(crate) fn record_metrics(&mut self, socket_id: u64, report: MetricsReport) -> bool {
        match self.by_arn.get_mut(&report.connector_arn) {
            Some(e) if e.info.socket_id == socket_id => {
                e.info.metrics = Some(ReportedMetrics::received(report));
                true
            }
            _ => false,
        }
    }

    /// All registrations, ordered by ARN.
    pub(crate) fn list(&self) -> Vec<RegistrationInfo> {
        self.by_arn.values().map(|e| e.info.clone()).collect()
    }

    /// The registrations after `after` (all when `None`), ordered by ARN: the console's
    /// keyset paging reads a range of the map instead of a copy of it.
    pub(crate) fn entries_after<'a>(
        &'a self,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = EntryView<'a>> + 'a {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.by_arn
            .range::<str, _>((from, Bound::Unbounded))
            .map(|(_, e)| EntryView {
                schemas: e.schemas.as_ref(),
                info: &e.info,
                figures: &e.figures,
                since_ms: e.since_ms,
            })
    }

    /// The registration `arn`, if there is one.
    pub(crate) fn entry(&self, arn: &str) -> Option<EntryView<'_>> {
        self.by_arn.get(arn).map(|e| EntryView {
            schemas: e.schemas.as_ref(),
            info: &e.info,
            figures: &e.figures,
            since_ms: e.since_ms,
        })
    }

    /// The ARNs a socket carries, in no order.
    pub(crate) fn arns_of_socket(&self, socket_id: u64) -> impl Iterator<Item = &str> {
        self.socket_arns
            .get(&socket_id)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Every bound socket with its tenant.
    pub(crate) fn socket_tenants(&self) -> impl Iterator<Item = (u64, &str)> {
        self.socket_tenant.iter().map(|(id, t)| (*id, t.as_str()))
    }

    /// Registrations per transport, every transport present (zero included).
    pub(crate) fn count_by_transport(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts: std::collections::BTreeMap<String, u64> = [
            super::link::TRANSPORT_WEBSOCKET,
            super::link::TRANSPORT_GRPC,
        ]
        .iter()
        .map(|t| ((*t).to_owned(), 0))
        .collect();
        for e in self.by_arn.values() {
            *counts.entry(e.info.transport.clone()).or_default() += 1;
        }
        counts
    }

    pub(crate) fn len(&self) -> usize {
        self.by_arn.len()
    }
}

/// Why a pending registration cannot be executed, and what to do.
pub(crate) fn pending_message(arn: &str) -> String {
    format!(
        "{arn} is awaiting approval; an operator approves it with \
         POST /api/v1/connectors/{arn}/approve (see GET /api/v1/approvals)"
    )
}

fn key_of(info: &RegistrationInfo) -> RegistrationKey {
    RegistrationKey::new(&info.tenant_id, &info.connector_type, &info.instance_id)
}

/// The ARN an invoke address names: itself when it is a well-formed ARN, else the ARN
/// of a three-part dot key (sanitised parts cannot contain `.`, so a key that splits
/// into any other number of parts names nobody).
fn arn_of_address(address: &str) -> Option<String> {
    if let Ok(arn) = Arn::parse(address) {
        return Some(arn.to_string());
    }
    let mut parts = address.split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(ty), Some(i), None) if !t.is_empty() && !ty.is_empty() && !i.is_empty() => {
            Some(Arn::for_key(&RegistrationKey::new(t, ty, i)).to_string())
        }
        _ => None,
    }
}

/// The tenant a register request names, sanitised (for logs).
pub(crate) fn tenant_of(req: &RegisterConnectorRequest) -> String {
    sanitize(&req.tenant_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ConnectorScope;

    fn req(tenant: &str, instance: &str) -> RegisterConnectorRequest {
        RegisterConnectorRequest {
            tenant_id: tenant.into(),
            connector_type: "echo".into(),
            instance_id: instance.into(),
            ..Default::default()
        }
    }

    #[test]
    fn register_assigns_the_arn_from_sanitised_parts() {
        let mut r = Registry::new();
        let out = r.register(1, "websocket", &req("acme.io", "node 1"), ());
        assert_eq!(
            out,
            RegisterOutcome::Accepted {
                arn: "matrix:acme-io:echo:node-1".into()
            }
        );
        assert_eq!(r.lookup("matrix:acme-io:echo:node-1"), Some(()));
    }

    #[test]
    fn a_socket_is_bound_to_its_first_tenant() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), ());
        let out = r.register(1, "websocket", &req("b", "y"), ());
        assert!(
            matches!(out, RegisterOutcome::Refused { ref arn, .. } if arn == "matrix:b:echo:y"),
            "{out:?}"
        );
        assert_eq!(r.len(), 1);
        assert!(matches!(
            r.register(2, "websocket", &req("b", "y"), ()),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn the_newest_socket_wins_an_arn_and_the_old_socket_no_longer_owns_it() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), 1u64);
        r.register(2, "websocket", &req("a", "x"), 2u64);
        assert_eq!(r.lookup("matrix:a:echo:x"), Some(2));
        assert_eq!(r.remove_socket(1), 0);
        assert_eq!(r.lookup("matrix:a:echo:x"), Some(2));
    }

    #[test]
    fn removing_a_socket_removes_its_registrations_and_binding() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), ());
        r.register(1, "websocket", &req("a", "y"), ());
        assert_eq!(r.remove_socket(1), 2);
        assert_eq!(r.len(), 0);
        assert!(matches!(
            r.register(1, "websocket", &req("b", "z"), ()),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn clearing_a_socket_keeps_its_tenant_binding() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), ());
        assert_eq!(r.clear_socket(1), 1);
        assert_eq!(r.len(), 0);
        assert!(matches!(
            r.register(1, "websocket", &req("b", "y"), ()),
            RegisterOutcome::Refused { .. }
        ));
        assert!(matches!(
            r.register(1, "websocket", &req("a", "x"), ()),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn clearing_a_socket_spares_arns_another_socket_took_over() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), 1u64);
        r.register(2, "websocket", &req("a", "x"), 2u64);
        assert_eq!(r.clear_socket(1), 0);
        assert_eq!(r.lookup("matrix:a:echo:x"), Some(2));
    }

    fn report(arn: &str, received: i64) -> MetricsReport {
        MetricsReport {
            connector_arn: arn.into(),
            requests_received: received,
            ..Default::default()
        }
    }

    #[test]
    fn an_address_resolves_by_arn_or_by_sanitised_dot_key() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("acme", "node 1"), 1u64);
        let by_arn = r.resolve("matrix:acme:echo:node-1").unwrap();
        assert_eq!(by_arn.socket, 1);
        assert_eq!(by_arn.tenant, "acme");
        assert!(!by_arn.global);
        let found = |a: &str| r.resolve(a).map(|t| (t.arn, t.socket));
        let by_arn = Some((by_arn.arn, by_arn.socket));
        assert_eq!(found("acme.echo.node 1"), by_arn);
        assert_eq!(found("acme.echo.node-1"), by_arn);
        for nobody in [
            "matrix:acme:echo:other",
            "acme.echo",
            "a.b.c.d",
            "acme..x",
            "plain",
        ] {
            assert!(r.resolve(nobody).is_none(), "{nobody}");
        }
    }

    #[test]
    fn the_scope_of_the_register_request_is_kept() {
        let mut r = Registry::new();
        let global = RegisterConnectorRequest {
            scope: ConnectorScope::Global as i32,
            ..req("acme", "g")
        };
        r.register(1, "websocket", &global, ());
        r.register(1, "websocket", &req("acme", "t"), ());
        assert!(r.resolve("acme.echo.g").unwrap().global);
        assert!(!r.resolve("acme.echo.t").unwrap().global);
        let scopes: Vec<String> = r.list().into_iter().map(|i| i.scope).collect();
        assert_eq!(scopes, ["global", "tenant"]);
    }

    #[test]
    fn a_metrics_report_is_kept_only_for_a_registration_of_the_reporting_socket() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), ());
        r.register(2, "websocket", &req("a", "y"), ());
        assert!(r.record_metrics(1, report("matrix:a:echo:x", 5)));
        assert!(
            !r.record_metrics(1, report("matrix:a:echo:y", 6)),
            "y is on socket 2"
        );
        assert!(!r.record_metrics(1, report("matrix:a:echo:nobody", 7)));
        let list = r.list();
        assert_eq!(list[0].metrics.as_ref().unwrap().requests_received, 5);
        assert_eq!(list[1].metrics, None);
    }

    #[test]
    fn a_re_register_keeps_its_report_on_the_same_socket_and_drops_it_on_another() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), ());
        r.record_metrics(1, report("matrix:a:echo:x", 5));
        r.register(1, "websocket", &req("a", "x"), ());
        assert!(r.list()[0].metrics.is_some());
        r.register(2, "websocket", &req("a", "x"), ());
        assert_eq!(r.list()[0].metrics, None);
    }

    #[test]
    fn a_pending_registration_is_listed_not_executable_until_approved() {
        let mut r = Registry::new();
        r.register_as(
            1,
            "grpc",
            &req("a", "x"),
            1u64,
            RegistrationState::Pending,
            100,
        );
        r.register_as(
            1,
            "grpc",
            &req("a", "x"),
            1u64,
            RegistrationState::Pending,
            200,
        );
        let p = r.pending();
        assert_eq!(p.len(), 1);
        assert_eq!(
            p[0].requested_at_ms, 100,
            "a re-register keeps its request time"
        );
        assert_eq!(r.list()[0].status, RegistrationState::Pending);
        assert!(matches!(
            r.lookup_executable("matrix:a:echo:x"),
            Err(Error::PendingApproval(_))
        ));
        assert!(r.resolve("a.echo.x").unwrap().pending);
        assert!(!r.socket_has_approved(1));
        let (key, socket) = r.approve("matrix:a:echo:x").unwrap();
        assert_eq!((key.dot_key(), socket), ("a.echo.x", 1));
        assert!(r.socket_has_approved(1));
        assert_eq!(r.lookup_executable("matrix:a:echo:x").unwrap().0, 1);
        assert!(r.approve("matrix:a:echo:x").is_none(), "no longer pending");
        assert!(r.pending().is_empty());
    }

    #[test]
    fn a_bare_register_from_another_link_cannot_take_an_approved_registration() {
        let mut r = Registry::new();
        r.register(1, "websocket", &req("a", "x"), 1u64);
        let intruder = r.register_as(
            2,
            "websocket",
            &req("a", "x"),
            2u64,
            RegistrationState::Pending,
            5,
        );
        assert!(
            matches!(&intruder, RegisterOutcome::Refused { reason, .. } if reason.contains("another live connection")),
            "{intruder:?}"
        );
        assert_eq!(r.lookup_executable("matrix:a:echo:x").unwrap().0, 1);
        assert!(r.pending().is_empty());
        // Its own link may pend it again (credentials lost, say), and once the
        // approved link is gone a bare register from elsewhere pends.
        r.register_as(
            1,
            "websocket",
            &req("a", "x"),
            1u64,
            RegistrationState::Pending,
            6,
        );
        assert_eq!(r.pending().len(), 1);
        r.register(1, "websocket", &req("a", "x"), 1u64);
        r.remove_socket(1);
        assert!(matches!(
            r.register_as(
                2,
                "websocket",
                &req("a", "x"),
                2u64,
                RegistrationState::Pending,
                7
            ),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn removing_a_pending_registration_spares_approved_ones() {
        let mut r = Registry::new();
        r.register_as(
            1,
            "websocket",
            &req("a", "x"),
            (),
            RegistrationState::Pending,
            1,
        );
        r.register(1, "websocket", &req("a", "y"), ());
        assert!(r.remove_pending("matrix:a:echo:y").is_none());
        assert!(r.remove_pending("matrix:a:echo:x").is_some());
        assert_eq!(r.len(), 1);
        assert_eq!(r.clear_socket(1), 1);
    }

    #[test]
    fn incomplete_identity_is_refused() {
        let mut r: Registry<()> = Registry::new();
        assert!(matches!(
            r.register(1, "websocket", &req("a", ""), ()),
            RegisterOutcome::Refused { .. }
        ));
    }
}
