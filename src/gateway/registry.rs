//! Who is registered where: ARNs, their sockets, and each socket's tenant binding.
//! Plain data; the server holds it behind one short lock.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::identity::{sanitize, Arn, RegistrationKey};
use crate::proto::RegisterConnectorRequest;

/// One registration as the gateway's HTTP API shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RegistrationInfo {
    /// The assigned ARN.
    pub arn: String,
    /// Sanitised tenant.
    pub tenant_id: String,
    /// Sanitised connector type.
    pub connector_type: String,
    /// Sanitised instance id.
    pub instance_id: String,
    /// `approved` (this gateway approves every valid register).
    pub status: String,
    /// `websocket`.
    pub transport: String,
    /// The socket carrying it.
    pub socket_id: u64,
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
    by_arn: BTreeMap<String, (RegistrationInfo, S)>,
    socket_tenant: HashMap<u64, String>,
    socket_arns: HashMap<u64, HashSet<String>>,
}

impl<S: Clone> Registry<S> {
    pub(crate) fn new() -> Self {
        Registry {
            by_arn: BTreeMap::new(),
            socket_tenant: HashMap::new(),
            socket_arns: HashMap::new(),
        }
    }

    /// Registers `req` on `socket_id`. A socket is bound to the tenant of its first
    /// successful registration; the same ARN from another socket replaces the old entry
    /// (the newest connection wins, as after a client reconnect the gateway has not
    /// noticed yet).
    pub(crate) fn register(
        &mut self,
        socket_id: u64,
        req: &RegisterConnectorRequest,
        socket: S,
    ) -> RegisterOutcome {
        let key = RegistrationKey::new(&req.tenant_id, &req.connector_type, &req.instance_id);
        let arn = Arn::for_key(&key).to_string();
        if key.tenant().is_empty()
            || key.connector_type().is_empty()
            || key.instance_id().is_empty()
        {
            return RegisterOutcome::Refused {
                arn,
                reason: "tenant_id, connector_type and instance_id are all required".into(),
            };
        }
        if let Some(bound) = self.socket_tenant.get(&socket_id) {
            if bound != key.tenant() {
                return RegisterOutcome::Refused {
                    arn,
                    reason: format!(
                        "this socket is bound to tenant {bound:?}; open another socket for tenant {:?}",
                        key.tenant()
                    ),
                };
            }
        }
        if let Some((old, _)) = self.by_arn.get(&arn) {
            if old.socket_id != socket_id {
                if let Some(set) = self.socket_arns.get_mut(&old.socket_id) {
                    set.remove(&arn);
                }
            }
        }
        self.socket_tenant
            .entry(socket_id)
            .or_insert_with(|| key.tenant().to_owned());
        self.socket_arns
            .entry(socket_id)
            .or_default()
            .insert(arn.clone());
        let info = RegistrationInfo {
            arn: arn.clone(),
            tenant_id: key.tenant().to_owned(),
            connector_type: key.connector_type().to_owned(),
            instance_id: key.instance_id().to_owned(),
            status: "approved".into(),
            transport: "websocket".into(),
            socket_id,
        };
        self.by_arn.insert(arn.clone(), (info, socket));
        RegisterOutcome::Accepted { arn }
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
    pub(crate) fn lookup(&self, arn: &str) -> Option<S> {
        self.by_arn.get(arn).map(|(_, s)| s.clone())
    }

    /// All registrations, ordered by ARN.
    pub(crate) fn list(&self) -> Vec<RegistrationInfo> {
        self.by_arn.values().map(|(i, _)| i.clone()).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.by_arn.len()
    }
}

/// The tenant a register request names, sanitised (for logs).
pub(crate) fn tenant_of(req: &RegisterConnectorRequest) -> String {
    sanitize(&req.tenant_id)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let out = r.register(1, &req("acme.io", "node 1"), ());
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
        r.register(1, &req("a", "x"), ());
        let out = r.register(1, &req("b", "y"), ());
        assert!(
            matches!(out, RegisterOutcome::Refused { ref arn, .. } if arn == "matrix:b:echo:y"),
            "{out:?}"
        );
        assert_eq!(r.len(), 1);
        assert!(matches!(
            r.register(2, &req("b", "y"), ()),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn the_newest_socket_wins_an_arn_and_the_old_socket_no_longer_owns_it() {
        let mut r = Registry::new();
        r.register(1, &req("a", "x"), 1u64);
        r.register(2, &req("a", "x"), 2u64);
        assert_eq!(r.lookup("matrix:a:echo:x"), Some(2));
        assert_eq!(r.remove_socket(1), 0);
        assert_eq!(r.lookup("matrix:a:echo:x"), Some(2));
    }

    #[test]
    fn removing_a_socket_removes_its_registrations_and_binding() {
        let mut r = Registry::new();
        r.register(1, &req("a", "x"), ());
        r.register(1, &req("a", "y"), ());
        assert_eq!(r.remove_socket(1), 2);
        assert_eq!(r.len(), 0);
        assert!(matches!(
            r.register(1, &req("b", "z"), ()),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn clearing_a_socket_keeps_its_tenant_binding() {
        let mut r = Registry::new();
        r.register(1, &req("a", "x"), ());
        assert_eq!(r.clear_socket(1), 1);
        assert_eq!(r.len(), 0);
        assert!(matches!(
            r.register(1, &req("b", "y"), ()),
            RegisterOutcome::Refused { .. }
        ));
        assert!(matches!(
            r.register(1, &req("a", "x"), ()),
            RegisterOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn clearing_a_socket_spares_arns_another_socket_took_over() {
        let mut r = Registry::new();
        r.register(1, &req("a", "x"), 1u64);
        r.register(2, &req("a", "x"), 2u64);
        assert_eq!(r.clear_socket(1), 0);
        assert_eq!(r.lookup("matrix:a:echo:x"), Some(2));
    }

    #[test]
    fn incomplete_identity_is_refused() {
        let mut r: Registry<()> = Registry::new();
        assert!(matches!(
            r.register(1, &req("a", ""), ()),
            RegisterOutcome::Refused { .. }
        ));
    }
}
