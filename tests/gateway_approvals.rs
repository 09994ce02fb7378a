//! The reference gateway's approval flow in manual mode (PROTOCOL.md §4 and the
//! README's "Approval" sections), driven over a raw Phoenix socket and its HTTP API:
//! pending registers, approve and reject, one-time-token key registration, the token
//! endpoint with private-key JWT assertions, registers with session tokens and JWTs,
//! and restarts on the same data dir. The client side is the few helpers below, not
//! the SDK's flow.
#![cfg(feature = "gateway")]

mod common;
#[path = "gateway_http/raw.rs"]
mod raw;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
use raw::{next_message, raw_client, register_response, send_proto, Raw};
use serde_json::{json, Value};
use switchboard::gateway::{
    ApprovalMode, Gateway, GatewayConfig, TestGateway, TEST_EXECUTE_TIMEOUT,
};
use switchboard::proto::{
    stream_message::Message, RegisterConnectorRequest, RegisterConnectorResponse,
    RegistrationStatus,
};

const TENANT: &str = "acme";
const TYPE: &str = "raw";
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

fn manual() -> GatewayConfig {
    GatewayConfig::default()
        .with_default_execute_timeout(TEST_EXECUTE_TIMEOUT)
        .with_approval(ApprovalMode::Manual)
}

fn register_with(instance: &str, session_token: &str, jwt: &str) -> Message {
    Message::RegisterRequest(RegisterConnectorRequest {
        tenant_id: TENANT.into(),
        connector_type: TYPE.into(),
        instance_id: instance.into(),
        session_token: session_token.into(),
        jwt_token: jwt.into(),
        ..Default::default()
    })
}

async fn register(
    ws: &mut Raw,
    instance: &str,
    session: &str,
    jwt: &str,
) -> RegisterConnectorResponse {
    send_proto(ws, 10, register_with(instance, session, jwt)).await;
    register_response(ws).await
}

fn arn(instance: &str) -> String {
    format!("matrix:{TENANT}:{TYPE}:{instance}")
}

fn dot(instance: &str) -> String {
    format!("{TENANT}.{TYPE}.{instance}")
}

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post_json(url: String, body: Value) -> (u16, Value) {
    let r = http().post(url).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn get_json(url: String) -> Value {
    http().get(url).send().await.unwrap().json().await.unwrap()
}

/// A connector's key pair, from a fixed seed so that two test keys differ.
fn client_key(seed: u8) -> p256::SecretKey {
    p256::SecretKey::from_slice(&[seed; 32]).unwrap()
}

fn public_pem(k: &p256::SecretKey) -> String {
    k.public_key().to_public_key_pem(LineEnding::LF).unwrap()
}

fn now_secs() -> u64 {
    now_ms() / 1000
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An RFC 7523 client assertion signed by `k`.
fn assertion(k: &p256::SecretKey, client_id: &str, aud: &str, jti: &str) -> String {
    let now = now_secs();
    let claims = json!({
        "iss": client_id, "sub": client_id, "aud": aud,
        "iat": now, "exp": now + 120, "jti": jti,
    });
    let der = k.to_pkcs8_der().unwrap();
    jsonwebtoken::encode(
        &Header::new(Algorithm::ES256),
        &claims,
        &EncodingKey::from_ec_der(der.as_bytes()),
    )
    .unwrap()
}

async fn token_request(endpoint: &str, client_id: &str, assertion: &str) -> (u16, Value) {
    let r = http()
        .post(endpoint)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("client_assertion_type", JWT_BEARER),
            ("client_assertion", assertion),
        ])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A pending registration of `instance` on a fresh socket.
async fn pending(gw: &TestGateway, instance: &str) -> Raw {
    let mut ws = raw_client(gw).await;
    let resp = register(&mut ws, instance, "", "").await;
    assert!(resp.success, "{resp:?}");
    assert_eq!(resp.status, RegistrationStatus::Pending as i32);
    assert_eq!(resp.connector_arn, arn(instance));
    assert!(resp.session_token.is_empty());
    ws
}

/// Approves `instance`, checks both pushes, returns the one-time token.
async fn approve(gw: &TestGateway, ws: &mut Raw, instance: &str) -> String {
    let url = format!(
        "{}/api/v1/connectors/{}/approve",
        gw.http_url(),
        arn(instance)
    );
    let (status, body) = post_json(url, json!({})).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("approved")),
        "{body}"
    );
    match next_message(ws).await {
        Message::ApprovalNotification(n) => {
            assert_eq!(n.gateway_id, dot(instance));
            assert_eq!(n.status, RegistrationStatus::Approved as i32);
        }
        other => panic!("expected approval_notification, got {other:?}"),
    }
    match next_message(ws).await {
        Message::CredentialsIssued(c) => {
            assert_eq!(c.gateway_id, dot(instance));
            assert_eq!(c.register_url, "/api/v1/auth/register");
            assert_eq!(c.matrix_api_url, gw.http_url());
            assert!(!c.ott.is_empty());
            c.ott
        }
        other => panic!("expected credentials_issued, got {other:?}"),
    }
}

async fn register_key(
    gw: &TestGateway,
    ott: &str,
    instance: &str,
    k: &p256::SecretKey,
) -> (u16, Value) {
    let body = json!({
        "token": ott, "public_key": public_pem(k),
        "tenant_id": TENANT, "connector_type": TYPE, "instance_id": instance,
    });
    post_json(format!("{}/api/v1/auth/register", gw.http_url()), body).await
}

/// The whole flow up to an access token: pending, approved, key registered, JWT.
async fn approved_jwt(
    gw: &TestGateway,
    ws: &mut Raw,
    instance: &str,
    k: &p256::SecretKey,
) -> String {
    let ott = approve(gw, ws, instance).await;
    let (status, reg) = register_key(gw, &ott, instance, k).await;
    assert_eq!(status, 200, "{reg}");
    let client_id = reg["client_id"].as_str().unwrap();
    let endpoint = reg["token_endpoint"].as_str().unwrap();
    let (status, tok) = token_request(
        endpoint,
        client_id,
        &assertion(k, client_id, endpoint, "j-1"),
    )
    .await;
    assert_eq!(status, 200, "{tok}");
    tok["access_token"].as_str().unwrap().to_owned()
}

/// `jwt` with its payload's `exp` pushed a day later and the signature kept.
fn tamper(jwt: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine as _;
    let parts: Vec<&str> = jwt.split('.').collect();
    let mut claims: Value = serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap();
    claims["exp"] = json!(claims["exp"].as_u64().unwrap() + 86_400);
    let payload = B64.encode(serde_json::to_vec(&claims).unwrap());
    format!("{}.{payload}.{}", parts[0], parts[2])
}

#[tokio::test]
async fn a_bare_register_is_pending_listed_and_not_executable() {
    let gw = TestGateway::start_with(manual()).await;
    let before = now_ms();
    let _ws = pending(&gw, "a").await;
    let after = now_ms();
    let listed = get_json(format!("{}/api/v1/approvals", gw.http_url())).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["arn"], arn("a"));
    assert_eq!(listed[0]["transport"], "websocket");
    let requested = listed[0]["requested_at_ms"].as_u64().unwrap();
    assert!(
        (before..=after).contains(&requested),
        "stamped when the register came, in ms: {requested} not in {before}..={after}"
    );
    assert_eq!(
        gw.registrations()[0].status,
        switchboard::gateway::RegistrationState::Pending
    );
    let r = http()
        .post(format!(
            "{}/api/v1/connectors/{}/execute",
            gw.http_url(),
            arn("a")
        ))
        .json(&json!({ "payload": {} }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "pending_approval", "{body}");
}

#[tokio::test]
async fn approval_leads_to_a_key_a_jwt_and_an_approved_register() {
    let gw = TestGateway::start_with(manual()).await;
    let mut ws = pending(&gw, "a").await;
    let k = client_key(1);
    let ott = approve(&gw, &mut ws, "a").await;
    assert_eq!(
        gw.registrations()[0].status,
        switchboard::gateway::RegistrationState::Approved
    );

    let (status, body) = register_key(&gw, &ott, "b", &k).await;
    assert_eq!(
        (status, &body["error"]),
        (403, &json!("identity_mismatch")),
        "{body}"
    );
    let (status, reg) = register_key(&gw, &ott, "a", &k).await;
    assert_eq!(status, 200, "{reg}");
    assert_eq!(reg["client_id"], dot("a"));
    assert_eq!(reg["issuer"], gw.http_url());
    let (status, body) = register_key(&gw, &ott, "a", &k).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("invalid_token")),
        "single use: {body}"
    );

    let endpoint = reg["token_endpoint"].as_str().unwrap().to_owned();
    let client_id = dot("a");
    let wrong = assertion(&client_key(2), &client_id, &endpoint, "j-0");
    let (status, body) = token_request(&endpoint, &client_id, &wrong).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("invalid_client")),
        "{body}"
    );
    let good = assertion(&k, &client_id, &endpoint, "j-1");
    let (status, tok) = token_request(&endpoint, &client_id, &good).await;
    assert_eq!(status, 200, "{tok}");
    assert_eq!(tok["token_type"], "Bearer");
    assert_eq!(tok["expires_in"], 15 * 60);
    let (status, body) = token_request(&endpoint, &client_id, &good).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("invalid_client")),
        "replayed jti: {body}"
    );

    let jwt = tok["access_token"].as_str().unwrap();
    let tampered = tamper(jwt);
    let refused = register(&mut ws, "a", "", &tampered).await;
    assert!(!refused.success);
    assert_eq!(refused.status, RegistrationStatus::Unspecified as i32);
    assert!(
        refused.error.starts_with("invalid_token: "),
        "{}",
        refused.error
    );

    let ok = register(&mut ws, "a", "", jwt).await;
    assert!(ok.success, "{ok:?}");
    assert_eq!(ok.status, RegistrationStatus::Approved as i32);
    assert!(!ok.session_token.is_empty());
    let again = register(&mut ws, "a", &ok.session_token, "").await;
    assert_eq!(
        again.status,
        RegistrationStatus::Approved as i32,
        "{again:?}"
    );
    let stale = register(&mut ws, "a", "not-a-token", "").await;
    assert!(
        stale.error.starts_with("invalid_session_token: "),
        "{stale:?}"
    );
}

#[tokio::test]
async fn an_expired_one_time_token_is_refused() {
    let gw = TestGateway::start_with(manual().with_ott_lifetime(Duration::ZERO)).await;
    let mut ws = pending(&gw, "a").await;
    let ott = approve(&gw, &mut ws, "a").await;
    let (status, body) = register_key(&gw, &ott, "a", &client_key(1)).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("expired_token")),
        "{body}"
    );
}

#[tokio::test]
async fn a_malformed_key_or_body_is_an_invalid_request() {
    let gw = TestGateway::start_with(manual()).await;
    let url = format!("{}/api/v1/auth/register", gw.http_url());
    let (status, body) = post_json(url.clone(), json!({ "token": "x" })).await;
    assert_eq!(
        (status, &body["error"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    let bad_key = json!({
        "token": "x", "public_key": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        "tenant_id": TENANT, "connector_type": TYPE, "instance_id": "a",
    });
    let (status, body) = post_json(url.clone(), bad_key).await;
    assert_eq!(
        (status, &body["error"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    let huge = "x".repeat(128 * 1024);
    let (status, _) = post_json(url, json!({ "token": huge })).await;
    assert_eq!(status, 413, "bodies are bounded");
    let r = http()
        .post(format!("{}/oauth/token", gw.http_url()))
        .form(&[("grant_type", "password")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "unsupported_grant_type");
}

#[tokio::test]
async fn a_rejected_identity_is_told_and_rejected_at_once_later() {
    let gw = TestGateway::start_with(manual()).await;
    let mut ws = pending(&gw, "a").await;
    let url = format!("{}/api/v1/connectors/{}/reject", gw.http_url(), arn("a"));
    let (status, body) = post_json(url.clone(), json!({ "reason": "unknown host" })).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("rejected")),
        "{body}"
    );
    match next_message(&mut ws).await {
        Message::ApprovalNotification(n) => {
            assert_eq!(n.status, RegistrationStatus::Rejected as i32);
            assert_eq!(n.message, "unknown host");
            assert_eq!(n.gateway_id, dot("a"));
        }
        other => panic!("expected approval_notification, got {other:?}"),
    }
    assert!(gw.registrations().is_empty());
    let (status, _) = post_json(url, json!({ "reason": "again" })).await;
    assert_eq!(status, 404, "no longer pending");
    let later = register(&mut ws, "a", "", "").await;
    assert!(!later.success);
    assert_eq!(later.status, RegistrationStatus::Rejected as i32);
    assert_eq!(later.error, "rejected: unknown host");
}

#[tokio::test]
async fn a_restarted_gateway_on_the_same_data_dir_accepts_the_same_credentials() {
    let tmp = tempfile::tempdir().unwrap();
    let mut gw = TestGateway::start_with(manual().with_data_dir(tmp.path().join("gw"))).await;
    let mut ws = pending(&gw, "a").await;
    let k = client_key(1);
    let jwt = approved_jwt(&gw, &mut ws, "a", &k).await;
    let session = register(&mut ws, "a", "", &jwt).await.session_token;
    let jwks = get_json(format!("{}/.well-known/jwks.json", gw.http_url())).await;
    drop(ws);
    gw.restart().await;

    assert_eq!(
        get_json(format!("{}/.well-known/jwks.json", gw.http_url())).await,
        jwks
    );
    let mut ws = raw_client(&gw).await;
    let by_session = register(&mut ws, "a", &session, "").await;
    assert_eq!(
        by_session.status,
        RegistrationStatus::Approved as i32,
        "{by_session:?}"
    );
    let by_jwt = register(&mut ws, "a", "", &jwt).await;
    assert_eq!(
        by_jwt.status,
        RegistrationStatus::Approved as i32,
        "{by_jwt:?}"
    );
    let client_id = dot("a");
    let endpoint = format!("{}/oauth/token", gw.http_url());
    let (status, body) = token_request(
        &endpoint,
        &client_id,
        &assertion(&k, &client_id, &endpoint, "j-2"),
    )
    .await;
    assert_eq!(status, 200, "the registered key survives too: {body}");
}

#[tokio::test]
async fn a_corrupt_data_file_fails_the_start_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("approvals.json"), b"{ not json").unwrap();
    let started = Gateway::start(
        manual().with_data_dir(tmp.path()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let e = started
        .err()
        .expect("a corrupt file stops the start")
        .to_string();
    assert!(
        e.contains(
            &Path::new(tmp.path())
                .join("approvals.json")
                .display()
                .to_string()
        ),
        "{e}"
    );
}

#[tokio::test]
async fn discovery_names_the_issuer_token_endpoint_and_key() {
    let gw = TestGateway::start_with(manual().with_public_url("http://gw.example/")).await;
    let conf = get_json(format!(
        "{}/.well-known/openid-configuration",
        gw.http_url()
    ))
    .await;
    assert_eq!(conf["issuer"], "http://gw.example");
    assert_eq!(conf["token_endpoint"], "http://gw.example/oauth/token");
    assert_eq!(conf["jwks_uri"], "http://gw.example/.well-known/jwks.json");
    assert_eq!(
        conf["token_endpoint_auth_methods_supported"],
        json!(["private_key_jwt"])
    );
    let jwks = get_json(format!("{}/.well-known/jwks.json", gw.http_url())).await;
    let key = &jwks["keys"][0];
    assert_eq!(
        (&key["kty"], &key["crv"], &key["alg"]),
        (&json!("EC"), &json!("P-256"), &json!("ES256"))
    );
    assert!(key["kid"].is_string() && key["x"].is_string() && key["y"].is_string());
}

#[tokio::test]
async fn auto_mode_approves_a_bare_register_at_once() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    let resp = register(&mut ws, "a", "", "").await;
    assert_eq!(resp.status, RegistrationStatus::Approved as i32);
    assert!(!resp.session_token.is_empty());
    let listed = get_json(format!("{}/api/v1/approvals", gw.http_url())).await;
    assert_eq!(listed, json!([]));
}

fn invoke(target: &str) -> Message {
    Message::InvokeRequest(switchboard::proto::InvokeCapabilityRequest {
        request_id: format!("inv-{target}"),
        target_address: target.into(),
        payload: b"{}".to_vec().into(),
        ..Default::default()
    })
}

#[tokio::test]
async fn invokes_neither_reach_a_pending_target_nor_come_from_an_unapproved_link() {
    let gw = TestGateway::start_with(manual()).await;
    let mut ws = pending(&gw, "a").await;
    let jwt = approved_jwt(&gw, &mut ws, "a", &client_key(1)).await;
    assert!(register(&mut ws, "a", "", &jwt).await.success);
    let b = register(&mut ws, "b", "", "").await;
    assert_eq!(b.status, RegistrationStatus::Pending as i32);
    send_proto(&mut ws, 20, invoke(&arn("b"))).await;
    let resp = raw::next_invoke_response(&mut ws).await;
    assert!(!resp.success);
    assert_eq!(resp.error_details["code"], "pending_approval", "{resp:?}");

    let mut other = pending(&gw, "c").await;
    send_proto(&mut other, 20, invoke(&arn("a"))).await;
    let resp = raw::next_invoke_response(&mut other).await;
    assert_eq!(resp.error_details["code"], "pending_approval", "{resp:?}");
}
