//! The overview, sources and queues pages.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use maud::html;
use serde_json::Value;

use super::app::{serve, App};
use super::widgets::{fields, num, scalar, unavailable};
use crate::console::chart::{self, Series};
use crate::console::format::{count, time};
use crate::console::{Page, Region, SessionInfo};
use crate::outbox::model::Depth;
use crate::runtime::ops::OutboxReport;
use crate::runtime::outbox_series::Point;
use crate::webhooks::admin::list_sources_value;

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

/// Fields the sources table shows in its own columns.
const SOURCE_COLUMNS: [&str; 6] = ["id", "provider", "kind", "tenant", "ingress_path", "counts"];

/// A source's counts (`counts` of `GET /api/v1/sources`): accepted, refusals by
/// reason, last event, rate-limit tokens.
fn source_counts(c: &Value) -> maud::Markup {
    html! {
        div { "accepted " strong.accepted { (count(num(c, "accepted"))) } }
        @if let Some(r) = c["refusals"].as_object() {
            @for (reason, n) in r { div { span.pill.bad { (reason) } " " (scalar(n)) } }
        }
        div.muted { "last event " (time(c["last_event_ms"].as_i64().unwrap_or(0))) }
        @if let Some(rl) = c["rate_limit"].as_object() {
            div.muted { "rate limit: " (scalar(&rl["tokens"])) " tokens" @if rl["limited"].as_bool() == Some(true) { " (limiting)" } }
        }
    }
}

pub(crate) async fn sources(
    State(app): App,
    Extension(session): Extension<SessionInfo>,
    headers: HeaderMap,
) -> Response {
    serve(app, session, &headers, |app, _csrf| async move {
        let listed = list_sources_value(&app.ingress).await;
        let described = listed["sources"].as_array().cloned().unwrap_or_default();
        let body = html! {
            h1 { "Sources" }
            @if described.is_empty() { p.muted { "No sources are configured." } }
            table #sources {
                tr { th { "source" } th { "provider" } th { "kind" } th { "tenant" } th { "ingress" } th { "counts" } th { "details" } }
                @for s in &described {
                    tr data-source=(scalar(&s["id"])) {
                        td { strong { (scalar(&s["id"])) } }
                        td { (scalar(&s["provider"])) } td { (scalar(&s["kind"])) }
                        td { (scalar(&s["tenant"])) } td { code { (scalar(&s["ingress_path"])) } }
                        td { (source_counts(&s["counts"])) }
                        td {
                            @let rest: serde_json::Map<String, Value> = s.as_object().into_iter().flatten()
                                .filter(|(k, _)| !SOURCE_COLUMNS.contains(&k.as_str()))
                                .map(|(k, v)| (k.clone(), v.clone())).collect();
                            (fields(&Value::Object(rest)))
                        }
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
