//! Who may look and act: sign-in, the session cookie, the CSRF check on every POST,
//! and the security headers every console response carries.
//!
//! - Without a session cookie a page redirects to `/console/login?next=<page>`; the
//!   sign-in form takes the operator token (compared in constant time) and answers
//!   with `Set-Cookie: <name>=<id>; HttpOnly; SameSite=Strict; Path=/`.
//! - Every POST behind the session (every action, and sign-out) needs the session's
//!   CSRF token in its form's `csrf` field, and an `Origin` header, when the browser
//!   sends one, naming this host: 403 otherwise, before any handler runs.
//! - The cookie has no `Max-Age` (the server's idle expiry governs), and carries
//!   `Secure` when the request came through an `https` proxy
//!   (`X-Forwarded-Proto: https`).
//! - Without an operator token the console is as open as the API it sits beside, but
//!   only reached by an IP address or `localhost` (a DNS name in `Host` is refused,
//!   which stops DNS-rebinding pages), and its sessions are stateless: the cookie is a
//!   random id and the CSRF token a keyed hash of it, so no request can fill or churn
//!   a session table.
//! - The sign-in form itself has no CSRF token (there is no session yet); it checks
//!   `Origin` and the operator token.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Form, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::html;
use serde::Deserialize;

use super::sessions::SessionInfo;
use super::{assets, page, ConsoleKit};

/// Largest console form body read (a filter form, a reason): 64 KiB.
pub(crate) const MAX_FORM_BYTES: usize = 64 * 1024;

/// The content security policy: nothing inline, nothing from another origin.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; \
frame-ancestors 'none'";

/// The sign-in, sign-out and asset routes, and `/` redirecting to `/console`.
pub(crate) fn public_routes(kit: Arc<ConsoleKit>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console/login", get(login_page).post(login))
        .route("/console/logout", post(logout))
        .route("/console/assets/{file}", get(assets::serve))
        .layer(middleware::map_response(security_headers))
        .with_state(kit)
}

/// `pages` behind the session check, the CSRF check and the security headers.
pub(crate) fn protect(kit: Arc<ConsoleKit>, pages: Router) -> Router {
    pages
        .layer(middleware::from_fn_with_state(kit, require_session))
        .layer(middleware::map_response(security_headers))
}

async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// The value of cookie `name` in a request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn set_cookie(kit: &ConsoleKit, id: &str, headers: &HeaderMap) -> HeaderValue {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let secure = if https { "; Secure" } else { "" };
    let v = format!(
        "{}={id}; HttpOnly; SameSite=Strict; Path=/{secure}",
        kit.cookie()
    );
    HeaderValue::from_str(&v).expect("hex ids make a valid header")
}

/// Whether `Host` names this listener by an IP address or `localhost`: what an open
/// console (no token) requires, since a DNS name there may be a rebinding attack.
fn host_is_literal(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => {
            return v6
                .split(']')
                .next()
                .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
        }
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

/// Whether a cookie value is a well-formed session id (64 lower-case hex digits).
fn well_formed(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn random32() -> [u8; 32] {
    use rand::Rng as _;
    rand::rng().random()
}

fn now_ms() -> u64 {
    u64::try_from(crate::clock::now_ms()).unwrap_or(0)
}

/// Whether a POST's `Origin` (when the browser sent one) is this host: a form
/// posted from another site is refused even before its CSRF token is looked at.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let bare = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((bare, host), (Some(o), Some(h)) if o == h)
}

fn forbidden(why: &str) -> Response {
    (StatusCode::FORBIDDEN, format!("forbidden: {why}\n")).into_response()
}

/// The session check (and the CSRF check for POSTs) in front of every page.
async fn require_session(State(kit): State<Arc<ConsoleKit>>, req: Request, next: Next) -> Response {
    let now = now_ms();
    let given = cookie(req.headers(), &kit.cookie()).map(str::to_owned);
    if kit.token.is_none() && !host_is_literal(req.headers()) {
        return forbidden(
            "this console has no operator token, so it answers only at an IP address or localhost",
        );
    }
    let known = match (&kit.token, given.as_deref()) {
        // Open console: any well-formed id is a session; its CSRF token is derived.
        (None, Some(id)) if well_formed(id) => Some((id.to_owned(), kit.open_csrf(id))),
        (None, _) => None,
        (Some(_), Some(id)) => kit
            .sessions
            .lock()
            .expect("sessions lock")
            .touch(id, now)
            .map(|csrf| (id.to_owned(), csrf)),
        (Some(_), None) => None,
    };
    let (session, opened) = match known {
        Some((id, csrf)) => (SessionInfo { id, csrf }, false),
        None if kit.token.is_none() => {
            let id = super::sessions::hex(&random32());
            let csrf = kit.open_csrf(&id);
            (SessionInfo { id, csrf }, true)
        }
        None => {
            let wants_page = req.method() == Method::GET && !page::wants_stream(req.headers());
            if !wants_page {
                return (StatusCode::UNAUTHORIZED, "sign in at /console/login\n").into_response();
            }
            let next = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/console");
            let to = format!("/console/login?next={}", encode_component(next));
            return Redirect::to(&to).into_response();
        }
    };
    let req = if req.method() == Method::POST {
        match check_csrf(req, &session.csrf).await {
            Ok(req) => req,
            Err(resp) => return resp,
        }
    } else {
        req
    };
    let cookie = opened.then(|| set_cookie(&kit, &session.id, req.headers()));
    let mut req = req;
    req.extensions_mut().insert(session);
    let mut resp = next.run(req).await;
    if let Some(c) = cookie {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

/// Reads a POST's form (bounded), refuses it without this session's CSRF token or
/// from another origin, and hands the request on with its body put back.
async fn check_csrf(req: Request, csrf: &str) -> Result<Request, Response> {
    if !same_origin(req.headers()) {
        return Err(forbidden("the form was posted from another origin"));
    }
    let (parts, body) = req.into_parts();
    let bytes = to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| (StatusCode::PAYLOAD_TOO_LARGE, "form too large\n").into_response())?;
    let given = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|s| s.split('&').find_map(|p| p.strip_prefix("csrf=")))
        .unwrap_or("");
    use subtle::ConstantTimeEq as _;
    if given.is_empty() || !bool::from(given.as_bytes().ct_eq(csrf.as_bytes())) {
        return Err(forbidden("this action needs the page's CSRF token"));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// Percent-encodes everything but unreserved characters (a query value, a path segment).
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[derive(Deserialize, Default)]
struct NextQuery {
    #[serde(default)]
    next: Option<String>,
}

/// Where to go after signing in: only a console page on this host. A path outside
/// `/console` names a console page by its short name (`/events` is
/// `/console/events`, as people type it from the page list), so it is kept under the
/// console's prefix rather than dropped; anything that could leave this host
/// (`//host`, a scheme, a backslash) goes to the overview.
fn safe_next(next: Option<&str>) -> std::borrow::Cow<'_, str> {
    const HOME: &str = "/console";
    let Some(n) = next else {
        return HOME.into();
    };
    if !n.starts_with('/') || n.starts_with("//") || n.contains('\\') {
        return HOME.into();
    }
    let under_console = n
        .strip_prefix(HOME)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?', '#']));
    if under_console {
        n.into()
    } else if n == "/" {
        HOME.into()
    } else {
        format!("{HOME}{n}").into()
    }
}

fn login_form(kit: &ConsoleKit, next: &str, error: Option<&str>) -> maud::Markup {
    let body = html! {
        section.login {
            h1 { "switchboard " (kit.name) }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            form method="post" action="/console/login" {
                input type="hidden" name="next" value=(next);
                label for="token" { "Operator token" }
                input #token type="password" name="token" autocomplete="current-password" autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    page::document(kit, "Sign in", None, body)
}

async fn login_page(State(kit): State<Arc<ConsoleKit>>, Query(q): Query<NextQuery>) -> Response {
    if kit.token.is_none() {
        return Redirect::to(&safe_next(q.next.as_deref())).into_response();
    }
    page::html_response(login_form(&kit, &safe_next(q.next.as_deref()), None))
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: Option<String>,
}

async fn login(
    State(kit): State<Arc<ConsoleKit>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !same_origin(&headers) {
        return forbidden("the form was posted from another origin");
    }
    if kit.token.is_none() && !host_is_literal(&headers) {
        return forbidden(
            "this console has no operator token, so it answers only at an IP address or localhost",
        );
    }
    let next = safe_next(form.next.as_deref());
    let ok = match &kit.token {
        Some(t) => t.matches(form.token.as_bytes()),
        None => true,
    };
    if !ok {
        tracing::warn!(console = kit.name, "console sign-in refused: wrong token");
        let mut resp = page::html_response(login_form(
            &kit,
            &next,
            Some("That token is not this console's operator token."),
        ));
        *resp.status_mut() = StatusCode::UNAUTHORIZED;
        return resp;
    }
    let (id, _) =
        kit.sessions
            .lock()
            .expect("sessions lock")
            .open(now_ms(), random32(), random32());
    let mut resp = Redirect::to(&next).into_response();
    resp.headers_mut()
        .append(header::SET_COOKIE, set_cookie(&kit, &id, &headers));
    resp
}

async fn logout(State(kit): State<Arc<ConsoleKit>>, req: Request) -> Response {
    let name = kit.cookie();
    let Some(id) = cookie(req.headers(), &name).map(str::to_owned) else {
        return Redirect::to("/console/login").into_response();
    };
    let csrf = kit
        .sessions
        .lock()
        .expect("sessions lock")
        .touch(&id, now_ms());
    let Some(csrf) = csrf else {
        return Redirect::to("/console/login").into_response();
    };
    if let Err(resp) = check_csrf(req, &csrf).await {
        return resp;
    }
    kit.sessions.lock().expect("sessions lock").close(&id);
    let mut resp = Redirect::to("/console/login").into_response();
    let gone = format!("{name}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    resp.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&gone).expect("a valid header"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_in_only_returns_to_console_paths() {
        assert_eq!(
            safe_next(Some("/console/events?x=1")),
            "/console/events?x=1"
        );
        assert_eq!(safe_next(Some("https://evil.example/")), "/console");
        assert_eq!(safe_next(Some("//evil.example/console")), "/console");
        assert_eq!(safe_next(None), "/console");
        assert_eq!(safe_next(Some("/console")), "/console");
        assert_eq!(safe_next(Some("/events")), "/console/events");
        assert_eq!(
            safe_next(Some("/dead-letters?binding=b")),
            "/console/dead-letters?binding=b"
        );
        assert_eq!(safe_next(Some("/consoles")), "/console/consoles");
        assert_eq!(safe_next(Some("/")), "/console");
        assert_eq!(safe_next(Some("/\\evil.example")), "/console");
        assert_eq!(safe_next(Some("events")), "/console");
    }

    #[test]
    fn origin_must_name_this_host_when_present() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:4000"));
        assert!(same_origin(&h), "no Origin: a same-origin form or a CLI");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:4000"),
        );
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&h));
    }

    #[test]
    fn an_open_console_answers_only_at_an_address_or_localhost() {
        let with = |host: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static(host));
            host_is_literal(&h)
        };
        assert!(
            with("127.0.0.1:8080") && with("localhost:4000") && with("[::1]:9") && with("10.0.0.7")
        );
        assert!(
            !with("evil.example:8080"),
            "a DNS name may be a rebinding attack"
        );
        assert!(!with("[not-an-address]:1"));
        assert!(!host_is_literal(&HeaderMap::new()), "no Host at all");
    }

    #[test]
    fn session_ids_are_64_lower_hex() {
        assert!(well_formed(&"a1".repeat(32)));
        assert!(
            !well_formed("a1") && !well_formed(&"A1".repeat(32)) && !well_formed(&"g1".repeat(32))
        );
    }

    #[test]
    fn cookies_are_found_by_name_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; sb_console_gateway=abc; b=2"),
        );
        assert_eq!(cookie(&h, "sb_console_gateway"), Some("abc"));
        assert_eq!(cookie(&h, "sb_console_runtime"), None);
    }
}
