//! The overview, sources and queues pages.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use maud::html;
use serde_json::Value;

use super::app::{serve, App};
use super::widgets::{fields, unavailable};
use crate::console::chart::{self, Series};
use crate::console::format::{count, time};
use crate::console::{Page, Region, SessionInfo};
use crate::outbox::model::Depth;
use crate::runtime::ops::sources::{list_sources_report, SourceCounts, SourceReport};
use crate::runtime::ops::OutboxReport;
use crate::runtime::outbox_series::Point;

fn age(ms: Option<i64>) -> String {
    match ms {
        None => "—".to_owned(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

/// One depth's cells: due, leased, scheduled, oldest, dead letters.
fn depth_cells(d: &Depth) -> maud::Markup {
    html! {
        td.num { (count(d.due)) } td.num { (count(d.leased)) }
        td.num { (count(d.scheduled)) } td.num { (age(d.oldest_age_ms)) }
        td.num { (count(d.dead_letters)) }
    }
}

/// The outbox's cards and its per-binding table, from `GET /api/v1/outbox/stats`.
fn outbox(report: &OutboxReport) -> maud::Markup {
    let total = &report.stats.total;
    html! {
        div.cards {
            div.card.stat { small { "due" } b #outbox-due { (count(total.due)) } }
            div.card.stat { small { "leased" } b #outbox-leased { (count(total.leased)) } }
            div.card.stat { small { "scheduled" } b { (count(total.scheduled)) } }
            div.card.stat { small { "oldest row" } b { (age(total.oldest_age_ms)) } }
            div.card.stat { small { "dead letters" } b #outbox-dead { (count(total.dead_letters)) } }
        }
        h2 { "By binding" }
        table #outbox-bindings {
            tr { th { "binding" } th.num { "due" } th.num { "leased" } th.num { "scheduled" } th.num { "oldest" } th.num { "dead letters" } }
            @for (id, d) in &report.stats.by_binding {
                tr {
                    td { a href=(format!("/console/bindings/{}", crate::console::guard::encode_component(id))) { (id) } }
                    (depth_cells(d))
                }
            }
        }
    }
}

pub(crate) async fn overview(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, move |app, _csrf| async move {
        let stats = match app.stats().await {
            Ok(s) => outbox(&s),
            Err(e) => unavailable(&e),
        };
        let points = app.ops.outbox_series().points;
        let pick =
            |figure: fn(&Point) -> u64| points.iter().map(|p| figure(p) as f64).collect::<Vec<_>>();
        let depth = chart::line(
            "outbox depth, last five minutes",
            &[
                Series {
                    label: "due",
                    values: pick(|p| p.due),
                },
                Series {
                    label: "leased",
                    values: pick(|p| p.leased),
                },
                Series {
                    label: "dead letters",
                    values: pick(|p| p.dead_letters),
                },
            ],
            crate::runtime::outbox_series::CAPACITY,
        );
        let triggers = app.ops.triggers();
        let bindings = html! {
            h2 { "Bindings" }
            (super::bindings::table(&triggers, None))
        };
        Page::new(
            "Overview",
            vec![
                Region::new(
                    "rt-outbox",
                    html! { h1 { "Runtime" } h2 { "Outbox" } (stats) },
                ),
                Region::new("rt-depth", html! { div.card { (depth) } }),
                Region::new("rt-bindings", bindings),
            ],
        )
    })
    .await
}

/// A source's counts: accepted, refusals by reason, last event, rate-limit tokens.
fn source_counts(c: &SourceCounts) -> maud::Markup {
    html! {
        div { "accepted " strong.accepted { (count(c.tally.accepted)) } }
        @for (reason, n) in &c.tally.refusals { div { span.pill.bad { (reason) } " " (count(*n)) } }
        div.muted { "last event " (time(c.tally.last_event_ms.unwrap_or(0))) }
        @if let Some(rl) = c.rate_limit {
            div.muted { "rate limit: " (format!("{:.1}", rl.tokens)) " tokens" @if rl.limited { " (limiting)" } }
        }
    }
}

/// The rest of what a source is: its configuration beyond the table's columns, and
/// whatever its connector says of it (open-ended, so shown as the JSON it is).
fn source_details(s: &SourceReport) -> maud::Markup {
    let rate = s.rate_limit.map(|r| match r.burst {
        Some(b) => format!("{}/s, burst {b}", r.per_second),
        None => format!("{}/s", r.per_second),
    });
    html! {
        table.kv {
            tr { th { "kinds offered" } td { (s.kinds.join(", ")) } }
            tr { th { "secrets configured" } td { (s.secrets_configured) } }
            tr { th { "max body" } td { (count(s.max_body_bytes as u64)) " bytes" } }
            tr { th { "dedupe retention" } td { (s.dedupe_retention_secs) " s" } }
            @if let Some(rate) = rate { tr { th { "rate limit" } td { (rate) } } }
        }
        @if !s.own.is_empty() { (fields(&Value::Object(s.own.clone()))) }
    }
}

pub(crate) async fn sources(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, |app, _csrf| async move {
        let listed = list_sources_report(&app.ingress).await;
        let body = html! {
            h1 { "Sources" }
            @if listed.sources.is_empty() { p.muted { "No sources are configured." } }
            table #sources {
                tr { th { "source" } th { "provider" } th { "kind" } th { "tenant" } th { "ingress" } th { "counts" } th { "details" } }
                @for s in &listed.sources {
                    tr data-source=(s.id) {
                        td { strong { (s.id) } }
                        td { (s.provider) } td { (s.kind) }
                        td { (s.tenant) } td { code { (s.ingress_path.as_deref().unwrap_or("—")) } }
                        td { (source_counts(&s.counts)) }
                        td { (source_details(s)) }
                    }
                }
            }
        };
        Page::new("Sources", vec![Region::new("rt-sources", body)])
    })
    .await
}

pub(crate) async fn queues(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, |app, _csrf| async move {
        let body = match app.stats().await {
            Err(e) => unavailable(&e),
            Ok(report) => html! {
                @let queues = &report.stats.queues;
                @if queues.is_empty() { p.muted { "No queues are configured." } }
                table #queues {
                    tr { th { "queue" } th.num { "visible" } th.num { "received, not acked" } th.num { "scheduled" } th.num { "oldest" } th.num { "dead letters" } }
                    @for (name, d) in queues {
                        tr { td { (name) } (depth_cells(d)) }
                    }
                }
            },
        };
        Page::new("Queues", vec![Region::new("rt-queues", html! { h1 { "Queues" } (body) })])
    })
    .await
}
