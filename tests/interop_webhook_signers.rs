//! Interop: signatures made by the providers' official libraries
//! (`@octokit/webhooks-methods` for GitHub, `standardwebhooks`) are accepted, by the
//! signature functions and by a running runtime over HTTP, and rejected once the body
//! is changed. The first run installs the Node
//! packages (`tests/interop/packages.rs`).
#![cfg(feature = "runtime")]

#[path = "interop/packages.rs"]
mod node_packages;
#[path = "ingest/support.rs"]
mod support;

use switchboard::__private::ingress::signature::{github, standard_webhooks, Rejection};

/// Runs tests/interop/sign.mjs, signing at `ts` (unix seconds).
fn node_signatures(ts: Option<i64>) -> serde_json::Value {
    let dir = node_packages::installed(&["@octokit/webhooks-methods", "standardwebhooks"]);
    let mut cmd = std::process::Command::new("node");
    cmd.arg(dir.join("sign.mjs"));
    if let Some(ts) = ts {
        cmd.arg(ts.to_string());
    }
    let out = cmd.output().expect("node runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from sign.mjs")
}

#[test]
fn signatures_from_the_official_libraries_verify() {
    let v = node_signatures(None);
    let body = v["body"].as_str().unwrap().as_bytes();
    let s = |k: &str| v[k].as_str().unwrap().to_owned();

    let gh = s("github");
    let gh_headers = [("X-Hub-Signature-256", gh.as_str())];
    assert_eq!(github(&[b"gh-secret"], &gh_headers, body), Ok(()));
    assert_eq!(
        github(&[b"gh-secret"], &gh_headers, b"{}"),
        Err(Rejection::BadSignature)
    );

    let (id, sig, ts) = (
        s("sw_id"),
        s("standard"),
        v["sw_ts"].as_i64().unwrap().to_string(),
    );
    let sw_headers = [
        ("webhook-id", id.as_str()),
        ("webhook-timestamp", ts.as_str()),
        ("webhook-signature", sig.as_str()),
    ];
    let secret = s("sw_secret");
    let now = v["sw_ts"].as_i64().unwrap() + 10;
    assert_eq!(
        standard_webhooks(&[secret.as_str()], &sw_headers, body, now, 300),
        Ok("msg_interop_1")
    );
    assert_eq!(
        standard_webhooks(&[secret.as_str()], &sw_headers, b"{}", now, 300),
        Err(Rejection::BadSignature)
    );
}

#[tokio::test]
async fn a_running_runtime_accepts_deliveries_signed_by_the_official_libraries() {
    let v = node_signatures(Some(support::now_s()));
    let h = support::Harness::sqlite(
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"INTEROP_GH\"\n\
         [[sources]]\nid = \"sw\"\nprovider = \"standard_webhooks\"\nsecret_env = \"INTEROP_SW\"\n",
    )
    .await;
    let body = v["body"].as_str().unwrap();
    let s = |k: &str| v[k].as_str().unwrap().to_owned();
    let gh = support::Delivery::new(
        &[
            ("X-Hub-Signature-256", &s("github")),
            ("X-GitHub-Event", "issues"),
            ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ],
        body,
    );
    let (status, resp) = h.post_json("gh", &gh).await;
    assert_eq!(
        (status, resp["duplicate"].as_bool()),
        (200, Some(false)),
        "{resp}"
    );
    let ts = v["sw_ts"].as_i64().unwrap().to_string();
    let sw = support::Delivery::new(
        &[
            ("webhook-id", &s("sw_id")),
            ("webhook-timestamp", &ts),
            ("webhook-signature", &s("standard")),
        ],
        body,
    );
    let (status, resp) = h.post_json("sw", &sw).await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(h.post_json("sw", &sw.with_body("{}")).await.0, 401);
    assert_eq!(h.events("gh").await[0]["kind"], "issues.opened");
    assert_eq!(h.events("sw").await[0]["dedupe_key"], "msg_interop_1");
}
