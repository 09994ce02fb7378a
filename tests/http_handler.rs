//! The built-in `http` handler end to end: bindings in a runtime config POST their
//! events, signed per Standard Webhooks, to a real local endpoint; the answers drive
//! the outbox (Retry-After, 4xx dead-lettered at once, redirects, the response cap);
//! the egress policy refuses loopback unless allow-listed, also through a DNS name and
//! at a redirect;
//! the per-endpoint breaker opens and half-opens. The official Python
//! `standardwebhooks` library verifies what was signed.

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "http_handler/endpoint.rs"]
mod endpoint;
#[path = "interop/python.rs"]
mod python;
#[path = "ingest/support.rs"]
mod support;

use std::time::Duration;

use common::eventually;
use dsupport::Rt;
use endpoint::{Answer, Endpoint};
use serde_json::{json, Value};

/// A runtime config with one `http` binding `hook` to `url` (retried up to
/// `max_attempts` times, 20 ms apart) and `outbound` as its `[outbound]` section.
fn config(url: &str, max_attempts: u32, outbound: &str) -> String {
    format!(
        r#"
[outbound]
{outbound}

[[triggers]]
id = "hook"
handler = {{ http = "{url}", secret_env = ["SW_SECRET", "OLD_SECRET"], timeout = "5s" }}
retry = {{ max_attempts = {max_attempts}, backoff = "constant", base = "20ms", jitter = 0.0 }}
"#
    )
}

const LOOPBACK: &str = r#"allow = ["127.0.0.0/8"]"#;

/// The runtime's dead letters of `binding`, once there are `n`.
async fn dead_letters(rt: &Rt, binding: &str, n: usize) -> Vec<Value> {
    common::eventually_some(&format!("{n} dead letter(s) of {binding}"), || async {
        let list = rt
            .get(&format!("/api/v1/dead-letters?binding={binding}"))
            .await["dead_letters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (list.len() >= n).then_some(list)
    })
    .await
}

fn error_kinds(dead_letter: &Value) -> Vec<String> {
    dead_letter["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn last_error(dead_letter: &Value) -> String {
    let errors = dead_letter["errors"].as_array().unwrap();
    errors.last().unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_webhook_triggered_event_is_posted_to_the_endpoint_with_its_identity() {
    let ep = Endpoint::start().await;
    let text = format!(
        r#"
[[sources]]
id = "gh"
provider = "github"
secret_env = "GH_SECRET"
{}"#,
        config(&ep.url("/hook"), 3, LOOPBACK)
    );
    let mut rt = Rt::sqlite(&text, &[]).await;
    let secret = dsupport::env("GH_SECRET").unwrap();
    let d = support::Kind::Github.sign(&secret, "delivery-1", support::now_s());
    let mut req = reqwest::Client::new()
        .post(format!("{}/hooks/gh", rt.base))
        .body(d.body.clone());
    for (k, v) in &d.headers {
        req = req.header(k, v);
    }
    assert_eq!(req.send().await.unwrap().status(), 200);
    eventually("the delivery", || async { ep.count() == 1 }).await;
    let hit = &ep.hits()[0];
    assert_eq!(hit.path, "/hook");
    assert_eq!(hit.body, d.body, "the event's body, as its sender sent it");
    assert_eq!(hit.header("content-type"), "application/json");
    assert!(hit.header("webhook-id").starts_with("msg_"));
    let ts: i64 = hit.header("webhook-timestamp").parse().unwrap();
    assert!((ts - support::now_s()).abs() < 60, "{ts}");
    let sigs: Vec<&str> = hit.header("webhook-signature").split(' ').collect();
    assert_eq!(sigs.len(), 2, "one signature per secret");
    assert!(sigs.iter().all(|s| s.starts_with("v1,")));
    assert_eq!(hit.header("switchboard-binding"), "hook");
    assert_eq!(hit.header("switchboard-attempt"), "1");
    let event_id = hit.header("switchboard-event-id");
    assert_eq!(
        hit.header("webhook-id"),
        switchboard::__private::outbound::message_id(event_id, "hook"),
        "the webhook-id is the delivery's: stable across its attempts"
    );
    eventually("the row done", || async {
        rt.get_direct_counts("hook").await.dispatched == 1
    })
    .await;
    rt.stop().await;
}

/// The `webhook-signature` the Standard Webhooks secret `secret` gives `hit`.
fn signature_with(secret: &str, hit: &endpoint::Hit) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.trim_start_matches("whsec_")).unwrap();
    let signed = support::mac(
        &key,
        &[
            hit.header("webhook-id").as_bytes(),
            b".",
            hit.header("webhook-timestamp").as_bytes(),
            b".",
            &hit.body,
        ],
    );
    format!("v1,{}", b64.encode(signed))
}

/// Operators who mount secrets as files sign deliveries with them: `secret_file`
/// read at start, and again at a reload, so a rotated file signs from then on.
#[tokio::test]
async fn a_secret_file_signs_and_a_reload_reads_the_rotated_file() {
    let ep = Endpoint::start().await;
    let (first, second) = (
        dsupport::env("SW_SECRET").unwrap(),
        dsupport::env("OLD_SECRET").unwrap(),
    );
    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("hook-secret");
    std::fs::write(&file, format!("{first}\n")).unwrap();
    let text = format!(
        r#"
[outbound]
{LOOPBACK}

[[triggers]]
id = "hook"
handler = {{ http = "{}", secret_file = "{}" }}
"#,
        ep.url("/hook"),
        file.display()
    );
    let mut rt = Rt::sqlite_file(&text, &[]).await;
    rt.enqueue("hook", json!({"n": 1})).await;
    eventually("the first delivery", || async { ep.count() == 1 }).await;
    let hit = &ep.hits()[0];
    assert_eq!(hit.header("webhook-signature"), signature_with(&first, hit));

    std::fs::write(&file, &second).unwrap();
    rt.rt().reload().await.unwrap();
    rt.enqueue("hook", json!({"n": 2})).await;
    eventually("the second delivery", || async { ep.count() == 2 }).await;
    let hit = &ep.hits()[1];
    assert_eq!(
        hit.header("webhook-signature"),
        signature_with(&second, hit),
        "signed with the rotated file's secret"
    );
    assert_ne!(signature_with(&first, hit), signature_with(&second, hit));
    rt.stop().await;
}

#[tokio::test]
async fn the_official_python_library_verifies_the_signature_with_either_secret() {
    let python = python::python();
    let ep = Endpoint::start().await;
    let mut rt = Rt::sqlite(&config(&ep.url("/hook"), 3, LOOPBACK), &[]).await;
    rt.enqueue("hook", json!({"n": 1, "text": "héllo"})).await;
    eventually("the delivery", || async { ep.count() == 1 }).await;
    rt.stop().await;
    let hit = &ep.hits()[0];
    use base64::Engine as _;
    let doc = json!({
        "secrets": [dsupport::env("SW_SECRET").unwrap(), dsupport::env("OLD_SECRET").unwrap(), "whsec_d3JvbmctYnV0LXdlbGwtZm9ybWVk"],
        "headers": hit.headers,
        "body_b64": base64::engine::general_purpose::STANDARD.encode(&hit.body),
    });
    let mut child = std::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/verify_standard_webhooks.py"
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdict: Value = serde_json::from_slice(&out.stdout).unwrap();
    let genuine = &verdict["genuine"];
    assert_eq!(genuine[0], "ok", "the current secret verifies: {verdict}");
    assert_eq!(genuine[1], "ok", "the previous secret verifies: {verdict}");
    assert!(
        genuine[2]
            .as_str()
            .unwrap()
            .contains("No matching signature"),
        "another secret does not: {verdict}"
    );
    for v in verdict["tampered"].as_array().unwrap() {
        assert_ne!(v, "ok", "a changed body never verifies: {verdict}");
    }
}

#[tokio::test]
async fn retry_after_on_a_429_schedules_the_next_attempt_that_much_later() {
    let ep = Endpoint::start().await;
    ep.script([Answer::status(429).with_header("retry-after", "30")]);
    let mut rt = Rt::sqlite(&config(&ep.url("/hook"), 3, LOOPBACK), &[]).await;
    rt.enqueue("hook", json!({"n": 1})).await;
    eventually("the first attempt", || async { ep.count() == 1 }).await;
    eventually("its retry recorded", || async {
        rt.get("/api/v1/outbox/stats").await["scheduled"] == 1
    })
    .await;
    let answered_at = ep.hits()[0].at_ms;
    let backend = switchboard::__private::store::open_backend(
        &rt.store_url,
        &switchboard::__private::store::StoreOptions::default(),
    )
    .await
    .unwrap();
    let due = backend
        .next_due_ms(&["hook".to_owned()], 0)
        .await
        .unwrap()
        .expect("the row is scheduled");
    // The policy alone would have retried 20 ms later. The dispatcher reads its clock
    // around the request, the endpoint when the request arrives: they differ by a
    // little either way, so the window starts a second early.
    let delay = due - answered_at;
    assert!(
        (29_000..35_000).contains(&delay),
        "the next attempt is due {delay} ms after the 429, not 30 s"
    );
    let counts = rt.get_direct_counts("hook").await;
    assert_eq!((counts.failed, counts.retried), (1, 1));
    assert_eq!(ep.count(), 1, "nothing was sent meanwhile");
    rt.stop().await;
}

#[tokio::test]
async fn a_400_is_dead_lettered_at_once_unless_retry_4xx_is_set() {
    let ep = Endpoint::start().await;
    ep.by_default(Answer::status(400).with_body("bad payload: n is odd"));
    let text = format!(
        r#"{}
[[triggers]]
id = "patient"
handler = {{ http = "{}", secret_env = "SW_SECRET", retry_4xx = true }}
retry = {{ max_attempts = 3, backoff = "constant", base = "20ms", jitter = 0.0 }}
"#,
        config(&ep.url("/strict"), 5, LOOPBACK),
        ep.url("/patient")
    );
    let mut rt = Rt::sqlite(&text, &[]).await;
    rt.enqueue("hook", json!({"n": 1})).await;
    let dl = dead_letters(&rt, "hook", 1).await;
    assert_eq!(dl[0]["attempts"], 1, "not retried: {}", dl[0]);
    assert_eq!(error_kinds(&dl[0]), ["handler"]);
    let msg = last_error(&dl[0]);
    assert!(
        msg.contains("/strict answered 400: bad payload: n is odd"),
        "{msg}"
    );
    rt.enqueue("patient", json!({"n": 1})).await;
    let dl = dead_letters(&rt, "patient", 1).await;
    assert_eq!(
        dl[0]["attempts"], 3,
        "retried to the last attempt: {}",
        dl[0]
    );
    let hits = ep.hits();
    let on = |p: &str| hits.iter().filter(|h| h.path == p).count();
    assert_eq!((on("/strict"), on("/patient")), (1, 3));
    rt.stop().await;
}

#[tokio::test]
async fn a_redirect_loop_and_an_eleventh_redirect_are_stopped_and_ten_are_followed() {
    let ep = Endpoint::start().await;
    let text = format!(
        r#"{}
[[triggers]]
id = "ten"
handler = {{ http = "{}", secret_env = "SW_SECRET" }}

[[triggers]]
id = "eleven"
handler = {{ http = "{}", secret_env = "SW_SECRET" }}
"#,
        config(&ep.url("/loop/a"), 3, LOOPBACK),
        ep.url("/chain/10"),
        ep.url("/chain/11"),
    );
    let mut rt = Rt::sqlite(&text, &[]).await;
    for b in ["hook", "ten", "eleven"] {
        rt.enqueue(b, json!({"n": 1})).await;
    }
    let dl = dead_letters(&rt, "hook", 1).await;
    assert_eq!(dl[0]["attempts"], 1, "{}", dl[0]);
    let msg = last_error(&dl[0]);
    assert!(msg.contains("redirect loop"), "{msg}");
    assert!(msg.contains("/loop/a was already visited"), "{msg}");
    let dl = dead_letters(&rt, "eleven", 1).await;
    let msg = last_error(&dl[0]);
    assert!(msg.contains("stopped after 10 redirects"), "{msg}");
    eventually("ten redirects followed", || async {
        rt.get_direct_counts("ten").await.dispatched == 1
    })
    .await;
    let loops = ep
        .hits()
        .iter()
        .filter(|h| h.path.starts_with("/loop"))
        .count();
    assert_eq!(
        loops, 2,
        "a → b, then b → a is stopped before a second request"
    );
    rt.stop().await;
}

#[tokio::test]
async fn a_response_body_past_the_cap_is_not_read() {
    let ep = Endpoint::start().await;
    let outbound = format!("{LOOPBACK}\nmax_response_bytes = 1024");
    let mut rt = Rt::sqlite(&config(&ep.url("/big"), 1, &outbound), &[]).await;
    // An endless 200: delivered (the status is the answer) without reading past the
    // cap; reading it all would end in the 5 s timeout instead.
    rt.enqueue("hook", json!({"n": 1})).await;
    eventually("the delivery done", || async {
        let c = rt.get_direct_counts("hook").await;
        c.dispatched + c.failed == 1
    })
    .await;
    let c = rt.get_direct_counts("hook").await;
    assert_eq!((c.dispatched, c.failed), (1, 0));
    rt.stop().await;
    // Where the body matters (the `http.request` capability's call), past the cap
    // is an error.
    use switchboard::__private::outbound::{
        HttpDelivery, HttpError, HttpRequest, OutboundSettings,
    };
    let mut settings = OutboundSettings::default().allow("127.0.0.0/8").unwrap();
    settings = settings.breaker(5, Duration::from_secs(30));
    let client = HttpDelivery::new(&settings).unwrap();
    let e = client
        .request(HttpRequest {
            method: reqwest::Method::GET,
            url: ep.url("/big"),
            headers: vec![],
            body: Default::default(),
            sign: None,
            timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, HttpError::TooLarge { .. }), "{e}");
}

#[tokio::test]
async fn loopback_is_refused_without_an_allow_list_also_through_a_dns_name() {
    let ep = Endpoint::start().await;
    let text = format!(
        r#"{}
[[triggers]]
id = "by-name"
handler = {{ http = "{}", secret_env = "SW_SECRET" }}
"#,
        config(&ep.url("/hook"), 5, ""),
        ep.localhost_url("/hook"),
    );
    let mut rt = Rt::sqlite(&text, &[]).await;
    rt.enqueue("hook", json!({"n": 1})).await;
    rt.enqueue("by-name", json!({"n": 1})).await;
    let dl = dead_letters(&rt, "hook", 1).await;
    assert_eq!(dl[0]["attempts"], 1, "a refusal is not retried: {}", dl[0]);
    assert_eq!(error_kinds(&dl[0]), ["egress_refused"]);
    let msg = last_error(&dl[0]);
    assert!(
        msg.contains("the egress policy refuses 127.0.0.1 (a loopback address)")
            && msg.contains("[outbound] allow"),
        "{msg}"
    );
    let dl = dead_letters(&rt, "by-name", 1).await;
    assert_eq!(error_kinds(&dl[0]), ["egress_refused"]);
    let msg = last_error(&dl[0]);
    assert!(
        msg.contains("localhost resolves to") && msg.contains("loopback address"),
        "{msg}"
    );
    assert_eq!(ep.count(), 0, "nothing reached the endpoint");
    rt.stop().await;
}

/// A redirect to an address the policy refuses is the refusal it would be as the
/// first URL: `egress_refused`, one attempt, although `retry_4xx` retries the
/// binding's other failures (it was once `handler` and retried; a redirect to a name
/// was refused, so the outcome depended on the spelling).
#[tokio::test]
async fn a_redirect_to_a_refused_address_is_egress_refused_at_once_even_with_retry_4xx() {
    let ep = Endpoint::start().await;
    let text = format!(
        r#"
[outbound]
allow = ["127.0.0.1/32"]

[[triggers]]
id = "hook"
handler = {{ http = "{}", secret_env = "SW_SECRET", retry_4xx = true }}
retry = {{ max_attempts = 5, backoff = "constant", base = "20ms", jitter = 0.0 }}
"#,
        ep.url(&format!("/to/127.0.0.2:{}/hook", ep.addr.port()))
    );
    let mut rt = Rt::sqlite(&text, &[]).await;
    rt.enqueue("hook", json!({"n": 1})).await;
    let dl = dead_letters(&rt, "hook", 1).await;
    assert_eq!(dl[0]["attempts"], 1, "a refusal is not retried: {}", dl[0]);
    assert_eq!(error_kinds(&dl[0]), ["egress_refused"]);
    let msg = last_error(&dl[0]);
    assert!(
        msg.contains(&format!(
            "redirected to http://127.0.0.2:{}/hook: the egress policy refuses 127.0.0.2 (a loopback address)",
            ep.addr.port()
        )) && msg.contains("allow = [\"127.0.0.2/32\"]"),
        "{msg}"
    );
    assert_eq!(ep.count(), 1, "only the redirecting request was sent");
    rt.stop().await;
}

#[tokio::test]
async fn an_open_breaker_fails_attempts_at_once_without_a_request() {
    let ep = Endpoint::start().await;
    ep.by_default(Answer::status(500));
    let outbound = format!("{LOOPBACK}\nbreaker = {{ errors = 2, cool_off = \"1h\" }}");
    let mut rt = Rt::sqlite(&config(&ep.url("/hook"), 4, &outbound), &[]).await;
    rt.enqueue("hook", json!({"n": 1})).await;
    let dl = dead_letters(&rt, "hook", 1).await;
    assert_eq!(
        error_kinds(&dl[0]),
        ["handler", "handler", "breaker_open", "breaker_open"]
    );
    assert!(last_error(&dl[0]).contains("circuit breaker"), "{}", dl[0]);
    assert_eq!(ep.count(), 2, "the open breaker sent nothing");
    rt.stop().await;
}

/// The breaker in time the test moves: open after three failures, one probe after the
/// cool-off (failed: open again; succeeded: closed).
#[tokio::test]
async fn the_breaker_opens_then_half_opens_for_one_probe_after_the_cool_off() {
    use switchboard::__private::outbound::{
        HttpDelivery, HttpError, HttpRequest, OutboundSettings,
    };
    let ep = Endpoint::start().await;
    ep.by_default(Answer::status(503));
    let cool_off = Duration::from_secs(30);
    let settings = OutboundSettings::default()
        .allow("127.0.0.0/8")
        .unwrap()
        .breaker(3, cool_off);
    let client = HttpDelivery::new(&settings).unwrap();
    let post = || {
        client.deliver(HttpRequest {
            method: reqwest::Method::POST,
            url: ep.url("/hook"),
            headers: vec![],
            body: "{}".into(),
            sign: None,
            timeout: Duration::from_secs(5),
        })
    };
    let endpoint = format!("http://127.0.0.1:{}", ep.addr.port());
    for _ in 0..3 {
        assert_eq!(post().await.unwrap().status, 503);
    }
    assert!(client.breaker_open(&endpoint));
    let e = post().await.unwrap_err();
    assert!(matches!(e, HttpError::BreakerOpen { .. }), "{e}");
    assert_eq!(ep.count(), 3, "refused without a request");
    // The cool-off passes in virtual time (the sockets run on real time around it).
    tokio::time::pause();
    tokio::time::advance(cool_off).await;
    tokio::time::resume();
    assert!(!client.breaker_open(&endpoint), "half-open");
    assert_eq!(post().await.unwrap().status, 503, "the probe went through");
    assert_eq!(ep.count(), 4);
    assert!(client.breaker_open(&endpoint), "a failed probe re-opens it");
    assert!(matches!(post().await, Err(HttpError::BreakerOpen { .. })));
    tokio::time::pause();
    tokio::time::advance(cool_off).await;
    tokio::time::resume();
    ep.by_default(Answer::status(200));
    assert_eq!(post().await.unwrap().status, 200, "the probe succeeds");
    for _ in 0..3 {
        assert_eq!(post().await.unwrap().status, 200, "closed: all pass");
    }
    assert_eq!(ep.count(), 8);
}
