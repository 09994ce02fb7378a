//! The events pages: the stored events, newest first, paged and filtered on the
//! server by source, kind, delivery id and time (`GET /api/v1/events`), and one
//! event's detail (`GET /api/v1/events/{id}`: the bindings it matched with each row's
//! attempts and errors, its stored, redacted headers, its payload) with a replay
//! button (`POST /api/v1/events/{id}/replay`).

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::app::{serve, App};
use super::widgets::{button, done, failed, unavailable, ActionForm};
use crate::console::chart::{timeline, Bar, Lane};
use crate::console::format::{count, time};
use crate::console::guard::encode_component;
use crate::console::{Page, Region, SessionInfo};
use crate::ingress::event_search::{list_events, EventFilter, EventsPage};
use crate::runtime::ops::inspect::Delivery;
use crate::runtime::ops::OpError;

/// Rows on one page of events.
const PAGE_ROWS: usize = 50;

/// The events page's filters, as its query string. `window` is a time filter a
/// person picks from a list (`5m`, `1h`, `24h`), turned into `since` at each render.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct EventFilters {
    #[serde(default)]
    source: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    delivery_id: String,
    #[serde(default)]
    window: String,
    #[serde(default)]
    after: String,
}

/// The time windows the filter offers: `(value, label, ms)`.
const WINDOWS: [(&str, &str, i64); 4] = [
    ("", "any time", 0),
    ("5m", "last 5 minutes", 5 * 60_000),
    ("1h", "last hour", 3_600_000),
    ("24h", "last 24 hours", 86_400_000),
];

impl EventFilters {
    fn href_after(&self, after: &str) -> String {
        format!(
            "/console/events?source={}&kind={}&delivery_id={}&window={}&after={}",
            encode_component(&self.source),
            encode_component(&self.kind),
            encode_component(&self.delivery_id),
            encode_component(&self.window),
            encode_component(after)
        )
    }

    /// The filter `GET /api/v1/events` would build from the same values.
    fn filter(&self, now_ms: i64) -> Result<EventFilter, String> {
        let given = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let window = WINDOWS
            .iter()
            .find(|(v, _, _)| *v == self.window)
            .ok_or_else(|| format!("window must be one of 5m, 1h, 24h, not {:?}", self.window))?;
        Ok(EventFilter {
            source: given(&self.source),
            kind: given(&self.kind),
            delivery_id: given(&self.delivery_id),
            since_ms: (window.2 > 0).then(|| now_ms - window.2),
            until_ms: None,
            limit: PAGE_ROWS,
            after: match given(&self.after) {
                None => None,
                Some(a) => Some(
                    a.parse()
                        .map_err(|_| "after must be a page cursor".to_owned())?,
                ),
            },
        })
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
            label { "kind" input name="kind" value=(f.kind) placeholder="e.g. issues.opened"; }
            label { "delivery id" input name="delivery_id" value=(f.delivery_id); }
            label { "received" select name="window" {
                @for (v, l, _) in WINDOWS { option value=(v) selected[f.window == v] { (l) } }
            } }
            button type="submit" { "Filter" }
        }
    }
}

fn rows(page: &EventsPage, f: &EventFilters) -> Markup {
    let events = &page.events;
    let next = page.next.as_deref();
    html! {
        table #events {
            tr { th { "received" } th { "source" } th { "kind" } th { "delivery id" } th { "event" } th { "signature" } }
            @for e in events {
                tr data-event=(e.id) {
                    td { (time(e.received_at_ms)) } td { (e.source) }
                    td { (e.kind) } td { code { (e.dedupe_key) } }
                    td { a href=(href(&e.id)) { code { (e.id) } } }
                    td { (e.signature.as_str()) }
                }
            }
        }
        @if events.is_empty() { p.muted { "No events." } }
        div.pager {
            @if !f.after.is_empty() { a href=(f.href_after("")) { "Newest" } }
            @if let Some(n) = next { a #next-page href=(f.href_after(n)) { "Older" } }
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
            let sources: Vec<String> = app
                .ingress
                .order
                .iter()
                .map(|s| s.spec.id.clone())
                .collect();
            let table = match f.filter(crate::clock::now_ms()) {
                Err(e) => html! { p.error { (e) } },
                Ok(filter) => match list_events(&app.ingress.store, &filter).await {
                    Err(e) => html! { p.error { "The store is unavailable: " (e) } },
                    Ok(page) => rows(&page, &f),
                },
            };
            Page::new(
                "Events",
                vec![
                    Region::new(
                        "rt-event-filters",
                        html! { h1 { "Events" } (filters(&f, &sources)) },
                    ),
                    Region::new("rt-events", table),
                ],
            )
        }
    })
    .await
}

/// Each delivery of an event (rows, queue messages, dead letters, runs) with its
/// attempts' errors.
fn deliveries(list: &[Delivery]) -> Markup {
    html! {
        @if list.is_empty() { p.muted { "No binding took it." } }
        table #deliveries {
            tr { th { "binding" } th { "version" } th { "record" } th { "state" } th.num { "attempts" } th { "errors" } }
            @for d in list {
                tr data-binding=(d.binding_id) {
                    td { a href=(format!("/console/bindings/{}", encode_component(&d.binding_id))) { (d.binding_id) } }
                    td { (d.version.as_deref().unwrap_or("—")) } td { (d.record) }
                    td.state { (d.state) } td.num { (d.attempts) }
                    td {
                        @for e in &d.errors {
                            div { "#" (e.attempt) " " span.pill.bad { (e.kind) } " " (e.message) }
                        }
                    }
                }
            }
        }
    }
}

/// The timeline of the event's recorded attempts (each failed attempt of a row still
/// pending or dead-lettered: its start, duration and failure kind), drawn from the
/// event's receipt, and the same as a table. A delivered row leaves no record (the
/// outbox forgets it), so its success shows in its trace and the metrics, not here.
fn attempt_timeline(received_at_ms: i64, list: &[Delivery]) -> Markup {
    let lanes: Vec<Lane> = list
        .iter()
        .filter(|d| !d.errors.is_empty())
        .map(|d| Lane {
            label: format!("{} ({})", d.binding_id, d.record),
            bars: d
                .errors
                .iter()
                .map(|e| Bar {
                    start_ms: e.at_ms - e.took_ms.unwrap_or(0),
                    end_ms: e.at_ms,
                    ok: false,
                    label: format!("#{} {} {} ms", e.attempt, e.kind, e.took_ms.unwrap_or(0)),
                })
                .collect(),
        })
        .collect();
    if lanes.is_empty() {
        return html! {};
    }
    html! {
        h3 { "Timeline of the recorded attempts" }
        (timeline("attempts", received_at_ms, &lanes))
        table #attempt-timeline {
            tr { th { "binding" } th.num { "attempt" } th.num { "started (ms after receipt)" } th.num { "took (ms)" } th { "outcome" } }
            @for d in list {
                @for e in &d.errors {
                    tr {
                        td { (d.binding_id) } td.num { (e.attempt) }
                        td.num { (e.at_ms - e.took_ms.unwrap_or(0) - received_at_ms) }
                        td.num { @if let Some(t) = e.took_ms { (t) } @else { "—" } }
                        td { span.pill.bad { (e.kind) } }
                    }
                }
            }
        }
    }
}

/// Most payload bytes the detail page shows; the rest is a link away, so a 10 MiB
/// body does not become a 10 MiB page re-rendered on every tick.
const MAX_SHOWN_PAYLOAD: usize = 256 * 1024;

/// The payload as a person reads it (JSON pretty-printed, text as it is), cut at
/// [`MAX_SHOWN_PAYLOAD`] with a pointer to the whole of it.
fn payload(v: &Value, id: &str) -> Markup {
    let text = match v {
        Value::String(t) => t.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    if text.len() <= MAX_SHOWN_PAYLOAD {
        return html! { pre { (text) } };
    }
    let cut = (0..=MAX_SHOWN_PAYLOAD)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    html! {
        pre { (&text[..cut]) }
        p.muted { "Shown: the first " (count(cut as u64)) " of " (count(text.len() as u64))
                  " bytes; the whole payload is at " code { "GET /api/v1/events/" (id) } "." }
    }
}

pub(crate) async fn detail(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| {
        let id = id.clone();
        async move {
            let found = match app.ops.event_detail(&id).await {
                Ok(v) => v,
                Err(OpError::NotFound(_)) => return Page::missing("rt-event", &format!("No stored event {id}.")),
                Err(e) => return Page::new("Event", vec![Region::new("rt-event", unavailable(&e))]),
            };
            let e = &found.event;
            let facts = [
                ("source", e.source.clone()),
                ("provider", e.provider.clone()),
                ("kind", e.kind.clone()),
                ("received", time(e.received_at_ms)),
                ("delivery id", e.delivery_id.clone()),
                ("trace id", e.trace_id.clone()),
                ("tenant", e.tenant.clone()),
                ("signature", e.signature.as_str().to_owned()),
            ];
            let trace_link = app.telemetry.trace_link(&e.trace_id);
            let body = html! {
                h1 { "Event " code { (id) } }
                p { (button(&format!("{}/replay", href(&id)), "Replay", &csrf, &href(&id), "secondary")) }
                (super::widgets::pairs(&facts))
                @if let Some(url) = &trace_link {
                    p { a #event-trace href=(url) rel="noopener noreferrer" { "Open trace " code { (e.trace_id) } } }
                }
                h2 { "Bindings and attempts" }
                (deliveries(&found.deliveries))
                (attempt_timeline(e.received_at_ms, &found.deliveries))
                h2 { "Headers (as stored: secrets redacted)" }
                table.kv #event-headers {
                    @for (k, v) in &e.headers { tr { th { (k) } td { code { (v) } } } }
                }
                h2 { "Payload (" (e.encoding) ")" }
                div #event-payload { (payload(&e.payload, &id)) }
            };
            Page::new(
                format!("Event {id}"),
                vec![Region::new("rt-event", body)],
            )
        }
    })
    .await
}

/// `POST /console/events/{id}/replay`: to every binding that took it.
pub(crate) async fn replay(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    match app.ops.replay_event(&id, None, None).await {
        Ok(v) => {
            let n = v.replayed.len();
            done(
                &app.kit,
                &session,
                &form.back,
                &format!("replayed to {n} binding(s)"),
            )
        }
        Err(e) => failed(e),
    }
}
