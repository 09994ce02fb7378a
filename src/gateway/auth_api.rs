//! The HTTP side of approval (PROTOCOL.md §4; the guide's (docs/guide/connector-authors.md) "Approval (reference gateway)"): the operator's
//! `GET /api/v1/approvals`, `POST /api/v1/connectors/{arn}/approve` and `/reject`;
//! the connector's key registration with a one-time token
//! (`POST /api/v1/auth/register`) and its token endpoint (`POST /oauth/token`,
//! client credentials with a private-key JWT assertion); and discovery
//! (`/.well-known/jwks.json`, `/.well-known/openid-configuration`).
//!
//! Bodies are bounded by [`MAX_AUTH_BODY_BYTES`]. The connector endpoints answer
//! errors as OAuth does, `{"error": code, "error_description": text}`; the operator
//! endpoints as the rest of the API does, `{"success": false, "error", "code"}`.
//! Approve and reject tell the connector over the link its pending registration is
//! on, whichever transport that is.

use std::sync::Arc;

use axum::extract::rejection::{FormRejection, JsonRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::approvals::{now_ms, REGISTER_PATH, TOKEN_PATH};
use super::credentials::OttError;
use super::state::GatewayState;
use super::tokens::{AccessClaims, ClientKey, ACCESS_TOKEN_AUDIENCE};
use crate::identity::RegistrationKey;

/// Largest request body these routes read (64 KiB): a PEM public key, a JWT or a
/// reason is well under a kilobyte, and an unauthenticated caller must not make the
/// gateway buffer more.
pub(crate) const MAX_AUTH_BODY_BYTES: usize = 64 * 1024;

/// The `client_assertion_type` of RFC 7523 private-key JWT client authentication.
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The operator's approval routes (list pending, approve, reject), which the
/// gateway's router puts behind its operator token.
pub(crate) fn operator_routes() -> Router<Arc<GatewayState>> {
    Router::new()
        .route("/api/v1/approvals", get(pending))
        .route("/api/v1/connectors/{arn}/approve", post(approve))
        .route("/api/v1/connectors/{arn}/reject", post(reject))
}

/// The connectors' side of approval (key registration, tokens, the gateway's keys),
/// open to every connector: each authenticates with its own credentials.
pub(crate) fn routes() -> Router<Arc<GatewayState>> {
    Router::new()
        .route(REGISTER_PATH, post(register_key))
        .route(TOKEN_PATH, post(token))
        .route("/.well-known/jwks.json", get(jwks))
        .route(
            "/.well-known/openid-configuration",
            get(openid_configuration),
        )
        .layer(DefaultBodyLimit::max(MAX_AUTH_BODY_BYTES))
}

fn oauth_error(status: StatusCode, code: &str, description: impl std::fmt::Display) -> Response {
    let body = json!({ "error": code, "error_description": description.to_string() });
    (status, Json(body)).into_response()
}

/// 413 for a body over [`MAX_AUTH_BODY_BYTES`], else 400 (OAuth's `invalid_request`
/// is a 400, where axum would say 415 or 422).
fn bad_body_status(rejection: StatusCode) -> StatusCode {
    if rejection == StatusCode::PAYLOAD_TOO_LARGE {
        rejection
    } else {
        StatusCode::BAD_REQUEST
    }
}

fn api_error(status: StatusCode, code: &str, message: impl std::fmt::Display) -> Response {
    let body = json!({ "success": false, "error": message.to_string(), "code": code });
    (status, Json(body)).into_response()
}

fn not_pending(arn: &str) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no pending registration with ARN {arn}; GET /api/v1/approvals lists them"),
    )
}

async fn pending(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.registry().pending()).into_response()
}

async fn approve(State(state): State<Arc<GatewayState>>, Path(arn): Path<String>) -> Response {
    match super::operator::approve(&state, &arn).await {
        Ok(()) => Json(json!({ "arn": arn, "status": "approved" })).into_response(),
        Err(super::operator::NotPending) => not_pending(&arn),
    }
}

#[derive(Deserialize, Default)]
struct RejectBody {
    #[serde(default)]
    reason: String,
}

async fn reject(
    State(state): State<Arc<GatewayState>>,
    Path(arn): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: RejectBody = if body.is_empty() {
        RejectBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => {
                return api_error(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("body must be {{\"reason\": \"...\"}}: {e}"),
                )
            }
        }
    };
    match super::operator::reject(&state, &arn, &body.reason).await {
        Ok(()) => Json(json!({ "arn": arn, "status": "rejected" })).into_response(),
        Err(super::operator::NotPending) => not_pending(&arn),
    }
}

#[derive(Deserialize)]
struct KeyRegistration {
    token: String,
    public_key: String,
    /// Optional: PROTOCOL.md §4 names only type and instance; the one-time token is
    /// bound to the whole identity either way.
    #[serde(default)]
    tenant_id: String,
    connector_type: String,
    instance_id: String,
}

async fn register_key(
    State(state): State<Arc<GatewayState>>,
    body: Result<Json<KeyRegistration>, JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            return oauth_error(
                bad_body_status(e.status()),
                "invalid_request",
                format!(
                    "body must be JSON {{\"token\", \"public_key\", \"tenant_id\", \
                     \"connector_type\", \"instance_id\"}}: {}",
                    e.body_text()
                ),
            )
        }
    };
    let key = match ClientKey::from_pem(&req.public_key) {
        Ok(k) => k,
        Err(e) => return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", e),
    };
    let claimed = RegistrationKey::new(&req.tenant_id, &req.connector_type, &req.instance_id);
    let with_tenant = !req.tenant_id.is_empty();
    let redeemed = state
        .approvals
        .with(|c| c.redeem_ott(&req.token, &claimed, with_tenant, key, now_ms()));
    match redeemed {
        Ok(client_id) => {
            tracing::info!(%client_id, "connector key registered");
            Json(json!({
                "client_id": client_id,
                "token_endpoint": state.approvals.token_endpoint(),
                "issuer": state.approvals.issuer,
            }))
            .into_response()
        }
        Err(OttError::Unknown) => oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the one-time token is unknown or was already used; ask the operator to approve again",
        ),
        Err(OttError::Expired) => oauth_error(
            StatusCode::UNAUTHORIZED,
            "expired_token",
            "the one-time token expired; ask the operator to approve again",
        ),
        Err(OttError::IdentityMismatch) => oauth_error(
            StatusCode::FORBIDDEN,
            "identity_mismatch",
            format!(
                "the one-time token was issued for another registration than {}",
                claimed.dot_key()
            ),
        ),
    }
}

#[derive(Deserialize)]
struct TokenRequest {
    #[serde(default)]
    grant_type: String,
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    client_assertion_type: String,
    #[serde(default)]
    client_assertion: String,
}

async fn token(
    State(state): State<Arc<GatewayState>>,
    body: Result<Form<TokenRequest>, FormRejection>,
) -> Response {
    let req = match body {
        Ok(Form(r)) => r,
        Err(e) => {
            return oauth_error(
                bad_body_status(e.status()),
                "invalid_request",
                format!(
                    "body must be application/x-www-form-urlencoded: {}",
                    e.body_text()
                ),
            )
        }
    };
    if req.grant_type != "client_credentials" {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            format!(
                "grant_type {:?} is not supported; use client_credentials",
                req.grant_type
            ),
        );
    }
    if req.client_assertion_type != JWT_BEARER
        || req.client_assertion.is_empty()
        || req.client_id.is_empty()
    {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!(
                "client_id, client_assertion and client_assertion_type={JWT_BEARER} are required"
            ),
        );
    }
    let invalid_client = |why: String| oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", why);
    let Some(client) = state.approvals.with(|c| c.client(&req.client_id).cloned()) else {
        return invalid_client(format!(
            "no client {:?} is registered; register a key with a one-time token first",
            req.client_id
        ));
    };
    let endpoint = state.approvals.token_endpoint();
    let now = now_ms() / 1000;
    let claims = match client.public_key.verify_assertion(
        &req.client_assertion,
        &req.client_id,
        &endpoint,
        now,
    ) {
        Ok(c) => c,
        Err(why) => return invalid_client(why),
    };
    if !state
        .approvals
        .with(|c| c.note_jti(&req.client_id, &claims.jti, claims.exp, now))
    {
        return invalid_client(format!(
            "the client assertion's jti {:?} was already used; sign a new assertion",
            claims.jti
        ));
    }
    let lifetime = state.approvals.token_lifetime.as_secs().max(1);
    let key = &client.key;
    let access = state.approvals.key.mint(&AccessClaims {
        iss: state.approvals.issuer.clone(),
        sub: key.dot_key().to_owned(),
        aud: ACCESS_TOKEN_AUDIENCE.to_owned(),
        tenant_id: key.tenant().to_owned(),
        connector_type: key.connector_type().to_owned(),
        instance_id: key.instance_id().to_owned(),
        iat: now,
        exp: now + lifetime,
    });
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({ "access_token": access, "token_type": "Bearer", "expires_in": lifetime })),
    )
        .into_response()
}

async fn jwks(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.approvals.key.jwks()).into_response()
}

async fn openid_configuration(State(state): State<Arc<GatewayState>>) -> Response {
    let issuer = &state.approvals.issuer;
    Json(json!({
        "issuer": issuer,
        "token_endpoint": state.approvals.token_endpoint(),
        "jwks_uri": format!("{issuer}/.well-known/jwks.json"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": ["ES256"],
    }))
    .into_response()
}
