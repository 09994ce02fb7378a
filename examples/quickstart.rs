//! The README's quickstart: a connector with one capability, served until ctrl-c.
//!
//! ```sh
//! cargo run --features gateway -- gateway --listen 127.0.0.1:4000   # in one terminal
//! SWITCHBOARD_GATEWAY_URL=ws://127.0.0.1:4000 SWITCHBOARD_TENANT_ID=acme \
//!   cargo run --example quickstart                                   # in another
//! ```

use serde_json::json;
use switchboard::{BaseConnector, Capability, Payload};

struct Greeter;

#[async_trait::async_trait]
impl BaseConnector for Greeter {
    fn connector_type(&self) -> &str {
        "greeter"
    }

    fn capabilities(&self) -> Vec<switchboard::proto::TaskTypeSchema> {
        vec![Capability::new("greet")
            .description("Says hello")
            .input_schema(json!({"type": "object", "properties": {"name": {"type": "string"}}}))
            .build()]
    }

    async fn execute(&self, payload: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        let name = payload
            .as_json()
            .and_then(|v| v["name"].as_str())
            .unwrap_or("world");
        Ok(Payload::Json(
            json!({ "greeting": format!("hello, {name}") }),
        ))
    }
}

#[tokio::main]
async fn main() -> switchboard::Result<()> {
    switchboard::run(Greeter).await
}
