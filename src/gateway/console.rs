//! The gateway's console (issue 25): tenants, connections and registrations, live, with
//! the approve and reject buttons of manual approval. Served at `/console` on the
//! gateway's HTTP listener, behind the operator token when one is set (the kit in
//! `crate::console` signs the browser in and checks every POST's CSRF token).
//!
//! Every view calls the operation its JSON endpoint calls (the registry's listings,
//! the stats, `operator::approve`/`reject`), never the HTTP API itself.
//!
//! Pages: `/console` (counters, invokes by outcome, the live charts of round trips,
//! errors and latency, tenants, pending approvals), `/console/connections` (paged),
//! `/console/registrations` (paged, filtered by tenant, status, transport and text),
//! `/console/registrations/{arn}` (what the connector sent: display name, version,
//! tags, capabilities with their category, icon and schemas, capability and instance
//! metadata; and its last metrics report).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use maud::{html, Markup};
use serde::Deserialize;

use super::operator;
use super::rates::Rates;
use super::registration_info::RegistrationState;
use super::state::GatewayState;
use super::views::{ConnectionsQuery, RegistrationsQuery};
use crate::console::chart::{self, Series};
use crate::console::format::{count, time};
use crate::console::guard::encode_component;
use crate::console::{page, ConsoleKit, Page, Region, SessionInfo};

/// How often the gateway's live pages are rendered again (and sent when changed): its
/// pages read memory only, and a registration should appear within a second (the
/// runtime's, which read the store, take a second).
const LIVE_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// What the console's handlers share.
struct ConsoleApp {
    kit: Arc<ConsoleKit>,
    state: Arc<GatewayState>,
    /// Per-second rates of the registrations being looked at (`rates.rs`).
    rates: std::sync::Mutex<Rates>,
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
            ("/console/connections", "Connections"),
        ],
        LIVE_TICK,
        state.cancel.child_token(),
    );
    let app = Arc::new(ConsoleApp {
        kit: kit.clone(),
        state,
        rates: Default::default(),
    });
    let pages = Router::new()
        .route("/console", get(overview))
        .route("/console/registrations", get(registrations))
        .route("/console/connections", get(connections))
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
    F: Fn(&ConsoleApp, &str) -> Page + Send + Sync + 'static,
{
    let render = Arc::new(render);
    page::respond_with(app.kit.clone(), session, headers, app, move |app, csrf| {
        let render = render.clone();
        async move { render(&app, &csrf) }
    })
    .await
}

/// A per-second rate for a cell: one decimal, `—` before there is one.
fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "—".to_owned(), |r| format!("{r:.1}"))
}

fn now() -> i64 {
    crate::clock::now_ms()
}

fn arn_href(arn: &str) -> String {
    format!("/console/registrations/{}", encode_component(arn))
}

fn status_pill(status: RegistrationState) -> Markup {
    let class = match status {
        RegistrationState::Approved => "pill ok",
        RegistrationState::Pending => "pill warn",
    };
    html! { span class=(class) { (status.as_str()) } }
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
        form.inline method="post" action=(format!("{href}/reject"))
            data-confirm="Reject this registration? Its connector is told why." {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="back" value=(back);
            input.reason type="text" name="reason" placeholder="reason (optional)" maxlength="200";
            button.danger type="submit" data-action="reject" { "Reject" }
        }
    }
}

async fn overview(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, |app, csrf| {
        let state = &app.state;
        let stats = state.stats();
        let (pending, pending_total) = state.registry().pending_first(OVERVIEW_ROWS);
        let manual = state.config.approval == super::ApprovalMode::Manual;
        let cards = html! {
            h1 { "Gateway" }
            div.cards {
                div.card.stat { small { "registrations" } b #stat-registrations { (count(stats.registrations)) }
                    @for (t, n) in &stats.registrations_by_transport { small { (t) " " (count(*n)) " " } } }
                div.card.stat { small { "pending approval" } b #stat-pending { (count(pending_total as u64)) }
                    small { @if manual { "manual approval" } @else { "auto approval" } } }
                div.card.stat { small { "sockets open" } b { (count(stats.sockets_open)) }
                    small { "gRPC streams " (count(stats.grpc_streams_open)) } }
                div.card.stat { small { "executes routed" } b #stat-executes { (count(stats.executes_routed)) } }
                div.card.stat { small { "frames in / out" } b { (count(stats.frames_in)) } small { (count(stats.frames_out)) " out" } }
            }
            h2 { "Invokes by outcome" }
            table.compact #invokes { tr { @for k in stats.invokes.keys() { th.num { (k) } } }
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
                table #pending { tr { th { "ARN" } th { "type" } th { "instance" } th { "transport" } th { "waiting since" } th {} }
                    @for p in &pending {
                        tr data-arn=(p.arn) {
                            td { a href=(arn_href(&p.arn)) { code { (p.arn) } } }
                            td { (p.connector_type) } td { (p.instance_id) } td { (p.transport) }
                            td { (time(p.requested_at_ms as i64)) }
                            td { (approval_buttons(&p.arn, csrf, "/console")) }
                        }
                    }
                }
                @if pending_total > pending.len() {
                    p { a href="/console/registrations?status=pending" { "All " (count(pending_total as u64)) " pending, paged" } }
                }
            }
        };
        Page::new(
            "Overview",
            vec![
                Region::new("gw-stats", cards),
                Region::new("gw-chart", charts(state)),
                Region::new("gw-tenants", tenants(state)),
                Region::new("gw-approvals", approvals),
            ],
        )
    })
    .await
}

/// Rows of the overview's pending and tenant tables (the rest are a link away).
const OVERVIEW_ROWS: usize = 20;

/// Rows on one console page of registrations.
const PAGE_ROWS: &str = "50";

/// The live charts: round trips and errors per second, execute latency, over the
/// last five minutes (`GET /api/v1/stats/series`).
fn charts(state: &GatewayState) -> Markup {
    let series = state.stats_series();
    let pick =
        |f: fn(&super::series::Point) -> f64| series.points.iter().map(f).collect::<Vec<_>>();
    let slots = super::series::SERIES_POINTS;
    html! {
        h2 { "Last five minutes" }
        div.cards {
            div.card.grow {
                (chart::line("per second", &[
                    Series { label: "round trips", values: pick(|p| p.round_trips as f64) },
                    Series { label: "errors", values: pick(|p| p.errors as f64) },
                ], slots))
            }
            div.card.grow {
                (chart::line("execute latency, ms", &[
                    Series { label: "p50", values: pick(|p| p.latency_p50_ms.unwrap_or(0.0)) },
                    Series { label: "p99", values: pick(|p| p.latency_p99_ms.unwrap_or(0.0)) },
                ], slots))
            }
        }
    }
}

/// Tenants with their connections and registrations (`GET /api/v1/tenants`), the
/// busiest [`OVERVIEW_ROWS`] of them.
fn tenants(state: &GatewayState) -> Markup {
    let mut view = state.tenants();
    let all = view.items.len();
    view.items.sort_by(|a, b| {
        b.registrations
            .cmp(&a.registrations)
            .then(a.tenant_id.cmp(&b.tenant_id))
    });
    view.items.truncate(OVERVIEW_ROWS);
    html! {
        h2 { "Tenants" }
        @if view.items.is_empty() { p.muted { "No tenant has connected." } }
        table #tenants.compact {
            tr { th { "tenant" } th.num { "connections" } th.num { "registrations" } th.num { "approved" } th.num { "pending" } }
            @for t in &view.items {
                tr {
                    td { a href=(format!("/console/registrations?tenant={}", encode_component(&t.tenant_id))) { (t.tenant_id) } }
                    td.num { a href=(format!("/console/connections?tenant={}", encode_component(&t.tenant_id))) { (count(t.connections as u64)) } }
                    td.num { (count(t.registrations as u64)) } td.num { (count(t.approved as u64)) } td.num { (count(t.pending as u64)) }
                }
            }
        }
        @if all > view.items.len() { p.muted { "The " (view.items.len()) " with most registrations of " (count(all as u64)) " tenants; GET /api/v1/tenants lists all." } }
        @if view.unbound_connections > 0 { p.muted { (view.unbound_connections) " connection(s) have registered nothing yet." } }
    }
}

async fn connections(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Query(q): Query<ConnectionsQuery>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, _csrf| {
        let state = &app.state;
        let tenant = q.tenant.clone().unwrap_or_default();
        let href = |after: &str| {
            format!("/console/connections?tenant={}&after={}", encode_component(&tenant), encode_component(after))
        };
        let table = match q.clone().parse() {
            Err(e) => html! { p.error { (e) } },
            Ok(filter) => {
                let page = state.connections_page(&filter);
                html! {
                    p.muted { (count(page.total as u64)) " open" }
                    table #connections {
                        tr { th.num { "id" } th { "transport" } th { "tenant" } th { "peer" } th { "since" } th.num { "registrations" } th.num { "in flight" } th { "invokes sent" } }
                        @for c in &page.items {
                            tr data-link=(c.id) {
                                td.num { (c.id) } td { (c.transport) } td { (c.tenant_id.as_deref().unwrap_or("—")) }
                                td { code { (c.peer.as_deref().unwrap_or("—")) } } td { (time(c.since_ms as i64)) }
                                td.num { (count(c.registrations as u64)) } td.num { (c.in_flight) }
                                td { @for (k, v) in &c.invokes_sent { @if *v > 0 { (k) " " (count(*v)) " " } } }
                            }
                        }
                    }
                    div.pager {
                        @if q.after.as_deref().is_some_and(|a| !a.is_empty()) { a href=(href("")) { "First page" } }
                        @if let Some(n) = page.next { a #next-page href=(href(&n.to_string())) { "Next page" } }
                    }
                }
            }
        };
        Page::new("Connections", vec![Region::new("gw-connections", html! { h1 { "Connections" } (table) })])
    })
    .await
}

/// The registrations page's address for the same filters from `after` on.
fn href_after(q: &RegistrationsQuery, after: &str) -> String {
    let v = |o: &Option<String>| encode_component(o.as_deref().unwrap_or(""));
    format!(
        "/console/registrations?tenant={}&status={}&transport={}&q={}&after={}",
        v(&q.tenant),
        v(&q.status),
        v(&q.transport),
        v(&q.q),
        encode_component(after)
    )
}

fn filters(q: &RegistrationsQuery) -> Markup {
    let is = |v: &Option<String>, s: &str| v.as_deref().unwrap_or("") == s;
    html! {
        form.filters method="get" action="/console/registrations" {
            label { "tenant" input name="tenant" value=(q.tenant.as_deref().unwrap_or("")); }
            label { "status" select name="status" {
                @for s in ["", "approved", "pending"] { option value=(s) selected[is(&q.status, s)] { (if s.is_empty() { "any" } else { s }) } }
            } }
            label { "transport" select name="transport" {
                @for s in ["", "websocket", "grpc"] { option value=(s) selected[is(&q.transport, s)] { (if s.is_empty() { "any" } else { s }) } }
            } }
            label { "search" input name="q" value=(q.q.as_deref().unwrap_or("")) placeholder="ARN, type or instance"; }
            button type="submit" { "Filter" }
        }
    }
}

async fn registrations(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Query(q): Query<RegistrationsQuery>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| {
        let state = &app.state;
        let mut query = q.clone();
        query.limit = Some(PAGE_ROWS.to_owned());
        let after = q.after.clone().unwrap_or_default();
        let back = href_after(&q, &after);
        let table = match query.parse() {
            Err(e) => html! { p.error { (e) } },
            Ok(filter) => {
                let page = state.registrations_page(&filter);
                let now = now();
                let per_second: Vec<(Option<f64>, Option<f64>)> = {
                    let mut rates = app.rates.lock().expect("rates lock");
                    page.items
                        .iter()
                        .map(|i| {
                            let invokes = i.figures.invokes_received.values().sum();
                            (
                                rates.observe(&format!("x {}", i.info.arn), now, i.figures.executes),
                                rates.observe(&format!("i {}", i.info.arn), now, invokes),
                            )
                        })
                        .collect()
                };
                html! {
                    p.muted { (count(page.total as u64)) " matching" }
                    table #registrations {
                        tr { th { "ARN" } th { "tenant" } th { "type" } th { "instance" } th { "status" } th { "transport" }
                             th.num { "capabilities" } th.num { "executes" } th.num { "executes/s" } th.num { "invokes/s" }
                             th.num { "errors" } th.num { "in flight" } th { "since" } th {} }
                        @for (item, (xs, is)) in page.items.iter().zip(&per_second) {
                            @let r = &item.info;
                            tr data-arn=(r.arn) {
                                td { a href=(arn_href(&r.arn)) { code { (r.arn) } } }
                                td { (r.tenant_id) } td { (r.connector_type) }
                                td { (r.instance_id) @if !r.display_name.is_empty() { br; span.muted { (r.display_name) } } }
                                td { (status_pill(r.status)) } td { (r.transport) }
                                td.num { (r.capabilities.len()) }
                                td.num.executes { (count(item.figures.executes)) }
                                td.num { (rate(*xs)) } td.num { (rate(*is)) }
                                td.num { (count(item.figures.execute_errors)) }
                                td.num { (count(item.figures.in_flight)) }
                                td { (time(item.since_ms as i64)) }
                                td { @if r.status == RegistrationState::Pending { (approval_buttons(&r.arn, csrf, &back)) } }
                            }
                        }
                    }
                    div.pager {
                        @if !after.is_empty() { a href=(href_after(&q, "")) { "First page" } }
                        @if let Some(n) = &page.next { a #next-page href=(href_after(&q, n)) { "Next page" } }
                    }
                }
            }
        };
        Page::new(
            "Registrations",
            vec![
                Region::new("gw-filters", html! { h1 { "Registrations" } (filters(&q)) }),
                Region::new("gw-registrations", table),
            ],
        )
    })
    .await
}

async fn registration(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    Path(arn): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, csrf| {
        let state = &app.state;
        let Some(item) = state.registration(&arn) else {
            return Page::missing("gw-registration", &format!("No registration {arn} is connected now."));
        };
        let r = &item.item.info;
        let f = &item.item.figures;
        let since = item.item.since_ms as i64;
        let (xs, is) = {
            let mut rates = app.rates.lock().expect("rates lock");
            let invokes = f.invokes_received.values().sum();
            (
                rates.observe(&format!("x {}", r.arn), now(), f.executes),
                rates.observe(&format!("i {}", r.arn), now(), invokes),
            )
        };
        let body = html! {
            h1 { code { (r.arn) } " " (status_pill(r.status)) }
            @if r.status == RegistrationState::Pending { p { (approval_buttons(&r.arn, csrf, &arn_href(&r.arn))) } }
            table.kv {
                tr { th { "tenant" } td { (r.tenant_id) } }
                tr { th { "type" } td { (r.connector_type) } }
                tr { th { "instance" } td { (r.instance_id) } }
                @if !r.display_name.is_empty() { tr { th { "display name" } td #reg-display-name { (r.display_name) } } }
                @if !r.version.is_empty() { tr { th { "version" } td #reg-version { code { (r.version) } } } }
                @if !r.tags.is_empty() {
                    tr { th { "tags" } td #reg-tags { @for t in &r.tags { span.pill { (t) } " " } } }
                }
                tr { th { "transport" } td { (r.transport) " (link " (r.socket_id) ")" } }
                tr { th { "scope" } td { (r.scope) } }
                tr { th { "registered" } td { (time(since)) } }
                tr { th { "executes / errors / timeouts" }
                     td #reg-executes { (count(f.executes)) " / " (count(f.execute_errors)) " / " (count(f.execute_timeouts)) } }
                tr { th { "executes / invokes per second" } td { (rate(xs)) " / " (rate(is)) } }
                tr { th { "in flight" } td { (count(f.in_flight)) } }
                tr { th { "invokes received" }
                     td { @for (k, v) in &f.invokes_received { @if *v > 0 { (k) " " (count(*v)) " " } } } }
            }
            h2 { "Capabilities" }
            @if r.capabilities.is_empty() { p.muted { "None listed." } }
            @match &item.capability_schemas {
                Some(schemas) => {
                    table #capabilities {
                        tr { th { "capability" } th { "category" } th { "description" } th { "input schema" } th { "output schema" } }
                        @for c in schemas {
                            tr {
                                td {
                                    @if !c.icon.is_empty() { span.icon title="icon" { (c.icon) } " " }
                                    code { (c.id) } @if !c.name.is_empty() && c.name != c.id { br; span.muted { (c.name) } }
                                }
                                td { (c.category) }
                                td { (c.description) }
                                td { @if !c.input_schema.is_empty() { pre { (pretty_json(&c.input_schema)) } } }
                                td { @if !c.output_schema.is_empty() { pre { (pretty_json(&c.output_schema)) } } }
                            }
                        }
                    }
                }
                None => ul #capabilities { @for c in &r.capabilities { li { code { (c) } } } },
            }
            h2 { "Metadata" }
            table #capability-metadata { @for (k, v) in &r.metadata { tr { th { (k) } td { code { (v) } } } } }
            @if !r.instance_metadata.is_empty() {
                h2 { "Instance metadata" }
                table #instance-metadata { @for (k, v) in &r.instance_metadata { tr { th { (k) } td { code { (v) } } } } }
            }
            h2 { "Last metrics report" }
            @match &r.metrics {
                None => p.muted { "None received yet." },
                Some(m) => table.kv {
                    tr { th { "received" } td { (time(m.received_at_ms)) } }
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

/// A schema's text pretty-printed when it is JSON, as sent otherwise.
fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
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
