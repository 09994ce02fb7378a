//! The runtime's probes follow what they report, both ways: `/readyz` goes 503 naming
//! the store while PostgreSQL is unreachable (a proxy cut in the test) or the SQLite
//! file is locked by another process, and naming the gateway while the runtime's
//! registration is down; each comes back to 200 when the cause goes away. `/healthz`
//! stays 200 throughout: a store outage is not a reason to restart the process.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::sync::Arc;

use serde_json::Value;
use switchboard::gateway::TestGateway;

use common::eventually_some;
use common::tcp_proxy::Proxy;
use dsupport::Rt;

/// `/readyz`: its status and body.
async fn readyz(base: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{base}/readyz")).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

async fn healthz(base: &str) -> u16 {
    reqwest::get(format!("{base}/healthz"))
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Waits until `/readyz` says `ready` and the check `name` agrees.
async fn wait_ready(base: &str, ready: bool, name: &str) -> Value {
    eventually_some(
        &format!("/readyz ready={ready} with check {name}"),
        || async move {
            let (status, body) = readyz(base).await;
            ((status == 200) == ready
                && body["ready"] == Value::Bool(ready)
                && body["checks"][name]["ok"] == Value::Bool(ready))
            .then_some(body)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_a_postgres_outage_both_ways() {
    let Some(base) = dsupport::postgres_url() else {
        dsupport::skip_postgres("readiness_follows_a_postgres_outage_both_ways");
        return;
    };
    let direct = dsupport::fresh_postgres_schema(&base).await;
    let proxy = Proxy::start("127.0.0.1:5432".into()).await;
    let via_proxy = direct.replacen("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port), 1);
    assert_ne!(via_proxy, direct, "the test URL names 127.0.0.1:5432");
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let rt = Rt::on(via_proxy, dir, "", &[]).await;
    let body = wait_ready(&rt.base, true, "store").await;
    assert_eq!(body["checks"]["store"]["detail"], "postgres answers");

    proxy.take_down();
    let body = wait_ready(&rt.base, false, "store").await;
    assert!(
        body["checks"]["store"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("postgres"),
        "{body}"
    );
    assert_eq!(healthz(&rt.base).await, 200, "alive through the outage");

    proxy.bring_up();
    wait_ready(&rt.base, true, "store").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_a_sqlite_file_locked_by_another_process_both_ways() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let path = dir.path().join("rt.db");
    let rt = Rt::on(format!("sqlite:{}", path.display()), dir.clone(), "", &[]).await;
    let body = wait_ready(&rt.base, true, "store").await;
    assert_eq!(body["checks"]["store"]["detail"], "sqlite answers");

    // Another process (a backup tool, a shell left in a transaction) holds the write
    // lock: no ingest could commit, so the runtime is not ready.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let body = wait_ready(&rt.base, false, "store").await;
    assert!(
        body["checks"]["store"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("sqlite"),
        "{body}"
    );
    assert_eq!(
        healthz(&rt.base).await,
        200,
        "alive while the file is locked"
    );

    other.execute_batch("ROLLBACK").unwrap();
    wait_ready(&rt.base, true, "store").await;
}

/// The runtime registered with a gateway that goes away and comes back, on `store`.
async fn readiness_follows_the_gateway(store_url: String, dir: Arc<tempfile::TempDir>) {
    let mut gw = TestGateway::start().await;
    let config = format!(
        "[gateway]\nurl = \"{}\"\ntenant = \"acme\"\ninstance_id = \"rt\"\n",
        gw.ws_url()
    );
    let rt = Rt::on(store_url, dir, &config, &[]).await;
    let body = wait_ready(&rt.base, true, "gateway").await;
    assert_eq!(
        body["checks"]["gateway"]["detail"],
        "registered as matrix:acme:switchboard:rt"
    );

    gw.stop().await;
    let body = wait_ready(&rt.base, false, "gateway").await;
    assert!(
        body["checks"]["gateway"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("not registered"),
        "{body}"
    );
    assert_eq!(
        body["checks"]["store"]["ok"], true,
        "only the gateway failed"
    );

    gw.resume().await;
    wait_ready(&rt.base, true, "gateway").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_gateway_registration_on_sqlite() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = format!("sqlite:{}", dir.path().join("rt.db").display());
    readiness_follows_the_gateway(url, dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_gateway_registration_on_postgres() {
    let Some(base) = dsupport::postgres_url() else {
        dsupport::skip_postgres("readiness_follows_the_gateway_registration_on_postgres");
        return;
    };
    let url = dsupport::fresh_postgres_schema(&base).await;
    readiness_follows_the_gateway(url, Arc::new(tempfile::tempdir().unwrap())).await;
}
