//! [`SourceMetrics`]: the counters a source keeps, and [`CustomCounters`], every
//! source's counters as `/metrics` renders them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Counters a source keeps, rendered at `/metrics` as
/// `switchboard_ingress_{name}_total{source="…", labels…}`.
#[derive(Clone)]
pub struct SourceMetrics {
    source: Arc<str>,
    counters: Arc<CustomCounters>,
}

impl std::fmt::Debug for SourceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceMetrics")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl SourceMetrics {
    pub(crate) fn new(source: &str, counters: Arc<CustomCounters>) -> SourceMetrics {
        SourceMetrics {
            source: source.into(),
            counters,
        }
    }

    /// Adds one to the counter `name` (lower-case letters, digits and `_`, starting
    /// with a letter; anything else is folded to `_`) with `labels`.
    pub fn inc(&self, name: &str, labels: &[(&str, &str)]) {
        self.add(name, labels, 1);
    }

    /// Adds `by` to the counter `name` with `labels`.
    pub fn add(&self, name: &str, labels: &[(&str, &str)], by: u64) {
        let mut key = String::with_capacity(64);
        key.push_str("switchboard_ingress_");
        key.extend(name.chars().map(metric_char));
        key.push_str("_total{source=\"");
        escape_into(&mut key, &self.source);
        key.push('"');
        for (k, v) in labels {
            key.push(',');
            key.extend(k.chars().map(metric_char));
            key.push_str("=\"");
            escape_into(&mut key, v);
            key.push('"');
        }
        key.push('}');
        let mut map = self.counters.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(key).or_default() += by;
    }
}

fn metric_char(c: char) -> char {
    if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
        c
    } else {
        '_'
    }
}

fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Every source's counters, one map per runtime.
#[derive(Default)]
pub(crate) struct CustomCounters(Mutex<BTreeMap<String, u64>>);

impl CustomCounters {
    /// The counters in the Prometheus text format (a `# TYPE` line per family).
    pub(crate) fn render(&self) -> String {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        let mut family = "";
        for (series, value) in map.iter() {
            let name = series.split('{').next().unwrap_or(series);
            let base = name.strip_suffix("_total").unwrap_or(name);
            if base != family {
                out.push_str(&format!("# TYPE {base} counter\n"));
                family = base;
            }
            out.push_str(&format!("{series} {value}\n"));
        }
        out
    }
}
