//! The page shell and live regions.
//!
//! A console page is a title and a list of [`Region`]s, each an element with an id.
//! [`respond`] answers a browser's navigation with the whole document, and the same
//! URL asked for `text/event-stream` (what `EventSource` sends) with a stream: every
//! tick of its console ([`ConsoleKit::tick`]; the first one tick after the page) the
//! page is rendered again and each region whose HTML changed is sent as an SSE event
//! `region` with `{"id", "html"}`; `console.js` puts it in place. A console serves at
//! most [`super::MAX_LIVE_STREAMS`] streams at once (past that, 503: the page works,
//! it is just not live). A stream ends when its session signs out or expires, and when
//! the console closes (listener shutdown), so an open tab never holds a graceful
//! shutdown. A notice an action left for the session (a flash) is shown once, above
//! the regions, outside the live part.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::hash::{Hash as _, Hasher as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use maud::{html, Markup, DOCTYPE};

use super::sessions::SessionInfo;
use super::{assets, ConsoleKit};

/// One live part of a page: an element id and its content.
pub(crate) struct Region {
    pub(crate) id: &'static str,
    pub(crate) html: Markup,
}

impl Region {
    /// The region `id` holding `html`.
    pub(crate) fn new(id: &'static str, html: Markup) -> Self {
        Region { id, html }
    }
}

/// A rendered page: its title, status and regions, in order.
pub(crate) struct Page {
    pub(crate) title: String,
    /// 200, or 404 for a page about something that is not there (the live stream
    /// keeps sending it, so a row deleted meanwhile turns into "not found" in place).
    pub(crate) status: StatusCode,
    pub(crate) regions: Vec<Region>,
}

impl Page {
    /// A page titled `title` made of `regions`.
    pub(crate) fn new(title: impl Into<String>, regions: Vec<Region>) -> Self {
        Page {
            title: title.into(),
            status: StatusCode::OK,
            regions,
        }
    }

    /// The 404 page for a thing that is not there (an unknown event id, a gone
    /// registration); its one region keeps the id `region`, so a live page whose
    /// subject went away says so in place.
    pub(crate) fn missing(region: &'static str, what: &str) -> Self {
        let body = html! { h1 { "Not found" } p { (what) } p { a href="/console" { "Back to the overview" } } };
        Page {
            title: "Not found".into(),
            status: StatusCode::NOT_FOUND,
            regions: vec![Region::new(region, body)],
        }
    }
}

/// Whether a request asks for an event stream (an `EventSource`).
pub(crate) fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// An HTML answer that no cache keeps (pages show live state and a CSRF token).
pub(crate) fn html_response(doc: Markup) -> Response {
    let mut resp = doc.into_string().into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The whole document around `body`: head, navigation and, for a signed-in page
/// (`csrf` given), the sign-out form.
pub(crate) fn document(kit: &ConsoleKit, title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · switchboard " (kit.name) }
                link rel="stylesheet" href=(assets::href("console.css"));
                script src=(assets::href("console.js")) defer {}
            }
            body data-live=[csrf.map(|_| "1")] {
                header.top {
                    a.brand href="/console" { "switchboard " span { (kit.name) } }
                    @if csrf.is_some() {
                        nav {
                            @for (href, label) in &kit.nav {
                                a href=(href) { (label) }
                            }
                        }
                        span #live-status title="live updates" { "●" }
                        @if kit.token.is_some() {
                            form.logout method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=[csrf];
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// One of a console's [`super::MAX_LIVE_STREAMS`] places, given back when its
/// stream ends (dropped with it).
struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    fn take(count: &Arc<AtomicUsize>) -> Option<StreamSlot> {
        let taken = count.fetch_add(1, Ordering::AcqRel);
        if taken >= super::MAX_LIVE_STREAMS {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(StreamSlot(count.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn hash(s: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Answers a page: the document, or its live stream (see the module docs). `render`
/// builds the page each time.
pub(crate) async fn respond<F, Fut>(
    kit: Arc<ConsoleKit>,
    session: SessionInfo,
    headers: &HeaderMap,
    render: F,
) -> Response
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Page> + Send + 'static,
{
    if !wants_stream(headers) {
        let p = render().await;
        let flash = kit.take_flash(&session);
        let body = html! {
            @if let Some(text) = &flash { p.notice #notice role="status" { (text) } }
            @for r in &p.regions { div id=(r.id) { (r.html) } }
        };
        let mut resp = html_response(document(&kit, &p.title, Some(&session.csrf), body));
        *resp.status_mut() = p.status;
        return resp;
    }
    let Some(slot) = StreamSlot::take(&kit.streams) else {
        let msg = "too many live pages are open; this one still works, reload it to update\n";
        return (StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
    };
    let closing = kit.closing.clone();
    // The page was rendered just now: the first tick is one tick away.
    let start = tokio::time::Instant::now() + kit.tick;
    let mut ticks = tokio::time::interval_at(start, kit.tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = (render, ticks, HashMap::<&'static str, u64>::new(), slot);
    let stream = futures_util::stream::unfold(state, move |(render, mut ticks, mut sent, slot)| {
        let (closing, kit, id) = (closing.clone(), kit.clone(), session.id.clone());
        async move {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = closing.cancelled() => return None,
            }
            // Signed out, or idle past expiry: the tab stops receiving.
            if !kit.signed_in(&id) {
                return None;
            }
            let mut events = Vec::new();
            for r in render().await.regions {
                let html = r.html.into_string();
                let h = hash(&html);
                if sent.insert(r.id, h) != Some(h) {
                    let data = serde_json::json!({"id": r.id, "html": html}).to_string();
                    events.push(Ok::<_, Infallible>(
                        Event::default().event("region").data(data),
                    ));
                }
            }
            Some((
                futures_util::stream::iter(events),
                (render, ticks, sent, slot),
            ))
        }
    })
    .flatten();
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// [`respond`] for the common shape: a page rendered from a shared context `ctx`
/// (an assembly's state) and the session's CSRF token, which its forms carry.
pub(crate) async fn respond_with<C, F, Fut>(
    kit: Arc<ConsoleKit>,
    session: SessionInfo,
    headers: &HeaderMap,
    ctx: Arc<C>,
    render: F,
) -> Response
where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Page> + Send + 'static,
{
    let csrf = session.csrf.clone();
    respond(kit, session, headers, move || {
        render(ctx.clone(), csrf.clone())
    })
    .await
}
