//! The console's sign-in sessions: a bounded in-memory table from a random session id
//! to that session's CSRF token and last use. A pure core: the caller passes `now` and
//! the random bytes, so every rule is a plain `#[test]`.
//!
//! In memory on purpose: a session is worth one sign-in with the operator token, the
//! console is served by one process's listener, and a restart asking the operator to
//! sign in again is the safe failure. Bounded, so a client that signs in in a loop
//! cannot grow the process: when full, expired sessions go first, then the least
//! recently used one.

use std::collections::HashMap;

/// What a page handler learns of its session (put in the request by the guard): its
/// id (for a live stream to check it is still signed in, and for flash notices) and
/// the CSRF token its forms must carry.
#[derive(Debug, Clone)]
pub(crate) struct SessionInfo {
    pub(crate) id: String,
    pub(crate) csrf: String,
}

/// How long a session lives without a request (12 hours).
pub(crate) const IDLE_EXPIRY_MS: u64 = 12 * 60 * 60 * 1000;
/// Most sessions kept at once.
pub(crate) const MAX_SESSIONS: usize = 1024;

/// One signed-in browser.
#[derive(Debug, Clone)]
struct Session {
    csrf: String,
    last_ms: u64,
}

/// Sessions by id (64 hex digits of 32 random bytes).
#[derive(Debug)]
pub(crate) struct Sessions {
    by_id: HashMap<String, Session>,
    max: usize,
    idle_ms: u64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(MAX_SESSIONS, IDLE_EXPIRY_MS)
    }
}

impl Sessions {
    /// An empty table holding at most `max` sessions, each expiring after `idle_ms`
    /// without use.
    pub(crate) fn new(max: usize, idle_ms: u64) -> Self {
        Sessions {
            by_id: HashMap::new(),
            max: max.max(1),
            idle_ms,
        }
    }

    /// Opens a session from 32 random bytes for its id and 32 for its CSRF token;
    /// returns `(id, csrf)`.
    pub(crate) fn open(&mut self, now_ms: u64, id: [u8; 32], csrf: [u8; 32]) -> (String, String) {
        if self.by_id.len() >= self.max {
            let idle = self.idle_ms;
            self.by_id
                .retain(|_, s| now_ms.saturating_sub(s.last_ms) < idle);
        }
        if self.by_id.len() >= self.max {
            let oldest = self
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.last_ms)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by_id.remove(&k);
            }
        }
        let (id, csrf) = (hex(&id), hex(&csrf));
        self.by_id.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                last_ms: now_ms,
            },
        );
        (id, csrf)
    }

    /// The CSRF token of a live session, marking it used; `None` for an unknown or
    /// expired id (an expired one is forgotten).
    pub(crate) fn touch(&mut self, id: &str, now_ms: u64) -> Option<String> {
        let s = self.by_id.get_mut(id)?;
        if now_ms.saturating_sub(s.last_ms) >= self.idle_ms {
            self.by_id.remove(id);
            return None;
        }
        s.last_ms = s.last_ms.max(now_ms);
        Some(s.csrf.clone())
    }

    /// Whether `id` is a live session, without marking it used: what a live stream
    /// asks on each tick, so that an open tab alone does not keep a session alive.
    pub(crate) fn alive(&self, id: &str, now_ms: u64) -> bool {
        self.by_id
            .get(id)
            .is_some_and(|s| now_ms.saturating_sub(s.last_ms) < self.idle_ms)
    }

    /// Forgets a session (sign-out).
    pub(crate) fn close(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    /// How many sessions are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opened_session_answers_its_csrf_token_until_it_idles_out() {
        let mut s = Sessions::new(8, 1000);
        let (id, csrf) = s.open(0, [1; 32], [2; 32]);
        assert_eq!(id.len(), 64);
        assert_eq!(csrf, hex(&[2; 32]));
        assert_eq!(s.touch(&id, 999).as_deref(), Some(csrf.as_str()));
        // Used at 999: alive until 1999.
        assert!(s.touch(&id, 1998).is_some());
        assert!(s.touch(&id, 2998).is_none(), "idle for 1000 ms: expired");
        assert_eq!(s.len(), 0, "an expired session is forgotten");
    }

    #[test]
    fn unknown_and_closed_ids_are_refused() {
        let mut s = Sessions::new(8, 1000);
        assert!(s.touch("nope", 0).is_none());
        let (id, _) = s.open(0, [1; 32], [2; 32]);
        assert!(
            s.alive(&id, 999) && !s.alive(&id, 1000),
            "alive until it idles out"
        );
        s.close(&id);
        assert!(s.touch(&id, 1).is_none());
        assert!(!s.alive(&id, 1), "closed: a live stream ends");
    }

    #[test]
    fn a_full_table_drops_expired_sessions_first_then_the_least_recently_used() {
        let mut s = Sessions::new(2, 1000);
        let (a, _) = s.open(0, [1; 32], [0; 32]);
        let (b, _) = s.open(10, [2; 32], [0; 32]);
        assert!(s.touch(&a, 20).is_some(), "a is now the more recent");
        let (c, _) = s.open(30, [3; 32], [0; 32]);
        assert_eq!(s.len(), 2);
        assert!(s.touch(&b, 31).is_none(), "b was least recently used");
        assert!(s.touch(&a, 31).is_some() && s.touch(&c, 31).is_some());
        // Both idle out; a new session finds room without evicting a live one.
        let (d, _) = s.open(5000, [4; 32], [0; 32]);
        assert_eq!(s.len(), 1);
        assert!(s.touch(&d, 5001).is_some());
    }
}
