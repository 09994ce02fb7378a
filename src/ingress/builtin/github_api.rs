//! The GitHub source's outbound side: `github.api`, a call of GitHub's REST API with
//! the source's API token, so a handler that received a GitHub event can answer
//! GitHub (comment, label, set a status) through "the GitHub connector" rather than
//! holding a token of its own.
//!
//! Options of a `github` source: `api_url` (default `https://api.github.com`; a
//! GitHub Enterprise host's `/api/v3`, or a local fake in tests) and `api_token_env`
//! (the environment variable holding a token; without it the capability is not
//! offered). The runtime has already taken a token of the source's outbound rate
//! limiter before a call gets here.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::connector::Capability;
use crate::encoding::Payload;
use crate::error::{Error, Result};
use crate::secret::Secret;

/// The default API root.
pub(crate) const DEFAULT_API_URL: &str = "https://api.github.com";

/// How long one API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Most bytes of an API answer returned to the caller.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// A GitHub API client for one source.
pub(crate) struct GithubApi {
    client: reqwest::Client,
    base: String,
    token: Secret,
}

/// `github.api`'s input.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    /// `GET`, `POST`, `PATCH`, `PUT` or `DELETE`.
    method: String,
    /// The path under the API root, e.g. `/repos/o/r/issues/1/comments`.
    path: String,
    /// A JSON body.
    json: Option<Value>,
}

impl GithubApi {
    /// A client for `base` with `token`.
    pub(crate) fn new(base: &str, token: Secret) -> Result<GithubApi> {
        let client = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("github api client: {e}")))?;
        Ok(GithubApi {
            client,
            base: base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// The capability, with its schemas.
    pub(crate) fn capability() -> Capability {
        Capability::new("github.api")
            .description("Call GitHub's REST API with this source's token")
            .input_schema(json!({
                "type": "object",
                "required": ["method", "path"],
                "properties": {
                    "method": {"enum": ["GET", "POST", "PATCH", "PUT", "DELETE"]},
                    "path": {"type": "string", "pattern": "^/"},
                    "json": {}
                },
                "additionalProperties": false
            }))
            .output_schema(json!({
                "type": "object",
                "properties": {
                    "status": {"type": "integer"},
                    "body": {}
                }
            }))
    }

    /// Makes one call; a non-2xx answer is returned (status and body), not an error,
    /// so the caller sees GitHub's own message.
    pub(crate) async fn call(&self, payload: Payload) -> Result<Payload> {
        let Payload::Json(v) = payload else {
            return Err(Error::Payload("github.api takes a JSON payload".into()));
        };
        let call: Call =
            serde_json::from_value(v).map_err(|e| Error::Payload(format!("github.api: {e}")))?;
        let method = match call.method.to_ascii_uppercase().as_str() {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            "PATCH" => reqwest::Method::PATCH,
            "PUT" => reqwest::Method::PUT,
            "DELETE" => reqwest::Method::DELETE,
            other => return Err(Error::Payload(format!("github.api: method {other:?}"))),
        };
        if !call.path.starts_with('/') || call.path.contains("://") {
            return Err(Error::Payload(
                "github.api: path must start with '/' and stay under the API root".into(),
            ));
        }
        let token = String::from_utf8_lossy(self.token.expose()).into_owned();
        let mut req = self
            .client
            .request(method, format!("{}{}", self.base, call.path))
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28")
            .bearer_auth(token);
        if let Some(body) = &call.json {
            req = req.json(body);
        }
        let mut resp = req
            .send()
            .await
            .map_err(|e| Error::Connector(format!("github.api: {e}")))?;
        let status = resp.status().as_u16();
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| Error::Connector(format!("github.api: {e}")))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > MAX_ANSWER_BYTES {
                return Err(Error::Connector(format!(
                    "github.api: the answer exceeds {MAX_ANSWER_BYTES} bytes"
                )));
            }
        }
        let body = serde_json::from_slice::<Value>(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Payload::Json(json!({"status": status, "body": body})))
    }
}
