//! The consoles in a real browser (issue 25): headless Chromium over WebDriver
//! against a real gateway and a real runtime, driven the way an operator uses them.
//! `console/browser.rs` holds the harness; the gateway's scenarios are here, the
//! runtime's in `console/runtime.rs`; `console/http.rs` checks the same rules with a
//! plain HTTP client (cookies, CSRF, headers), which needs no browser.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "console/browser.rs"]
mod browser;
mod common;
#[path = "console/http.rs"]
mod http;
#[path = "console/runtime.rs"]
mod runtime;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use switchboard::gateway::{ApprovalMode, GatewayConfig, TestGateway, TEST_EXECUTE_TIMEOUT};
use switchboard::{
    BackoffPolicy, BaseConnector, ConnectorConfig, MultiConnectorRunner, Payload, Registration,
    RunnerOptions,
};

use browser::Browser;
use common::{spawn, start, tagged, DEADLINE};

/// The operator token every console here is started with.
pub const TOKEN: &str = "console-test-token";

async fn gateway(approval: ApprovalMode) -> TestGateway {
    TestGateway::start_with(
        GatewayConfig::default()
            .with_default_execute_timeout(TEST_EXECUTE_TIMEOUT)
            .with_approval(approval)
            .with_admin_token(TOKEN),
    )
    .await
}

/// The markup a hostile connector or payload would like to see run.
pub const HOSTILE: &str =
    "<script>window.__pwned=1</script>\"><img src=x onerror=\"window.__pwned=2\">";

/// Stops a runner started by the test and waits for it, within the deadline.
async fn stop(
    runner: &MultiConnectorRunner,
    join: tokio::task::JoinHandle<switchboard::Result<()>>,
) {
    runner.shutdown_handle().shutdown();
    tokio::time::timeout(DEADLINE, join)
        .await
        .expect("the runner stops")
        .unwrap()
        .unwrap();
}

/// A connector whose metadata holds markup.
struct Hostile;

#[async_trait]
impl BaseConnector for Hostile {
    fn connector_type(&self) -> &str {
        "hostile"
    }
    fn metadata(&self) -> HashMap<String, String> {
        HashMap::from([("note".to_owned(), HOSTILE.to_owned())])
    }
    fn capabilities(&self) -> Vec<switchboard::proto::TaskTypeSchema> {
        vec![switchboard::Capability::new("poke")
            .description(HOSTILE)
            .input_schema(json!({"title": HOSTILE}))
            .build()]
    }
    async fn execute(&self, p: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Ok(p)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_is_required_and_a_wrong_token_is_refused() {
    let gw = gateway(ApprovalMode::Auto).await;
    let Some(b) = Browser::start("sign_in").await else {
        return;
    };
    let base = gw.http_url();

    b.goto(&format!("{base}/console/registrations")).await;
    b.wait_js(
        "redirected to sign-in",
        "return location.pathname === '/console/login';",
    )
    .await;
    assert!(b.url().await.contains("next=%2Fconsole%2Fregistrations"));
    b.screenshot("sign-in").await;

    b.type_into("#token", "not-the-token").await;
    b.click("section.login button").await;
    b.wait_text("p.error", "not this console's operator token")
        .await;
    assert!(
        b.url().await.ends_with("/console/login"),
        "still signing in"
    );

    b.type_into("#token", TOKEN).await;
    b.click("section.login button").await;
    b.wait_text("main h1", "Registrations").await;
    assert!(
        b.url().await.ends_with("/console/registrations"),
        "back where it was going"
    );
    // The session cookie is HttpOnly: the page's script cannot read it.
    let cookies = b.js("return document.cookie;", vec![]).await;
    assert_eq!(cookies, json!(""), "no script-readable cookie");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_appear_count_and_disappear_without_a_reload() {
    let gw = gateway(ApprovalMode::Auto).await;
    let Some(b) = Browser::start("live_registrations").await else {
        return;
    };
    let base = gw.http_url();
    b.sign_in(&base, TOKEN).await;
    b.goto(&format!("{base}/console/registrations")).await;
    b.wait_js(
        "live stream open",
        "return window.switchboardConsole && window.switchboardConsole.connected;",
    )
    .await;
    b.wait_text("#gw-registrations", "0 matching").await;
    let marker = b
        .js("window.__same_page = true; return true;", vec![])
        .await;
    assert_eq!(marker, json!(true));

    let shown = Instant::now();
    let (runner, join) = start(
        RunnerOptions::default(),
        vec![
            tagged(&gw.ws_url(), "acme", "alpha"),
            tagged(&gw.ws_url(), "acme", "beta"),
        ],
    )
    .await;
    b.wait_text("#gw-registrations", "alpha").await;
    b.wait_text("#gw-registrations", "beta").await;
    let appeared = shown.elapsed();
    println!(
        "console: registrations appeared {appeared:?} after the runner started (live tick 500 ms)"
    );

    // An execute moves the overview's count, still without a reload.
    b.goto(&format!("{base}/console")).await;
    b.wait_text("#stat-executes", "0").await;
    b.js("window.__same_page = true; return true;", vec![])
        .await;
    let arn = gw.registrations()[0].arn.clone();
    for _ in 0..3 {
        assert!(gw.execute(&arn, json!({"n": 1})).await.unwrap().success);
    }
    b.wait_text("#stat-executes", "3").await;
    b.screenshot("gateway-overview").await;

    b.goto(&format!("{base}/console/registrations")).await;
    b.wait_text("#gw-registrations", "alpha").await;
    b.js("window.__same_page = true; return true;", vec![])
        .await;
    b.screenshot("gateway-registrations").await;
    stop(&runner, join).await;
    b.wait_gone("#gw-registrations tr[data-arn]").await;
    let same = b.js("return window.__same_page === true;", vec![]).await;
    assert_eq!(same, json!(true), "the rows went without a reload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_connector_is_approved_by_a_click_and_then_executable() {
    let gw = gateway(ApprovalMode::Manual).await;
    let Some(b) = Browser::start("approval").await else {
        return;
    };
    let base = gw.http_url();
    b.sign_in(&base, TOKEN).await;

    let creds = tempfile::tempdir().unwrap();
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("waiting")
        .credentials_dir(creds.path())
        .reconnect(BackoffPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
        .build()
        .unwrap();
    let reg = Registration::new(cfg, common::Tagged("waiting".into()));
    let (runner, join) =
        spawn(MultiConnectorRunner::new(RunnerOptions::default(), vec![reg]).unwrap());
    let h = common::find(&runner, "waiting");

    b.wait_text("#gw-approvals", "waiting").await;
    b.wait_text("#stat-pending", "1").await;
    b.screenshot("gateway-approvals").await;
    b.click("#gw-approvals button[data-action=approve]").await;
    let arn = h
        .wait_registered(DEADLINE)
        .await
        .expect("registered after the click");
    b.wait_text("#gw-approvals", "None.").await;
    let out = gw.execute(&arn, json!({"n": 1})).await.unwrap();
    assert!(out.success, "executable once approved: {:?}", out.error);
    assert_eq!(out.payload["instance"], "waiting");

    stop(&runner, join).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_from_a_connector_renders_as_text_and_never_runs() {
    let gw = gateway(ApprovalMode::Auto).await;
    let Some(b) = Browser::start("markup").await else {
        return;
    };
    let base = gw.http_url();
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("h")
        .build()
        .unwrap();
    let (runner, join) = start(
        RunnerOptions::default(),
        vec![Registration::new(cfg, Hostile)],
    )
    .await;
    let arn = gw.registrations()[0].arn.clone();

    b.sign_in(&base, TOKEN).await;
    let href = b
        .js("return encodeURIComponent(arguments[0]);", vec![json!(arn)])
        .await;
    b.goto(&format!(
        "{base}/console/registrations/{}",
        href.as_str().unwrap()
    ))
    .await;
    let text = b.wait_text("#gw-registration", "window.__pwned=1").await;
    assert!(text.contains(HOSTILE), "shown as the text it is: {text}");
    let caps = b.wait_text("#capabilities", "poke").await;
    assert!(
        caps.contains(HOSTILE),
        "a capability's description and schema as text: {caps}"
    );
    b.assert_nothing_injected().await;

    stop(&runner, join).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_the_csrf_token_is_refused_in_the_browser() {
    let gw = gateway(ApprovalMode::Manual).await;
    let Some(b) = Browser::start("csrf").await else {
        return;
    };
    let base = gw.http_url();
    b.sign_in(&base, TOKEN).await;
    // The session cookie goes with it (same origin), the CSRF field does not.
    let status = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/console/registrations/arn%3Ax/approve', {method: 'POST',
               headers: {'content-type': 'application/x-www-form-urlencoded'}, body: 'back=%2Fconsole'})
               .then(r => done(r.status), e => done(String(e)));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(403));
}

/// What the browser measured of one page load (Navigation and Paint Timing).
#[derive(Debug)]
struct Load {
    /// Bytes of the document, its stylesheet and its script as sent (a cold cache's
    /// load: the assets count even when this load found them cached).
    transferred: u64,
    /// First contentful paint, ms after navigation start.
    first_paint_ms: f64,
    /// The document's request to its first byte (the server's render), ms.
    response_ms: f64,
}

async fn measure(b: &Browser, url: &str) -> Load {
    b.goto(url).await;
    b.wait_js("painted", "return performance.getEntriesByType('paint').some(p => p.name === 'first-contentful-paint');").await;
    let v = b
        .js(
            "const nav = performance.getEntriesByType('navigation')[0];
             const assets = performance.getEntriesByType('resource')
               .filter(r => r.initiatorType === 'link' || r.initiatorType === 'script');
             const fcp = performance.getEntriesByType('paint').find(p => p.name === 'first-contentful-paint');
             return {doc: nav.encodedBodySize, assets: assets.reduce((a, r) => a + r.encodedBodySize, 0),
                     fcp: fcp.startTime, response: nav.responseStart - nav.requestStart};",
            vec![],
        )
        .await;
    Load {
        transferred: v["doc"].as_u64().unwrap_or(0) + v["assets"].as_u64().unwrap_or(0),
        first_paint_ms: v["fcp"].as_f64().unwrap_or(f64::NAN),
        response_ms: v["response"].as_f64().unwrap_or(f64::NAN),
    }
}

/// The console's own weight and time to first render, with no registrations (the
/// baseline of the same run) and with 10,000, printed for the README (targets: under
/// 200 KiB transferred, first render under 300 ms with 10,000 registrations). A
/// measurement, not a check: it asserts only that the page was usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_weight_and_first_render_with_ten_thousand_registrations() {
    let gw = gateway(ApprovalMode::Auto).await;
    let Some(b) = Browser::start("weight").await else {
        return;
    };
    let base = gw.http_url();
    b.sign_in(&base, TOKEN).await;
    let pages = [
        format!("{base}/console"),
        format!("{base}/console/registrations"),
    ];
    let mut empty = Vec::new();
    for p in &pages {
        empty.push(measure(&b, p).await);
    }

    let (tenants, per_tenant) = (20usize, 500usize);
    let connector: std::sync::Arc<dyn BaseConnector> =
        std::sync::Arc::new(switchboard::EchoConnector);
    let regs: Vec<Registration> = (0..tenants)
        .flat_map(|t| (0..per_tenant).map(move |i| (t, i)))
        .map(|(t, i)| {
            let cfg = ConnectorConfig::builder(gw.ws_url(), format!("tenant-{t}"))
                .instance_id(format!("idle-{i}"))
                .build()
                .unwrap();
            Registration::shared(cfg, connector.clone())
        })
        .collect();
    let runner =
        std::sync::Arc::new(MultiConnectorRunner::new(RunnerOptions::default(), regs).unwrap());
    let run = tokio::spawn({
        let r = runner.clone();
        async move { r.run().await }
    });
    runner
        .wait_registered(Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(gw.registrations().len(), tenants * per_tenant);

    let mut full = Vec::new();
    for p in &pages {
        full.push(measure(&b, &format!("{p}?")).await);
    }
    b.wait_text("#gw-registrations", "10,000 matching").await;
    let rows = b
        .js(
            "return document.querySelectorAll('#registrations tr[data-arn]').length;",
            vec![],
        )
        .await;
    assert_eq!(rows, json!(50), "one page of rows, not the whole registry");
    b.screenshot("gateway-registrations-10k").await;
    println!("| console page | registrations | bytes, cold cache | first contentful paint | server (request to first byte) |");
    println!("|---|---|---|---|---|");
    for (i, page) in ["/console", "/console/registrations"].iter().enumerate() {
        for (n, l) in [(0, &empty[i]), (tenants * per_tenant, &full[i])] {
            println!(
                "| {page} | {n} | {:.1} KiB | {:.0} ms | {:.1} ms |",
                l.transferred as f64 / 1024.0,
                l.first_paint_ms,
                l.response_ms
            );
        }
    }
    runner.shutdown_handle().shutdown();
    run.await.unwrap().unwrap();
}
