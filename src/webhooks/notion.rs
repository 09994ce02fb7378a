//! Re-checking a Notion source's stored verification token, bounded.
//!
//! Several runtime processes may share one store, and the token one of them captured
//! (or an operator cleared) is only in the store until the others read it. So a Notion
//! delivery refused for want of the right token is judged again against the stored
//! token. Unbounded, that is one store read per refused request, and refusals are what
//! an attacker can send for free: a flood of unsigned "verification" bodies would turn
//! into a flood of store reads. Two bounds keep it cheap:
//!
//! - single flight: re-checks of one source run one at a time, and a refusal that
//!   waited while another re-read the store takes that read's answer instead of
//!   reading again, so N concurrent refusals cost one read;
//! - a token bucket per source (`notion_recheck_limit`, default 1/s, burst 10): past
//!   it, a refusal keeps its in-memory answer. A capture elsewhere is still seen within
//!   a second or so, and Notion retries what was refused meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use super::classify::Provider;
use super::ingest::{decide, IngestDecision, Request};
use super::metrics::IngressMetrics;
use super::rate_limit::TokenBucket;
use super::source::{RateLimit, Rule, SourceSpec};
use crate::store::Store;

/// State key of a captured Notion verification token.
pub(crate) const NOTION_TOKEN_KEY: &str = "verification_token";

/// One Notion source's verification token as this process knows it, and the bounded
/// re-check of the stored one. Self-contained (it takes the spec, store and metrics
/// it needs), so the shared ingest state holds one without this module depending on
/// that state.
pub(crate) struct NotionToken {
    /// The captured token, if any, as last read or captured here.
    token: RwLock<Option<String>>,
    budget: Mutex<TokenBucket>,
    /// Held while a re-check reads the store.
    flight: tokio::sync::Mutex<()>,
    /// Store reads finished, so a waiter can tell that one happened while it waited.
    reads: AtomicU64,
}

impl NotionToken {
    /// The token loaded at start, and a full re-check budget at `now_ms`.
    pub(crate) fn new(token: Option<String>, limit: RateLimit, now_ms: i64) -> NotionToken {
        NotionToken {
            token: RwLock::new(token),
            budget: Mutex::new(TokenBucket::for_limit(limit, now_ms)),
            flight: tokio::sync::Mutex::new(()),
            reads: AtomicU64::new(0),
        }
    }

    /// The captured token, if any.
    pub(crate) fn get(&self) -> Option<String> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces (or clears) the captured token.
    pub(crate) fn set(&self, token: Option<String>) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// A better decision for a Notion delivery refused for a token reason, if the token
    /// has changed since `judged_with` was read: in this process (a concurrent capture),
    /// or in the store (another process), the latter at most as often as the budget lets.
    /// Counted in `notion_rechecks_total{source,outcome}`: `read` (a store read),
    /// `shared` (another re-check's read answered this one), `skipped` (over budget).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn recheck(
        &self,
        spec: &SourceSpec,
        store: &Store,
        metrics: &IngressMetrics,
        req: &Request<'_>,
        decision: &IngestDecision,
        judged_with: Option<&str>,
    ) -> Option<IngestDecision> {
        let IngestDecision::Refuse(r) = decision else {
            return None;
        };
        let notion = matches!(spec.rule, Rule::Provider(Provider::Notion));
        let token_related = matches!(
            r.reason,
            "bad_signature" | "no_verification_token" | "verification_token_already_captured"
        );
        if !notion || !token_related {
            return None;
        }
        let id = spec.id.as_str();
        let redecide = |token: Option<String>| {
            (token.as_deref() != judged_with).then(|| decide(spec, token.as_deref(), req))
        };
        let state = self;
        let seen = state.reads.load(Ordering::Acquire);
        let _flight = state.flight.lock().await;
        if state.reads.load(Ordering::Acquire) != seen {
            metrics.notion_recheck(id, "shared");
            return redecide(self.get());
        }
        let allowed = state
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_take(req.now_ms)
            .is_ok();
        if !allowed {
            metrics.notion_recheck(id, "skipped");
            return redecide(self.get());
        }
        metrics.notion_recheck(id, "read");
        let stored = store.backend().get_state(id, NOTION_TOKEN_KEY).await;
        state.reads.fetch_add(1, Ordering::Release);
        let stored = stored.ok()?;
        self.set(stored.clone());
        redecide(stored)
    }
}
