//! One registration as the gateway's HTTP API and console show it: what the register
//! request said of the connector (kept within listing limits) and its approval state.
//! The registry keeps one per ARN; this file says what is in it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::report::ReportedMetrics;
use crate::identity::RegistrationKey;
use crate::proto::{ConnectorScope, RegisterConnectorRequest};

/// [`RegistrationInfo::scope`] of a registration only its own tenant may invoke.
pub(crate) const SCOPE_TENANT: &str = "tenant";
/// [`RegistrationInfo::scope`] of a registration every tenant may invoke.
pub(crate) const SCOPE_GLOBAL: &str = "global";

/// Longest metadata value kept in [`RegistrationInfo::metadata`].
pub const MAX_LISTED_METADATA_BYTES: usize = 256;

/// One registration as the gateway's HTTP API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RegistrationInfo {
    /// The assigned ARN.
    pub arn: String,
    /// Sanitised tenant.
    pub tenant_id: String,
    /// Sanitised connector type.
    pub connector_type: String,
    /// Sanitised instance id.
    pub instance_id: String,
    /// Approved, or pending while it awaits an operator's approval (manual approval
    /// mode).
    pub status: RegistrationState,
    /// `websocket` or `grpc`.
    pub transport: String,
    /// The socket carrying it.
    pub socket_id: u64,
    /// Who may invoke it: `tenant` (its own tenant only; also what an unspecified
    /// scope means here, since this gateway has no tenant-less registrations) or
    /// `global` (any tenant), from the register request's `scope`.
    pub scope: String,
    /// The latest `metrics_report` it sent on this socket; `None` until one arrives.
    /// A registration taken over by another socket starts again from `None`.
    pub metrics: Option<ReportedMetrics>,
    /// The capability ids (task types) it registered with, in its order.
    pub capabilities: Vec<String>,
    /// The metadata it registered with (e.g. a switchboard source's `inbound_kind`),
    /// less values over [`MAX_LISTED_METADATA_BYTES`] (tool schemas, event schemas),
    /// so a registration's footprint here stays small.
    pub metadata: BTreeMap<String, String>,
    /// The version its capabilities declare (`ConnectorCapabilities.version`); empty
    /// when it sent none.
    pub version: String,
    /// The name a person knows this instance by (`InstanceMetadata.display_name`);
    /// empty when it sent none. Shown beside the ARN, which stays the identity.
    pub display_name: String,
    /// Its instance's tags (`InstanceMetadata.tags`), in its order.
    pub tags: Vec<String>,
    /// Its instance's own metadata (`InstanceMetadata.metadata`, as opposed to the
    /// capabilities' [`RegistrationInfo::metadata`]), less values over
    /// [`MAX_LISTED_METADATA_BYTES`].
    pub instance_metadata: BTreeMap<String, String>,
}

/// `map`'s entries whose value is at most [`MAX_LISTED_METADATA_BYTES`] long: what a
/// listing keeps of a metadata map.
fn listed(map: &HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter()
        .filter(|(_, v)| v.len() <= MAX_LISTED_METADATA_BYTES)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether a registration may be executed: [`RegistrationInfo::status`]. Serialised
/// (and shown) as `approved` / `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistrationState {
    /// Executable.
    Approved,
    /// Awaiting the operator's approval (manual approval mode).
    Pending,
}

impl RegistrationState {
    /// The label the HTTP API and the console show: `approved` or `pending`.
    pub fn as_str(self) -> &'static str {
        match self {
            RegistrationState::Approved => "approved",
            RegistrationState::Pending => "pending",
        }
    }
}

impl std::fmt::Display for RegistrationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RegistrationInfo {
    /// The view of the register request `req`, accepted as `arn` with `status` on the
    /// `transport` link `socket_id`, keeping `metrics` (the last report, when the
    /// registration re-registered on the same link).
    pub(crate) fn of(
        req: &RegisterConnectorRequest,
        key: &RegistrationKey,
        arn: &str,
        status: RegistrationState,
        transport: &str,
        socket_id: u64,
        metrics: Option<ReportedMetrics>,
    ) -> RegistrationInfo {
        let scope = match ConnectorScope::try_from(req.scope) {
            Ok(ConnectorScope::Global) => SCOPE_GLOBAL,
            _ => SCOPE_TENANT,
        };
        let capabilities = req.capabilities.as_ref();
        let instance = req.instance_metadata.as_ref();
        RegistrationInfo {
            arn: arn.to_owned(),
            tenant_id: key.tenant().to_owned(),
            connector_type: key.connector_type().to_owned(),
            instance_id: key.instance_id().to_owned(),
            status,
            transport: transport.to_owned(),
            socket_id,
            scope: scope.to_owned(),
            metrics,
            capabilities: capabilities
                .map(|c| {
                    c.task_types
                        .iter()
                        .map(|t| t.task_type_id.clone())
                        .collect()
                })
                .unwrap_or_default(),
            metadata: capabilities
                .map(|c| listed(&c.metadata))
                .unwrap_or_default(),
            version: capabilities.map(|c| c.version.clone()).unwrap_or_default(),
            display_name: instance.map(|i| i.display_name.clone()).unwrap_or_default(),
            tags: instance.map(|i| i.tags.clone()).unwrap_or_default(),
            instance_metadata: instance.map(|i| listed(&i.metadata)).unwrap_or_default(),
        }
    }
}
