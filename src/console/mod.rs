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
//!   renders the same regions again every tick of its console and sends the ones that
//!   changed; `console.js` swaps each into place by id. One renderer for the first
//!   paint and every update, so they cannot disagree, and escaping stays on the
//!   server. The script is about sixty lines and there is no client-side template.
//! - **Actions are plain HTML forms** (POST, with a hidden CSRF field): they work
//!   without script, and [`guard`] checks the token of every POST behind the session
//!   before any handler runs, so no handler can forget to.
//! - **Charts are SVG** drawn by the server from the sampled series ([`chart`]).

pub(crate) mod assets;
pub(crate) mod chart;
pub(crate) mod format;
pub(crate) mod guard;
pub(crate) mod page;
pub(crate) mod sessions;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::secret::Secret;
use sessions::Sessions;

pub(crate) use page::{Page, Region};
pub(crate) use sessions::SessionInfo;

/// Most live streams one console serves at once; past it a page still works, it just
/// is not live (each stream renders its page every tick, so they are bounded).
pub(crate) const MAX_LIVE_STREAMS: usize = 64;

/// Most flash notices kept (one per session that just acted).
#[cfg_attr(
    not(feature = "runtime"),
    allow(dead_code, reason = "the runtime's console flashes")
)]
const MAX_FLASHES: usize = 1024;

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
    /// How often live pages render again.
    pub(crate) tick: Duration,
    /// Live streams open now ([`MAX_LIVE_STREAMS`]).
    pub(crate) streams: Arc<AtomicUsize>,
    /// A random per-process key: an open console's CSRF tokens are keyed hashes of
    /// the session id, so it keeps no session table.
    key: [u8; 32],
    /// What an action just did, shown once on the page it returns to, by session id
    /// (kept on the server: a `?notice=` in the URL could be forged by a link).
    flashes: Mutex<HashMap<String, String>>,
}

impl ConsoleKit {
    /// A console named `name` with `nav` links, guarded by `token`, re-rendering live
    /// pages every `tick` (a console whose pages read the store takes a slower one
    /// than the gateway's in-memory pages); its live streams end when `closing` is
    /// cancelled.
    pub(crate) fn new(
        name: &'static str,
        token: Option<Secret>,
        nav: Vec<(&'static str, &'static str)>,
        tick: Duration,
        closing: CancellationToken,
    ) -> Arc<Self> {
        use rand::Rng as _;
        Arc::new(ConsoleKit {
            name,
            token,
            nav,
            sessions: Mutex::new(Sessions::default()),
            closing,
            tick,
            streams: Arc::default(),
            key: rand::rng().random(),
            flashes: Mutex::default(),
        })
    }

    /// An open console's CSRF token for session `id`: SHA-256 of the process key and
    /// the id, so a token is only good for its own cookie and this process.
    pub(crate) fn open_csrf(&self, id: &str) -> String {
        use sha2::{Digest as _, Sha256};
        let mut h = Sha256::new();
        h.update(self.key);
        h.update(id.as_bytes());
        sessions::hex(&h.finalize())
    }

    /// Whether session `id` is still signed in (always, for an open console).
    pub(crate) fn signed_in(&self, id: &str) -> bool {
        if self.token.is_none() {
            return true;
        }
        let now = u64::try_from(crate::clock::now_ms()).unwrap_or(0);
        self.sessions.lock().expect("sessions lock").alive(id, now)
    }

    /// Keeps `text` to show once on `session`'s next page.
    #[cfg_attr(
        not(feature = "runtime"),
        allow(dead_code, reason = "the runtime's console flashes")
    )]
    pub(crate) fn flash(&self, session: &SessionInfo, text: impl Into<String>) {
        let mut f = self.flashes.lock().expect("flash lock");
        if f.len() >= MAX_FLASHES {
            f.clear();
        }
        f.insert(session.id.clone(), text.into());
    }

    /// The notice kept for `session`, taken (shown once).
    pub(crate) fn take_flash(&self, session: &SessionInfo) -> Option<String> {
        self.flashes.lock().expect("flash lock").remove(&session.id)
    }

    /// The session cookie's name.
    pub(crate) fn cookie(&self) -> String {
        format!("sb_console_{}", self.name)
    }
}
