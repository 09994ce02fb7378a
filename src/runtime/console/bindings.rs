//! The bindings pages: every binding with its version, state and counts (from
//! `GET /api/v1/triggers`), one binding's definition, versions and lifecycle history
//! (`GET /api/v1/triggers/{id}/history`), and the pause, resume and drain buttons
//! (the operations behind `POST /api/v1/triggers/{id}/pause|resume|drain`).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::{html, Markup};
use serde_json::Value;

use super::app::{serve, App};
use super::widgets::{button, confirm_button, done, failed, num, pretty, scalar, ActionForm};
use crate::console::format::{count, time};
use crate::console::guard::encode_component;
use crate::console::{Page, Region, SessionInfo};

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
pub(crate) fn table(triggers: &Value, csrf: Option<&str>) -> Markup {
    let list = triggers["triggers"].as_array().cloned().unwrap_or_default();
    html! {
        @if list.is_empty() { p.muted { "No bindings." } }
        table #bindings {
            tr { th { "binding" } th { "version" } th { "state" } th.num { "received" } th.num { "matched" }
                 th.num { "dispatched" } th.num { "failed" } th.num { "dead" } th.num { "in flight" } th { "last event" }
                 @if csrf.is_some() { th {} } }
            @for b in &list {
                @let id = scalar(&b["id"]);
                @let c = &b["counts"];
                tr data-binding=(id) {
                    td { a href=(href(&id)) { strong { (id) } } }
                    td { @if let Some(v) = b["active"].as_u64() { "v" (v) } @else { "—" } }
                    td.state { (state_pill(b["state"].as_str().unwrap_or("?"))) }
                    td.num { (count(num(c, "received"))) } td.num { (count(num(c, "matched"))) }
                    td.num.dispatched { (count(num(c, "dispatched"))) } td.num { (count(num(c, "failed"))) }
                    td.num { (count(num(c, "dead_lettered"))) } td.num { (c["in_flight"].as_i64().unwrap_or(0)) }
                    td { (time(c["last_received_ms"].as_i64().unwrap_or(0))) }
                    @if let Some(csrf) = csrf {
                        td { (actions(&id, b["paused"].as_bool().unwrap_or(false), csrf, "/console/bindings")) }
                    }
                }
            }
        }
    }
}

/// A binding's lifecycle log (`GET /api/v1/triggers/{id}/history`), oldest first.
fn history_table(history: &Value) -> Markup {
    html! {
        table #history {
            tr { th { "when" } th { "version" } th { "event" } th { "reason" } th { "process" } }
            @for e in history["history"].as_array().into_iter().flatten() {
                tr { td { (time(e["at_ms"].as_i64().unwrap_or(0))) } td { "v" (scalar(&e["version"])) }
                     td { (scalar(&e["event"])) } td { (scalar(&e["reason"])) } td { code { (scalar(&e["process"])) } } }
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
            let found = all["triggers"]
                .as_array()
                .and_then(|l| l.iter().find(|b| b["id"] == id.as_str()))
                .cloned();
            let Some(b) = found else {
                return Page::missing("rt-binding", &format!("No binding {id} is known."));
            };
            let history = match app.ops.history(&id, None, Some(100)).await {
                Ok(h) => html! { (history_table(&h)) },
                Err(e) => super::widgets::unavailable(&e),
            };
            let paused = b["paused"].as_bool().unwrap_or(false);
            let body = html! {
                h1 { (id) " " (state_pill(b["state"].as_str().unwrap_or("?"))) }
                p { (actions(&id, paused, &csrf, &href(&id))) }
                h2 { "Counts" }
                (super::widgets::fields(&b["counts"]))
                h2 { "Versions" }
                table #versions {
                    tr { th { "version" } th { "state" } th { "fingerprint" } th { "pinned" } }
                    @for v in b["versions"].as_array().into_iter().flatten() {
                        tr { td { (scalar(&v["label"])) } td { (scalar(&v["state"])) }
                             td { code { (scalar(&v["fingerprint"])) } } td { (scalar(&v["pinned"])) } }
                    }
                }
                h2 { "Definition (active version)" }
                (pretty(&b["definition"]))
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
