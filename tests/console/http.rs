//! The console's rules seen by a plain HTTP client (no browser needed): the sign-in
//! redirect and cookie, the security headers on every response, CSRF and Origin on
//! every POST, the assets' caching, and the open console of a gateway without a token.

use reqwest::header::{self, HeaderMap};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use switchboard::gateway::{ApprovalMode, GatewayConfig, TestGateway};

use super::{common, gateway, TOKEN};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

fn assert_hardened(h: &HeaderMap, what: &str) {
    let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{what}: {csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
    assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{what}");
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
}

/// Signs in; returns the `Cookie` header value and the CSRF token of the overview.
async fn session(base: &str) -> (String, String) {
    let resp = client()
        .post(format!("{base}/console/login"))
        .form(&[("token", TOKEN), ("next", "/console")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let set = resp.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = overview(base, &cookie).await;
    let csrf = attribute_after(&page, "name=\"csrf\" value=\"").expect("a CSRF field on the page");
    (cookie, csrf)
}

/// The overview's HTML, with the session `cookie`.
async fn overview(base: &str, cookie: &str) -> String {
    client()
        .get(format!("{base}/console"))
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The quoted value that follows the first `marker` in `html`.
fn attribute_after(html: &str, marker: &str) -> Option<String> {
    html.split(marker)
        .nth(1)
        .and_then(|s| s.split('"').next())
        .map(str::to_owned)
}

#[tokio::test]
async fn pages_need_a_session_and_every_response_is_hardened() {
    let gw = gateway(ApprovalMode::Auto).await;
    let base = gw.http_url();
    let resp = client()
        .get(format!("{base}/console"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        resp.headers()[header::LOCATION],
        "/console/login?next=%2Fconsole"
    );
    assert_hardened(resp.headers(), "redirect");
    let live = client()
        .get(format!("{base}/console"))
        .header(header::ACCEPT, "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(
        live.status(),
        StatusCode::UNAUTHORIZED,
        "no live stream without a session"
    );

    let wrong = client()
        .post(format!("{base}/console/login"))
        .form(&[("token", "nope")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(header::SET_COOKIE).is_none());
    assert_hardened(wrong.headers(), "sign-in page");

    let (cookie, _) = session(&base).await;
    let page = client()
        .get(format!("{base}/console"))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_hardened(page.headers(), "overview");
    assert_eq!(page.headers()[header::CACHE_CONTROL], "no-store");
    let body = page.text().await.unwrap();
    assert!(
        !body.contains("<script>") && !body.contains(" on"),
        "no inline script or handler"
    );
    // The cookie opens the console, not the API: that takes the bearer token.
    let api = client()
        .get(format!("{base}/api/v1/connectors"))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn posts_need_the_csrf_token_and_this_origin() {
    let gw = gateway(ApprovalMode::Manual).await;
    let base = gw.http_url();
    let (cookie, csrf) = session(&base).await;
    let post = |form: Vec<(&'static str, String)>, origin: Option<&'static str>| {
        let mut req = client()
            .post(format!(
                "{base}/console/registrations/arn%3Aacme%3Ax/approve"
            ))
            .header(header::COOKIE, &cookie)
            .form(&form);
        if let Some(o) = origin {
            req = req.header(header::ORIGIN, o);
        }
        async move { req.send().await.unwrap() }
    };
    let none = post(vec![("back", "/console".into())], None).await;
    assert_eq!(none.status(), StatusCode::FORBIDDEN);
    assert!(none.text().await.unwrap().contains("CSRF"));
    let wrong = post(vec![("csrf", "0".repeat(64))], None).await;
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    let elsewhere = post(vec![("csrf", csrf.clone())], Some("http://evil.example")).await;
    assert_eq!(elsewhere.status(), StatusCode::FORBIDDEN);
    assert!(elsewhere.text().await.unwrap().contains("another origin"));
    // With the token the action runs: nothing is pending under that ARN.
    let ok = post(vec![("csrf", csrf.clone())], None).await;
    assert_eq!(ok.status(), StatusCode::NOT_FOUND);
    assert!(ok.text().await.unwrap().contains("no pending registration"));
    // Signing out ends the session.
    let out = client()
        .post(format!("{base}/console/logout"))
        .header(header::COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let after = client()
        .get(format!("{base}/console"))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        after.status(),
        StatusCode::SEE_OTHER,
        "the old cookie signs in no more"
    );
}

#[tokio::test]
async fn assets_are_embedded_versioned_and_revalidated() {
    let gw = gateway(ApprovalMode::Auto).await;
    let base = gw.http_url();
    let (cookie, _) = session(&base).await;
    let page = overview(&base, &cookie).await;
    let js = attribute_after(&page, "src=\"").expect("the script's address");
    assert!(js.starts_with("/console/assets/console.js?v="), "{js}");
    let resp = client().get(format!("{base}{js}")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()[header::CACHE_CONTROL]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert_hardened(resp.headers(), "asset");
    let etag = resp.headers()[header::ETAG].clone();
    assert!(resp.text().await.unwrap().contains("EventSource"));
    let again = client()
        .get(format!("{base}{js}"))
        .header(header::IF_NONE_MATCH, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    let missing = client()
        .get(format!("{base}/console/assets/x.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn without_a_token_the_console_opens_like_the_api_with_csrf_still_on() {
    let gw = TestGateway::start_with(GatewayConfig::default()).await;
    let base = gw.http_url();
    let root = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(root.headers()[header::LOCATION], "/console");
    let resp = client()
        .get(format!("{base}/console"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let set = resp.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.starts_with("sb_console_gateway="),
        "a session for CSRF: {set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let refused = client()
        .post(format!("{base}/console/registrations/x/approve"))
        .header(header::COOKIE, &cookie)
        .form(&[("back", "/console")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::FORBIDDEN,
        "CSRF is checked without a token too"
    );
}

#[tokio::test]
async fn an_open_console_refuses_a_dns_name_and_the_cookie_follows_the_proxy_scheme() {
    let gw = TestGateway::start_with(GatewayConfig::default()).await;
    let base = gw.http_url();
    // A page reached through a DNS name (what a rebinding attack looks like).
    let rebound = client()
        .get(format!("{base}/console"))
        .header(header::HOST, "evil.example:80")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    assert!(rebound
        .text()
        .await
        .unwrap()
        .contains("IP address or localhost"));
    // Through an https proxy the session cookie is Secure; it never carries Max-Age
    // (the server's idle expiry governs).
    let proxied = client()
        .get(format!("{base}/console"))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    let set = proxied.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.contains("; Secure") && !set.contains("Max-Age"),
        "{set}"
    );
}

#[tokio::test]
async fn a_live_stream_ends_when_its_session_signs_out() {
    let gw = gateway(ApprovalMode::Auto).await;
    let base = gw.http_url();
    let (cookie, csrf) = session(&base).await;
    let mut live = client()
        .get(format!("{base}/console"))
        .header(header::COOKIE, &cookie)
        .header(header::ACCEPT, "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    // The first update arrives one tick after the stream opens.
    let first = tokio::time::timeout(common::DEADLINE, live.chunk())
        .await
        .expect("an update within the deadline")
        .unwrap()
        .expect("a chunk");
    assert!(String::from_utf8_lossy(&first).contains("event: region"));
    let out = client()
        .post(format!("{base}/console/logout"))
        .header(header::COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    // Read until the server ends the stream; a stream that outlived the sign-out
    // would run into the deadline instead.
    tokio::time::timeout(common::DEADLINE, async {
        while live.chunk().await.unwrap().is_some() {}
    })
    .await
    .expect("the stream ended after sign-out");
}

#[tokio::test]
async fn sign_in_returns_to_the_page_asked_for_even_by_its_short_name() {
    let gw = gateway(ApprovalMode::Auto).await;
    let base = gw.http_url();
    for (next, to) in [
        (
            "/console/registrations?status=active",
            "/console/registrations?status=active",
        ),
        ("/registrations", "/console/registrations"),
        ("//evil.example/console", "/console"),
    ] {
        let resp = client()
            .post(format!("{base}/console/login"))
            .form(&[("token", TOKEN), ("next", next)])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{next}");
        assert_eq!(resp.headers()[header::LOCATION], to, "{next}");
    }
}

#[tokio::test]
async fn a_registrations_page_shows_what_its_connector_sent_about_itself() {
    let gw = gateway(ApprovalMode::Auto).await;
    let base = gw.http_url();
    let cfg = switchboard::ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("d")
        .display_name("Tickets EU")
        .tags(["eu-tag", "tickets-tag"])
        .metadata("region", "eu-west-1")
        .build()
        .unwrap();
    let (runner, join) = common::start(
        switchboard::RunnerOptions::default(),
        vec![switchboard::Registration::new(cfg, common::Described)],
    )
    .await;
    let (cookie, _) = session(&base).await;
    let arn = gw.registrations()[0].arn.clone();
    let page = |path: String| {
        let cookie = cookie.clone();
        async move {
            let resp = client()
                .get(path)
                .header(header::COOKIE, cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp.text().await.unwrap()
        }
    };
    let list = page(format!("{base}/console/registrations")).await;
    assert!(list.contains("Tickets EU"), "the list names it too: {list}");
    let href = attribute_after(&list, "<a href=\"/console/registrations/")
        .expect("a link to the registration");
    let detail = page(format!("{base}/console/registrations/{href}")).await;
    assert!(detail.contains(&arn), "{detail}");
    for sent in [
        "Tickets EU",
        "2.4.1",
        "eu-tag",
        "tickets-tag",
        "region",
        "eu-west-1",
        "ticketing",
        "title=\"icon\">ticket<",
    ] {
        assert!(detail.contains(sent), "{sent:?} missing from {detail}");
    }
    super::stop(&runner, join).await;
}
