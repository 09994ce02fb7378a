//! The deliver section's target connectors, registered on the in-process gateway
//! through one `MultiConnectorRunner` (so one socket carries all three):
//!
//! - `tickets` answers every delivery with a ticket number;
//! - `flaky` fails every delivery (a downstream system that is down), so its binding is
//!   retried and dead-lettered;
//! - `audit` is the dead-letter handler's target: it records each dead letter.
//!
//! Each records every execute it answers in a shared [`Journal`], which is how the demo
//! checks that every delivery arrived, how often, and when.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{json, Value};
use switchboard::{BaseConnector, Error, ExecuteContext, Payload};
use switchboard::{CONTEXT_ATTEMPT, CONTEXT_DEAD_LETTER_ID, CONTEXT_EVENT_ID};

/// Which of the three a connector is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Tickets,
    Flaky,
    Audit,
}

impl Role {
    pub(super) const ALL: [Role; 3] = [Role::Tickets, Role::Flaky, Role::Audit];

    /// The connector type: the middle part of its dot key and ARN.
    pub(super) fn connector_type(self) -> &'static str {
        match self {
            Role::Tickets => "tickets",
            Role::Flaky => "flaky",
            Role::Audit => "audit",
        }
    }
}

/// One execute a connector answered.
#[derive(Debug, Clone)]
pub(super) struct Visit {
    pub(super) role: Role,
    /// The webhook's issue number (for `audit`: of the event inside the dead letter).
    pub(super) issue: Option<u64>,
    /// The runtime's event id (`switchboard.event_id`).
    pub(super) event_id: String,
    /// The attempt (`switchboard.attempt`), 0 if absent.
    pub(super) attempt: u32,
    /// `switchboard.dead_letter_id`, for a dead-letter handler's delivery.
    pub(super) dead_letter_id: Option<i64>,
    /// The binding of the dead letter inside an `audit` delivery's payload.
    pub(super) dead_binding: Option<String>,
    pub(super) at: Instant,
}

/// Every execute the three connectors answered, in arrival order.
#[derive(Debug, Clone, Default)]
pub(super) struct Journal(Arc<Mutex<Vec<Visit>>>);

impl Journal {
    fn push(&self, v: Visit) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(v);
    }

    /// A copy of the visits so far.
    pub(super) fn visits(&self) -> Vec<Visit> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many executes `role` answered so far.
    pub(super) fn count(&self, role: Role) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|v| v.role == role)
            .count()
    }
}

/// One of the three demo connectors.
pub(super) struct DemoConnector {
    role: Role,
    journal: Journal,
}

impl DemoConnector {
    pub(super) fn new(role: Role, journal: Journal) -> DemoConnector {
        DemoConnector { role, journal }
    }
}

fn issue_number(v: &Value) -> Option<u64> {
    v.pointer("/issue/number").and_then(Value::as_u64)
}

#[async_trait]
impl BaseConnector for DemoConnector {
    fn connector_type(&self) -> &str {
        self.role.connector_type()
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Err(Error::Connector(
            "the demo connectors answer through execute_with_context".into(),
        ))
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        _capability: Option<&str>,
        ctx: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        let body = payload.as_json().cloned().unwrap_or(Value::Null);
        let (issue, dead_binding) = match self.role {
            Role::Audit => (
                body.get("event").and_then(issue_number),
                body.pointer("/dead_letter/binding_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ),
            _ => (issue_number(&body), None),
        };
        let value = |key: &str| ctx.values().get(key).cloned();
        self.journal.push(Visit {
            role: self.role,
            issue,
            event_id: value(CONTEXT_EVENT_ID).unwrap_or_default(),
            attempt: value(CONTEXT_ATTEMPT)
                .and_then(|a| a.parse().ok())
                .unwrap_or(0),
            dead_letter_id: value(CONTEXT_DEAD_LETTER_ID).and_then(|d| d.parse().ok()),
            dead_binding,
            at: Instant::now(),
        });
        match self.role {
            Role::Tickets => Ok(Payload::Json(json!({
                "ticket": format!("TCK-{}", issue.unwrap_or(0)),
            }))),
            Role::Flaky => Err(Error::Connector(
                "flaky: the downstream system is down (deliberately, for the demo)".into(),
            )),
            Role::Audit => Ok(Payload::Json(json!({
                "recorded": value(CONTEXT_DEAD_LETTER_ID),
            }))),
        }
    }
}
