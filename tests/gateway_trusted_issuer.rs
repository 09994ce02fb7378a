//! Registers with JWTs of a trusted external OIDC issuer (`GatewayConfig::trusted_issuers`,
//! the guide's (docs/guide/connector-authors.md) "Approval (reference gateway)") on a manual-mode reference gateway:
//! a small JWKS server in this process stands in for a Keycloak realm. Every wait has a
//! deadline; nothing sleeps to synchronise.
#![cfg(feature = "gateway")]

mod common;
#[path = "gateway_http/raw.rs"]
mod raw;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{eventually, DEADLINE};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
use raw::{next_message, raw_client, register_response, send_proto, Raw};
use serde_json::{json, Value};
use switchboard::gateway::{
    ApprovalMode, GatewayConfig, TestGateway, TrustedIssuer, TEST_EXECUTE_TIMEOUT,
};
use switchboard::proto::{
    stream_message::Message, RegisterConnectorRequest, RegisterConnectorResponse,
    RegistrationStatus,
};

const TENANT: &str = "acme";
const TYPE: &str = "raw";
const KID: &str = "kc-1";

fn manual() -> GatewayConfig {
    GatewayConfig::default()
        .with_default_execute_timeout(TEST_EXECUTE_TIMEOUT)
        .with_approval(ApprovalMode::Manual)
}

fn dot(instance: &str) -> String {
    format!("{TENANT}.{TYPE}.{instance}")
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn key(seed: u8) -> p256::SecretKey {
    p256::SecretKey::from_slice(&[seed; 32]).unwrap()
}

/// `claims` as an ES256 JWT signed by `k` with `kid`.
fn sign(k: &p256::SecretKey, kid: &str, claims: &Value) -> String {
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some(kid.into());
    let der = k.to_pkcs8_der().unwrap();
    jsonwebtoken::encode(&h, claims, &EncodingKey::from_ec_der(der.as_bytes())).unwrap()
}

/// The claims a realm mapper would add for `instance`, issued by `iss`.
fn identity_claims(iss: &str, instance: &str) -> Value {
    json!({
        "iss": iss, "sub": "service-account", "azp": "switchboard",
        "iat": now_secs(), "exp": now_secs() + 300,
        "tenant_id": TENANT, "connector_type": TYPE, "instance_id": instance,
    })
}

async fn register(
    ws: &mut Raw,
    instance: &str,
    session: &str,
    jwt: &str,
) -> RegisterConnectorResponse {
    send_proto(ws, 10, register_msg(instance, session, jwt)).await;
    register_response(ws).await
}

fn register_msg(instance: &str, session: &str, jwt: &str) -> Message {
    Message::RegisterRequest(RegisterConnectorRequest {
        tenant_id: TENANT.into(),
        connector_type: TYPE.into(),
        instance_id: instance.into(),
        session_token: session.into(),
        jwt_token: jwt.into(),
        ..Default::default()
    })
}

fn refused_with(resp: &RegisterConnectorResponse, code: &str) {
    assert!(!resp.success, "{resp:?}");
    assert_eq!(
        resp.status,
        RegistrationStatus::Unspecified as i32,
        "{resp:?}"
    );
    assert!(
        resp.error.starts_with(code),
        "{code} expected: {}",
        resp.error
    );
}

/// A JWKS server serving `k`'s public key as `kid`, counting its requests.
struct Realm {
    issuer: String,
    jwks_url: String,
    hits: Arc<AtomicUsize>,
}

async fn realm(k: &p256::SecretKey) -> Realm {
    realm_gated(k, None).await
}

/// [`realm`], answering each request only once `gate` gives it a permit (it is counted
/// on arrival).
async fn realm_gated(k: &p256::SecretKey, gate: Option<Arc<tokio::sync::Semaphore>>) -> Realm {
    let mut jwk = serde_json::to_value(k.public_key().to_jwk()).unwrap();
    jwk["kid"] = KID.into();
    jwk["alg"] = "ES256".into();
    jwk["use"] = "sig".into();
    let body = json!({ "keys": [
        { "kty": "RSA", "use": "enc", "alg": "RSA-OAEP", "kid": "enc-1", "n": "AQAB", "e": "AQAB" },
        jwk,
    ]});
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/realms/test/protocol/openid-connect/certs",
        axum::routing::get(move || {
            counted.fetch_add(1, SeqCst);
            let (body, gate) = (body.clone(), gate.clone());
            async move {
                if let Some(gate) = gate {
                    gate.acquire().await.expect("open").forget();
                }
                axum::Json(body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Realm {
        issuer: format!("{base}/realms/test"),
        jwks_url: format!("{base}/realms/test/protocol/openid-connect/certs"),
        hits,
    }
}

#[tokio::test]
async fn a_jwt_of_a_trusted_issuer_registers_approved_and_a_foreign_key_does_not() {
    let signer = key(11);
    let realm = realm(&signer).await;
    let gw = TestGateway::start_with(
        manual().with_trusted_issuer(TrustedIssuer::new(&realm.issuer, &realm.jwks_url)),
    )
    .await;
    let mut ws = raw_client(&gw).await;

    let jwt = sign(&signer, KID, &identity_claims(&realm.issuer, "a"));
    let ok = register(&mut ws, "a", "", &jwt).await;
    assert!(ok.success, "{ok:?}");
    assert_eq!(ok.status, RegistrationStatus::Approved as i32);
    assert_eq!(ok.connector_arn, format!("matrix:{TENANT}:{TYPE}:a"));
    assert!(!ok.session_token.is_empty());
    assert_eq!(
        gw.registrations()[0].status,
        switchboard::gateway::RegistrationState::Approved
    );
    let again = register(&mut ws, "a", &ok.session_token, "").await;
    assert_eq!(
        again.status,
        RegistrationStatus::Approved as i32,
        "{again:?}"
    );

    // No identity claims: the client id (azp) must be the dot key.
    let by_azp = json!({
        "iss": realm.issuer, "azp": dot("b"), "exp": now_secs() + 300,
    });
    let b = register(&mut ws, "b", "", &sign(&signer, KID, &by_azp)).await;
    assert_eq!(b.status, RegistrationStatus::Approved as i32, "{b:?}");
    assert_eq!(realm.hits.load(SeqCst), 1, "the JWKS is cached");

    let foreign = sign(&key(12), KID, &identity_claims(&realm.issuer, "a"));
    refused_with(
        &register(&mut ws, "a", "", &foreign).await,
        "invalid_token: ",
    );
    let other = sign(&signer, KID, &identity_claims(&realm.issuer, "c"));
    refused_with(&register(&mut ws, "a", "", &other).await, "invalid_token: ");
    let mut expired = identity_claims(&realm.issuer, "a");
    expired["exp"] = json!(now_secs() - 10);
    refused_with(
        &register(&mut ws, "a", "", &sign(&signer, KID, &expired)).await,
        "expired_token: ",
    );
    for n in 0..5 {
        let bad_kid = sign(
            &signer,
            &format!("kc-{n}x"),
            &identity_claims(&realm.issuer, "a"),
        );
        refused_with(
            &register(&mut ws, "a", "", &bad_kid).await,
            "invalid_token: ",
        );
    }
    assert_eq!(
        realm.hits.load(SeqCst),
        1,
        "unknown kids refetch at most once per interval; the first fetch was just now"
    );
}

#[tokio::test]
async fn a_configured_audience_must_be_in_the_token() {
    let signer = key(11);
    let realm = realm(&signer).await;
    let trusted = TrustedIssuer::new(&realm.issuer, &realm.jwks_url).with_audience("switchboard");
    let gw = TestGateway::start_with(manual().with_trusted_issuer(trusted)).await;
    let mut ws = raw_client(&gw).await;
    let no_aud = sign(&signer, KID, &identity_claims(&realm.issuer, "a"));
    refused_with(
        &register(&mut ws, "a", "", &no_aud).await,
        "invalid_token: ",
    );
    let mut claims = identity_claims(&realm.issuer, "a");
    claims["aud"] = json!(["account", "switchboard"]);
    let ok = register(&mut ws, "a", "", &sign(&signer, KID, &claims)).await;
    assert_eq!(ok.status, RegistrationStatus::Approved as i32, "{ok:?}");
}

#[tokio::test]
async fn an_unknown_issuer_is_refused_untrusted_issuer() {
    let signer = key(11);
    let realm = realm(&signer).await;
    let gw = TestGateway::start_with(
        manual().with_trusted_issuer(TrustedIssuer::new(&realm.issuer, &realm.jwks_url)),
    )
    .await;
    let mut ws = raw_client(&gw).await;
    let jwt = sign(
        &signer,
        KID,
        &identity_claims("https://elsewhere.example/realms/x", "a"),
    );
    let resp = register(&mut ws, "a", "", &jwt).await;
    refused_with(&resp, "untrusted_issuer: ");
    assert!(resp.error.contains("elsewhere.example"), "{}", resp.error);
    assert_eq!(realm.hits.load(SeqCst), 0, "nothing is fetched for it");
    assert!(gw.registrations().is_empty());
}

/// A server that accepts connections and never answers; each accept is announced.
async fn silent_server() -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/certs", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
            let _ = tx.send(());
        }
    });
    (url, rx)
}

/// A gateway session token for `instance`: pending, approved, key registered, JWT
/// from the gateway's token endpoint, register with it.
async fn gateway_session(gw: &TestGateway, ws: &mut Raw, instance: &str) -> String {
    let pending = register(ws, instance, "", "").await;
    assert_eq!(
        pending.status,
        RegistrationStatus::Pending as i32,
        "{pending:?}"
    );
    let http = reqwest::Client::new();
    let approve = format!(
        "{}/api/v1/connectors/matrix:{TENANT}:{TYPE}:{instance}/approve",
        gw.http_url()
    );
    let r = http.post(approve).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(matches!(
        next_message(ws).await,
        Message::ApprovalNotification(_)
    ));
    let Message::CredentialsIssued(creds) = next_message(ws).await else {
        panic!("expected credentials_issued")
    };
    let k = key(21);
    let reg: Value = http
        .post(format!("{}/api/v1/auth/register", gw.http_url()))
        .json(&json!({
            "token": creds.ott,
            "public_key": k.public_key().to_public_key_pem(LineEnding::LF).unwrap(),
            "tenant_id": TENANT, "connector_type": TYPE, "instance_id": instance,
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (client_id, endpoint) = (
        reg["client_id"].as_str().unwrap(),
        reg["token_endpoint"].as_str().unwrap(),
    );
    let assertion = json!({
        "iss": client_id, "sub": client_id, "aud": endpoint,
        "iat": now_secs(), "exp": now_secs() + 60, "jti": "j-1",
    });
    let der = k.to_pkcs8_der().unwrap();
    let assertion = jsonwebtoken::encode(
        &Header::new(Algorithm::ES256),
        &assertion,
        &EncodingKey::from_ec_der(der.as_bytes()),
    )
    .unwrap();
    let tok: Value = http
        .post(endpoint)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ),
            ("client_assertion", &assertion),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ok = register(ws, instance, "", tok["access_token"].as_str().unwrap()).await;
    assert_eq!(ok.status, RegistrationStatus::Approved as i32, "{ok:?}");
    ok.session_token
}

#[tokio::test]
async fn a_jwks_server_that_never_answers_fails_the_register_in_time() {
    const FETCH_TIMEOUT: Duration = Duration::from_millis(500);
    let (jwks_url, mut accepted) = silent_server().await;
    let issuer = "https://kc.example/realms/silent";
    let gw = TestGateway::start_with(
        manual()
            .with_jwks_fetch_timeout(FETCH_TIMEOUT)
            .with_trusted_issuer(TrustedIssuer::new(issuer, &jwks_url)),
    )
    .await;
    let mut waiting = raw_client(&gw).await;
    let jwt = sign(&key(11), KID, &identity_claims(issuer, "a"));
    let sent = Instant::now();
    send_proto(&mut waiting, 10, register_msg("a", "", &jwt)).await;
    tokio::time::timeout(DEADLINE, accepted.recv())
        .await
        .expect("the gateway connects to the JWKS server")
        .unwrap();
    // Answered at all: the server never will, so only the fetch timeout can end it.
    let a = tokio::time::timeout(DEADLINE, register_response(&mut waiting))
        .await
        .expect("the register is answered");
    let waited = sent.elapsed();
    refused_with(&a, "untrusted_issuer: ");
    assert!(
        a.error.contains(&format!(
            "could not fetch the JWKS of {issuer} from {jwks_url} within {FETCH_TIMEOUT:?}: "
        )),
        "{}",
        a.error
    );
    assert!(
        waited >= FETCH_TIMEOUT - Duration::from_millis(50),
        "answered after the fetch timeout, not before: {waited:?}"
    );

    // Within the refetch interval a failed issuer is refused at once, unfetched.
    let again = register(&mut waiting, "a", "", &jwt).await;
    refused_with(&again, "untrusted_issuer: ");
    assert!(
        accepted.try_recv().is_err(),
        "no second connection to the issuer"
    );
}

#[tokio::test]
async fn a_register_waiting_on_a_jwks_fetch_delays_no_other_link() {
    let signer = key(11);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let realm = realm_gated(&signer, Some(gate.clone())).await;
    // The fetch is held by the test, not timed: no deadline runs out while it waits.
    let gw = TestGateway::start_with(
        manual()
            .with_jwks_fetch_timeout(DEADLINE)
            .with_trusted_issuer(TrustedIssuer::new(&realm.issuer, &realm.jwks_url)),
    )
    .await;
    let mut other = raw_client(&gw).await;
    let session = gateway_session(&gw, &mut other, "b").await;

    let mut waiting = raw_client(&gw).await;
    let jwt = sign(&signer, KID, &identity_claims(&realm.issuer, "a"));
    send_proto(&mut waiting, 10, register_msg("a", "", &jwt)).await;
    eventually("the gateway to ask for the JWKS", || async {
        realm.hits.load(SeqCst) == 1
    })
    .await;
    let first = tokio::spawn(async move { register_response(&mut waiting).await });

    // Meanwhile another link registers with its session token, at once.
    let b = register(&mut other, "b", &session, "").await;
    assert_eq!(b.status, RegistrationStatus::Approved as i32, "{b:?}");
    assert!(
        !first.is_finished(),
        "the other link was answered while this one waited"
    );

    gate.add_permits(1);
    let a = tokio::time::timeout(DEADLINE, first)
        .await
        .expect("the register is answered once the JWKS comes")
        .unwrap();
    assert_eq!(a.status, RegistrationStatus::Approved as i32, "{a:?}");
}
