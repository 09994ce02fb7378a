//! The gateway's console (issue 25): tenants, connections and registrations, live, with
//! the approve and reject buttons of manual approval. Served at `/console` on the
//! gateway's HTTP listener, behind the operator token when one is set (the kit in
//! `crate::console` signs the browser in and checks every POST's CSRF token).
//!
//! Every view calls the operation its JSON endpoint calls (the registry's listings,
//! the stats, `operator::approve`/`reject`), never the HTTP API itself.
//!
//! Pages: `/console` (counters, invokes by outcome, pending approvals),
//! `/console/registrations` (paged, filtered by tenant, status, transport and text),
//! `/console/registrations/{arn}` (capabilities, metadata, last metrics report).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use maud::{html, Markup};
use serde::Deserialize;

use super::operator;
use super::registry::RegistrationInfo;
use super::state::GatewayState;
use crate::console::format::{ago, count, time};
use crate::console::guard::encode_component;
use crate::console::{page, ConsoleKit, Page, Region, SessionInfo};

/// What the console's handlers share.
struct ConsoleApp {
    kit: Arc<ConsoleKit>,
    state: Arc<GatewayState>,
}

type App = State<Arc<ConsoleApp>>;

/// The console's routes: its public ones (sign-in, assets) and its pages.
pub(crate) fn routes(state: Arc<GatewayState>) -> Router {
    let kit = ConsoleKit::new(
        "gateway",
        state.config.admin_token.clone(),
        vec![
            ("/console", "Overview"),
            ("/console/registrations", "Registrations"),
        ],
        state.cancel.child_token(),
    );
    let app = Arc::new(ConsoleApp {
        kit: kit.clone(),
        state,
    });
    let pages = Router::new()
        .route("/console", get(overview))
        .route("/console/registrations", get(registrations))
        .route("/console/registrations/{arn}", get(registration))
        .route("/console/registrations/{arn}/approve", post(approve))
        .route("/console/registrations/{arn}/reject", post(reject))
        .with_state(app);
    crate::console::guard::public_routes(kit.clone())
        .merge(crate::console::guard::protect(kit, pages))
}

/// Answers a page whose regions `render` builds from the gateway's state.
async fn serve<F>(
    app: Arc<ConsoleApp>,
    session: SessionInfo,
    headers: &HeaderMap,
    render: F,
) -> Response
where
    F: Fn(&GatewayState, &str) -> Page + Send + Sync + 'static,
{
    let render = Arc::new(render);
    page::respond_with(
        app.kit.clone(),
        session,
        headers,
        app.state.clone(),
        move |state, csrf| {
            let render = render.clone();
            async move { render(&state, &csrf) }
        },
    )
    .await
}

fn now() -> i64 {
    crate::clock::now_ms()
}

fn arn_href(arn: &str) -> String {
    format!("/console/registrations/{}", encode_component(arn))
}

fn status_pill(status: &str) -> Markup {
    let class = if status == "approved" {
        "pill ok"
    } else {
        "pill warn"
    };
    html! { span class=(class) { (status) } }
}

/// An approve and a reject button for a pending registration, returning to `back`.
fn approval_buttons(arn: &str, csrf: &str, back: &str) -> Markup {
    let href = arn_href(arn);
    html! {
        form.inline method="post" action=(format!("{href}/approve")) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="back" value=(back);
            button type="submit" data-action="approve" { "Approve" }
        }
        " "
        form.inline method="post" action=(format!("{href}/reject")) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="back" value=(back);
            button.danger type="submit" data-action="reject" { "Reject" }
        }
    }
}

async fn overview(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, |state, csrf| {
        let stats = state.stats();
        let pending = state.registry().pending();
        let manual = state.config.approval == super::ApprovalMode::Manual;
        let cards = html! {
            h1 { "Gateway" }
            div.cards {
                div.card.stat { small { "registrations" } b #stat-registrations { (count(stats.registrations)) }
                    @for (t, n) in &stats.registrations_by_transport { small { (t) " " (count(*n)) " " } } }
                div.card.stat { small { "pending approval" } b #stat-pending { (count(pending.len() as u64)) }
                    small { @if manual { "manual approval" } @else { "auto approval" } } }
                div.card.stat { small { "sockets open" } b { (count(stats.sockets_open)) }
                    small { "gRPC streams " (count(stats.grpc_streams_open)) } }
                div.card.stat { small { "executes routed" } b #stat-executes { (count(stats.executes_routed)) } }
                div.card.stat { small { "frames in / out" } b { (count(stats.frames_in)) } small { (count(stats.frames_out)) " out" } }
            }
            h2 { "Invokes by outcome" }
            table #invokes { tr { @for k in stats.invokes.keys() { th.num { (k) } } }
                tr { @for v in stats.invokes.values() { td.num { (count(*v)) } } } }
            @if !stats.frames_dropped.is_empty() {
                h2 { "Frames dropped" }
                table { @for (k, v) in &stats.frames_dropped { tr { td { (k) } td.num { (count(*v)) } } } }
            }
        };
        let approvals = html! {
            h2 { "Pending approvals" }
            @if pending.is_empty() {
                p.muted { "None." }
            } @else {
                table #pending { tr { th { "ARN" } th { "type" } th { "instance" } th { "transport" } th { "waiting" } th {} }
                    @for p in &pending {
                        tr data-arn=(p.arn) {
                            td { a href=(arn_href(&p.arn)) { code { (p.arn) } } }
                            td { (p.connector_type) } td { (p.instance_id) } td { (p.transport) }
                            td { (ago(now(), p.requested_at_ms as i64)) }
                            td { (approval_buttons(&p.arn, csrf, "/console")) }
                        }
                    }
                }
            }
        };
        Page::new("Overview", vec![Region::new("gw-stats", cards), Region::new("gw-approvals", approvals)])
    })
    .await
}

/// The registrations page's filters (also the JSON endpoint's).
#[derive(Debug, Clone, Default, Deserialize)]
struct ListQuery {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    transport: String,
    #[serde(default)]
    q: String,
    #[serde(default)]
    after: String,
}

/// Rows on one console page of registrations.
const PAGE_ROWS: usize = 50;

impl ListQuery {
    fn matches(&self, r: &RegistrationInfo) -> bool {
        let q = self.q.to_lowercase();
        (self.tenant.is_empty() || r.tenant_id == self.tenant)
            && (self.status.is_empty() || r.status == self.status)
            && (self.transport.is_empty() || r.transport == self.transport)
            && (q.is_empty()
                || [&r.arn, &r.connector_type, &r.instance_id]
                    .iter()
                    .any(|f| f.to_lowercase().contains(&q)))
    }

    fn href_after(&self, after: &str) -> String {
        format!(
            "/console/registrations?tenant={}&status={}&transport={}&q={}&after={}",
            encode_component(&self.tenant),
            encode_component(&self.status),
            encode_component(&self.transport),
            encode_component(&self.q),
            encode_component(after)
        )
    }
}

fn filters(q: &ListQuery) -> Markup {
    html! {
        form.filters method="get" action="/console/registrations" {
            label { "tenant" input name="tenant" value=(q.tenant); }
            label { "status" select name="status" {
                @for s in ["", "approved", "pending"] { option value=(s) selected[q.status == s] { (if s.is_empty() { "any" } else { s }) } }
            } }
            label { "transport" select name="transport" {
                @for s in ["", "websocket", "grpc"] { option value=(s) selected[q.transport == s] { (if s.is_empty() { "any" } else { s }) } }
            } }
            label { "search" input name="q" value=(q.q) placeholder="ARN, type or instance"; }
            button type="submit" { "Filter" }
        }
    }
}

async fn registrations(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |state, csrf| {
        let (rows, next, total) = {
            let reg = state.registry();
            let all = reg.list();
            let matching: Vec<_> = all.into_iter().filter(|r| q.matches(r)).collect();
            let total = matching.len();
            let rows: Vec<_> = matching
                .into_iter()
                .filter(|r| q.after.is_empty() || r.arn > q.after)
                .take(PAGE_ROWS + 1)
                .collect();
            (rows, None::<String>, total)
        };
        let mut rows = rows;
        let next = next.or_else(|| (rows.len() > PAGE_ROWS).then(|| rows[PAGE_ROWS - 1].arn.clone()));
        rows.truncate(PAGE_ROWS);
        let back = q.href_after(&q.after);
        let table = html! {
            p.muted { (count(total as u64)) " matching" }
            table #registrations {
                tr { th { "ARN" } th { "tenant" } th { "type" } th { "instance" } th { "status" } th { "transport" }
                     th { "capabilities" } th.num { "requests" } th.num { "failed" } th {} }
                @for r in &rows {
                    tr data-arn=(r.arn) {
                        td { a href=(arn_href(&r.arn)) { code { (r.arn) } } }
                        td { (r.tenant_id) } td { (r.connector_type) } td { (r.instance_id) }
                        td { (status_pill(&r.status)) } td { (r.transport) }
                        td { (r.capabilities.len()) }
                        td.num { (r.metrics.as_ref().map(|m| count(m.requests_received.max(0) as u64)).unwrap_or_default()) }
                        td.num { (r.metrics.as_ref().map(|m| count(m.requests_failed.max(0) as u64)).unwrap_or_default()) }
                        td { @if r.status == "pending" { (approval_buttons(&r.arn, csrf, &back)) } }
                    }
                }
            }
            div.pager {
                @if !q.after.is_empty() { a href=(q.href_after("")) { "First page" } }
                @if let Some(n) = &next { a #next-page href=(q.href_after(n)) { "Next page" } }
            }
        };
        Page::new("Registrations", vec![
                Region::new("gw-filters", html! { h1 { "Registrations" } (filters(&q)) }),
                Region::new("gw-registrations", table),
            ])
    })
    .await
}

async fn registration(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(arn): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |state, csrf| {
        let found = state.registry().list().into_iter().find(|r| r.arn == arn);
        let Some(r) = found else {
            return Page::missing("gw-registration", &format!("No registration {arn} is connected now."));
        };
        let body = html! {
            h1 { code { (r.arn) } " " (status_pill(&r.status)) }
            @if r.status == "pending" { p { (approval_buttons(&r.arn, csrf, &arn_href(&r.arn))) } }
            table {
                tr { th { "tenant" } td { (r.tenant_id) } }
                tr { th { "type" } td { (r.connector_type) } }
                tr { th { "instance" } td { (r.instance_id) } }
                tr { th { "transport" } td { (r.transport) " (link " (r.socket_id) ")" } }
                tr { th { "scope" } td { (r.scope) } }
            }
            h2 { "Capabilities" }
            @if r.capabilities.is_empty() { p.muted { "None listed." } }
            ul #capabilities { @for c in &r.capabilities { li { code { (c) } } } }
            h2 { "Metadata" }
            table { @for (k, v) in &r.metadata { tr { th { (k) } td { code { (v) } } } } }
            h2 { "Last metrics report" }
            @match &r.metrics {
                None => p.muted { "None received yet." },
                Some(m) => table {
                    tr { th { "received" } td { (time(m.received_at_ms)) " (" (ago(now(), m.received_at_ms)) ")" } }
                    tr { th { "requests received / processed / failed" }
                         td { (m.requests_received) " / " (m.requests_processed) " / " (m.requests_failed) } }
                    tr { th { "mean latency" } td { (format!("{:.2}", m.avg_latency_ms)) " ms" } }
                    tr { th { "bytes in / out" } td { (m.bytes_received) " / " (m.bytes_sent) } }
                    tr { th { "reconnects (ok / tried)" } td { (m.successful_reconnects) " / " (m.reconnection_attempts) } }
                    tr { th { "uptime" } td { (format!("{:.0}", m.uptime_seconds)) " s" } }
                    @for (k, v) in &m.custom_metrics { tr { th { (k) } td { (v) } } }
                },
            }
        };
        Page::new(r.arn.clone(), vec![Region::new("gw-registration", body)])
    })
    .await
}

/// An action's form: the CSRF token (checked by the kit before this runs), where to go
/// back to, and a reject's reason.
#[derive(Deserialize)]
struct ActionForm {
    #[serde(default)]
    back: String,
    #[serde(default)]
    reason: String,
}

/// Back to a console page; anything else goes to the overview.
fn back_to(back: &str) -> Redirect {
    if back.starts_with("/console") && !back.starts_with("//") {
        Redirect::to(back)
    } else {
        Redirect::to("/console")
    }
}

async fn approve(
    State(app): App,
    Path(arn): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    match operator::approve(&app.state, &arn).await {
        Ok(()) => back_to(&form.back).into_response(),
        Err(operator::NotPending) => gone(&arn),
    }
}

async fn reject(
    State(app): App,
    Path(arn): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    match operator::reject(&app.state, &arn, &form.reason).await {
        Ok(()) => back_to(&form.back).into_response(),
        Err(operator::NotPending) => gone(&arn),
    }
}

fn gone(arn: &str) -> Response {
    (
        axum::http::StatusCode::NOT_FOUND,
        format!("no pending registration {arn} (approved, rejected or gone meanwhile)\n"),
    )
        .into_response()
}
