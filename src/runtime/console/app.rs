//! What the runtime console's pages share: its state and the page answer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::response::Response;

use crate::console::{page, ConsoleKit, Page, SessionInfo};
use crate::ingress::state::Ingress;
use crate::runtime::config::telemetry::TelemetrySettings;
use crate::runtime::ops::{OpError, Operations, OutboxReport};

/// How long the outbox totals are reused across live pages: they are several
/// grouped counts over the outbox, and every open overview would otherwise run them
/// once a tick.
const STATS_TTL: Duration = Duration::from_secs(2);

/// What the console's handlers share.
pub(crate) struct RuntimeConsole {
    pub(crate) kit: Arc<ConsoleKit>,
    pub(crate) ops: Arc<Operations>,
    pub(crate) ingress: Arc<Ingress>,
    /// `[telemetry]`: the trace link's template.
    pub(crate) telemetry: TelemetrySettings,
    /// The last outbox totals and when they were read ([`RuntimeConsole::stats`]).
    stats: Mutex<Option<(Instant, OutboxReport)>>,
}

impl RuntimeConsole {
    /// The console over `ops` and `ingress`.
    pub(crate) fn new(
        kit: Arc<ConsoleKit>,
        ops: Arc<Operations>,
        ingress: Arc<Ingress>,
        telemetry: TelemetrySettings,
    ) -> Self {
        RuntimeConsole {
            kit,
            ops,
            ingress,
            telemetry,
            stats: Mutex::default(),
        }
    }

    /// The outbox totals (`GET /api/v1/outbox/stats`), read at most once per
    /// [`STATS_TTL`] however many pages show them (two readers racing both read;
    /// the lock is never held across the read).
    pub(crate) async fn stats(&self) -> Result<OutboxReport, OpError> {
        if let Some((at, v)) = &*self.stats.lock().expect("stats lock") {
            if at.elapsed() < STATS_TTL {
                return Ok(v.clone());
            }
        }
        let v = self.ops.stats().await?;
        *self.stats.lock().expect("stats lock") = Some((Instant::now(), v.clone()));
        Ok(v)
    }
}

pub(crate) type App = axum::extract::State<Arc<RuntimeConsole>>;

/// Answers a page rendered by `render` from the console's state and the CSRF token.
pub(crate) async fn serve<F, Fut>(
    app: Arc<RuntimeConsole>,
    session: SessionInfo,
    headers: &HeaderMap,
    render: F,
) -> Response
where
    F: Fn(Arc<RuntimeConsole>, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Page> + Send + 'static,
{
    page::respond_with(app.kit.clone(), session, headers, app, render).await
}
