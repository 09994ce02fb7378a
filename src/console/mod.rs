//! The console's kit, shared by the gateway's and the runtime's consoles: sign-in
//! sessions, CSRF, the security headers, the page shell, live regions over
//! Server-Sent Events, SVG charts and the embedded assets. Each assembly
//! (`gateway::console`, `runtime::console`) adds its own pages on top and calls the
//! same operations its JSON API does; the JSON API stays the source of truth.
//!
//! Why this shape (decided for issue 25; `docs/design/console.md` has the longer note):
//!
//! - **Server-rendered HTML from `maud`**: templates are Rust expressions checked at
//!   compile time, and every interpolation is escaped unless marked `PreEscaped`, so a
//!   payload holding `<script>` renders as text by construction. No template files,
//!   no Node build, nothing fetched at run time.
//! - **Live regions**: a page is a list of regions, each rendered by one function.
//!   The page's own URL, asked for `text/event-stream` (which `EventSource` sends),
//!   renders the same regions again every [`LIVE_TICK`] and sends the ones that
//!   changed; `console.js` swaps each into place by id. One renderer for the first
//!   paint and every update, so they cannot disagree, and escaping stays on the
//!   server. The script is about fifty lines and there is no client-side template.
//! - **Actions are plain HTML forms** (POST, with a hidden CSRF field): they work
//!   without script, and [`guard`] checks every POST's token before any handler runs,
//!   so no handler can forget to.
//! - **Charts are SVG** drawn by the server from the sampled series ([`chart`]).

pub(crate) mod assets;
pub(crate) mod chart;
pub(crate) mod format;
pub(crate) mod guard;
pub(crate) mod page;
pub(crate) mod sessions;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::secret::Secret;
use sessions::Sessions;

pub(crate) use page::{Page, Region};
pub(crate) use sessions::SessionInfo;

/// How often a live page's regions are rendered again (and sent when changed).
pub(crate) const LIVE_TICK: Duration = Duration::from_millis(500);

/// One console: who may sign in, its sessions, and the switch that ends its live
/// streams when the listener shuts down (an open `EventSource` would otherwise hold a
/// graceful shutdown forever).
pub(crate) struct ConsoleKit {
    /// `gateway` or `runtime`: the title, and the session cookie's name, so the two
    /// consoles on one host (cookies ignore ports) never overwrite each other's.
    pub(crate) name: &'static str,
    /// The operator token; `None` leaves the console open like its API (a session is
    /// opened on the first visit, still with a CSRF token).
    pub(crate) token: Option<Secret>,
    /// The pages' navigation: `(href, label)`.
    pub(crate) nav: Vec<(&'static str, &'static str)>,
    pub(crate) sessions: Mutex<Sessions>,
    pub(crate) closing: CancellationToken,
}

impl ConsoleKit {
    /// A console named `name` with `nav` links, guarded by `token`; its live streams
    /// end when `closing` is cancelled.
    pub(crate) fn new(
        name: &'static str,
        token: Option<Secret>,
        nav: Vec<(&'static str, &'static str)>,
        closing: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(ConsoleKit {
            name,
            token,
            nav,
            sessions: Mutex::new(Sessions::default()),
            closing,
        })
    }

    /// The session cookie's name.
    pub(crate) fn cookie(&self) -> String {
        format!("sb_console_{}", self.name)
    }
}
