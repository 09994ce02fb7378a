//! The approval flow end to end (PROTOCOL.md §4 and the guide's (docs/guide/connector-authors.md) "Approval" sections): a real
//! manual-mode reference gateway, real sockets, the public API only. Every wait is on
//! an event with a deadline; the one fixed window (`QUIET`) only observes that nothing
//! happens after a rejection.

mod common;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard::gateway::{ApprovalMode, GatewayConfig, TestGateway, TEST_EXECUTE_TIMEOUT};
use switchboard::proto::{
    stream_message::Message, CredentialsIssued, RegistrationStatus, StreamMessage,
};
use switchboard::{
    BackoffPolicy, ConnectorConfig, Error, MultiConnectorRunner, Registration, RegistrationHandle,
    RunnerOptions,
};

use common::{eventually, spawn, Tagged, DEADLINE};

/// How long a rejected registration is watched for retries: with a 20 ms retry
/// backoff a storm would send dozens of registers in this time.
const QUIET: Duration = Duration::from_millis(800);

fn manual(data_dir: Option<&Path>) -> GatewayConfig {
    let c = GatewayConfig::default()
        .with_default_execute_timeout(TEST_EXECUTE_TIMEOUT)
        .with_approval(ApprovalMode::Manual);
    match data_dir {
        Some(d) => c.with_data_dir(d),
        None => c,
    }
}

fn registration(url: &str, instance: &str, creds: &Path) -> Registration {
    let cfg = ConnectorConfig::builder(url, "acme")
        .instance_id(instance)
        .credentials_dir(creds)
        .reconnect(BackoffPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
        .build()
        .expect("valid config");
    Registration::new(cfg, Tagged(instance.to_owned()))
}

fn runner(
    regs: Vec<Registration>,
) -> (
    std::sync::Arc<MultiConnectorRunner>,
    tokio::task::JoinHandle<switchboard::Result<()>>,
) {
    let mut opts = RunnerOptions::default();
    opts.max_handlers_per_socket = 64;
    spawn(MultiConnectorRunner::new(opts, regs).expect("admission"))
}

async fn stop(
    runner: &MultiConnectorRunner,
    join: tokio::task::JoinHandle<switchboard::Result<()>>,
) {
    runner.shutdown_handle().shutdown();
    tokio::time::timeout(DEADLINE, join)
        .await
        .expect("runner stops")
        .unwrap()
        .unwrap();
}

/// Waits until the gateway holds the registration as pending and returns its ARN.
async fn pending_arn(h: &RegistrationHandle) -> String {
    eventually("pending", || async {
        h.status() == Some(RegistrationStatus::Pending)
    })
    .await;
    assert!(
        h.arn().is_none(),
        "a pending registration has no executable ARN"
    );
    h.pending_arn().expect("a pending ARN")
}

async fn operator(gw: &TestGateway, arn: &str, verb: &str, body: Value) -> reqwest::StatusCode {
    let url = format!("{}/api/v1/connectors/{arn}/{verb}", gw.http_url());
    reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("gateway HTTP")
        .status()
}

async fn approvals(gw: &TestGateway) -> Vec<Value> {
    let url = format!("{}/api/v1/approvals", gw.http_url());
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

async fn executes(gw: &TestGateway, arn: &str, instance: &str) {
    let out = gw.execute(arn, json!({"n": 1})).await.expect("execute");
    assert!(out.success, "{:?}", out.error);
    assert_eq!(out.payload["instance"], instance);
}

fn stored(creds: &Path, instance: &str) -> Value {
    let path = creds
        .join(format!("acme.tagged.{instance}"))
        .join("credentials.json");
    serde_json::from_slice(&std::fs::read(path).expect("credentials.json")).unwrap()
}

/// Approves a pending registration and waits until its JWT registered it.
async fn approve(gw: &TestGateway, h: &RegistrationHandle) -> String {
    let arn = pending_arn(h).await;
    assert_eq!(operator(gw, &arn, "approve", json!({})).await, 200);
    h.wait_registered(DEADLINE)
        .await
        .expect("registered after approval")
}

/// Approves, then waits until the session token is on disk too (it is written off
/// the socket task), so a test that edits the file next does not race that write.
async fn approve_and_persist(gw: &TestGateway, h: &RegistrationHandle, creds: &Path) -> String {
    let arn = approve(gw, h).await;
    let instance = h.key().instance_id().to_owned();
    eventually("the session token persisted", || async {
        !stored(creds, &instance)["session_token"].is_null()
    })
    .await;
    arn
}

/// The address of the gateway over one transport.
#[derive(Clone, Copy)]
enum Over {
    WebSocket,
    Grpc,
}

impl Over {
    fn url(self, gw: &TestGateway) -> String {
        match self {
            Over::WebSocket => gw.ws_url(),
            Over::Grpc => gw.grpc_url().expect("the test gateway serves gRPC"),
        }
    }
}

#[tokio::test]
async fn an_approved_registration_exchanges_its_token_and_becomes_executable() {
    approved_registration_becomes_executable(Over::WebSocket).await;
}

#[tokio::test]
async fn an_approved_grpc_registration_exchanges_its_token_and_becomes_executable() {
    approved_registration_becomes_executable(Over::Grpc).await;
}

async fn approved_registration_becomes_executable(over: Over) {
    let creds = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_with(manual(None)).await;
    let (r, join) = runner(vec![registration(&over.url(&gw), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    let arn = pending_arn(&h).await;
    assert_eq!(approvals(&gw).await.len(), 1);
    let refused = gw.execute(&arn, json!({})).await;
    assert_eq!(
        refused.err().map(|e| e.code()),
        Some("pending_approval"),
        "pending is not executable"
    );

    assert_eq!(operator(&gw, &arn, "approve", json!({})).await, 200);
    let got = h.wait_registered(DEADLINE).await.unwrap();
    assert_eq!(got, arn);
    assert_eq!(h.status(), Some(RegistrationStatus::Approved));
    executes(&gw, &arn, "a").await;

    // The session token is written off the socket task, just after the register.
    eventually("the session token persisted", || async {
        !stored(creds.path(), "a")["session_token"].is_null()
    })
    .await;
    let c = stored(creds.path(), "a");
    for field in ["client_id", "token_endpoint", "jwt", "jwt_expires_at_ms"] {
        assert!(!c[field].is_null(), "{field} persisted: {c}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let dir = creds.path().join("acme.tagged.a");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("key.pem")), 0o600);
        assert_eq!(mode(&dir.join("credentials.json")), 0o600);
    }
    stop(&r, join).await;
}

#[tokio::test]
async fn a_restarted_connector_and_a_restarted_gateway_need_no_second_approval() {
    restarts_need_no_second_approval(Over::WebSocket).await;
}

#[tokio::test]
async fn over_grpc_a_restarted_connector_and_gateway_need_no_second_approval() {
    restarts_need_no_second_approval(Over::Grpc).await;
}

async fn restarts_need_no_second_approval(over: Over) {
    let (creds, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut gw = TestGateway::start_with(manual(Some(data.path()))).await;
    let (r, join) = runner(vec![registration(&over.url(&gw), "a", creds.path())]);
    let arn = approve_and_persist(&gw, &r.registrations()[0], creds.path()).await;
    stop(&r, join).await;

    // A new runner on the same credentials_dir: registered at once.
    let (r, join) = runner(vec![registration(&over.url(&gw), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    assert_eq!(h.wait_registered(DEADLINE).await.unwrap(), arn);
    assert!(approvals(&gw).await.is_empty());
    executes(&gw, &arn, "a").await;

    // The gateway restarts on the same data_dir: the connector reconnects and is
    // accepted with its stored credentials.
    gw.restart().await;
    eventually("re-registered after the gateway restart", || async {
        gw.registrations()
            .iter()
            .any(|i| i.arn == arn && i.status == switchboard::gateway::RegistrationState::Approved)
    })
    .await;
    h.wait_registered(DEADLINE).await.unwrap();
    assert!(approvals(&gw).await.is_empty());
    executes(&gw, &arn, "a").await;
    stop(&r, join).await;
}

#[tokio::test]
async fn a_connector_with_only_stored_keys_mints_a_jwt_before_registering() {
    let (creds, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let gw = TestGateway::start_with(manual(Some(data.path()))).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let arn = approve_and_persist(&gw, &r.registrations()[0], creds.path()).await;
    stop(&r, join).await;
    // Forget the session token and the JWT: only the key and the client remain.
    let path = creds.path().join("acme.tagged.a/credentials.json");
    let mut c = stored(creds.path(), "a");
    for f in ["session_token", "jwt", "jwt_expires_at_ms"] {
        c.as_object_mut().unwrap().remove(f);
    }
    std::fs::write(&path, c.to_string()).unwrap();

    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    assert_eq!(h.wait_registered(DEADLINE).await.unwrap(), arn);
    assert!(approvals(&gw).await.is_empty(), "never shown as pending");
    assert!(
        !stored(creds.path(), "a")["jwt"].is_null(),
        "the fresh JWT is stored"
    );
    stop(&r, join).await;
}

#[tokio::test]
async fn a_rejected_registration_says_so_and_stops_registering() {
    let creds = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_with(manual(None)).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    let arn = pending_arn(&h).await;
    let status = operator(&gw, &arn, "reject", json!({"reason": "unknown host"})).await;
    assert_eq!(status, 200);
    match h.wait_registered(DEADLINE).await {
        Err(Error::Rejected(reason)) => assert_eq!(reason, "unknown host"),
        other => panic!("expected Error::Rejected, got {other:?}"),
    }
    assert_eq!(h.status(), Some(RegistrationStatus::Rejected));
    assert!(h.last_error().unwrap().contains("unknown host"));

    // No retry storm: neither side sees another register.
    let (before, frames) = (h.metrics(), gw.stats().frames_in);
    tokio::time::sleep(QUIET).await;
    let after = h.metrics();
    assert_eq!(
        (after.registrations, after.register_failures),
        (before.registrations, before.register_failures)
    );
    assert_eq!(
        gw.stats().frames_in,
        frames,
        "the gateway received nothing more"
    );

    // A new runner for the same identity is refused as rejected at its first register.
    stop(&r, join).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    assert!(matches!(
        h.wait_registered(DEADLINE).await,
        Err(Error::Rejected(_))
    ));
    stop(&r, join).await;
}

#[tokio::test]
async fn an_expired_one_time_token_gives_a_clear_error_on_the_handle() {
    let creds = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_with(manual(None).with_ott_lifetime(Duration::ZERO)).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    let arn = pending_arn(&h).await;
    assert_eq!(operator(&gw, &arn, "approve", json!({})).await, 200);
    eventually("the exchange's error", || async {
        h.approval_error().is_some()
    })
    .await;
    let e = h.approval_error().unwrap();
    assert!(
        e.contains("expired_token") && e.contains("approve the registration again"),
        "{e}"
    );
    assert!(h.arn().is_none());
    // A caller that waits for the registration learns why it does not come.
    let waited = h
        .wait_registered(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(waited.to_string().contains("expired_token"), "{waited}");
    stop(&r, join).await;
}

#[tokio::test]
async fn an_unknown_or_reused_one_time_token_gives_a_clear_error_on_the_handle() {
    let creds = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_with(manual(None)).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    pending_arn(&h).await;
    // A credentials_issued whose token the gateway never issued (or already took).
    let issued = CredentialsIssued {
        gateway_id: "acme.tagged.a".into(),
        ott: "not-a-token-this-gateway-issued".into(),
        register_url: "/api/v1/auth/register".into(),
        matrix_api_url: gw.http_url(),
        ..Default::default()
    };
    let socket = gw.socket_ids()[0];
    assert!(gw.push(
        socket,
        StreamMessage {
            message: Some(Message::CredentialsIssued(issued))
        }
    ));
    eventually("the exchange's error", || async {
        h.approval_error().is_some()
    })
    .await;
    let e = h.approval_error().unwrap();
    assert!(
        e.contains("invalid_token") && e.contains("already used"),
        "{e}"
    );
    assert_eq!(h.status(), Some(RegistrationStatus::Pending));
    stop(&r, join).await;
}

#[tokio::test]
async fn a_tampered_stored_jwt_is_refused_and_the_connector_asks_for_a_fresh_approval() {
    let (creds, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let gw = TestGateway::start_with(manual(Some(data.path()))).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    approve_and_persist(&gw, &r.registrations()[0], creds.path()).await;
    stop(&r, join).await;
    // Drop the session token and flip a character of the JWT's signature.
    let path = creds.path().join("acme.tagged.a/credentials.json");
    let mut c = stored(creds.path(), "a");
    c.as_object_mut().unwrap().remove("session_token");
    let jwt = c["jwt"].as_str().unwrap().to_owned();
    let (head, last) = jwt.split_at(jwt.len() - 2);
    let flipped = if last.starts_with('A') { "B" } else { "A" };
    c["jwt"] = json!(format!("{head}{flipped}{}", &last[1..]));
    std::fs::write(&path, c.to_string()).unwrap();

    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let h = r.registrations()[0].clone();
    pending_arn(&h).await;
    assert!(
        h.last_error().unwrap().starts_with("invalid_token"),
        "{:?}",
        h.last_error()
    );
    eventually("the refused JWT is forgotten", || async {
        stored(creds.path(), "a")["jwt"].is_null()
    })
    .await;
    // A fresh approval works as the first one did.
    let arn = approve(&gw, &h).await;
    executes(&gw, &arn, "a").await;
    stop(&r, join).await;
}

#[tokio::test]
async fn twenty_registrations_on_one_socket_approved_in_random_order_all_register() {
    let creds = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_with(manual(None)).await;
    let names: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    let regs = names
        .iter()
        .map(|n| registration(&gw.ws_url(), n, creds.path()))
        .collect();
    let (r, join) = runner(regs);
    assert_eq!(r.socket_count(), 1);
    let handles = r.registrations();
    let mut arns = Vec::new();
    for h in &handles {
        arns.push((pending_arn(h).await, h.key().instance_id().to_owned()));
    }
    assert_eq!(approvals(&gw).await.len(), 20);
    // A fixed shuffle: every seventh, wrapping.
    let order: Vec<usize> = (0..20).map(|i| (i * 7 + 3) % 20).collect();
    for &i in &order {
        assert_eq!(operator(&gw, &arns[i].0, "approve", json!({})).await, 200);
    }
    for h in &handles {
        h.wait_registered(DEADLINE).await.unwrap();
    }
    for (arn, instance) in &arns {
        executes(&gw, arn, instance).await;
    }
    assert_eq!(r.socket_count(), 1);
    stop(&r, join).await;
}

#[tokio::test]
async fn a_bare_register_from_elsewhere_cannot_take_over_an_approved_registration() {
    let (creds, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let gw = TestGateway::start_with(manual(None)).await;
    let (r, join) = runner(vec![registration(&gw.ws_url(), "a", creds.path())]);
    let arn = approve(&gw, &r.registrations()[0]).await;

    // The same identity from another process, with no credentials of its own.
    let (intruder, intruder_join) = runner(vec![registration(&gw.ws_url(), "a", other.path())]);
    let h = intruder.registrations()[0].clone();
    eventually("the intruder is refused", || async {
        h.last_error()
            .is_some_and(|e| e.contains("another live connection"))
    })
    .await;
    assert!(
        approvals(&gw).await.is_empty(),
        "nothing for the operator to approve"
    );
    assert!(h.pending_arn().is_none() && h.arn().is_none());
    executes(&gw, &arn, "a").await;
    stop(&intruder, intruder_join).await;
    stop(&r, join).await;
}

#[tokio::test]
async fn the_exchange_trusts_the_ca_bundle_of_a_gateway_behind_tls() {
    // The gateway's public URL (where the key is registered and tokens are minted) is
    // the TLS front itself, whose certificate only the CA bundle makes trusted: the
    // exchange must trust what the socket trusts.
    let term = common::tls_terminator::TlsTerminator::start("127.0.0.1:9".parse().unwrap()).await;
    let public = format!("https://localhost:{}", term.port());
    let gw = TestGateway::start_with(manual(None).with_public_url(&public)).await;
    term.retarget(gw.local_addr());
    let creds = tempfile::tempdir().unwrap();
    let url = format!("wss://localhost:{}/socket/connector/websocket", term.port());
    let cfg = ConnectorConfig::builder(url, "acme")
        .instance_id("tls")
        .credentials_dir(creds.path())
        .ca_bundle(term.ca_bundle())
        .proxy(switchboard::ProxySetting::Disabled)
        .build()
        .expect("valid config");
    let (r, join) = runner(vec![Registration::new(cfg, Tagged("tls".into()))]);
    let arn = approve(&gw, &r.registrations()[0]).await;
    executes(&gw, &arn, "tls").await;
    let c = stored(creds.path(), "tls");
    assert!(
        c["token_endpoint"]
            .as_str()
            .is_some_and(|e| e.starts_with(&public)),
        "tokens were minted through the TLS front: {c}"
    );
    assert_eq!(term.failed_handshakes(), 0);
    stop(&r, join).await;
}
