//! `[telemetry]`: how dispatch attempts' spans relate to their events, and the link
//! the console builds from a trace id. Export itself is configured by the standard
//! `OTEL_*` environment variables (`crate::Telemetry::from_env`), not here, so the
//! same deployment settings serve every OpenTelemetry-instrumented process.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::telemetry::Relationship;

/// `[telemetry]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// `"child"` (default) or `"link"`: whether each dispatch attempt's span is a
    /// child of its event's creation context (and linked to it) or starts a trace of
    /// its own that links back. See the guide's "Tracing" page.
    pub span_relationship: Option<String>,
    /// A URL with `{trace_id}` in it, e.g. `https://tempo.example/trace/{trace_id}`:
    /// the console links an event's trace id there.
    pub trace_url: Option<String>,
}

/// `[telemetry]` resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TelemetrySettings {
    /// See [`TelemetryConfig::span_relationship`].
    pub(crate) span_relationship: Relationship,
    /// See [`TelemetryConfig::trace_url`]; checked to hold `{trace_id}`.
    pub(crate) trace_url: Option<String>,
}

impl TelemetrySettings {
    /// The console's link for `trace_id`, when a template is configured.
    pub(crate) fn trace_link(&self, trace_id: &str) -> Option<String> {
        self.trace_url
            .as_ref()
            .map(|t| t.replace("{trace_id}", trace_id))
    }
}

impl TelemetryConfig {
    pub(super) fn resolve(&self) -> Result<TelemetrySettings> {
        let span_relationship = match self.span_relationship.as_deref().map(str::trim) {
            None | Some("child") => Relationship::Child,
            Some("link") => Relationship::Link,
            Some(other) => {
                return Err(Error::Config(format!(
                    "[telemetry] span_relationship: {other:?} is neither \"child\" nor \"link\""
                )))
            }
        };
        let trace_url = match &self.trace_url {
            Some(t) if !t.contains("{trace_id}") => {
                return Err(Error::Config(format!(
                    "[telemetry] trace_url: {t:?} has no {{trace_id}} to put the trace id in"
                )))
            }
            Some(t) if !(t.starts_with("https://") || t.starts_with("http://")) => {
                return Err(Error::Config(format!(
                    "[telemetry] trace_url: {t:?} is not an http(s) URL"
                )))
            }
            t => t.clone(),
        };
        Ok(TelemetrySettings {
            span_relationship,
            trace_url,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(rel: Option<&str>, url: Option<&str>) -> Result<TelemetrySettings> {
        TelemetryConfig {
            span_relationship: rel.map(str::to_owned),
            trace_url: url.map(str::to_owned),
        }
        .resolve()
    }

    #[test]
    fn defaults_child_and_no_link() {
        assert_eq!(resolve(None, None).unwrap(), TelemetrySettings::default());
        assert_eq!(
            resolve(Some("link"), None).unwrap().span_relationship,
            Relationship::Link
        );
    }

    #[test]
    fn the_trace_url_must_hold_the_trace_id_and_be_http() {
        let s = resolve(None, Some("https://tempo.example/trace/{trace_id}")).unwrap();
        assert_eq!(
            s.trace_link("abc").as_deref(),
            Some("https://tempo.example/trace/abc")
        );
        let e = resolve(None, Some("https://tempo.example/trace/")).unwrap_err();
        assert!(e.to_string().contains("{trace_id}"), "{e}");
        let e = resolve(None, Some("javascript:{trace_id}")).unwrap_err();
        assert!(e.to_string().contains("not an http(s) URL"), "{e}");
        let e = resolve(Some("parent"), None).unwrap_err();
        assert!(e.to_string().contains("span_relationship"), "{e}");
    }
}
