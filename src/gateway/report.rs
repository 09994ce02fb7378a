//! [`ReportedMetrics`]: the latest `metrics_report` a registration sent, as the HTTP API
//! shows it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::proto::MetricsReport;

/// The latest `metrics_report` of one registration: the connector's own view of its
/// traffic and connection health, which the gateway cannot observe itself (queueing,
/// latency inside the connector, reconnects it made before this socket). Only the
/// newest report is kept, because each one carries running totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReportedMetrics {
    /// When the connector took the report (its clock, Unix ms).
    pub timestamp_ms: i64,
    /// When the gateway received it (the gateway's clock, Unix ms), so that a stale
    /// report can be told apart even when the two clocks disagree.
    pub received_at_ms: i64,
    /// Requests the connector received.
    pub requests_received: i64,
    /// Requests it processed successfully.
    pub requests_processed: i64,
    /// Requests that failed.
    pub requests_failed: i64,
    /// Mean request latency inside the connector.
    pub avg_latency_ms: f64,
    /// Sum of request latencies (with the counts, lets a reader compute windows).
    pub total_duration_ms: f64,
    /// Payload bytes received.
    pub bytes_received: i64,
    /// Payload bytes sent.
    pub bytes_sent: i64,
    /// Reconnects attempted.
    pub reconnection_attempts: i64,
    /// Connections lost.
    pub total_disconnects: i64,
    /// Reconnects that succeeded.
    pub successful_reconnects: i64,
    /// How long the connector has run.
    pub uptime_seconds: f64,
    /// When it last received a request (Unix ms; 0 for never).
    pub last_request_at_ms: i64,
    /// The connector's own metrics, by name (sorted, for a stable listing).
    pub custom_metrics: BTreeMap<String, f64>,
}

impl ReportedMetrics {
    /// The stored form of `report`, stamped with the gateway's receive time.
    pub(crate) fn received(report: MetricsReport) -> Self {
        let received_at_ms = crate::clock::now_ms();
        ReportedMetrics {
            timestamp_ms: report.timestamp_ms,
            received_at_ms,
            requests_received: report.requests_received,
            requests_processed: report.requests_processed,
            requests_failed: report.requests_failed,
            avg_latency_ms: report.avg_latency_ms,
            total_duration_ms: report.total_duration_ms,
            bytes_received: report.bytes_received,
            bytes_sent: report.bytes_sent,
            reconnection_attempts: report.reconnection_attempts,
            total_disconnects: report.total_disconnects,
            successful_reconnects: report.successful_reconnects,
            uptime_seconds: report.uptime_seconds,
            last_request_at_ms: report.last_request_at_ms,
            custom_metrics: report.custom_metrics.into_iter().collect(),
        }
    }
}
