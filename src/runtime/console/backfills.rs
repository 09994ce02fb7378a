//! The backfills pages: every job with a progress bar, its rate and ETA (what
//! `GET /api/v1/backfills` answers), one job's selection, counts and error, and the
//! pause, resume and cancel buttons (the operations behind
//! `POST /api/v1/backfills/{id}/pause|resume|cancel`). Both pages are live regions,
//! so a running job's bar moves without a reload. Starting a backfill stays in the
//! API and the CLI: a selection is a form with a dozen fields, and a typo there
//! enqueues history into a live binding.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::{html, Markup};

use super::app::{serve, App};
use super::widgets::{button, confirm_button, done, failed, pretty, ActionForm};
use crate::console::format::{count, time};
use crate::console::{Page, Region, SessionInfo};
use crate::runtime::ops::backfills::BackfillView;
use crate::triggers::backfill::BackfillState;

fn href(id: i64) -> String {
    format!("/console/backfills/{id}")
}

fn state_pill(state: BackfillState) -> Markup {
    let class = match state {
        BackfillState::Running | BackfillState::Done => "pill ok",
        BackfillState::Paused | BackfillState::Cancelled => "pill warn",
        BackfillState::Failed => "pill bad",
    };
    html! { span class=(class) { (state.as_str()) } }
}

/// The buttons a job in its state offers, returning to `back`.
fn actions(b: &BackfillView, csrf: &str, back: &str) -> Markup {
    let base = href(b.job.id);
    html! {
        @match b.job.state {
            BackfillState::Running => (button(&format!("{base}/pause"), "Pause", csrf, back, "secondary")),
            BackfillState::Paused => (button(&format!("{base}/resume"), "Resume", csrf, back, "")),
            _ => {}
        }
        @if matches!(b.job.state, BackfillState::Running | BackfillState::Paused) {
            " "
            (confirm_button(&format!("{base}/cancel"), "Cancel", csrf, back, "danger",
                Some("Cancel this backfill? It enqueues nothing more; what it enqueued stays.")))
        }
    }
}

/// The progress bar and its figures: `1,240 / 2,000 · 62 %`.
fn progress(b: &BackfillView) -> Markup {
    let total = b.job.total.max(b.job.walked).max(0);
    html! {
        progress value=(b.job.walked) max=(total.max(1)) {}
        " " (count(b.job.walked as u64)) " / " (count(total as u64))
        " · " (format!("{:.0} %", b.progress * 100.0))
    }
}

fn eta(b: &BackfillView) -> String {
    b.eta_seconds
        .map_or_else(|| "—".into(), |s| format!("{s} s"))
}

fn table(jobs: &[BackfillView], csrf: &str) -> Markup {
    html! {
        @if jobs.is_empty() {
            p.muted { "No backfills. Start one with " code { "switchboard backfill start" }
                " or " code { "POST /api/v1/backfills" } "." }
        } @else {
            table #backfills {
                tr { th { "id" } th { "binding" } th { "state" } th { "progress" } th.num { "enqueued" }
                     th.num { "skipped" } th.num { "events/s" } th { "ETA" } th { "started" } th {} }
                @for b in jobs {
                    tr data-backfill=(b.job.id) {
                        td { a href=(href(b.job.id)) { strong { (b.job.id) } } }
                        td { (b.job.spec.binding) @if let Some(v) = b.job.spec.version { " v" (v) } }
                        td.state { (state_pill(b.job.state)) }
                        td { (progress(b)) }
                        td.num { (count(b.job.enqueued as u64)) }
                        td.num { (count(b.job.skipped as u64)) }
                        td.num { (format!("{:.0}", b.walk_rate)) }
                        td { (eta(b)) }
                        td { (time(b.job.created_at_ms)) }
                        td { (actions(b, csrf, "/console/backfills")) }
                    }
                }
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
        let body = match app.ops.backfills().await {
            Ok(jobs) => html! { h1 { "Backfills" } (table(&jobs, &csrf)) },
            Err(e) => html! { h1 { "Backfills" } (super::widgets::unavailable(&e)) },
        };
        Page::new("Backfills", vec![Region::new("rt-backfills", body)])
    })
    .await
}

pub(crate) async fn detail(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| async move {
        let b = match app.ops.backfill(id).await {
            Ok(b) => b,
            Err(e) => {
                return Page::missing("rt-backfill", &e.message());
            }
        };
        let j = &b.job;
        let body = html! {
            h1 { "Backfill " (id) " " (state_pill(j.state)) }
            p { (actions(&b, &csrf, &href(id))) }
            p { (progress(&b)) }
            table.kv #counts {
                tr { th { "binding" } td { a href=(format!("/console/bindings/{}", crate::console::guard::encode_component(&j.spec.binding))) { (j.spec.binding) }
                     @if let Some(v) = j.spec.version { " (pinned to v" (v) ")" } } }
                tr { th { "walked" } td { (count(j.walked as u64)) " of " (count(j.total as u64)) } }
                tr { th { "matched" } td { (count(j.matched as u64)) } }
                tr { th { "left to the binding's filter" } td { (count(j.filtered as u64)) } }
                tr { th { "skipped (handled already)" } td { (count(j.skipped as u64)) } }
                tr { th { "enqueued" } td { (count(j.enqueued as u64)) } }
                tr { th { "events/s" } td { (format!("{:.1}", b.walk_rate)) } }
                tr { th { "ETA" } td { (eta(&b)) } }
                tr { th { "started" } td { (time(j.created_at_ms)) } }
                tr { th { "last step" } td { (time(j.updated_at_ms)) } }
                tr { th { "walked by" } td { code { (j.lease_holder.as_deref().unwrap_or("—")) } } }
                @if let Some(e) = &j.error { tr.error { th { "error" } td { (e) } } }
            }
            h2 { "Selection" }
            (pretty(&serde_json::to_value(&j.spec).unwrap_or_default()))
        };
        Page::new(format!("Backfill {id}"), vec![Region::new("rt-backfill", body)])
    })
    .await
}

/// `POST /console/backfills/{id}/{pause|resume|cancel}`.
pub(crate) async fn act(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path((id, action)): Path<(i64, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let to = match action.as_str() {
        "pause" => BackfillState::Paused,
        "resume" => BackfillState::Running,
        "cancel" => BackfillState::Cancelled,
        _ => return (StatusCode::NOT_FOUND, "no such action\n").into_response(),
    };
    match app.ops.set_backfill(id, to).await {
        Ok(_) => done(
            &app.kit,
            &session,
            &form.back,
            &format!("backfill {id}: {action} done"),
        ),
        Err(e) => failed(e),
    }
}
