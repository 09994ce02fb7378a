//! Every configured source as a registration of the runtime on its gateway
//! connection (connector type = provider id, instance = source id, tenant = the
//! source's), so the gateway lists it with its kind and "the GitHub connector" is
//! callable through the execute channel: its capabilities are the source's outbound
//! side ([`crate::InboundSource::capabilities`]). Each call first takes a token of the
//! source's outbound rate limiter, keyed by the source id, waiting for it up to the
//! source's `outbound_max_wait`.
//!
//! Beside them, the built-in `http` outbound connector (type `http`, instance = the
//! runtime's `instance_id`) offers `http.request`: any connector can have the
//! runtime make an HTTP request under its egress policy, redirect rules, response
//! cap and per-endpoint breaker, signed per Standard Webhooks on request.
//!
//! Registrations share the runtime's sockets (one per tenant). Several runtime
//! processes register the same ARNs; the gateway keeps the newest connection's, and
//! any of them can answer, since each hosts the same sources.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::connector::{BaseConnector, Capability, ExecuteContext};
use crate::encoding::Payload;
use crate::error::{Error, Result};
use crate::ingress::hosted::HostedSource;
use crate::outbound::http::{HttpDelivery, HttpError, HttpRequest};
use crate::proto::TaskTypeSchema;

/// A hosted source as a connector.
pub(crate) struct SourceConnector {
    source: Arc<HostedSource>,
}

impl SourceConnector {
    pub(crate) fn new(source: Arc<HostedSource>) -> SourceConnector {
        SourceConnector { source }
    }
}

#[async_trait]
impl BaseConnector for SourceConnector {
    fn connector_type(&self) -> &str {
        &self.source.provider
    }

    async fn execute(&self, payload: Payload, capability: Option<&str>) -> Result<Payload> {
        self.execute_with_context(
            payload,
            capability,
            &ExecuteContext::detached("", HashMap::new()),
        )
        .await
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        capability: Option<&str>,
        ctx: &ExecuteContext,
    ) -> Result<Payload> {
        let s = &self.source;
        s.ctx.limiter().acquire(s.id()).await?;
        s.source.execute(capability, payload, ctx).await
    }

    fn metadata(&self) -> HashMap<String, String> {
        let s = &self.source;
        let mut m = HashMap::from([
            ("source".to_owned(), s.id().to_owned()),
            ("inbound_kind".to_owned(), s.kind.as_str().to_owned()),
            (
                "inbound_kinds".to_owned(),
                s.connector
                    .kinds()
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ]);
        if let Some(schema) = s.connector.event_schema() {
            m.insert("event_schema".to_owned(), schema.to_string());
        }
        m
    }

    fn capabilities(&self) -> Vec<TaskTypeSchema> {
        self.source
            .source
            .capabilities()
            .into_iter()
            .map(Capability::build)
            .collect()
    }
}

/// The built-in `http` outbound connector: `http.request`.
pub(crate) struct HttpConnector {
    http: Arc<HttpDelivery>,
}

impl HttpConnector {
    pub(crate) fn new(http: Arc<HttpDelivery>) -> HttpConnector {
        HttpConnector { http }
    }
}

/// Default timeout of an `http.request` call.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `http.request`'s input.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestInput {
    url: String,
    #[serde(default = "post")]
    method: String,
    #[serde(default)]
    headers: HashMap<String, String>,
    /// A JSON body (sent as `application/json`), or …
    json: Option<Value>,
    /// … a text body.
    body: Option<String>,
    timeout_ms: Option<u64>,
}

fn post() -> String {
    "POST".into()
}

#[async_trait]
impl BaseConnector for HttpConnector {
    fn connector_type(&self) -> &str {
        "http"
    }

    async fn execute(&self, payload: Payload, capability: Option<&str>) -> Result<Payload> {
        match capability {
            Some("http.request") | None => {}
            Some(other) => {
                return Err(Error::Connector(format!(
                    "the http connector has no capability {other:?}; it offers http.request"
                )))
            }
        }
        let Payload::Json(v) = payload else {
            return Err(Error::Payload("http.request takes a JSON payload".into()));
        };
        let input: RequestInput =
            serde_json::from_value(v).map_err(|e| Error::Payload(format!("http.request: {e}")))?;
        let method = reqwest::Method::from_bytes(input.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| Error::Payload(format!("http.request: method {:?}", input.method)))?;
        let mut headers: Vec<(String, String)> = input.headers.into_iter().collect();
        let body = match (input.json, input.body) {
            (Some(_), Some(_)) => {
                return Err(Error::Payload(
                    "http.request: give json or body, not both".into(),
                ))
            }
            (Some(j), None) => {
                headers.push(("content-type".into(), "application/json".into()));
                j.to_string().into_bytes()
            }
            (None, Some(b)) => b.into_bytes(),
            (None, None) => Vec::new(),
        };
        let request = HttpRequest {
            method,
            url: input.url,
            headers,
            body: body.into(),
            sign: None,
            timeout: input
                .timeout_ms
                .map_or(DEFAULT_REQUEST_TIMEOUT, Duration::from_millis),
        };
        let resp = self.http.request(request).await.map_err(|e| match e {
            HttpError::Invalid(m) => Error::Payload(format!("http.request: {m}")),
            other => Error::Connector(format!("http.request: {other}")),
        })?;
        let text = std::str::from_utf8(&resp.body).ok();
        let headers: serde_json::Map<String, Value> = resp
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), json!(v.to_str().ok()?))))
            .collect();
        Ok(Payload::Json(json!({
            "status": resp.status,
            "url": resp.url,
            "headers": headers,
            "body": text,
            "body_base64": text.is_none().then(|| base64::engine::general_purpose::STANDARD.encode(&resp.body)),
        })))
    }

    fn capabilities(&self) -> Vec<TaskTypeSchema> {
        vec![Capability::new("http.request")
            .description("An HTTP request under the runtime's egress policy, redirect limit, response cap and per-endpoint breaker")
            .input_schema(json!({
                "type": "object",
                "required": ["url"],
                "properties": {
                    "url": {"type": "string"},
                    "method": {"type": "string", "default": "POST"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "json": {},
                    "body": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1}
                },
                "additionalProperties": false
            }))
            .output_schema(json!({
                "type": "object",
                "properties": {
                    "status": {"type": "integer"},
                    "url": {"type": "string"},
                    "headers": {"type": "object"},
                    "body": {"type": ["string", "null"]},
                    "body_base64": {"type": ["string", "null"]}
                }
            }))
            .build()]
    }
}
