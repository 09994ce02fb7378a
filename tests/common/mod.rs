//! Helpers shared by the integration tests.
#![allow(dead_code)]

#[cfg(feature = "websocket")]
pub mod connect_proxy;
pub mod logs;
#[cfg(unix)]
pub mod process;
#[cfg(feature = "gateway")]
pub mod serve;
pub mod tcp_proxy;
pub mod wait;

#[allow(unused_imports)]
pub use wait::{eventually, eventually_some, DEADLINE};
#[cfg(feature = "websocket")]
pub mod tls_terminator;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use switchboard::{
    BaseConnector, ConnectorConfig, MultiConnectorRunner, Payload, Registration,
    RegistrationHandle, RunnerOptions,
};

/// A connector that answers `{"instance": <its instance id>, "echo": <payload>}`, so a
/// test can tell which registration answered.
pub struct Tagged(pub String);

#[async_trait]
impl BaseConnector for Tagged {
    fn connector_type(&self) -> &str {
        "tagged"
    }
    async fn execute(
        &self,
        payload: Payload,
        _capability_id: Option<&str>,
    ) -> switchboard::Result<Payload> {
        let echo = payload.as_json().cloned().unwrap_or_default();
        Ok(Payload::Json(json!({ "instance": self.0, "echo": echo })))
    }
}

/// A connector that says everything about itself the protocol lets it say: a version,
/// one capability with a name, description, category, icon and both schemas.
pub struct Described;

#[async_trait]
impl BaseConnector for Described {
    fn connector_type(&self) -> &str {
        "described"
    }
    fn version(&self) -> &str {
        "2.4.1"
    }
    fn capabilities(&self) -> Vec<switchboard::proto::TaskTypeSchema> {
        vec![switchboard::Capability::new("create_issue")
            .name("Create issue")
            .description("Opens an issue")
            .category("ticketing")
            .icon("ticket")
            .input_schema(json!({"type": "object", "required": ["title"]}))
            .output_schema(json!({"type": "object"}))
            .build()]
    }
    async fn execute(&self, p: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Ok(p)
    }
}

/// A registration of a [`Tagged`] connector.
pub fn tagged(url: &str, tenant: &str, instance: &str) -> Registration {
    let cfg = ConnectorConfig::builder(url, tenant)
        .instance_id(instance)
        .build()
        .expect("valid config");
    Registration::new(cfg, Tagged(instance.to_owned()))
}

/// The registration of `runner` with this instance id; panics when there is none.
pub fn find(runner: &MultiConnectorRunner, instance: &str) -> RegistrationHandle {
    runner
        .registrations()
        .into_iter()
        .find(|h| h.key().instance_id() == instance)
        .unwrap_or_else(|| panic!("no registration {instance}"))
}

/// Starts `runner.run()` in the background; returns the runner and its join handle.
pub fn spawn(
    runner: MultiConnectorRunner,
) -> (
    Arc<MultiConnectorRunner>,
    tokio::task::JoinHandle<switchboard::Result<()>>,
) {
    let runner = Arc::new(runner);
    let r = runner.clone();
    (runner, tokio::spawn(async move { r.run().await }))
}

/// Builds and starts a runner over `regs`, waits until all are registered.
pub async fn start(
    options: RunnerOptions,
    regs: Vec<Registration>,
) -> (
    Arc<MultiConnectorRunner>,
    tokio::task::JoinHandle<switchboard::Result<()>>,
) {
    let (runner, join) = spawn(MultiConnectorRunner::new(options, regs).expect("admission"));
    runner
        .wait_registered(DEADLINE)
        .await
        .expect("all registered");
    (runner, join)
}
