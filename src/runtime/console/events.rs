//! The events pages: the stored events, newest first, paged and filtered on the
//! server (`GET /api/v1/events`), and one event's detail (its stored, redacted
//! headers and its payload) with a replay button (`POST /api/v1/events/{id}/replay`).

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::overview::Notice;
use super::widgets::{button, done, failed, notice, pretty, ActionForm};
use super::{serve, App};
use crate::console::format::time;
use crate::console::guard::encode_component;
use crate::console::{Page, Region, SessionInfo};
use crate::store::EventQuery;
use crate::triggers::TriggerEvent;

/// Rows on one page of events.
const PAGE_ROWS: usize = 50;

/// The events page's filters, as its query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct EventFilters {
    #[serde(default)]
    source: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    notice: String,
}

impl EventFilters {
    fn href_after(&self, after: &str) -> String {
        format!(
            "/console/events?source={}&after={}",
            encode_component(&self.source),
            encode_component(after)
        )
    }

    fn query(&self) -> EventQuery {
        EventQuery {
            source: Some(self.source.clone()).filter(|s| !s.is_empty()),
            limit: PAGE_ROWS,
            before_seq: self.after.parse().ok(),
            ..Default::default()
        }
    }
}

fn href(id: &str) -> String {
    format!("/console/events/{}", encode_component(id))
}

fn filters(f: &EventFilters, sources: &[String]) -> Markup {
    html! {
        form.filters method="get" action="/console/events" {
            label { "source" select name="source" {
                option value="" selected[f.source.is_empty()] { "any" }
                @for s in sources { option value=(s) selected[&f.source == s] { (s) } }
            } }
            button type="submit" { "Filter" }
        }
    }
}

pub(crate) async fn list(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Query(f): Query<EventFilters>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, _csrf| {
        let f = f.clone();
        async move {
            let sources: Vec<String> = app.ingress.order.iter().map(|s| s.spec.id.clone()).collect();
            let table = match app.ingress.store.backend().events(&f.query()).await {
                Err(e) => html! { p.error { "The store is unavailable: " (e) } },
                Ok(rows) => {
                    let next = (rows.len() == PAGE_ROWS).then(|| rows.last().map(|r| r.seq.to_string())).flatten();
                    html! {
                        table #events {
                            tr { th { "received" } th { "source" } th { "kind" } th { "delivery id" } th { "event" } th { "signature" } }
                            @for r in &rows {
                                @let e = &r.event;
                                tr data-event=(e.id) {
                                    td { (time(e.received_at_ms)) } td { (e.source) } td { (e.kind) }
                                    td { code { (e.dedupe_key) } }
                                    td { a href=(href(&e.id)) { code { (e.id) } } }
                                    td { (format!("{:?}", e.signature).to_lowercase()) }
                                }
                            }
                        }
                        @if rows.is_empty() { p.muted { "No events." } }
                        div.pager {
                            @if !f.after.is_empty() { a href=(f.href_after("")) { "Newest" } }
                            @if let Some(n) = &next { a #next-page href=(f.href_after(n)) { "Older" } }
                        }
                    }
                }
            };
            Page::new("Events", vec![
                    Region::new("rt-notice", notice(&f.notice)),
                    Region::new("rt-event-filters", html! { h1 { "Events" } (filters(&f, &sources)) }),
                    Region::new("rt-events", table),
                ])
        }
    })
    .await
}

/// The payload as a person reads it: JSON pretty-printed, else the body as text.
fn payload(e: &TriggerEvent) -> Markup {
    if !e.payload.is_null() {
        return pretty(&e.payload);
    }
    html! { pre { (String::from_utf8_lossy(&e.body)) } }
}

pub(crate) async fn detail(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<String>,
    Query(n): Query<Notice>,
    headers: HeaderMap,
) -> Response {
    let notice_text = n.notice;
    serve(app, session, &headers, move |app, csrf| {
        let (id, notice_text) = (id.clone(), notice_text.clone());
        async move {
            let q = EventQuery { limit: 1, event_id: Some(id.clone()), ..Default::default() };
            let found = app.ingress.store.backend().events(&q).await.ok().and_then(|mut v| v.pop());
            let Some(stored) = found else {
                return Page::missing("rt-event", &format!("No stored event {id}."));
            };
            let e = stored.event;
            let facts = serde_json::json!({
                "id": e.id, "source": e.source, "provider": e.provider, "kind": e.kind,
                "delivery id": e.dedupe_key, "trace id": e.trace_id, "tenant": e.tenant,
                "received": time(e.received_at_ms), "signature": format!("{:?}", e.signature).to_lowercase(),
            });
            let body = html! {
                h1 { "Event " code { (e.id) } }
                p { (button(&format!("{}/replay", href(&e.id)), "Replay", &csrf, &href(&e.id), "secondary")) }
                (super::widgets::fields(&facts))
                h2 { "Headers (as stored: secrets redacted)" }
                table #event-headers { @for (k, v) in &e.headers { tr { th { (k) } td { code { (v) } } } } }
                h2 { "Payload" }
                div #event-payload { (payload(&e)) }
            };
            Page::new(format!("Event {}", e.id), vec![Region::new("rt-notice", notice(&notice_text)), Region::new("rt-event", body)])
        }
    })
    .await
}

/// `POST /console/events/{id}/replay`: to every binding that took it.
pub(crate) async fn replay(
    State(app): App,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    match app.ops.replay_event(&id, None, None).await {
        Ok(v) => {
            let n = v["replayed"].as_array().map_or(0, Vec::len);
            done(&form.back, &format!("replayed to {n} binding(s)"))
        }
        Err(e) => failed(e),
    }
}
