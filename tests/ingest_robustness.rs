//! Bad input gets a clear error and loses nothing: unknown sources, oversized and
//! malformed bodies, rate limits, a full store, a broken database file; plus the admin
//! API's paging, auth and metrics, and secrets kept out of everything it shows.
#![cfg(feature = "runtime")]

#[path = "ingest/support.rs"]
mod support;

use serde_json::Value;
use support::{all_sources, env, Delivery, Harness, Kind};

#[tokio::test]
async fn an_unknown_source_is_404() {
    let h = Harness::sqlite(&all_sources()).await;
    let (status, body) = h.post_json("nope", &Kind::Github.signed("d")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_source"))
    );
}

#[tokio::test]
async fn an_oversized_body_is_413_whether_declared_or_streamed_and_is_audited() {
    let h = Harness::sqlite(
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\nmax_body_bytes = 1024\n",
    )
    .await;
    let big = Kind::Github.signed("d").with_body(vec![b'x'; 4096]);
    let (status, body) = h.post_json("gh", &big).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("body_too_large"))
    );
    // No Content-Length: a chunked body is cut off at the limit too.
    let chunks =
        futures_util::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 512])));
    let resp = h
        .http
        .post(h.url("/hooks/gh"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let audit = support::eventually("two audit rows", || async {
        let rows = h.get("/api/v1/rejections?source=gh").await["rejections"]
            .as_array()
            .cloned()?;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    assert!(audit.iter().all(|r| r["reason"] == "body_too_large"));
    assert!(h.events("gh").await.is_empty());
    // A body of exactly the limit is fine; one byte more is not. (The delivery id is
    // part of the body, so its length sets the body's.)
    let skeleton = Kind::Github.signed("").body.len();
    let at_limit = "d".repeat(1024 - skeleton);
    assert_eq!(
        h.post_json("gh", &Kind::Github.signed(&at_limit)).await.0,
        200
    );
    let over = format!("{at_limit}d");
    assert_eq!(h.post_json("gh", &Kind::Github.signed(&over)).await.0, 413);
}

#[tokio::test]
async fn a_signed_body_that_is_not_json_is_400_with_a_reason() {
    let h = Harness::sqlite(&all_sources()).await;
    let secret = env("GENERIC_SECRET").unwrap();
    let body = b"{\"unterminated\": ";
    let sig = {
        use hmac::Mac;
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        m.update(body);
        format!("sha256={}", support::hex(&m.finalize().into_bytes()))
    };
    let d = Delivery::new(&[("X-Signature", &sig), ("X-Delivery", "x")], &body[..]);
    let (status, resp) = h.post_json("generic", &d).await;
    assert_eq!(
        (status, resp["error"].as_str()),
        (400, Some("invalid_json"))
    );
    assert!(resp["message"].as_str().unwrap().contains("not valid JSON"));
    assert!(h.events("generic").await.is_empty());
}

#[tokio::test]
async fn a_source_over_its_rate_limit_gets_429_with_retry_after() {
    let h = Harness::sqlite(
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\nrate_limit = { per_second = 0.01, burst = 2 }\n",
    )
    .await;
    for i in 0..2 {
        assert_eq!(
            h.post_json("gh", &Kind::Github.signed(&format!("r{i}")))
                .await
                .0,
            200
        );
    }
    let resp = h.post("gh", &Kind::Github.signed("r2")).await;
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=100).contains(&retry), "{retry}");
    assert_eq!(h.events("gh").await.len(), 2);
    assert!(h.metrics().await.contains("outcome=\"rate_limited\""));
}

#[tokio::test]
async fn a_full_store_answers_503_with_retry_after_and_acknowledges_only_what_it_stored() {
    let h = Harness::sqlite(&format!("sqlite_max_bytes = 262144\n{}", all_sources())).await;
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for i in 0..200 {
        // 4 KiB of padding per event fills 256 KiB quickly (the empty schema's
        // tables and indexes take a page each; schema 11 added six).
        let body = format!(r#"{{"thing":"fill-{i}","pad":"{}"}}"#, "p".repeat(4096));
        let d = Delivery::new(
            &[
                (
                    "X-Signature",
                    &format!("sha256={}", generic_sig(body.as_bytes())),
                ),
                ("X-Delivery", &format!("fill-{i}")),
            ],
            body,
        );
        let resp = h.post("generic", &d).await;
        match resp.status().as_u16() {
            200 => acknowledged.push(
                resp.json::<Value>().await.unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            503 => {
                assert!(resp.headers().contains_key("retry-after"));
                let body: Value = resp.json().await.unwrap();
                assert_eq!(body["error"], "store_unavailable");
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(refused == 3, "the cap was never reached");
    assert!(!acknowledged.is_empty());
    let stored: Vec<String> = h
        .events("generic")
        .await
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let mut want = acknowledged.clone();
    want.sort();
    let mut got = stored.clone();
    got.sort();
    assert_eq!(
        got, want,
        "every acknowledged event is stored, and nothing else"
    );
}

fn generic_sig(body: &[u8]) -> String {
    use hmac::Mac;
    let mut m =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(env("GENERIC_SECRET").unwrap().as_bytes())
            .unwrap();
    m.update(body);
    support::hex(&m.finalize().into_bytes())
}

#[tokio::test]
async fn a_file_that_is_not_a_database_fails_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.db");
    std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore = \"sqlite:{}\"\n",
        path.display()
    );
    let config = switchboard::RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(env)
        .unwrap();
    let err = switchboard::Runtime::start(config)
        .await
        .expect_err("start fails");
    assert_eq!(err.code(), "store_unavailable");
    assert!(
        err.to_string().contains("not a usable SQLite database"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        vec![0x42u8; 8192],
        "the file is left as it was"
    );
}

#[tokio::test]
async fn events_page_newest_first_with_a_cursor() {
    let h = Harness::sqlite(&all_sources()).await;
    for i in 0..7 {
        assert_eq!(
            h.post_json("gh", &Kind::Github.signed(&format!("p{i}")))
                .await
                .0,
            200
        );
    }
    assert_eq!(
        h.post_json("slack", &Kind::Slack.signed("other")).await.0,
        200
    );
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page = h
            .get(&format!("/api/v1/events?source=gh&limit=3&after={after}"))
            .await;
        let events = page["events"].as_array().unwrap();
        seen.extend(events.iter().map(|e| e["id"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(n) => after = n.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(seen, sorted, "newest first");
    assert_eq!(
        h.get("/api/v1/events").await["events"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
    for bad in ["limit=0", "limit=501", "limit=x", "after=zz"] {
        let resp = h
            .http
            .get(h.url(&format!("/api/v1/events?{bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{bad}");
    }
}

#[tokio::test]
async fn secrets_never_appear_in_stored_headers_rejections_or_the_admin_api() {
    let h = Harness::sqlite(&all_sources()).await;
    for k in Kind::ALL {
        h.post("nope", &k.signed("s")).await;
        assert_eq!(h.post_json(k.source(), &k.signed("s")).await.0, 200);
        h.post(k.source(), &k.sign("wrong-secret", "s2", support::now_s()))
            .await;
    }
    let mut shown = String::new();
    shown.push_str(&h.get("/api/v1/sources").await.to_string());
    for k in Kind::ALL {
        shown.push_str(
            &h.get(&format!("/api/v1/sources/{}", k.source()))
                .await
                .to_string(),
        );
    }
    shown.push_str(&h.get("/api/v1/events?limit=500").await.to_string());
    let rejections = support::eventually("audit rows", || async {
        let v = h.get("/api/v1/rejections?limit=500").await;
        (v["rejections"].as_array()?.len() >= Kind::ALL.len()).then_some(v)
    })
    .await;
    shown.push_str(&rejections.to_string());
    shown.push_str(&h.metrics().await);
    for var in [
        "GH_SECRET",
        "OLD_SECRET",
        "SLACK_SECRET",
        "LINEAR_SECRET",
        "NOTION_SECRET",
        "STRIPE_SECRET",
        "SW_SECRET",
        "GENERIC_SECRET",
    ] {
        let secret = env(var).unwrap();
        assert!(!shown.contains(&secret), "{var} leaked");
    }
    // Signatures are blanked, the rest of the headers kept.
    let events = h.events("gh").await;
    assert_eq!(events[0]["headers"]["x-hub-signature-256"], "[redacted]");
    assert_eq!(events[0]["headers"]["x-github-event"], "issues");
    let canonical = h.events("canonical").await;
    assert_eq!(canonical[0]["headers"]["authorization"], "[redacted]");
}

#[tokio::test]
async fn rejections_are_counted_per_source_and_reason_and_audited() {
    let h = Harness::sqlite(&all_sources()).await;
    h.post("gh", &Kind::Github.sign("wrong", "a", 0)).await;
    h.post("gh", &Kind::Github.sign("wrong", "b", 0)).await;
    h.post(
        "stripe",
        &Kind::Stripe.sign(&env("STRIPE_SECRET").unwrap(), "c", 1),
    )
    .await;
    h.post_json("gh", &Kind::Github.signed("ok")).await;
    h.post_json("gh", &Kind::Github.signed("ok")).await;
    let m = h.metrics().await;
    for line in [
        "switchboard_ingress_rejections_total{source=\"gh\",reason=\"bad_signature\"} 2",
        "switchboard_ingress_rejections_total{source=\"stripe\",reason=\"stale_timestamp\"} 1",
        "switchboard_ingress_requests_total{source=\"gh\",outcome=\"stored\"} 1",
        "switchboard_ingress_requests_total{source=\"gh\",outcome=\"duplicate\"} 1",
    ] {
        assert!(m.contains(line), "missing {line:?} in\n{m}");
    }
    let rows = support::eventually("three audit rows", || async {
        let v = h.get("/api/v1/rejections").await;
        let rows = v["rejections"].as_array()?.clone();
        (rows.len() == 3).then_some(rows)
    })
    .await;
    assert_eq!(rows[0]["source"], "stripe");
    assert_eq!(rows[0]["reason"], "stale_timestamp");
    assert!(rows[0]["detail"].as_str().unwrap().contains("old"));
    assert_eq!(rows[1]["headers"]["x-hub-signature-256"], "[redacted]");
}

#[tokio::test]
async fn an_admin_token_guards_the_admin_api_but_not_ingress() {
    let h = Harness::sqlite(&format!(
        "admin_token_env = \"ADMIN_TOKEN\"\n{}",
        all_sources()
    ))
    .await;
    for path in [
        "/api/v1/sources",
        "/api/v1/events",
        "/api/v1/rejections",
        "/metrics",
    ] {
        let resp = h.http.get(h.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let resp = h
            .http
            .get(h.url(path))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let resp = h
            .http
            .get(h.url(path))
            .bearer_auth("admin-token-123")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    assert_eq!(h.post_json("gh", &Kind::Github.signed("x")).await.0, 200);
    assert_eq!(
        h.http.get(h.url("/healthz")).send().await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn a_flood_of_forgeries_is_counted_in_full_but_audited_only_up_to_the_budget() {
    // A budget that refills once in 1,000 s: exactly the burst is audited however
    // fast or slow this machine posts the flood.
    let config = all_sources().replacen(
        "id = \"gh\"\n",
        "id = \"gh\"\nrejection_audit_limit = { per_second = 0.001, burst = 50 }\n",
        1,
    );
    let h = Harness::sqlite(&config).await;
    let forged = Kind::Github.sign("forged", "f", support::now_s());
    for _ in 0..300 {
        assert_eq!(h.post("gh", &forged).await.status(), 401);
    }
    let m = h.metrics().await;
    for line in [
        "switchboard_ingress_rejections_total{source=\"gh\",reason=\"bad_signature\"} 300",
        "switchboard_ingress_audit_skipped_total{source=\"gh\"} 250",
    ] {
        assert!(m.contains(line), "missing {line:?} in\n{m}");
    }
    let rows = support::eventually("the audit rows to land", || async {
        let v = h.get("/api/v1/rejections?source=gh&limit=500").await;
        let n = v["rejections"].as_array()?.len();
        (n >= 50).then_some(n)
    })
    .await;
    assert_eq!(rows, 50, "the audit table holds the budget, not the flood");
}
