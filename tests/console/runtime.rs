//! The runtime's console in a real browser: webhooks arriving in the events list live,
//! an event's detail, a failing binding's dead letter replayed by a click, pause /
//! resume / drain by clicks, a backfill paused and cancelled by clicks, and a payload's markup shown as text.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use switchboard::{BaseConnector, Payload, Runtime, RuntimeConfig};

use super::browser::Browser;
use super::{HOSTILE, TOKEN};

/// A handler that fails while `failing` is set and counts what it delivered.
#[derive(Clone, Default)]
struct Switch {
    failing: Arc<AtomicBool>,
    delivered: Arc<AtomicUsize>,
}

#[async_trait]
impl BaseConnector for Switch {
    fn connector_type(&self) -> &str {
        "switch"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(switchboard::Error::Connector("the partner said 500".into()));
        }
        self.delivered.fetch_add(1, Ordering::SeqCst);
        Ok(Payload::Json(json!({"ok": true})))
    }
}

const CONFIG: &str = r#"
admin_token_env = "RT_ADMIN"

[[sources]]
id = "hook"
provider = "generic_hmac"
secret_env = "GENERIC_SECRET"
header = "X-Signature"
prefix = "sha256="

[[triggers]]
id = "orders"
sources = ["hook"]
handler = { local = "switch", capability = "record" }
retry = { max_attempts = 3, backoff = "constant", base = "150ms", jitter = 0.0 }

[telemetry]
trace_url = "https://tempo.example/trace/{trace_id}"
"#;

struct Rt {
    runtime: Runtime,
    base: String,
    _dir: tempfile::TempDir,
}

async fn runtime(handler: Switch) -> Rt {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore = \"sqlite:{}\"\n{CONFIG}",
        dir.path().join("rt.db").display()
    );
    let config = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|name| match name {
            "RT_ADMIN" => Some(TOKEN.to_owned()),
            "GENERIC_SECRET" => Some("generic-secret".to_owned()),
            _ => None,
        })
        .unwrap();
    let runtime = Runtime::builder(config)
        .local_connector("switch", handler)
        .start()
        .await
        .unwrap();
    let base = format!("http://{}", runtime.local_addr());
    Rt {
        runtime,
        base,
        _dir: dir,
    }
}

/// Posts a signed webhook; returns its status.
async fn post_hook(base: &str, body: &Value) -> u16 {
    use hmac::{Hmac, Mac};
    let body = body.to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"generic-secret").unwrap();
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    reqwest::Client::new()
        .post(format!("{base}/hooks/hook"))
        .header("X-Signature", format!("sha256={hex}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_appears_live_and_its_dead_letter_is_replayed_by_a_click() {
    let handler = Switch::default();
    handler.failing.store(true, Ordering::SeqCst);
    let rt = runtime(handler.clone()).await;
    let Some(b) = Browser::start("runtime_events").await else {
        return;
    };
    b.sign_in(&rt.base, TOKEN).await;

    b.goto(&format!("{}/console/events", rt.base)).await;
    b.wait_text("#rt-events", "No events.").await;
    b.js("window.__same_page = true; return true;", vec![])
        .await;
    assert_eq!(post_hook(&rt.base, &json!({"order": 17})).await, 200);
    b.wait_text("#rt-events", "hook").await;
    assert_eq!(
        b.js("return window.__same_page === true;", vec![]).await,
        json!(true)
    );
    b.screenshot("runtime-events").await;

    // Its detail: the binding it matched with the row's failed attempt, the stored
    // headers (the signature redacted) and the payload.
    b.click("#events tr[data-event] a").await;
    b.wait_text(
        "#deliveries tr[data-binding=orders]",
        "the partner said 500",
    )
    .await;
    let detail = b.wait_text("#rt-event", "\"order\": 17").await;
    assert!(detail.contains("x-signature"), "{detail}");
    assert!(
        !detail.contains("sha256="),
        "the signature is not shown: {detail}"
    );
    b.screenshot("runtime-event").await;
    // The attempts' timeline (drawn and as a table), all three once the row is
    // dead-lettered, and the trace link.
    b.wait_js(
        "the timeline draws the three failed attempts",
        "return document.querySelectorAll('svg.timeline rect.bad').length === 3;",
    )
    .await;
    b.wait_text("#attempt-timeline", "handler").await;
    let link = b
        .js(
            "return document.querySelector('#event-trace').href;",
            vec![],
        )
        .await;
    let link = link.as_str().unwrap_or_default();
    let id = link
        .strip_prefix("https://tempo.example/trace/")
        .unwrap_or_else(|| panic!("the trace link follows trace_url: {link:?}"));
    assert!(
        id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()),
        "{link}"
    );
    b.screenshot("runtime-event-timeline").await;

    // The failing binding dead-letters it; replayed by a click once the partner is back.
    b.goto(&format!("{}/console/dead-letters", rt.base)).await;
    b.wait_text("#rt-dead-letters", "the partner said 500")
        .await;
    b.screenshot("runtime-dead-letters").await;
    handler.failing.store(false, Ordering::SeqCst);
    b.click("#dead-letters button[data-action=replay]").await;
    b.wait_text("#notice", "replayed").await;
    super::common::eventually("the replay delivered", || async {
        handler.delivered.load(Ordering::SeqCst) == 1
    })
    .await;

    // A filtered selection: a second dead letter, then "Replay all matching" (which
    // asks first) replays the one never replayed, and a second click replays none:
    // a repeated bulk replay delivers nothing twice.
    handler.failing.store(true, Ordering::SeqCst);
    assert_eq!(post_hook(&rt.base, &json!({"order": 18})).await, 200);
    b.goto(&format!("{}/console/dead-letters?binding=orders", rt.base))
        .await;
    b.wait_js(
        "two dead letters listed",
        "return document.querySelectorAll('#dead-letters tr[data-dead-letter]').length === 2;",
    )
    .await;
    handler.failing.store(false, Ordering::SeqCst);
    b.click("button[data-action=replay-selection]").await;
    b.client
        .accept_alert()
        .await
        .expect("the confirmation is asked");
    b.wait_text("#notice", "replayed 1 dead letter(s)").await;
    super::common::eventually("the new one delivered", || async {
        handler.delivered.load(Ordering::SeqCst) == 2
    })
    .await;
    b.click("button[data-action=replay-selection]").await;
    b.client
        .accept_alert()
        .await
        .expect("the confirmation is asked");
    b.wait_text("#notice", "replayed 0 dead letter(s)").await;

    b.goto(&format!("{}/console", rt.base)).await;
    b.wait_text("#outbox-bindings", "orders").await;
    b.wait_js(
        "the depth chart has points",
        "return !!document.querySelector('#rt-depth polyline[points*=\",\"]');",
    )
    .await;
    b.screenshot("runtime-overview").await;
    rt.runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_is_paused_resumed_and_drained_by_clicks() {
    let rt = runtime(Switch::default()).await;
    let Some(b) = Browser::start("runtime_bindings").await else {
        return;
    };
    b.sign_in(&rt.base, TOKEN).await;
    b.goto(&format!("{}/console/bindings", rt.base)).await;
    b.wait_text("#bindings tr[data-binding=orders] td.state", "active")
        .await;
    b.screenshot("runtime-bindings").await;

    b.click("#bindings tr[data-binding=orders] button[data-action=pause]")
        .await;
    b.wait_text("#bindings tr[data-binding=orders] td.state", "paused")
        .await;
    b.wait_text("#notice", "orders: pause done").await;
    let api = reqwest::Client::new()
        .get(format!("{}/api/v1/triggers", rt.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        api["triggers"][0]["paused"],
        json!(true),
        "the click paused it: {api}"
    );

    b.click("#bindings tr[data-binding=orders] button[data-action=resume]")
        .await;
    b.wait_text("#bindings tr[data-binding=orders] td.state", "active")
        .await;

    b.click("#bindings tr[data-binding=orders] button[data-action=drain]")
        .await;
    b.client
        .accept_alert()
        .await
        .expect("a drain is confirmed first");
    b.wait_js(
        "drained",
        "const td = document.querySelector('#bindings tr[data-binding=orders] td.state'); \
         return !td || td.textContent !== 'active';",
    )
    .await;
    b.goto(&format!("{}/console/bindings/orders", rt.base))
        .await;
    b.wait_text("#history", "drain").await;
    rt.runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_with_markup_renders_as_text() {
    let rt = runtime(Switch::default()).await;
    let Some(b) = Browser::start("runtime_markup").await else {
        return;
    };
    assert_eq!(post_hook(&rt.base, &json!({"note": HOSTILE})).await, 200);
    b.sign_in(&rt.base, TOKEN).await;
    b.goto(&format!("{}/console/events", rt.base)).await;
    b.click("#events tr[data-event] a").await;
    let text = b.wait_text("#event-payload", "window.__pwned=1").await;
    assert!(
        text.contains("<script>"),
        "the markup is shown as text: {text}"
    );
    b.assert_nothing_injected().await;
    rt.runtime.shutdown().await.unwrap();
}

/// The sources and queues pages over plain HTTP (no browser): a source's facts and
/// counts, and a configured queue's depth, as the typed reports render them.
#[tokio::test]
async fn the_sources_and_queues_pages_show_each_source_and_queue() {
    let rt = runtime(Switch::default()).await;
    assert_eq!(post_hook(&rt.base, &json!({"n": 1})).await, 200);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(format!("{}/console/login", rt.base))
        .form(&[("token", TOKEN), ("next", "/sources")])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.headers()["location"], "/console/sources");
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = |path: &'static str| {
        let (http, cookie, base) = (http.clone(), cookie.clone(), rt.base.clone());
        async move {
            let resp = http
                .get(format!("{base}{path}"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            resp.text().await.unwrap()
        }
    };
    let sources = page("/console/sources").await;
    for shown in [
        "data-source=\"hook\"",
        "generic_hmac",
        "/hooks/hook",
        "secrets configured",
    ] {
        assert!(sources.contains(shown), "{shown:?} missing: {sources}");
    }
    let accepted = sources
        .split("class=\"accepted\">")
        .nth(1)
        .and_then(|s| s.split('<').next());
    assert_eq!(accepted, Some("1"), "the accepted webhook is counted");
    let queues = page("/console/queues").await;
    assert!(
        queues.contains("No queues are configured."),
        "this runtime has none: {queues}"
    );
    rt.runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_shows_its_progress_and_is_paused_and_cancelled_by_clicks() {
    let rt = runtime(Switch::default()).await;
    let Some(b) = Browser::start("runtime_backfills").await else {
        return;
    };
    for n in 0..6 {
        assert_eq!(post_hook(&rt.base, &json!({"n": n})).await, 200);
    }
    // Again into `orders`, which had them live: one a second, about six seconds.
    let started: Value = reqwest::Client::new()
        .post(format!("{}/api/v1/backfills", rt.base))
        .bearer_auth(TOKEN)
        .json(&json!({"binding": "orders", "skip_delivered": false, "rate": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["id"].as_i64().expect("a job");
    let row = format!("#backfills tr[data-backfill='{id}']");
    b.sign_in(&rt.base, TOKEN).await;
    b.goto(&format!("{}/console/backfills", rt.base)).await;
    b.wait_text(&format!("{row} td.state"), "running").await;
    b.wait_js(
        "some progress",
        &format!("const p = document.querySelector(\"{row} progress\"); return p && p.value > 0;"),
    )
    .await;
    b.screenshot("runtime-backfills").await;

    b.click(&format!("{row} button[data-action=pause]")).await;
    b.wait_text(&format!("{row} td.state"), "paused").await;
    b.wait_text("#notice", &format!("backfill {id}: pause done"))
        .await;
    let api: Value = reqwest::Client::new()
        .get(format!("{}/api/v1/backfills/{id}", rt.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(api["state"], "paused", "the click paused it: {api}");

    b.click(&format!("{row} button[data-action=cancel]")).await;
    b.client
        .accept_alert()
        .await
        .expect("a cancel is confirmed first");
    b.wait_text(&format!("{row} td.state"), "cancelled").await;
    b.goto(&format!("{}/console/backfills/{id}", rt.base)).await;
    b.wait_text("#counts", "orders").await;
    rt.runtime.shutdown().await.unwrap();
}
