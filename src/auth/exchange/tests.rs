//! The exchange against a tiny real HTTP server that speaks the approval contract's
//! answers, including its error bodies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Form, Json, Router};
use serde_json::{json, Value};

use super::*;

const TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Gw {
    base: String,
    /// The public key registered, by client id.
    keys: HashMap<String, String>,
}

type FakeGatewayState = Arc<Mutex<Gw>>;

fn contract_error(status: StatusCode, code: &str) -> (StatusCode, Json<Value>) {
    (
        status,
        Json(json!({"error": code, "error_description": format!("test says {code}")})),
    )
}

async fn register(
    State(gw): State<FakeGatewayState>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    match body["token"].as_str().unwrap_or("") {
        "good" => {
            let client_id = format!(
                "{}.{}.{}",
                body["tenant_id"].as_str().unwrap(),
                body["connector_type"].as_str().unwrap(),
                body["instance_id"].as_str().unwrap()
            );
            let mut gw = gw.lock().unwrap();
            gw.keys.insert(
                client_id.clone(),
                body["public_key"].as_str().unwrap().into(),
            );
            let endpoint = format!("{}/oauth/token", gw.base);
            (
                StatusCode::OK,
                Json(
                    json!({"client_id": client_id, "token_endpoint": endpoint, "issuer": gw.base}),
                ),
            )
        }
        "used" => contract_error(StatusCode::UNAUTHORIZED, "invalid_token"),
        "old" => contract_error(StatusCode::UNAUTHORIZED, "expired_token"),
        "other" => contract_error(StatusCode::FORBIDDEN, "identity_mismatch"),
        "slow" => {
            tokio::time::sleep(TIMEOUT * 4).await;
            contract_error(StatusCode::OK, "late")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!("boom"))),
    }
}

/// Verifies the client assertion with the registered public key, as the contract's
/// token endpoint does.
async fn token(
    State(gw): State<FakeGatewayState>,
    Form(form): Form<HashMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let gw = gw.lock().unwrap();
    let endpoint = format!("{}/oauth/token", gw.base);
    let client_id = form.get("client_id").cloned().unwrap_or_default();
    let (Some(pem), Some(assertion)) = (gw.keys.get(&client_id), form.get("client_assertion"))
    else {
        return contract_error(StatusCode::UNAUTHORIZED, "invalid_client");
    };
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["client_assertion_type"], ASSERTION_TYPE);
    let key = jsonwebtoken::DecodingKey::from_ec_pem(pem.as_bytes()).unwrap();
    let mut v = jsonwebtoken::Validation::new(Algorithm::ES256);
    v.set_audience(&[endpoint]);
    v.set_issuer(&[client_id.as_str()]);
    v.sub = Some(client_id.clone());
    match jsonwebtoken::decode::<Value>(assertion, &key, &v) {
        Ok(data) => {
            let c = data.claims;
            assert!(c["exp"].as_u64().unwrap() - c["iat"].as_u64().unwrap() <= 300);
            assert!(!c["jti"].as_str().unwrap().is_empty());
            (
                StatusCode::OK,
                Json(
                    json!({"access_token": format!("jwt-for-{client_id}"), "token_type": "Bearer", "expires_in": 900}),
                ),
            )
        }
        Err(_) => contract_error(StatusCode::UNAUTHORIZED, "invalid_client"),
    }
}

async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let gw: FakeGatewayState = Arc::new(Mutex::new(Gw {
        base: base.clone(),
        ..Default::default()
    }));
    let app = Router::new()
        .route("/api/v1/auth/register", post(register))
        .route("/oauth/token", post(token))
        .with_state(gw);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

fn exchange() -> Exchange {
    Exchange::new(TIMEOUT, None, &ProxySetting::Disabled).unwrap()
}

fn who() -> RegistrationKey {
    RegistrationKey::new("acme", "echo", "pod-1")
}

async fn register_with(base: &str, ott: &str) -> Result<KeyRegistration> {
    let ex = exchange();
    ex.register_key(
        base,
        "/api/v1/auth/register",
        ott,
        &KeyPair::generate(),
        &who(),
    )
    .await
}

fn code_of(e: &Error) -> &str {
    match e {
        Error::Approval { code, .. } => code,
        other => panic!("expected Error::Approval, got {other:?}"),
    }
}

#[tokio::test]
async fn a_registered_key_mints_an_access_token_with_a_verified_assertion() {
    let base = serve().await;
    let ex = exchange();
    let key = KeyPair::generate();
    let reg = ex
        .register_key(&base, "/api/v1/auth/register", "good", &key, &who())
        .await
        .unwrap();
    assert_eq!(reg.client_id, "acme.echo.pod-1");
    assert_eq!(reg.token_endpoint, format!("{base}/oauth/token"));
    let token = ex
        .mint(&reg.client_id, &reg.token_endpoint, &key)
        .await
        .unwrap();
    assert_eq!(token.jwt, "jwt-for-acme.echo.pod-1");
    assert_eq!(token.expires_in, Duration::from_secs(900));
}

#[tokio::test]
async fn an_assertion_signed_by_another_key_is_invalid_client_and_final() {
    let base = serve().await;
    let reg = register_with(&base, "good").await.unwrap();
    let ex = exchange();
    let e = ex
        .mint(&reg.client_id, &reg.token_endpoint, &KeyPair::generate())
        .await
        .unwrap_err();
    assert_eq!(code_of(&e), "invalid_client");
    assert!(!e.is_recoverable());
    assert!(e.to_string().contains("fresh approval"), "{e}");
}

#[tokio::test]
async fn a_reused_one_time_token_is_invalid_token_and_says_to_approve_again() {
    let e = register_with(&serve().await, "used").await.unwrap_err();
    assert_eq!(code_of(&e), "invalid_token");
    assert!(!e.is_recoverable());
    assert!(
        e.to_string().contains("approve the registration again"),
        "{e}"
    );
}

#[tokio::test]
async fn an_expired_one_time_token_is_expired_token_and_final() {
    let e = register_with(&serve().await, "old").await.unwrap_err();
    assert_eq!(code_of(&e), "expired_token");
    assert!(!e.is_recoverable());
    assert!(e.to_string().contains("expired"), "{e}");
}

#[tokio::test]
async fn a_token_for_another_identity_is_identity_mismatch() {
    let e = register_with(&serve().await, "other").await.unwrap_err();
    assert_eq!(code_of(&e), "identity_mismatch");
    assert!(e.to_string().contains("HTTP 403"), "{e}");
}

#[tokio::test]
async fn a_server_error_is_recoverable() {
    let e = register_with(&serve().await, "crash").await.unwrap_err();
    assert_eq!(code_of(&e), "server_error");
    assert!(e.is_recoverable());
}

#[tokio::test]
async fn a_silent_gateway_is_a_timeout_within_the_bound() {
    let started = std::time::Instant::now();
    let e = register_with(&serve().await, "slow").await.unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    assert!(started.elapsed() < TIMEOUT * 3);
}

#[tokio::test]
async fn an_unreachable_gateway_is_a_recoverable_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let e = register_with(&base, "good").await.unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e:?}");
    assert!(e.is_recoverable());
}

#[test]
fn urls_join_with_exactly_one_slash_and_absolute_paths_win() {
    assert_eq!(join_url("http://g/", "/api/x"), "http://g/api/x");
    assert_eq!(join_url("http://g", "api/x"), "http://g/api/x");
    assert_eq!(join_url("http://g", "https://h/y"), "https://h/y");
}

#[tokio::test]
async fn an_explicit_proxy_carries_the_exchange() {
    // A forward proxy that records the request line and answers as the gateway would
    // for a used token: the answer proves the request went through it.
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let seen = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut tcp, _) = proxy.accept().await.unwrap();
        let mut buf = vec![0; 4096];
        let n = tcp.read(&mut buf).await.unwrap();
        let body = r#"{"error":"invalid_token","error_description":"from the proxy"}"#;
        let answer = format!(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(answer.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()
    });
    let ex = Exchange::new(TIMEOUT, None, &ProxySetting::Url(proxy_url)).unwrap();
    let e = ex
        .register_key(
            "http://gateway.invalid:4000",
            "/api/v1/auth/register",
            "good",
            &KeyPair::generate(),
            &who(),
        )
        .await
        .unwrap_err();
    assert_eq!(code_of(&e), "invalid_token");
    assert_eq!(
        seen.await.unwrap(),
        "POST http://gateway.invalid:4000/api/v1/auth/register HTTP/1.1"
    );
}

#[test]
fn a_malformed_explicit_proxy_is_a_config_error() {
    let e = Exchange::new(TIMEOUT, None, &ProxySetting::Url("ftp://x".into())).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
}
