//! The dead letters pages: the list (newest first, by binding, paged:
//! `GET /api/v1/dead-letters`, filtered by binding and last error kind), one dead
//! letter's error history (`GET /api/v1/dead-letters/{id}`), its replay button
//! (`POST /api/v1/dead-letters/{id}/replay`), and a replay of every dead letter the
//! filters match (`POST /api/v1/dead-letters/replay`).

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::app::{serve, App};
use super::widgets::{button, done, failed, unavailable, ActionForm};
use crate::console::format::time;
use crate::console::guard::encode_component;
use crate::console::{Page, Region, SessionInfo};
use crate::outbox::model::{DeadLetter, DeadLetterQuery};
use crate::runtime::ops::replay::{DeadLetterSelection, MAX_BULK_REPLAY};

/// Rows on one page of dead letters.
const PAGE_ROWS: usize = 50;

/// The list's filters, as its query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct DeadLetterFilters {
    #[serde(default)]
    binding: String,
    #[serde(default)]
    error_kind: String,
    #[serde(default)]
    before: String,
}

/// The error kinds a filter offers (`AttemptError::kind`'s labels).
const ERROR_KINDS: [&str; 8] = [
    "",
    "handler",
    "timeout",
    "overloaded",
    "platform",
    "validation",
    "breaker_open",
    "egress_refused",
];

fn given(s: &str) -> Option<String> {
    Some(s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl DeadLetterFilters {
    fn href_before(&self, before: &str) -> String {
        format!(
            "/console/dead-letters?binding={}&error_kind={}&before={}",
            encode_component(&self.binding),
            encode_component(&self.error_kind),
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
                binding_id: given(&f.binding),
                error_kind: given(&f.error_kind),
                limit: PAGE_ROWS,
                before_id: f.before.parse().ok(),
                ..Default::default()
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
                                    td { (d.binding_id) }
                                    td { a href=(format!("/console/events/{}", encode_component(&d.event_id))) { code { (d.event_id) } } }
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
                    label { "last error" select name="error_kind" {
                        @for k in ERROR_KINDS { option value=(k) selected[f.error_kind == k] { (if k.is_empty() { "any" } else { k }) } }
                    } }
                    button type="submit" { "Filter" }
                }
                form.filters method="post" action="/console/dead-letters/replay"
                    data-confirm="Replay every dead letter matching these filters that was not replayed yet (up to 1000)?" {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="binding" value=(f.binding);
                    input type="hidden" name="error_kind" value=(f.error_kind);
                    input type="hidden" name="back" value=(f.href_before(""));
                    button.secondary type="submit" data-action="replay-selection" { "Replay all matching, not yet replayed" }
                }
            };
            Page::new("Dead letters", vec![
                    Region::new("rt-dl-filters", filters),
                    Region::new("rt-dead-letters", table),
                ])
        }
    })
    .await
}

pub(crate) async fn detail(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| {
        async move {
            let d = match app.ops.store.backend().dead_letter(id).await {
                Ok(Some(d)) => d,
                Ok(None) => return Page::missing("rt-dead-letter", &format!("No dead letter {id}.")),
                Err(e) => {
                    let body = html! { p.error { "The store is unavailable: " (e) } };
                    return Page::new("Dead letter", vec![Region::new("rt-dead-letter", body)]);
                }
            };
            let body = html! {
                h1 { "Dead letter " (d.id) }
                p { (button(&format!("{}/replay", href(d.id)), "Replay", &csrf, &href(d.id), "")) }
                table.kv {
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
            Page::new(format!("Dead letter {}", d.id), vec![Region::new("rt-dead-letter", body)])
        }
    })
    .await
}

/// The bulk replay's form: the list's filters.
#[derive(Debug, Deserialize)]
pub(crate) struct SelectionForm {
    #[serde(default)]
    binding: String,
    #[serde(default)]
    error_kind: String,
    #[serde(default)]
    back: String,
}

/// `POST /console/dead-letters/replay`: every dead letter matching the list's
/// filters, up to [`MAX_BULK_REPLAY`] (`POST /api/v1/dead-letters/replay`).
pub(crate) async fn replay_selection(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Form(form): Form<SelectionForm>,
) -> Response {
    let sel = DeadLetterSelection {
        binding: given(&form.binding),
        error_kind: given(&form.error_kind),
        since_ms: None,
        before_ms: None,
        after_id: None,
        limit: MAX_BULK_REPLAY,
        include_replayed: false,
    };
    match app.ops.replay_dead_letters(&sel).await {
        Ok(v) => {
            let failed = v.failed.len();
            let more = if v.next.is_none() {
                ""
            } else {
                "; more match: the button replays the next ones"
            };
            done(
                &app.kit,
                &session,
                &form.back,
                &format!(
                    "replayed {} dead letter(s), {failed} could not be{more}",
                    v.replayed
                ),
            )
        }
        Err(e) => failed(e),
    }
}

/// `POST /console/dead-letters/{id}/replay`.
pub(crate) async fn replay(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    match app.ops.replay_dead_letter(id, None).await {
        Ok(_) => done(
            &app.kit,
            &session,
            &form.back,
            &format!("dead letter {id} replayed"),
        ),
        Err(e) => failed(e),
    }
}
