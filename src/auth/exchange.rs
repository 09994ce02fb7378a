//! The HTTP half of the approval flow (approval contract, "Key registration" and
//! "Token endpoint"): register the registration's public key with the gateway's
//! one-time token, then trade a private-key client assertion (RFC 7523, ES256) for an
//! access token (a JWT) at the token endpoint.
//!
//! Every request runs under one deadline (the registration's `register_timeout`), so a
//! silent gateway cannot hold the exchange. Failures come back as the crate's
//! [`Error`]: the contract's error bodies (`{"error", "error_description"}`) as
//! [`Error::Approval`] with the gateway's code and a message saying what to do, a 5xx
//! or 429 as the recoverable `server_error`, a dead network as [`Error::Connect`] or
//! [`Error::Timeout`]. [`Error::is_recoverable`] then tells the caller whether to retry
//! (with backoff) or stop and wait for a new approval.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use super::keys::KeyPair;
use crate::connector::config::ProxySetting;
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::transport::proxy::redact_url;

/// `client_assertion_type` of a JWT bearer client assertion (RFC 7523).
const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long a client assertion is valid: the contract allows at most 5 minutes; one
/// minute covers any sane clock skew and request time while limiting replay.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(60);

/// What the key registration answers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct KeyRegistration {
    pub(crate) client_id: String,
    pub(crate) token_endpoint: String,
    #[serde(default)]
    pub(crate) issuer: String,
}

/// An access token and how long it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AccessToken {
    pub(crate) jwt: String,
    pub(crate) expires_in: Duration,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    error_description: String,
}

#[derive(Serialize)]
struct RegisterBody<'a> {
    token: &'a str,
    public_key: &'a str,
    tenant_id: &'a str,
    connector_type: &'a str,
    instance_id: &'a str,
}

#[derive(Serialize)]
struct AssertionClaims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    jti: String,
}

/// An HTTP client for one registration's exchanges.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    http: reqwest::Client,
    timeout: Duration,
}

impl Exchange {
    /// A client whose every request (connect included) ends within `timeout`, reaching
    /// the gateway's HTTP API the way the registration reaches its socket: trusting the
    /// same roots (`tls`, the dialer's configuration with the CA bundle; `None` for the
    /// webpki roots alone) and through the same proxy setting. An explicit proxy URL is
    /// used for every request; [`ProxySetting::FromEnvironment`] leaves reqwest to read
    /// `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`/`NO_PROXY`, the rules the dialer follows.
    pub(crate) fn new(
        timeout: Duration,
        tls: Option<rustls::ClientConfig>,
        proxy: &ProxySetting,
    ) -> Result<Self> {
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout);
        if let Some(tls) = tls {
            builder = builder.use_preconfigured_tls(tls);
        }
        builder = match proxy {
            ProxySetting::FromEnvironment => builder,
            ProxySetting::Disabled => builder.no_proxy(),
            ProxySetting::Url(url) => {
                proxy.validate()?;
                let proxy = reqwest::Proxy::all(url.as_str())
                    .map_err(|e| Error::Config(format!("proxy {:?}: {e}", redact_url(url))))?;
                builder.proxy(proxy)
            }
        };
        let http = builder
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Exchange { http, timeout })
    }

    /// `POST {matrix_api_url}{register_url}`: registers `key`'s public half for `key_of`
    /// with the one-time token `ott`. The token is single use: a retry after a lost
    /// answer is refused as `invalid_token`.
    pub(crate) async fn register_key(
        &self,
        matrix_api_url: &str,
        register_url: &str,
        ott: &str,
        key: &KeyPair,
        key_of: &RegistrationKey,
    ) -> Result<KeyRegistration> {
        let url = join_url(matrix_api_url, register_url);
        let public_key = key.public_key_pem()?;
        let body = RegisterBody {
            token: ott,
            public_key: &public_key,
            tenant_id: key_of.tenant(),
            connector_type: key_of.connector_type(),
            instance_id: key_of.instance_id(),
        };
        let sent = self.http.post(&url).json(&body).send().await;
        let resp = self.answered(&url, "the key registration", sent).await?;
        resp.json::<KeyRegistration>().await.map_err(|e| Error::Approval {
            code: "invalid_response".into(),
            message: format!("the key registration at {url} answered 200 with an unreadable body ({e}); the gateway does not follow the approval contract"),
        })
    }

    /// Mints an access token: a client-credentials grant with an ES256 client
    /// assertion signed by `key` (`iss` = `sub` = `client_id`, `aud` = the endpoint).
    pub(crate) async fn mint(
        &self,
        client_id: &str,
        token_endpoint: &str,
        key: &KeyPair,
    ) -> Result<AccessToken> {
        let assertion = client_assertion(client_id, token_endpoint, key)?;
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("client_assertion_type", ASSERTION_TYPE),
            ("client_assertion", assertion.as_str()),
        ];
        let sent = self.http.post(token_endpoint).form(&form).send().await;
        let resp = self
            .answered(token_endpoint, "the token request", sent)
            .await?;
        let token: TokenResponse = resp.json().await.map_err(|e| Error::Approval {
            code: "invalid_response".into(),
            message: format!(
                "the token endpoint {token_endpoint} answered 200 with an unreadable body ({e})"
            ),
        })?;
        Ok(AccessToken {
            jwt: token.access_token,
            // The contract's default lifetime when a gateway leaves it out.
            expires_in: Duration::from_secs(token.expires_in.unwrap_or(15 * 60)),
        })
    }

    /// Maps transport failures and non-2xx answers to errors.
    async fn answered(
        &self,
        url: &str,
        what: &str,
        sent: reqwest::Result<reqwest::Response>,
    ) -> Result<reqwest::Response> {
        let resp = sent.map_err(|e| self.transport_error(url, what, e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        Err(answer_error(url, what, status.as_u16(), &text))
    }

    fn transport_error(&self, url: &str, what: &str, e: reqwest::Error) -> Error {
        if e.is_timeout() {
            Error::timeout(format!("{what} at {url}"), self.timeout)
        } else {
            Error::Connect {
                url: url.to_owned(),
                reason: format!(
                    "{what} failed: {e}; check that the gateway's HTTP API is reachable from here"
                ),
            }
        }
    }
}

/// The error for a non-2xx answer: the contract's codes get a message that says what
/// to do; 5xx, 408 and 429 are the recoverable `server_error`.
pub(crate) fn answer_error(url: &str, what: &str, status: u16, body: &str) -> Error {
    let parsed: Option<ErrorBody> = serde_json::from_str(body).ok();
    if matches!(status, 408 | 429) || status >= 500 {
        return Error::Approval {
            code: "server_error".into(),
            message: format!(
                "{what} at {url} answered HTTP {status}: {}; retrying",
                body.trim()
            ),
        };
    }
    let Some(ErrorBody {
        error,
        error_description: desc,
    }) = parsed
    else {
        return Error::Approval {
            code: format!("http_{status}"),
            message: format!(
                "{what} at {url} answered HTTP {status} without a contract error body: {}",
                body.trim()
            ),
        };
    };
    let advice = match error.as_str() {
        "invalid_token" => "the one-time token is unknown or was already used (each works once); ask the operator to approve the registration again",
        "expired_token" => "the one-time token expired before it was used; ask the operator to approve the registration again",
        "identity_mismatch" => "the one-time token was issued for another registration; check the tenant, type and instance id",
        "invalid_client" => "the token endpoint does not accept this registration's key (unknown client, wrong key or a refused assertion); the registration needs a fresh approval",
        "invalid_request" | "unsupported_grant_type" => "the gateway refused the request as malformed; switchboard and the gateway disagree on the approval contract",
        _ => "the gateway refused the request",
    };
    Error::Approval {
        code: error,
        message: format!("{what} at {url} answered HTTP {status} ({desc}): {advice}"),
    }
}

/// The signed client assertion.
fn client_assertion(client_id: &str, token_endpoint: &str, key: &KeyPair) -> Result<String> {
    let iat = u64::try_from(crate::clock::now_ms() / 1000).unwrap_or(0);
    let claims = AssertionClaims {
        iss: client_id,
        sub: client_id,
        aud: token_endpoint,
        iat,
        exp: iat + ASSERTION_LIFETIME.as_secs(),
        jti: format!("{:032x}", rand::random::<u128>()),
    };
    let pem = key.private_key_pem()?;
    let signing = EncodingKey::from_ec_pem(pem.as_bytes())
        .map_err(|e| Error::Config(format!("cannot load the private key for signing: {e}")))?;
    let mut header = Header::new(Algorithm::ES256);
    header.typ = Some("JWT".into());
    jsonwebtoken::encode(&header, &claims, &signing)
        .map_err(|e| Error::Config(format!("cannot sign the client assertion: {e}")))
}

/// `base` + `path`, unless `path` is already an absolute URL.
fn join_url(base: &str, path: &str) -> String {
    if path.starts_with("http://") || path.starts_with("https://") {
        return path.to_owned();
    }
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests;
