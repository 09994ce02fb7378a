//! The deliver section's table and its checks, from what [`super::deliver`] observed.
//!
//! Two sources are compared on purpose: what the connectors saw (the journal) and what
//! the runtime says it did (its admin API and `/metrics`). Every expectation is checked
//! against both, so a miscount on either side shows.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::connectors::{Role, Visit};
use super::latency::{fmt_latency, percentile};
use super::observed::{Observed, Sizing, TENANT};
use super::webhooks::Delivery;

/// Attempts `flaky-sync` gets before its rows are dead-lettered.
pub(super) const FLAKY_ATTEMPTS: usize = 3;

const TICKETS: &str = "issues-to-tickets";
const FLAKY: &str = "flaky-sync";
const AUDIT: &str = "dl-audit";

/// What the deliveries should produce.
pub(super) struct Expected {
    /// `issues.opened` deliveries: one `tickets` delivery each.
    pub(super) opened: usize,
    /// `issues.closed` deliveries: [`FLAKY_ATTEMPTS`] `flaky` attempts, one dead letter
    /// and one `audit` delivery each.
    pub(super) closed: usize,
}

impl Expected {
    pub(super) fn of(deliveries: &[Delivery]) -> Expected {
        let closed = deliveries.iter().filter(|d| d.action == "closed").count();
        Expected {
            opened: deliveries.len() - closed,
            closed,
        }
    }
}

/// A binding's counts as the dispatcher reports them (`GET /api/v1/triggers`).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    dispatched: u64,
    failed: u64,
    retried: u64,
    dead_lettered: u64,
}

fn counts(triggers: &Value, binding: &str) -> Counts {
    let found = triggers["triggers"]
        .as_array()
        .and_then(|list| list.iter().find(|t| t["id"] == binding));
    let Some(t) = found else {
        return Counts::default();
    };
    let n = |k: &str| t["counts"][k].as_u64().unwrap_or(0);
    Counts {
        dispatched: n("dispatched"),
        failed: n("failed"),
        retried: n("retried"),
        dead_lettered: n("dead_lettered"),
    }
}

/// Per role: issue number → the visits for it, in arrival order.
fn by_issue(visits: &[Visit], role: Role) -> BTreeMap<u64, Vec<&Visit>> {
    let mut out: BTreeMap<u64, Vec<&Visit>> = BTreeMap::new();
    for v in visits.iter().filter(|v| v.role == role) {
        out.entry(v.issue.unwrap_or(0)).or_default().push(v);
    }
    out
}

/// From each issue's first POST to its first visit by `role`, sorted.
fn webhook_to(o: &Observed, role: Role) -> Vec<Duration> {
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    for p in &o.posted {
        sent.entry(p.issue).or_insert(p.sent);
    }
    let mut out: Vec<Duration> = by_issue(&o.visits, role)
        .iter()
        .filter_map(|(issue, visits)| Some(visits.first()?.at.duration_since(*sent.get(issue)?)))
        .collect();
    out.sort_unstable();
    out
}

fn pair(p50: Option<Duration>, p99: Option<Duration>) -> String {
    match (p50, p99) {
        (Some(a), Some(b)) => format!("{} / {}", fmt_latency(a), fmt_latency(b)),
        _ => "-".into(),
    }
}

fn histogram_pair(o: &Observed, name: &str, binding: &str) -> String {
    let q = |q| o.metrics.quantile(name, &[("binding", binding)], q);
    pair(q(0.50), q(0.99))
}

fn sorted_pair(sorted: &[Duration]) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    pair(
        Some(percentile(sorted, 0.50)),
        Some(percentile(sorted, 0.99)),
    )
}

/// Prints the section's tables.
pub(super) fn print(sizing: &Sizing, o: &Observed) {
    let expected = Expected::of(&o.deliveries);
    let accepted = o
        .posted
        .iter()
        .filter(|p| p.status == 200 && !p.duplicate)
        .count();
    let duplicates = o.posted.iter().filter(|p| p.duplicate).count();
    let refused = o.posted.iter().filter(|p| p.status != 200).count();
    let mut ingress: Vec<Duration> = o.posted.iter().map(|p| p.took).collect();
    ingress.sort_unstable();

    println!(
        "2. deliver: {} signed GitHub webhooks -> ingress -> SQLite outbox -> dispatcher -> invoke through the gateway -> 3 connectors on {} socket{}",
        sizing.webhooks,
        o.connector_sockets,
        if o.connector_sockets == 1 { "" } else { "s" },
    );
    println!();
    println!("| webhooks posted | accepted | duplicates | refused | ingress p50 | ingress p99 | drained in |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} | {} |",
        o.posted.len(),
        accepted,
        duplicates,
        refused,
        fmt_latency(percentile(&ingress, 0.50)),
        fmt_latency(percentile(&ingress, 0.99)),
        o.drained_in.map_or_else(
            || "not drained".to_owned(),
            |d| format!("{:.2} s", d.as_secs_f64())
        ),
    );
    println!();
    println!("| binding | takes | rows | delivered | failed attempts | retried | dead-lettered | enqueue→start p50 / p99 | handler p50 / p99 | webhook→connector p50 / p99 |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let rows = [
        (
            TICKETS,
            format!("issues.* if opened → {TENANT}.tickets.main"),
            Role::Tickets,
        ),
        (
            FLAKY,
            format!("issues.closed → {TENANT}.flaky.main (always fails)"),
            Role::Flaky,
        ),
        (
            AUDIT,
            format!("dead letters of {FLAKY} → {TENANT}.audit.main"),
            Role::Audit,
        ),
    ];
    for (binding, takes, role) in rows {
        let c = counts(&o.triggers, binding);
        let annotated = o.metrics.sum(
            "switchboard_dispatch_annotated_total",
            &[("binding", binding)],
        ) as u64;
        println!(
            "| {binding} | {takes} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.dispatched + c.dead_lettered + annotated,
            c.dispatched,
            c.failed,
            c.retried,
            c.dead_lettered,
            histogram_pair(o, "switchboard_dispatch_enqueue_to_start_seconds", binding),
            histogram_pair(o, "switchboard_dispatch_handler_seconds", binding),
            sorted_pair(&webhook_to(o, role)),
        );
    }
    println!();
    println!(
        "dead-letter handler runs: {} ({AUDIT}, one per dead letter of {FLAKY})",
        o.visits.iter().filter(|v| v.role == Role::Audit).count(),
    );
    println!(
        "filtered out of {TICKETS} by its CEL filter: {} closed issues",
        expected.closed
    );
    println!(
        "sockets: {} opened (the three connectors' and the runtime's own registration); store: SQLite in a temp dir, removed",
        o.sockets
    );
    println!(
        "latencies: ingress and webhook→connector measured by the demo; enqueue→start and handler from the runtime's /metrics histograms (estimates within their doubling buckets)"
    );
}

/// Every expectation that does not hold, as a sentence.
pub(super) fn check(o: &Observed) -> Vec<String> {
    let e = Expected::of(&o.deliveries);
    let n = o.deliveries.len();
    let mut failed = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            failed.push(what);
        }
    };

    // Ingress: every distinct delivery stored once, the redelivery a duplicate of it.
    let (first, redelivery) = o.posted.split_at(o.posted.len().saturating_sub(1));
    let refused: Vec<_> = o.posted.iter().filter(|p| p.status != 200).collect();
    expect(
        refused.is_empty(),
        format!(
            "{} webhook POST(s) were not answered 200 (statuses: {:?})",
            refused.len(),
            refused.iter().map(|p| p.status).collect::<Vec<_>>()
        ),
    );
    let stored = first
        .iter()
        .filter(|p| p.status == 200 && !p.duplicate)
        .count();
    expect(
        stored == n,
        format!("{stored} of {n} distinct webhooks were stored"),
    );
    let original = redelivery
        .first()
        .and_then(|r| first.iter().find(|p| p.issue == r.issue));
    expect(
        matches!((redelivery.first(), original), (Some(r), Some(p)) if r.duplicate && r.event_id.is_some() && r.event_id == p.event_id),
        "the redelivery was not answered as a duplicate of the first delivery's event".into(),
    );
    let counter = |outcome| {
        o.metrics.sum(
            "switchboard_ingress_requests_total",
            &[("source", "github"), ("outcome", outcome)],
        ) as usize
    };
    expect(
        counter("stored") == n && counter("duplicate") == 1,
        format!(
            "the runtime counted {} stored and {} duplicate webhooks, not {n} and 1",
            counter("stored"),
            counter("duplicate")
        ),
    );

    expect(
        o.drained_in.is_some(),
        format!(
            "the outbox did not drain, or not every delivery arrived, before the deadline (outbox: {})",
            o.stats
        ),
    );
    expect(
        o.connector_sockets == 1,
        format!(
            "the three target connectors used {} sockets, not one",
            o.connector_sockets
        ),
    );

    // What the connectors saw: each opened issue once at tickets, each closed issue
    // FLAKY_ATTEMPTS times at flaky and once at audit, and nothing else.
    let of = |action: &str| -> Vec<u64> {
        o.deliveries
            .iter()
            .filter(|d| d.action == action)
            .map(|d| d.issue)
            .collect()
    };
    let (opened, closed) = (of("opened"), of("closed"));
    let seen = |role: Role, issues: &[u64], times: usize, what: &str| -> Option<String> {
        let got = by_issue(&o.visits, role);
        let wrong: Vec<String> = issues
            .iter()
            .filter(|i| got.get(i).map_or(0, Vec::len) != times)
            .map(|i| format!("#{i}: {}", got.get(i).map_or(0, Vec::len)))
            .collect();
        let extra: Vec<&u64> = got.keys().filter(|i| !issues.contains(i)).collect();
        (!wrong.is_empty() || !extra.is_empty()).then(|| {
            format!(
                "{what}: expected {times} per issue; wrong for {} issue(s) ({}), unexpected issues {extra:?}",
                wrong.len(),
                wrong.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            )
        })
    };
    for problem in [
        seen(
            Role::Tickets,
            &opened,
            1,
            "tickets deliveries (opened issues)",
        ),
        seen(
            Role::Flaky,
            &closed,
            FLAKY_ATTEMPTS,
            "flaky attempts (closed issues)",
        ),
        seen(Role::Audit, &closed, 1, "dead-letter handler runs"),
    ]
    .into_iter()
    .flatten()
    {
        expect(false, problem);
    }
    let flaky_attempts_ok = by_issue(&o.visits, Role::Flaky).values().all(|vs| {
        let mut a: Vec<u32> = vs.iter().map(|v| v.attempt).collect();
        a.sort_unstable();
        a == (1..=FLAKY_ATTEMPTS as u32).collect::<Vec<_>>()
    });
    expect(
        flaky_attempts_ok,
        "flaky's attempts were not numbered 1, 2, 3 for every issue".into(),
    );
    let event_of: HashMap<u64, &str> = first
        .iter()
        .filter_map(|p| Some((p.issue, p.event_id.as_deref()?)))
        .collect();
    let mismatched = o
        .visits
        .iter()
        .filter(|v| v.role != Role::Audit)
        .filter(|v| v.issue.and_then(|i| event_of.get(&i)) != Some(&v.event_id.as_str()))
        .count();
    expect(
        mismatched == 0,
        format!("{mismatched} delivery(ies) carried another event id than ingress answered"),
    );
    let audit_ok = o
        .visits
        .iter()
        .filter(|v| v.role == Role::Audit)
        .all(|v| v.dead_letter_id.is_some() && v.dead_binding.as_deref() == Some(FLAKY));
    expect(
        audit_ok,
        format!("a dead-letter handler run did not carry a dead letter of {FLAKY}"),
    );

    // What the runtime says it did.
    let (t, f, a) = (
        counts(&o.triggers, TICKETS),
        counts(&o.triggers, FLAKY),
        counts(&o.triggers, AUDIT),
    );
    let closed_n = e.closed as u64;
    expect(
        t.dispatched == e.opened as u64 && t.failed == 0 && t.dead_lettered == 0,
        format!(
            "{TICKETS}: the dispatcher reports {t:?}, expected {} delivered and no failures",
            e.opened
        ),
    );
    expect(
        f.dispatched == 0
            && f.failed == closed_n * FLAKY_ATTEMPTS as u64
            && f.retried == closed_n * (FLAKY_ATTEMPTS as u64 - 1)
            && f.dead_lettered == closed_n,
        format!(
            "{FLAKY}: the dispatcher reports {f:?}, expected {} failed attempts, {} retried, {closed_n} dead-lettered",
            closed_n * FLAKY_ATTEMPTS as u64,
            closed_n * (FLAKY_ATTEMPTS as u64 - 1)
        ),
    );
    expect(
        a.dispatched == closed_n && a.failed == 0,
        format!("{AUDIT}: the dispatcher reports {a:?}, expected {closed_n} delivered"),
    );
    expect(
        o.stats["dead_letters"].as_u64() == Some(closed_n),
        format!(
            "the outbox keeps {} dead letters, expected {closed_n}",
            o.stats["dead_letters"]
        ),
    );
    failed
}
