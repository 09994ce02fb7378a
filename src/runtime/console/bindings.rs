//! The bindings pages: every binding with its version, state and counts (from
//! `GET /api/v1/triggers`), one binding's definition, versions and lifecycle history
//! (`GET /api/v1/triggers/{id}/history`), and the pause, resume and drain buttons
//! (the operations behind `POST /api/v1/triggers/{id}/pause|resume|drain`).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::{html, Markup};

use super::app::{serve, App};
use super::widgets::{button, confirm_button, done, failed, pretty, ActionForm};
use crate::console::format::{count, time};
use crate::console::guard::encode_component;
use crate::console::{Page, Region, SessionInfo};
use crate::runtime::ops::inspect::{BindingFigures, TriggersReport};
use crate::runtime::ops::HistoryPage;

fn href(id: &str) -> String {
    format!("/console/bindings/{}", encode_component(id))
}

fn state_pill(state: &str) -> Markup {
    let class = match state {
        "active" => "pill ok",
        "paused" | "draining" => "pill warn",
        _ => "pill bad",
    };
    html! { span class=(class) { (state) } }
}

/// The buttons a binding in `state` offers, returning to `back`.
fn actions(id: &str, paused: bool, csrf: &str, back: &str) -> Markup {
    let base = href(id);
    html! {
        @if paused {
            (button(&format!("{base}/resume"), "Resume", csrf, back, ""))
        } @else {
            (button(&format!("{base}/pause"), "Pause", csrf, back, "secondary"))
        }
        " "
        (confirm_button(&format!("{base}/drain"), "Drain", csrf, back, "danger",
            Some("Drain this binding? It takes no new events, finishes its rows, and terminates.")))
    }
}

/// The bindings table of a `GET /api/v1/triggers` answer; with `csrf`, each row has
/// its buttons.
pub(crate) fn table(report: &TriggersReport, csrf: Option<&str>) -> Markup {
    html! {
        @if report.triggers.is_empty() { p.muted { "No bindings." } }
        table #bindings {
            tr { th { "binding" } th { "version" } th { "state" } th.num { "received" } th.num { "matched" }
                 th.num { "dispatched" } th.num { "failed" } th.num { "dead" } th.num { "in flight" } th { "last event" }
                 @if csrf.is_some() { th {} } }
            @for b in &report.triggers {
                @let id = &b.view.id;
                @let c = &b.counts.dispatch;
                @let ingest = b.counts.ingest;
                tr data-binding=(id) {
                    td { a href=(href(id)) { strong { (id) } } }
                    td { @if let Some(v) = b.view.active { "v" (v) } @else { "—" } }
                    td.state { (state_pill(b.state)) }
                    td.num { (count(ingest.map_or(0, |i| i.received))) }
                    td.num { (count(ingest.map_or(0, |i| i.matched))) }
                    td.num.dispatched { (count(c.dispatched)) } td.num { (count(c.failed)) }
                    td.num { (count(c.dead_lettered)) } td.num { (c.in_flight) }
                    td { (time(ingest.and_then(|i| i.last_received_ms).unwrap_or(0))) }
                    @if let Some(csrf) = csrf {
                        td { (actions(id, b.view.paused, csrf, "/console/bindings")) }
                    }
                }
            }
        }
    }
}

/// A binding's counts, as a key/value table.
fn counts_table(figures: &BindingFigures) -> Markup {
    let c = &figures.dispatch;
    html! {
        table.kv #counts {
            @if let Some(i) = figures.ingest {
                tr { th { "received" } td { (count(i.received)) } }
                tr { th { "matched" } td { (count(i.matched)) } }
                tr { th { "last event" } td { (time(i.last_received_ms.unwrap_or(0))) } }
            }
            tr { th { "dispatched" } td { (count(c.dispatched)) } }
            tr { th { "failed" } td { (count(c.failed)) } }
            tr { th { "retried" } td { (count(c.retried)) } }
            tr { th { "dead-lettered" } td { (count(c.dead_lettered)) } }
            tr { th { "in flight" } td { (c.in_flight) } }
        }
    }
}

/// A binding's lifecycle log (`GET /api/v1/triggers/{id}/history`), oldest first.
fn history_table(page: &HistoryPage) -> Markup {
    html! {
        table #history {
            tr { th { "when" } th { "version" } th { "event" } th { "reason" } th { "process" } }
            @for e in &page.history {
                tr { td { (time(e.at_ms)) } td { "v" (e.version) }
                     td { (e.event.as_str()) } td { (e.reason) } td { code { (e.process) } } }
            }
        }
    }
}

pub(crate) async fn list(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| async move {
        let body = html! { h1 { "Bindings" } (table(&app.ops.triggers(), Some(&csrf))) };
        Page::new("Bindings", vec![Region::new("rt-bindings", body)])
    })
    .await
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
            let all = app.ops.triggers();
            let Some(b) = all.find(&id) else {
                return Page::missing("rt-binding", &format!("No binding {id} is known."));
            };
            let history = match app.ops.history(&id, None, Some(100)).await {
                Ok(h) => html! { (history_table(&h)) },
                Err(e) => super::widgets::unavailable(&e),
            };
            let body = html! {
                h1 { (id) " " (state_pill(b.state)) }
                p { (actions(&id, b.view.paused, &csrf, &href(&id))) }
                h2 { "Counts" }
                (counts_table(&b.counts))
                h2 { "Versions" }
                table #versions {
                    tr { th { "version" } th { "state" } th { "fingerprint" } th { "pinned" } }
                    @for v in &b.view.versions {
                        tr { td { (v.label) } td { (v.state.as_str()) }
                             td { code { (v.fingerprint) } } td { (v.pinned) } }
                    }
                }
                h2 { "Definition (active version)" }
                @match &b.definition {
                    Some(d) => (pretty(&serde_json::to_value(&**d).unwrap_or_default())),
                    None => p.muted { "No active version." },
                }
                h2 { "Lifecycle history" }
                (history)
            };
            Page::new(id.clone(), vec![Region::new("rt-binding", body)])
        }
    })
    .await
}

/// `POST /console/bindings/{id}/{pause|resume|drain}`.
pub(crate) async fn act(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let result = match action.as_str() {
        "pause" => app.ops.set_paused(&id, true).await,
        "resume" => app.ops.set_paused(&id, false).await,
        "drain" => app.ops.drain(&id).await,
        _ => return (StatusCode::NOT_FOUND, "no such action\n").into_response(),
    };
    match result {
        Ok(_) => done(
            &app.kit,
            &session,
            &form.back,
            &format!("{id}: {action} done"),
        ),
        Err(e) => failed(e),
    }
}
