//! The dead letters pages: the list (newest first, by binding, paged:
//! `GET /api/v1/dead-letters`), one dead letter's error history
//! (`GET /api/v1/dead-letters/{id}`), and its replay button
//! (`POST /api/v1/dead-letters/{id}/replay`).

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::widgets::{button, done, failed, notice, unavailable, ActionForm};
use super::{serve, App};
use crate::console::format::time;
use crate::console::guard::encode_component;
use crate::console::{Page, Region, SessionInfo};
use crate::outbox::model::{DeadLetter, DeadLetterQuery};

/// Rows on one page of dead letters.
const PAGE_ROWS: usize = 50;

/// The list's filters, as its query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct DeadLetterFilters {
    #[serde(default)]
    binding: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    notice: String,
}

impl DeadLetterFilters {
    fn href_before(&self, before: &str) -> String {
        format!(
            "/console/dead-letters?binding={}&before={}",
            encode_component(&self.binding),
            encode_component(before)
        )
    }
}

fn href(id: i64) -> String {
    format!("/console/dead-letters/{id}")
}

fn last_error(d: &DeadLetter) -> Markup {
    match d.errors.last() {
        Some(e) => html! { span.pill.bad { (e.kind) } " " (e.message) },
        None => html! { span.muted { "—" } },
    }
}

pub(crate) async fn list(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Query(f): Query<DeadLetterFilters>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| {
        let f = f.clone();
        async move {
            let query = DeadLetterQuery {
                binding_id: Some(f.binding.clone()).filter(|b| !b.is_empty()),
                limit: PAGE_ROWS,
                before_id: f.before.parse().ok(),
            };
            let back = f.href_before(&f.before);
            let table = match app.ops.dead_letters(query).await {
                Err(e) => unavailable(&e),
                Ok(rows) => {
                    let next = (rows.len() == PAGE_ROWS).then(|| rows.last().map(|d| d.id.to_string())).flatten();
                    html! {
                        @if rows.is_empty() { p.muted { "No dead letters." } }
                        table #dead-letters {
                            tr { th { "id" } th { "binding" } th { "event" } th.num { "attempts" } th { "last error" } th { "dead since" } th.num { "replays" } th {} }
                            @for d in &rows {
                                tr data-dead-letter=(d.id) {
                                    td { a href=(href(d.id)) { (d.id) } }
                                    td { (d.binding_id) } td { code { (d.event_id) } }
                                    td.num { (d.attempts) } td { (last_error(d)) }
                                    td { (time(d.dead_at_ms)) } td.num { (d.replays) }
                                    td { (button(&format!("{}/replay", href(d.id)), "Replay", &csrf, &back, "secondary")) }
                                }
                            }
                        }
                        div.pager {
                            @if !f.before.is_empty() { a href=(f.href_before("")) { "Newest" } }
                            @if let Some(n) = &next { a #next-page href=(f.href_before(n)) { "Older" } }
                        }
                    }
                }
            };
            let filters = html! {
                h1 { "Dead letters" }
                form.filters method="get" action="/console/dead-letters" {
                    label { "binding" input name="binding" value=(f.binding); }
                    button type="submit" { "Filter" }
                }
            };
            Page::new("Dead letters", vec![
                    Region::new("rt-notice", notice(&f.notice)),
                    Region::new("rt-dl-filters", filters),
                    Region::new("rt-dead-letters", table),
                ])
        }
    })
    .await
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DetailQuery {
    #[serde(default)]
    notice: String,
}

pub(crate) async fn detail(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<i64>,
    Query(q): Query<DetailQuery>,
    headers: HeaderMap,
) -> Response {
    let notice_text = q.notice;
    serve(app, session, &headers, move |app, csrf| {
        let notice_text = notice_text.clone();
        async move {
            let found = app.ops.store.backend().dead_letter(id).await.ok().flatten();
            let Some(d) = found else {
                return Page::missing("rt-dead-letter", &format!("No dead letter {id}."));
            };
            let body = html! {
                h1 { "Dead letter " (d.id) }
                p { (button(&format!("{}/replay", href(d.id)), "Replay", &csrf, &href(d.id), "")) }
                table {
                    tr { th { "binding" } td { (d.binding_id) } }
                    tr { th { "fingerprint" } td { code { (d.fingerprint) } } }
                    tr { th { "event" } td { a href=(format!("/console/events/{}", encode_component(&d.event_id))) { code { (d.event_id) } } } }
                    tr { th { "trace id" } td { code { (d.trace_id) } } }
                    @if let Some(q) = &d.queue { tr { th { "queue" } td { (q) } } }
                    tr { th { "enqueued" } td { (time(d.enqueued_at_ms)) } }
                    tr { th { "dead since" } td { (time(d.dead_at_ms)) } }
                    tr { th { "replays" } td { (d.replays) @if let Some(at) = d.replayed_at_ms { " (last " (time(at)) ")" } } }
                }
                h2 { "Attempts" }
                table #attempts {
                    tr { th.num { "attempt" } th { "when" } th { "kind" } th { "error" } }
                    @for e in &d.errors {
                        tr { td.num { (e.attempt) } td { (time(e.at_ms)) } td { span.pill.bad { (e.kind) } } td { (e.message) } }
                    }
                }
                @if !d.annotations.is_empty() {
                    h2 { "Dead-letter handlers" }
                    ul { @for a in &d.annotations { li { (a) } } }
                }
            };
            Page::new(format!("Dead letter {}", d.id), vec![Region::new("rt-notice", notice(&notice_text)), Region::new("rt-dead-letter", body)])
        }
    })
    .await
}

/// `POST /console/dead-letters/{id}/replay`.
pub(crate) async fn replay(
    State(app): App,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    match app.ops.replay_dead_letter(id, None).await {
        Ok(_) => done(&form.back, &format!("dead letter {id} replayed")),
        Err(e) => failed(e),
    }
}
