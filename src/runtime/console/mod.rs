//! The runtime's console (issue 25), on the runtime's listener beside its admin API and
//! behind the same admin token (signed in once, then a session cookie; every action a
//! POST carrying the page's CSRF token, checked by `crate::console` before any handler
//! runs).
//!
//! Pages, each rendering what its JSON endpoint answers (the same operations, never
//! the HTTP API itself): `/console` (the outbox and its depth, sources and bindings at
//! a glance), `/console/sources`, `/console/events` (paged, filtered) and
//! `/console/events/{id}`, `/console/bindings` and `/console/bindings/{id}` (pause,
//! resume, drain, the lifecycle history), `/console/dead-letters` and
//! `/console/dead-letters/{id}` (replay), `/console/backfills` and
//! `/console/backfills/{id}` (progress, pause, resume, cancel), `/console/queues`.

mod app;
mod backfills;
mod bindings;
mod events;
mod overview;
mod recovery;
mod widgets;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use super::ops::Operations;
use crate::console::ConsoleKit;

/// How often the runtime's live pages render again: they read the store, so once a
/// second (the gateway's in-memory pages take half that).
const LIVE_TICK: std::time::Duration = std::time::Duration::from_secs(1);
use crate::ingress::state::Ingress;
use crate::runtime::config::telemetry::TelemetrySettings;
use crate::secret::Secret;
use app::RuntimeConsole;

/// The console's routes: sign-in and assets, and the pages behind the session.
pub(crate) fn routes(
    ops: Arc<Operations>,
    ingress: Arc<Ingress>,
    token: Option<Secret>,
    telemetry: TelemetrySettings,
    closing: CancellationToken,
) -> Router {
    let kit = ConsoleKit::new(
        "runtime",
        token,
        vec![
            ("/console", "Overview"),
            ("/console/sources", "Sources"),
            ("/console/events", "Events"),
            ("/console/bindings", "Bindings"),
            ("/console/dead-letters", "Dead letters"),
            ("/console/backfills", "Backfills"),
            ("/console/queues", "Queues"),
        ],
        LIVE_TICK,
        closing,
    );
    let app = Arc::new(RuntimeConsole::new(kit.clone(), ops, ingress, telemetry));
    let pages = Router::new()
        .route("/console", get(overview::overview))
        .route("/console/sources", get(overview::sources))
        .route("/console/queues", get(overview::queues))
        .route("/console/events", get(events::list))
        .route("/console/events/{id}", get(events::detail))
        .route("/console/events/{id}/replay", post(events::replay))
        .route("/console/bindings", get(bindings::list))
        .route("/console/bindings/{id}", get(bindings::detail))
        .route("/console/bindings/{id}/{action}", post(bindings::act))
        .route("/console/dead-letters", get(recovery::list))
        .route(
            "/console/dead-letters/replay",
            post(recovery::replay_selection),
        )
        .route("/console/dead-letters/{id}", get(recovery::detail))
        .route("/console/dead-letters/{id}/replay", post(recovery::replay))
        .route("/console/backfills", get(backfills::list))
        .route("/console/backfills/{id}", get(backfills::detail))
        .route("/console/backfills/{id}/{action}", post(backfills::act))
        .with_state(app);
    crate::console::guard::public_routes(kit.clone())
        .merge(crate::console::guard::protect(kit, pages))
}
