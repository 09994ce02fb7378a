//! Sources are connectors with an outbound side: each configured source is a
//! registration of the runtime on its gateway connection (type = provider id,
//! instance = source id), listed by the gateway with its kind, and its capabilities
//! are callable by any other connector through the gateway. Here another connector
//! invokes the GitHub source's `github.api` against a local fake GitHub API; the
//! source's outbound rate limiter makes one call wait for its token and refuses one
//! that would wait past `outbound_max_wait_secs`. The runtime's `http` connector
//! answers `http.request` the same way.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use common::eventually_some;
use dsupport::{Recorder, Rt};
use serde_json::{json, Value};
use switchboard::gateway::TestGateway;
use switchboard::{
    ConnectorConfig, InvokeOptions, MultiConnectorRunner, Payload, Registration,
    RegistrationHandle, RunnerOptions,
};

/// A fake GitHub API that records the `Authorization` of every call.
async fn fake_github() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/repos/{owner}/{repo}",
        get(move |headers: axum::http::HeaderMap| {
            let s = s.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                s.lock().unwrap().push(auth);
                axum::Json(json!({"full_name": "octo/hello", "private": false}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

/// A caller connector on `gw` (tenant `acme`), whose handle invokes others.
async fn caller(gw: &TestGateway) -> RegistrationHandle {
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("caller")
        .build()
        .unwrap();
    let runner = MultiConnectorRunner::new(
        RunnerOptions::default(),
        [Registration::new(cfg, Recorder::default())],
    )
    .unwrap();
    let handle = runner.registrations().remove(0);
    tokio::spawn(async move {
        let _ = runner.run().await;
    });
    handle
        .wait_registered(Duration::from_secs(10))
        .await
        .unwrap();
    handle
}

#[tokio::test]
async fn another_connector_calls_the_github_source_through_the_gateway_under_its_rate_limit() {
    let gw = TestGateway::start().await;
    let (api, seen) = fake_github().await;
    std::env::set_var("SB_TEST_GITHUB_API_TOKEN", "ghp_test_token");
    // No top-level `tenant`: the source registers under the runtime's (`acme`), so
    // `acme.github.gh` reaches it.
    let config = format!(
        r#"
[gateway]
url = "{ws}"
tenant = "acme"
instance_id = "rt1"

[[sources]]
id = "gh"
provider = "github"
secret_env = "GH_SECRET"
api_url = "{api}"
api_token_env = "SB_TEST_GITHUB_API_TOKEN"
# One token every 2 s, one at once; a call waits at most 2.5 s for one.
outbound_rate_limit = {{ per_second = 0.5, burst = 1 }}
outbound_max_wait_secs = 2.5
"#,
        ws = gw.ws_url()
    );
    let rt = Rt::sqlite(&config, &[]).await;

    // The gateway lists the source as a connector, with its kind and capability.
    let listed = eventually_some("the source registered", || async {
        let list: Value = reqwest::get(format!("{}/api/v1/connectors", gw.http_url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list.as_array()?
            .iter()
            .find(|r| r["connector_type"] == "github" && r["instance_id"] == "gh")
            .cloned()
    })
    .await;
    assert_eq!(listed["tenant_id"], "acme", "{listed}");
    assert_eq!(listed["metadata"]["inbound_kind"], "webhook", "{listed}");
    assert_eq!(listed["capabilities"], json!(["github.api"]), "{listed}");

    let caller = caller(&gw).await;
    let call = || {
        caller.invoke(
            "acme.github.gh",
            "github.api",
            Payload::Json(json!({"method": "GET", "path": "/repos/octo/hello"})),
            InvokeOptions::default().with_timeout(Duration::from_secs(10)),
        )
    };
    let answer = call().await.unwrap().json().unwrap();
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["body"]["full_name"], "octo/hello");
    assert_eq!(seen.lock().unwrap().as_slice(), ["Bearer ghp_test_token"]);

    // Two more at once: one waits about 2 s for the next token; the other would wait
    // about 4 s, past 2.5 s, and is refused without a request.
    let (a, b) = tokio::join!(call(), call());
    let outcomes: Vec<bool> = [&a, &b]
        .iter()
        .map(|r| matches!(r, Ok(resp) if resp.json().is_ok()))
        .collect();
    assert_eq!(outcomes.iter().filter(|ok| **ok).count(), 1, "{a:?} {b:?}");
    let refused = [a, b]
        .into_iter()
        .find_map(|r| match r {
            Ok(resp) => resp.json().err().map(|e| e.to_string()),
            Err(e) => Some(e.to_string()),
        })
        .unwrap();
    assert!(refused.contains("rate limited"), "{refused}");
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "the refused call sent nothing"
    );
    let metrics = rt.metrics().await;
    for outcome in ["immediate", "waited", "refused"] {
        let line = format!(
            r#"switchboard_ingress_outbound_calls_total{{source="gh",outcome="{outcome}"}} 1"#
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

/// A local endpoint that answers every POST with the body it got, upper-cased.
async fn shouting_endpoint() -> String {
    let app = axum::Router::new().route(
        "/shout",
        axum::routing::post(|body: String| async move { body.to_uppercase() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/shout")
}

#[tokio::test]
async fn the_http_connector_makes_requests_for_others_under_the_egress_policy() {
    let gw = TestGateway::start().await;
    let endpoint = shouting_endpoint().await;
    let runtime_with = |allow: &str| {
        format!(
            "tenant = \"acme\"\n{allow}\n[gateway]\nurl = \"{}\"\ntenant = \"acme\"\ninstance_id = \"rt1\"\n",
            gw.ws_url()
        )
    };
    let caller = caller(&gw).await;
    let request = |url: &str| {
        caller.invoke(
            "acme.http.rt1",
            "http.request",
            Payload::Json(json!({"url": url, "body": "hello"})),
            InvokeOptions::default().with_timeout(Duration::from_secs(10)),
        )
    };

    // Loopback is refused unless allow-listed.
    let rt = Rt::sqlite(&runtime_with(""), &[]).await;
    let refused = eventually_some("the http connector registered", || async {
        match request(&endpoint).await {
            Err(e) if e.to_string().contains("not_found") => None,
            other => Some(other),
        }
    })
    .await;
    let err = match refused {
        Ok(resp) => resp.json().unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("loopback"), "{err}");
    drop(rt);

    let _rt = Rt::sqlite(&runtime_with("[outbound]\nallow = [\"127.0.0.0/8\"]"), &[]).await;
    let answer = eventually_some("the allow-listed request answered", || async {
        request(&endpoint).await.ok()?.json().ok()
    })
    .await;
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["body"], "HELLO");
}
