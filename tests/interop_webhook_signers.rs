//! Interop: signatures made by the providers' official libraries
//! (`@octokit/webhooks-methods` for GitHub, `standardwebhooks`) are accepted, and
//! rejected once the body is changed. `.ci/run` installs the Node packages.
#![cfg(feature = "runtime")]

use std::path::Path;

use switchboard::webhooks::signature::{github, standard_webhooks, Rejection};

#[test]
fn signatures_from_the_official_libraries_verify() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    assert!(
        dir.join("node_modules/standardwebhooks").exists(),
        "Node packages missing: run `npm ci --prefix tests/interop` (bash .ci/run does)"
    );
    let out = std::process::Command::new("node")
        .arg(dir.join("sign.mjs"))
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON from sign.mjs");
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
