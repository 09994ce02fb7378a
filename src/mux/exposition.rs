//! The runner's metrics snapshot in the Prometheus text exposition format (0.0.4),
//! for the health listener's `/metrics`.
//!
//! Written by hand rather than through `prometheus-client`, which only the runtime
//! and the gateway build: the SDK's series are a fixed set made from a snapshot at
//! scrape time, so a registry would be a second copy of the counters. What the format
//! asks is kept here: one `# HELP` and `# TYPE` per family before its samples, label
//! values escaped (`\\`, `\"`, `\n`), histogram buckets cumulative with a `+Inf`
//! bucket equal to `_count`, counters ending in `_total`, times in seconds.
//!
//! Per registration (labels `registration`, the dot key, and `tenant`): its state,
//! when its socket connected and last went down (and why), reconnects, executes by
//! outcome and an execute duration histogram. Per socket (labels `tenant`, `gateway`
//! and `stream`, a gRPC registration's own stream or empty): the same connection
//! figures, once.

use std::fmt::Write as _;

use super::metrics::ConnectorMetrics;

/// Every state a registration can be in, as the `state` label names it; each gets a
/// 0/1 sample so a series never disappears when the state changes.
const STATES: [&str; 4] = ["registered", "pending_approval", "registering", "rejected"];

/// One registration's figures at scrape time.
pub(crate) struct RegistrationSeries {
    /// Its dot key.
    pub(crate) key: String,
    pub(crate) tenant: String,
    /// One of [`STATES`].
    pub(crate) state: &'static str,
    pub(crate) metrics: ConnectorMetrics,
}

/// One socket's figures at scrape time (only its connection figures are read).
pub(crate) struct SocketSeries {
    pub(crate) tenant: String,
    pub(crate) gateway: String,
    /// A gRPC registration's own stream (its dot key); empty for a shared WebSocket.
    pub(crate) stream: String,
    pub(crate) metrics: ConnectorMetrics,
}

/// The whole exposition: the runner's readiness, then every registration family,
/// then every socket family.
pub(crate) fn render(
    ready: bool,
    registrations: &[RegistrationSeries],
    sockets: &[SocketSeries],
) -> String {
    let mut w = Writer(String::with_capacity(4096 + 2048 * registrations.len()));
    w.family(
        "switchboard_runner_ready",
        "gauge",
        "1 when every registration is registered or pending approval (what /readyz answers).",
    );
    w.sample("switchboard_runner_ready", &[], u64::from(ready));

    let regs: Vec<(Vec<(&str, &str)>, &ConnectorMetrics)> = registrations
        .iter()
        .map(|r| {
            let labels = vec![
                ("registration", r.key.as_str()),
                ("tenant", r.tenant.as_str()),
            ];
            (labels, &r.metrics)
        })
        .collect();
    w.family(
        "switchboard_registration_state",
        "gauge",
        "1 for the registration's current state, 0 for the others.",
    );
    for (r, (labels, _)) in registrations.iter().zip(&regs) {
        for state in STATES {
            let labels = with(labels, ("state", state));
            w.sample(
                "switchboard_registration_state",
                &labels,
                u64::from(r.state == state),
            );
        }
    }
    w.connection("switchboard_registration", &regs);
    w.family(
        "switchboard_registration_executes_total",
        "counter",
        "Executes answered, by outcome: ok, error (the connector's, or a refusal while stopping), timeout, overloaded.",
    );
    for (labels, m) in &regs {
        let error = m
            .requests_failed
            .saturating_sub(m.requests_timed_out)
            .saturating_sub(m.requests_rejected_overloaded);
        for (outcome, n) in [
            ("ok", m.requests_processed),
            ("error", error),
            ("timeout", m.requests_timed_out),
            ("overloaded", m.requests_rejected_overloaded),
        ] {
            let labels = with(labels, ("outcome", outcome));
            w.sample("switchboard_registration_executes_total", &labels, n);
        }
    }
    w.family(
        "switchboard_registration_executes_in_flight",
        "gauge",
        "Executes received and not answered yet (running or queued).",
    );
    for (labels, m) in &regs {
        let answered = m.requests_processed + m.requests_failed;
        let n = m.requests_received.saturating_sub(answered);
        w.sample("switchboard_registration_executes_in_flight", labels, n);
    }
    let name = "switchboard_registration_execute_duration_seconds";
    w.family(
        name,
        "histogram",
        "How long the connector took to answer an execute (timed-out and refused ones excluded).",
    );
    for (labels, m) in &regs {
        let mut count = 0;
        for (le_ms, n) in &m.execute_duration_buckets {
            let le = if *le_ms == u64::MAX {
                "+Inf".to_owned()
            } else {
                seconds(*le_ms)
            };
            let labels = with(labels, ("le", &le));
            w.sample(&format!("{name}_bucket"), &labels, *n);
            count = *n;
        }
        w.sample_str(
            &format!("{name}_sum"),
            labels,
            &seconds(m.total_duration_ms),
        );
        w.sample(&format!("{name}_count"), labels, count);
    }

    let socks: Vec<(Vec<(&str, &str)>, &ConnectorMetrics)> = sockets
        .iter()
        .map(|s| {
            let labels = vec![
                ("tenant", s.tenant.as_str()),
                ("gateway", s.gateway.as_str()),
                ("stream", s.stream.as_str()),
            ];
            (labels, &s.metrics)
        })
        .collect();
    w.connection("switchboard_socket", &socks);
    w.family(
        "switchboard_socket_connects_total",
        "counter",
        "Times the socket connected and joined.",
    );
    for (labels, m) in &socks {
        w.sample("switchboard_socket_connects_total", labels, m.connects);
    }
    w.0
}

/// `labels` and one more.
fn with<'a>(labels: &[(&'a str, &'a str)], extra: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    let mut all = labels.to_vec();
    all.push(extra);
    all
}

/// Milliseconds as decimal seconds, exactly (no float rounding): 5 → `0.005`.
fn seconds(ms: u64) -> String {
    match ms % 1000 {
        0 => format!("{}", ms / 1000),
        frac => format!("{}.{:03}", ms / 1000, frac)
            .trim_end_matches('0')
            .to_owned(),
    }
}

/// A label value as the text format wants it: backslash, double quote and line feed
/// escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

struct Writer(String);

impl Writer {
    /// Starts a family: its help text (plain, no backslash or line feed) and type.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.sample_str(name, labels, &value.to_string());
    }

    fn sample_str(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    /// The connection families of `prefix` (`switchboard_registration` or
    /// `switchboard_socket`): connected since, last disconnect with its reason,
    /// disconnects and reconnects.
    fn connection(&mut self, prefix: &str, rows: &[(Vec<(&str, &str)>, &ConnectorMetrics)]) {
        let name = format!("{prefix}_connected");
        self.family(&name, "gauge", "1 while the socket is joined.");
        for (labels, m) in rows {
            self.sample(&name, labels, u64::from(m.connected_since_ms.is_some()));
        }
        let name = format!("{prefix}_connected_since_seconds");
        self.family(
            &name,
            "gauge",
            "Unix time the socket joined; absent while it is down.",
        );
        for (labels, m) in rows {
            if let Some(ms) = m.connected_since_ms {
                self.sample_str(&name, labels, &seconds(ms));
            }
        }
        let name = format!("{prefix}_last_disconnect_seconds");
        self.family(
            &name,
            "gauge",
            "Unix time the socket last went down, labelled with why; absent until it has.",
        );
        for (labels, m) in rows {
            if let Some(ms) = m.last_disconnect_at_ms {
                let reason = m.last_disconnect_reason.as_deref().unwrap_or("");
                let labels = with(labels, ("reason", reason));
                self.sample_str(&name, &labels, &seconds(ms));
            }
        }
        let name = format!("{prefix}_disconnects_total");
        self.family(&name, "counter", "Times the socket's connection was lost.");
        for (labels, m) in rows {
            self.sample(&name, labels, m.disconnects);
        }
        let name = format!("{prefix}_reconnects_total");
        self.family(&name, "counter", "Reconnect attempts scheduled.");
        for (labels, m) in rows {
            self.sample(&name, labels, m.reconnect_attempts);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The samples of `text`: name with labels → value, after checking that every
    /// sample follows its family's `# TYPE` line and no family is declared twice.
    fn parse(text: &str) -> BTreeMap<String, String> {
        let mut declared = Vec::new();
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
                assert!(
                    !declared.contains(&name.to_owned()),
                    "{name} declared twice"
                );
                declared.push(name.to_owned());
            } else if line.starts_with("# HELP ") {
                continue;
            } else {
                let (series, value) = line.rsplit_once(' ').expect("series value");
                let name = series.split('{').next().unwrap();
                let family = declared.last().expect("a sample before any # TYPE");
                assert!(
                    name == family
                        || name
                            .strip_prefix(family.as_str())
                            .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s)),
                    "{name} is not in family {family}"
                );
                samples.insert(series.to_owned(), value.to_owned());
            }
        }
        samples
    }

    fn registration(state: &'static str, reason: &str) -> RegistrationSeries {
        let metrics = ConnectorMetrics {
            requests_received: 8,
            requests_processed: 3,
            requests_failed: 4,
            requests_timed_out: 1,
            requests_rejected_overloaded: 2,
            total_duration_ms: 1_234,
            connected_since_ms: None,
            last_disconnect_at_ms: Some(1_700_000_000_250),
            last_disconnect_reason: Some(reason.to_owned()),
            reconnect_attempts: 2,
            execute_duration_buckets: vec![(5, 1), (1_000, 4), (u64::MAX, 4)],
            ..Default::default()
        };
        RegistrationSeries {
            key: "acme.echo.a".into(),
            tenant: "acme".into(),
            state,
            metrics,
        }
    }

    #[test]
    fn every_family_is_typed_and_samples_follow_it() {
        let text = render(true, &[registration("registered", "read failed")], &[]);
        let s = parse(&text);
        let l = r#"registration="acme.echo.a",tenant="acme""#;
        assert_eq!(s["switchboard_runner_ready"], "1");
        assert_eq!(
            s[&format!("switchboard_registration_state{{{l},state=\"registered\"}}")],
            "1"
        );
        assert_eq!(
            s[&format!("switchboard_registration_state{{{l},state=\"rejected\"}}")],
            "0"
        );
        assert_eq!(
            s[&format!("switchboard_registration_executes_total{{{l},outcome=\"ok\"}}")],
            "3"
        );
        assert_eq!(
            s[&format!("switchboard_registration_executes_total{{{l},outcome=\"error\"}}")],
            "1"
        );
        assert_eq!(
            s[&format!("switchboard_registration_executes_total{{{l},outcome=\"timeout\"}}")],
            "1"
        );
        assert_eq!(
            s[&format!("switchboard_registration_executes_total{{{l},outcome=\"overloaded\"}}")],
            "2"
        );
        assert_eq!(
            s[&format!("switchboard_registration_connected{{{l}}}")],
            "0"
        );
        assert!(
            !text.contains("switchboard_registration_connected_since_seconds{"),
            "absent while down"
        );
        assert_eq!(
            s[&format!(
                "switchboard_registration_last_disconnect_seconds{{{l},reason=\"read failed\"}}"
            )],
            "1700000000.25"
        );
        assert_eq!(
            s[&format!("switchboard_registration_reconnects_total{{{l}}}")],
            "2"
        );
    }

    #[test]
    fn the_histogram_is_cumulative_in_seconds_with_inf_equal_to_count() {
        let s = parse(&render(false, &[registration("registering", "x")], &[]));
        let h = "switchboard_registration_execute_duration_seconds";
        let l = r#"registration="acme.echo.a",tenant="acme""#;
        assert_eq!(s[&format!("{h}_bucket{{{l},le=\"0.005\"}}")], "1");
        assert_eq!(s[&format!("{h}_bucket{{{l},le=\"1\"}}")], "4");
        assert_eq!(s[&format!("{h}_bucket{{{l},le=\"+Inf\"}}")], "4");
        assert_eq!(s[&format!("{h}_count{{{l}}}")], "4");
        assert_eq!(s[&format!("{h}_sum{{{l}}}")], "1.234");
        assert_eq!(s["switchboard_runner_ready"], "0");
    }

    #[test]
    fn label_values_are_escaped() {
        let text = render(
            true,
            &[registration("registered", "closed: \"bye\"\nC:\\path")],
            &[],
        );
        assert!(
            text.contains(r#"reason="closed: \"bye\"\nC:\\path"} "#),
            "{text}"
        );
        // Still one sample per line: the line feed did not split it.
        parse(&text);
    }

    #[test]
    fn sockets_get_their_own_series() {
        let metrics = ConnectorMetrics {
            connects: 2,
            connected_since_ms: Some(1_700_000_001_000),
            ..Default::default()
        };
        let socket = SocketSeries {
            tenant: "acme".into(),
            gateway: "ws://127.0.0.1:4000/socket/websocket".into(),
            stream: String::new(),
            metrics,
        };
        let s = parse(&render(true, &[], &[socket]));
        let l = r#"tenant="acme",gateway="ws://127.0.0.1:4000/socket/websocket",stream="""#;
        assert_eq!(s[&format!("switchboard_socket_connected{{{l}}}")], "1");
        assert_eq!(
            s[&format!("switchboard_socket_connected_since_seconds{{{l}}}")],
            "1700000001"
        );
        assert_eq!(s[&format!("switchboard_socket_connects_total{{{l}}}")], "2");
    }

    #[test]
    fn seconds_are_exact_decimals() {
        assert_eq!(seconds(5), "0.005");
        assert_eq!(seconds(250), "0.25");
        assert_eq!(seconds(60_000), "60");
        assert_eq!(seconds(1_234), "1.234");
    }
}
