//! Every provider rule through real HTTP: valid, tampered, wrong secret, rotated
//! secret, missing headers, stale and future timestamps, duplicates, and each
//! provider's handshake.
#![cfg(feature = "runtime")]

#[path = "ingest/support.rs"]
mod support;

use serde_json::Value;
use support::{all_sources, env, now_s, Delivery, Harness, Kind};

async fn harness() -> Harness {
    Harness::sqlite(&all_sources()).await
}

#[tokio::test]
async fn a_valid_delivery_is_stored_once_for_every_provider() {
    let h = harness().await;
    for k in Kind::ALL {
        let d = k.signed("del-1");
        let (status, body) = h.post_json(k.source(), &d).await;
        assert_eq!(status, 200, "{k:?}: {body}");
        assert_eq!(body["duplicate"], false, "{k:?}");
        let events = h.events(k.source()).await;
        assert_eq!(events.len(), 1, "{k:?}");
        let e = &events[0];
        assert_eq!(e["id"], body["id"], "{k:?}");
        assert_eq!(e["kind"], k.expected_kind(), "{k:?}");
        assert_eq!(e["signature"], "verified");
        assert_eq!(e["tenant"], "default");
        assert_eq!(
            e["body"].as_str().unwrap().as_bytes(),
            d.body.as_slice(),
            "{k:?}: raw body kept"
        );
        assert!(e["payload"].is_object(), "{k:?}: payload parsed");
        assert_eq!(e["trace_id"].as_str().unwrap().len(), 32);
    }
}

#[tokio::test]
async fn a_redelivery_answers_duplicate_and_stores_nothing_new() {
    let h = harness().await;
    for k in Kind::ALL {
        let d = k.signed("del-dup");
        let (_, first) = h.post_json(k.source(), &d).await;
        let (status, again) = h.post_json(k.source(), &d).await;
        assert_eq!(status, 200, "{k:?}");
        assert_eq!(again["duplicate"], true, "{k:?}");
        assert_eq!(
            again["id"], first["id"],
            "{k:?}: the duplicate names the stored event"
        );
        assert_eq!(h.events(k.source()).await.len(), 1, "{k:?}");
    }
}

#[tokio::test]
async fn tampered_bodies_wrong_secrets_and_missing_headers_are_refused_and_nothing_is_stored() {
    let h = harness().await;
    for k in Kind::ALL {
        let good = k.signed("del-bad");
        let mut tampered = good.body.clone();
        tampered.insert(1, b' ');
        let cases = [
            ("tampered", good.with_body(tampered), "bad_signature"),
            (
                "wrong secret",
                k.sign("not-the-secret", "del-bad", now_s()),
                "bad_signature",
            ),
            (
                "missing headers",
                good.without("sig").without("authorization"),
                "missing_header",
            ),
        ];
        for (what, d, reason) in cases {
            let (status, body) = h.post_json(k.source(), &d).await;
            assert_eq!(status, 401, "{k:?} {what}: {body}");
            assert_eq!(body["error"], reason, "{k:?} {what}");
        }
        assert!(h.events(k.source()).await.is_empty(), "{k:?}");
    }
}

#[tokio::test]
async fn a_rotated_secret_still_verifies() {
    let h = harness().await;
    for k in Kind::ALL {
        let d = k.sign(&env("OLD_SECRET").unwrap(), "del-rot", now_s());
        let (status, body) = h.post_json(k.source(), &d).await;
        assert_eq!(status, 200, "{k:?}: {body}");
    }
}

#[tokio::test]
async fn stale_and_future_timestamps_are_refused() {
    let h = harness().await;
    for k in Kind::ALL.into_iter().filter(|k| k.has_timestamp()) {
        let secret = env(k.secret_env()).unwrap();
        for (offset, reason) in [(-3600, "stale_timestamp"), (3600, "future_timestamp")] {
            let d = k.sign(&secret, "del-ts", now_s() + offset);
            let (status, body) = h.post_json(k.source(), &d).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (401, Some(reason)),
                "{k:?} {offset}"
            );
        }
        assert!(h.events(k.source()).await.is_empty(), "{k:?}");
    }
}

#[tokio::test]
async fn slack_url_verification_is_answered_with_the_challenge_as_text() {
    let h = harness().await;
    let body = r#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let ts = now_s().to_string();
    let secret = env("SLACK_SECRET").unwrap();
    let sig = {
        let d = Kind::Slack.sign(&secret, "x", 0);
        let _ = d;
        use hmac::Mac;
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        m.update(format!("v0:{ts}:{body}").as_bytes());
        format!("v0={}", support::hex(&m.finalize().into_bytes()))
    };
    let d = Delivery::new(
        &[
            ("X-Slack-Request-Timestamp", &ts),
            ("X-Slack-Signature", &sig),
        ],
        body,
    );
    let resp = h.post("slack", &d).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert_eq!(
        resp.text().await.unwrap(),
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    assert!(
        h.events("slack").await.is_empty(),
        "a handshake stores nothing"
    );
}

#[tokio::test]
async fn slack_refusals_ask_slack_not_to_retry_and_retries_dedupe_by_event_id() {
    let h = harness().await;
    let bad = Kind::Slack.sign("wrong", "Ev1", now_s());
    let resp = h.post("slack", &bad).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["x-slack-no-retry"], "1");

    let first = Kind::Slack.signed("Ev1");
    assert_eq!(h.post_json("slack", &first).await.1["duplicate"], false);
    // Slack's retry: same event_id, a new timestamp and signature, X-Slack-Retry-Num.
    let mut retry = Kind::Slack.sign(&env("SLACK_SECRET").unwrap(), "Ev1", now_s() - 2);
    retry.headers.push(("X-Slack-Retry-Num".into(), "1".into()));
    retry
        .headers
        .push(("X-Slack-Retry-Reason".into(), "http_timeout".into()));
    let (status, body) = h.post_json("slack", &retry).await;
    assert_eq!((status, body["duplicate"].as_bool()), (200, Some(true)));
    assert_eq!(h.events("slack").await.len(), 1);
}

#[tokio::test]
async fn github_ping_is_accepted_and_recorded_and_hooks_sharing_a_delivery_are_kept_apart() {
    let h = harness().await;
    let secret = env("GH_SECRET").unwrap();
    let body = r#"{"zen":"Design for failure.","hook_id":7}"#;
    let sig = {
        use hmac::Mac;
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        m.update(body.as_bytes());
        format!("sha256={}", support::hex(&m.finalize().into_bytes()))
    };
    let ping = |hook: &str| {
        Delivery::new(
            &[
                ("X-Hub-Signature-256", &sig),
                ("X-GitHub-Event", "ping"),
                ("X-GitHub-Delivery", "guid-1"),
                ("X-GitHub-Hook-ID", hook),
            ],
            body,
        )
    };
    assert_eq!(h.post_json("gh", &ping("7")).await.0, 200);
    assert_eq!(
        h.post_json("gh", &ping("8")).await.1["duplicate"],
        false,
        "another hook, same GUID"
    );
    assert_eq!(h.post_json("gh", &ping("7")).await.1["duplicate"], true);
    let events = h.events("gh").await;
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e["kind"] == "ping"));
}

#[tokio::test]
async fn notion_verification_token_is_captured_shown_to_the_operator_and_then_verifies() {
    // No secret_env: the key is the token Notion sends in its first request.
    let h = Harness::sqlite("[[sources]]\nid = \"notion\"\nprovider = \"notion\"\n").await;
    let signed = Kind::Notion.sign("secret_captured", "n-1", now_s());
    let (status, body) = h.post_json("notion", &signed).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("no_verification_token"))
    );

    let first = Delivery::new(&[], r#"{"verification_token":"secret_captured"}"#);
    assert_eq!(h.post_json("notion", &first).await.0, 200);
    let shown = h.get("/api/v1/sources/notion").await;
    assert_eq!(shown["verification_token"], "secret_captured");
    let listing = h.get("/api/v1/sources").await.to_string();
    assert!(
        !listing.contains("secret_captured"),
        "only the one-source view shows it"
    );
    assert!(
        h.events("notion").await.is_empty(),
        "the handshake is not an event"
    );

    let (status, body) = h.post_json("notion", &signed).await;
    assert_eq!((status, body["duplicate"].as_bool()), (200, Some(false)));
    // A forged "first request" cannot replace the token in use.
    let forged = Delivery::new(&[], r#"{"verification_token":"attacker"}"#);
    assert_eq!(h.post_json("notion", &forged).await.0, 409);
    assert_eq!(
        h.get("/api/v1/sources/notion").await["verification_token"],
        "secret_captured"
    );
    // The operator clears it to re-subscribe.
    let resp = h
        .http
        .delete(h.url("/api/v1/sources/notion/verification_token"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(
        h.get("/api/v1/sources/notion").await["verification_token"],
        Value::Null
    );
    assert_eq!(h.post_json("notion", &first).await.0, 200);
}

#[tokio::test]
async fn concurrent_notion_verification_requests_capture_exactly_one_token() {
    let h = Harness::sqlite("[[sources]]\nid = \"notion\"\nprovider = \"notion\"\n").await;
    let requests: Vec<Delivery> = (0..16)
        .map(|i| Delivery::new(&[], format!(r#"{{"verification_token":"secret_{i}"}}"#)))
        .collect();
    let answers =
        futures_util::future::join_all(requests.iter().map(|d| h.post_json("notion", d))).await;
    let captured = answers.iter().filter(|(s, _)| *s == 200).count();
    let refused = answers.iter().filter(|(s, _)| *s == 409).count();
    assert_eq!((captured, refused), (1, 15), "{answers:?}");
    let shown = h.get("/api/v1/sources/notion").await["verification_token"].clone();
    let token = shown.as_str().unwrap().to_owned();
    // The token shown is the one that verifies.
    let signed = Kind::Notion.sign(&token, "n-1", now_s());
    assert_eq!(h.post_json("notion", &signed).await.0, 200);
}
