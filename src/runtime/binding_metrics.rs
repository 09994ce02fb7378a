//! The runtime's part of `/metrics`: the dispatcher's counters, then one set of gauges
//! per binding, read at each scrape:
//!
//! - `switchboard_trigger_version{binding}`: the active version's number (0 while none
//!   is active);
//! - `switchboard_trigger_state{binding,state}`: 1 for the binding's state (`active`,
//!   `draining`, `paused`, `breaker_open`, `terminated`), 0 for the others, so an alert
//!   can watch one series;
//! - `switchboard_outbox_depth{binding,state}`: rows `due`, `leased` and `scheduled`;
//! - `switchboard_outbox_oldest_age_seconds{binding}`: how long the oldest row has waited.
//!
//! The depth gauges come from the store's stats (one grouped read per scrape), so a
//! scrape shows what every process on the database has left, not only this one's.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::clock::now_ms;
use crate::dispatch::metrics::DispatchMetrics;
use crate::outbox::model::Depth;
use crate::outbox::OutboxStore;
use crate::triggers::filter_breaker::Breakers;
use crate::triggers::live::LiveTriggers;
use crate::triggers::versions::VersionState;

/// The states `switchboard_trigger_state` has a series for.
const STATES: [&str; 5] = ["active", "draining", "paused", "breaker_open", "terminated"];

/// Renders the dispatcher's metrics and the per-binding gauges.
pub(crate) struct RuntimeMetrics {
    pub(crate) dispatch: Arc<DispatchMetrics>,
    pub(crate) triggers: Arc<LiveTriggers>,
    pub(crate) store: Arc<dyn OutboxStore>,
    pub(crate) breakers: Arc<Breakers>,
}

/// A binding's state as one word: paused wins, then an open filter breaker, then
/// active, draining, terminated.
pub(crate) fn state_word(
    paused: bool,
    breaker_open: bool,
    active: bool,
    draining: bool,
) -> &'static str {
    match (paused, breaker_open, active, draining) {
        (true, _, _, _) => "paused",
        (false, true, true, _) => "breaker_open",
        (false, _, true, _) => "active",
        (false, _, false, true) => "draining",
        (false, _, false, false) => "terminated",
    }
}

/// `{prefix}_depth{{key, state}}` (due, leased, scheduled) and
/// `{prefix}_oldest_age_seconds{{key}}` for each entry of `depths` (a binding's rows, a
/// queue's messages), with their help texts.
fn depth_gauges(
    out: &mut String,
    (prefix, key): (&str, &str),
    (depth_help, age_help): (&str, &str),
    depths: &std::collections::BTreeMap<String, Depth>,
) {
    gauge_header(out, &format!("{prefix}_depth"), depth_help);
    for (id, d) in depths {
        for (state, n) in [
            ("due", d.due),
            ("leased", d.leased),
            ("scheduled", d.scheduled),
        ] {
            let _ = writeln!(
                out,
                "{prefix}_depth{{{key}=\"{}\",state=\"{state}\"}} {n}",
                label(id)
            );
        }
    }
    gauge_header(out, &format!("{prefix}_oldest_age_seconds"), age_help);
    for (id, d) in depths {
        let age = d.oldest_age_ms.unwrap_or(0).max(0) as f64 / 1000.0;
        let _ = writeln!(
            out,
            "{prefix}_oldest_age_seconds{{{key}=\"{}\"}} {age}",
            label(id)
        );
    }
}

/// A gauge family's `# TYPE` and `# HELP` lines.
fn gauge_header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "# HELP {name} {help}");
}

/// A label value, escaped as the text format asks.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl RuntimeMetrics {
    /// The exposition: the dispatcher's families, then the per-binding gauges, ending
    /// with `# EOF`.
    pub(crate) async fn render(&self) -> String {
        let mut out = self.dispatch.render();
        if let Some(cut) = out.rfind("# EOF") {
            out.truncate(cut);
        }
        let view = self.triggers.current().view();
        let _ = writeln!(out, "# TYPE switchboard_trigger_version gauge");
        let _ = writeln!(
            out,
            "# HELP switchboard_trigger_version The active version's number (0: none active)."
        );
        for b in &view {
            let _ = writeln!(
                out,
                "switchboard_trigger_version{{binding=\"{}\"}} {}",
                label(&b.id),
                b.active.unwrap_or(0)
            );
        }
        let _ = writeln!(out, "# TYPE switchboard_trigger_state gauge");
        let _ = writeln!(
            out,
            "# HELP switchboard_trigger_state 1 for the binding's state, 0 for the others."
        );
        for b in &view {
            let draining = b.versions.iter().any(|v| v.state == VersionState::Draining);
            let now = state_word(
                b.paused,
                self.breakers.is_open(&b.id),
                b.active.is_some(),
                draining,
            );
            for s in STATES {
                let _ = writeln!(
                    out,
                    "switchboard_trigger_state{{binding=\"{}\",state=\"{s}\"}} {}",
                    label(&b.id),
                    u8::from(s == now)
                );
            }
        }
        match self.store.stats(now_ms()).await {
            Ok(stats) => {
                depth_gauges(
                    &mut out,
                    ("switchboard_outbox", "binding"),
                    (
                        "Outbox rows per binding: due, leased, scheduled.",
                        "How long the binding's oldest row has waited.",
                    ),
                    &stats.by_binding,
                );
                depth_gauges(
                    &mut out,
                    ("switchboard_queue", "queue"),
                    ("Queue messages: due (visible), leased (received, not acked), scheduled (delayed).", "How long the queue's oldest message has waited."),
                    &stats.queues,
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "/metrics: could not read the outbox depth");
            }
        }
        gauge_header(&mut out, "switchboard_outbox_lease_age_seconds", "Per binding, how long ago the oldest row this process is attempting was claimed (a stuck handler shows as a growing age; 0 with none in flight).");
        let ages = self.dispatch.lease_ages(now_ms());
        for b in &view {
            let age = ages.get(&b.id).copied().unwrap_or(0) as f64 / 1000.0;
            let _ = writeln!(
                out,
                "switchboard_outbox_lease_age_seconds{{binding=\"{}\"}} {age}",
                label(&b.id)
            );
        }
        out.push_str("# EOF\n");
        out
    }
}
