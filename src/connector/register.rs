//! A connector's register request: its capabilities message (with the tool list a
//! TOOL connector advertises), its instance metadata with the SDK's own keys, and the
//! one credential it presents.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::base::{BaseConnector, TOOL_SCHEMAS_KEY};
use super::config::ConnectorConfig;
use crate::proto::{
    ConnectorBehavior, ConnectorCapabilities, InstanceMetadata, RegisterConnectorRequest,
    TaskTypeSchema,
};

/// Builds the capabilities message sent inside a register request.
///
/// For a TOOL connector whose [`BaseConnector::metadata`] has no [`TOOL_SCHEMAS_KEY`],
/// one is generated from [`BaseConnector::capabilities`] so tool-aware gateways can list
/// its tools without every author hand-writing the array; an explicit value is kept
/// untouched. See [`tool_schemas_json`] for the shape.
#[cfg_attr(not(feature = "websocket"), allow(dead_code))]
fn capabilities_message(connector: &dyn BaseConnector) -> ConnectorCapabilities {
    let behaviors = connector.behaviors();
    let task_types = connector.capabilities();
    let mut metadata = connector.metadata();
    if behaviors.contains(&ConnectorBehavior::Tool) && !metadata.contains_key(TOOL_SCHEMAS_KEY) {
        metadata.insert(TOOL_SCHEMAS_KEY.to_owned(), tool_schemas_json(&task_types));
    }
    ConnectorCapabilities {
        connector_type: crate::identity::sanitize(connector.connector_type()),
        version: connector.version().to_owned(),
        supported_encodings: connector
            .supported_encodings()
            .into_iter()
            .map(i32::from)
            .collect(),
        behaviors: behaviors.into_iter().map(i32::from).collect(),
        metadata,
        task_types,
    }
}

/// Renders task types as a JSON array of `{name, description, input_schema}`.
///
/// * `name` is the `task_type_id` (what a caller sends back as `capability_id`), or the
///   display `name` when the id is empty.
/// * `input_schema` is the parsed `input_schema_json`; an empty one becomes the
///   permissive `{"type": "object"}`.
/// * An `input_schema_json` that is not valid JSON is kept as a JSON string and logged
///   at warn level. Registration is not failed for a schema typo (the connector still
///   works), and the text is not silently replaced, so the author can see and fix it.
fn tool_schemas_json(task_types: &[TaskTypeSchema]) -> String {
    let tools: Vec<Value> = task_types
        .iter()
        .map(|t| {
            let name = if t.task_type_id.is_empty() { &t.name } else { &t.task_type_id };
            let input_schema = if t.input_schema_json.trim().is_empty() {
                json!({"type": "object"})
            } else {
                serde_json::from_str(&t.input_schema_json).unwrap_or_else(|e| {
                    tracing::warn!(task_type = %name, error = %e, "input_schema_json is not valid JSON; sending it as a string");
                    Value::String(t.input_schema_json.clone())
                })
            };
            json!({"name": name, "description": t.description, "input_schema": input_schema})
        })
        .collect();
    Value::Array(tools).to_string()
}

/// Builds the register request for one registration: sanitised tenant, type and
/// instance id (the same parts as the dot key), the connector's capabilities, the
/// instance metadata from the config, the scope, and ONE credential, in this order of
/// preference (approval contract): the session token of an earlier register, else
/// the approval flow's JWT, else the configured `auth_token`, else none. The
/// connection core re-picks the credential on every attempt (`mux::core`), with the
/// configured token as its last resort.
#[cfg_attr(not(feature = "websocket"), allow(dead_code))]
pub(crate) fn register_request(
    config: &ConnectorConfig,
    connector: &dyn BaseConnector,
    session_token: Option<&str>,
    jwt: Option<&str>,
) -> RegisterConnectorRequest {
    let key = config.key(connector.connector_type());
    let (session_token, jwt_token) = match (session_token, jwt, config.auth_token.as_deref()) {
        (Some(s), _, _) => (s.to_owned(), String::new()),
        (None, Some(j), _) | (None, None, Some(j)) => (String::new(), j.to_owned()),
        (None, None, None) => (String::new(), String::new()),
    };
    RegisterConnectorRequest {
        tenant_id: key.tenant().to_owned(),
        connector_type: key.connector_type().to_owned(),
        instance_id: key.instance_id().to_owned(),
        capabilities: Some(capabilities_message(connector)),
        jwt_token,
        session_token,
        scope: i32::from(config.scope),
        instance_metadata: Some(InstanceMetadata {
            display_name: config.display_name.clone(),
            tags: config.tags.clone(),
            metadata: instance_metadata(&config.metadata),
        }),
    }
}

/// The `sdk.*` keys every register request carries, so an operator can tell which SDK
/// (and which build of it, on which platform) each registration runs; the other SDKs
/// of this protocol family send the same keys.
const SDK_METADATA_KEYS: [&str; 5] = [
    "sdk.name",
    "sdk.version",
    "sdk.language",
    "sdk.os",
    "sdk.arch",
];

/// The configured instance metadata plus the `sdk.*` keys. The SDK's own keys win over
/// configured ones of the same name: they describe the running code, and a stale value
/// copied from another deployment would mislead whoever reads them.
fn instance_metadata(configured: &HashMap<String, String>) -> HashMap<String, String> {
    let mut metadata = configured.clone();
    let values = [
        "switchboard",
        env!("CARGO_PKG_VERSION"),
        "rust",
        std::env::consts::OS,
        std::env::consts::ARCH,
    ];
    for (key, value) in SDK_METADATA_KEYS.iter().zip(values) {
        metadata.insert((*key).to_owned(), value.to_owned());
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::super::echo::EchoConnector;
    use super::*;
    use crate::encoding::Payload;
    use crate::error::Result;
    use crate::proto::{ConnectorScope, PayloadEncoding, WebSocketOpenRequest};

    struct Tool {
        metadata: HashMap<String, String>,
    }
    #[async_trait::async_trait]
    impl BaseConnector for Tool {
        fn connector_type(&self) -> &str {
            "vendor.search"
        }
        fn version(&self) -> &str {
            "2.1.0"
        }
        async fn execute(&self, p: Payload, _: Option<&str>) -> Result<Payload> {
            Ok(p)
        }
        fn behaviors(&self) -> Vec<ConnectorBehavior> {
            vec![ConnectorBehavior::Tool]
        }
        fn metadata(&self) -> HashMap<String, String> {
            self.metadata.clone()
        }
        fn capabilities(&self) -> Vec<TaskTypeSchema> {
            vec![
                TaskTypeSchema {
                    task_type_id: "search".into(),
                    name: "Search".into(),
                    description: "Full-text search".into(),
                    input_schema_json: r#"{"type":"object","properties":{"q":{"type":"string"}}}"#
                        .into(),
                    ..Default::default()
                },
                TaskTypeSchema {
                    name: "broken".into(),
                    input_schema_json: "{not json".into(),
                    ..Default::default()
                },
                TaskTypeSchema {
                    task_type_id: "ping".into(),
                    ..Default::default()
                },
            ]
        }
    }

    fn tool_schemas(c: &dyn BaseConnector) -> Option<Value> {
        capabilities_message(c)
            .metadata
            .get(TOOL_SCHEMAS_KEY)
            .map(|s| serde_json::from_str(s).unwrap())
    }

    #[test]
    fn register_request_carries_sanitised_identity_and_config() {
        let config = ConnectorConfig::builder("ws://localhost:4000", "acme corp")
            .instance_id("host:1")
            .display_name("Search one")
            .tag("blue")
            .metadata("region", "eu")
            .auth_token("the-jwt")
            .scope(ConnectorScope::Tenant)
            .build()
            .unwrap();
        let tool = Tool {
            metadata: HashMap::new(),
        };
        let req = register_request(&config, &tool, None, None);
        assert_eq!(req.tenant_id, "acme-corp");
        assert_eq!(req.connector_type, "vendor-search");
        assert_eq!(req.instance_id, "host-1");
        assert_eq!(req.jwt_token, "the-jwt");
        assert_eq!(req.session_token, "");
        assert_eq!(req.scope, i32::from(ConnectorScope::Tenant));
        let meta = req.instance_metadata.unwrap();
        assert_eq!(meta.display_name, "Search one");
        assert_eq!(meta.tags, ["blue"]);
        assert_eq!(meta.metadata["region"], "eu");
        assert_eq!(meta.metadata["sdk.name"], "switchboard");
        assert_eq!(meta.metadata["sdk.version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(meta.metadata["sdk.language"], "rust");
        assert_eq!(meta.metadata["sdk.os"], std::env::consts::OS);
        assert_eq!(meta.metadata["sdk.arch"], std::env::consts::ARCH);
        assert_eq!(meta.metadata.len(), 1 + SDK_METADATA_KEYS.len());
        let caps = req.capabilities.unwrap();
        assert_eq!(caps.connector_type, "vendor-search");
        assert_eq!(caps.version, "2.1.0");
        assert_eq!(caps.behaviors, [i32::from(ConnectorBehavior::Tool)]);
        assert_eq!(caps.task_types.len(), 3);
    }

    #[test]
    fn the_sdk_keys_win_over_configured_ones() {
        let config = ConnectorConfig::builder("ws://h", "t")
            .metadata("sdk.version", "0.0.0-copied")
            .metadata("sdk.custom", "kept")
            .build()
            .unwrap();
        let meta = register_request(&config, &EchoConnector, None, None)
            .instance_metadata
            .unwrap()
            .metadata;
        assert_eq!(meta["sdk.version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(meta["sdk.custom"], "kept");
    }

    #[test]
    fn register_request_presents_one_credential_in_the_order_of_preference() {
        let config = ConnectorConfig::builder("ws://h", "t")
            .instance_id("i")
            .auth_token("configured")
            .build()
            .unwrap();
        let creds = |s, j| {
            let r = register_request(&config, &EchoConnector, s, j);
            (r.session_token, r.jwt_token)
        };
        assert_eq!(creds(Some("sess"), Some("jwt")), ("sess".into(), "".into()));
        assert_eq!(creds(None, Some("jwt")), ("".into(), "jwt".into()));
        assert_eq!(creds(None, None), ("".into(), "configured".into()));
    }

    #[test]
    fn register_request_without_credentials_sends_empty_tokens() {
        let config = ConnectorConfig::builder("ws://h", "t")
            .instance_id("i")
            .build()
            .unwrap();
        let req = register_request(&config, &EchoConnector, None, None);
        assert!(req.jwt_token.is_empty() && req.session_token.is_empty());
        assert_eq!(req.scope, i32::from(ConnectorScope::Unspecified));
        let caps = req.capabilities.unwrap();
        assert_eq!(caps.version, "0.1.0");
        assert_eq!(
            caps.behaviors,
            [i32::from(ConnectorBehavior::RequestResponse)]
        );
        assert_eq!(
            caps.supported_encodings,
            [
                PayloadEncoding::Json,
                PayloadEncoding::RawBytes,
                PayloadEncoding::JsonLines
            ]
            .map(i32::from)
        );
    }

    #[test]
    fn tool_connector_gets_generated_tool_schemas() {
        let schemas = tool_schemas(&Tool {
            metadata: HashMap::new(),
        })
        .expect("generated");
        assert_eq!(
            schemas,
            json!([
                {"name": "search", "description": "Full-text search",
                 "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
                {"name": "broken", "description": "", "input_schema": "{not json"},
                {"name": "ping", "description": "", "input_schema": {"type": "object"}},
            ])
        );
    }

    #[test]
    fn explicit_tool_schemas_are_kept() {
        let explicit = r#"[{"name":"mine"}]"#.to_owned();
        let tool = Tool {
            metadata: HashMap::from([(TOOL_SCHEMAS_KEY.to_owned(), explicit.clone())]),
        };
        assert_eq!(
            capabilities_message(&tool).metadata[TOOL_SCHEMAS_KEY],
            explicit
        );
    }

    #[test]
    fn proxied_streams_are_refused_by_default_with_an_error_naming_the_hook() {
        let req = WebSocketOpenRequest {
            connection_id: "c1".into(),
            path: "/live".into(),
            ..Default::default()
        };
        let err = EchoConnector.ws_open(&req).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ws_open") && text.contains("/live"), "{text}");
        assert!(EchoConnector.custom_metrics().is_empty());
    }

    #[test]
    fn non_tool_connectors_get_no_tool_schemas() {
        assert!(tool_schemas(&EchoConnector).is_none());
    }
}
