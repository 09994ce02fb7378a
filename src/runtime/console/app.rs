//! What the runtime console's pages share: its state and the page answer.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;

use crate::console::{page, ConsoleKit, Page, SessionInfo};
use crate::runtime::ops::DeliverOps;
use crate::webhooks::state::Ingress;

/// What the console's handlers share.
pub(crate) struct RuntimeConsole {
    pub(crate) kit: Arc<ConsoleKit>,
    pub(crate) ops: Arc<DeliverOps>,
    pub(crate) ingress: Arc<Ingress>,
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
