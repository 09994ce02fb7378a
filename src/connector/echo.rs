//! [`EchoConnector`]: the smallest working connector.

use crate::connector::BaseConnector;
use crate::encoding::Payload;
use crate::error::Result;

/// A connector that answers every request with its own payload: the smallest working
/// connector, used by the demo, the examples and tests of the transport.
#[derive(Clone, Copy, Debug, Default)]
pub struct EchoConnector;

#[async_trait::async_trait]
impl BaseConnector for EchoConnector {
    fn connector_type(&self) -> &str {
        "echo"
    }

    async fn execute(&self, payload: Payload, _capability_id: Option<&str>) -> Result<Payload> {
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn echo_returns_its_payload_unchanged() {
        let p = Payload::Json(json!({"k": [1, 2]}));
        assert_eq!(
            EchoConnector.execute(p.clone(), Some("any")).await.unwrap(),
            p
        );
        assert_eq!(EchoConnector.connector_type(), "echo");
    }
}
