//! Notion's verification token: captured from Notion's first, unsigned request,
//! kept in the source's state, and re-checked against the store, bounded.
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

use serde_json::json;

use crate::error::Result;
use crate::inbound::rate_limit::TokenBucket;
use crate::inbound::RateLimit;
use crate::inbound::{InboundRequest, InboundResponse, Received, Refusal, SourceContext};
use crate::ingress::ingest::{decide, IngestDecision, WebhookSpec};
use crate::secret::Secret;

/// State key of a captured Notion verification token.
pub(crate) const NOTION_TOKEN_KEY: &str = "verification_token";

/// Default `notion_recheck_limit`: re-reading a Notion source's stored token (after a
/// refusal that another process's capture could explain) at most once a second,
/// 10 at once. Legitimate re-checks follow an operator's capture or clear, a handful
/// at a time; a flood of unsigned requests gets the in-memory answer.
pub(crate) const DEFAULT_NOTION_RECHECK_LIMIT: RateLimit = RateLimit {
    per_second: 1.0,
    burst: Some(10.0),
};

/// `Retry-After` seconds when the store cannot take a capture.
const STORE_RETRY_AFTER_SECS: u64 = 5;

/// One Notion source's verification token as this process knows it, and the bounded
/// re-check of the stored one.
pub(crate) struct NotionToken {
    /// The captured token, if any, as last read or captured here.
    token: RwLock<Option<String>>,
    /// The source state's generation when `token` was last read: a write through the
    /// state (the operator clearing the token) makes it stale.
    seen: AtomicU64,
    budget: Mutex<TokenBucket>,
    /// Held while a re-check reads the store.
    flight: tokio::sync::Mutex<()>,
    /// Serialises captures in this process, so two concurrent unsigned verification
    /// requests cannot both be captured (the second gets 409).
    capture: tokio::sync::Mutex<()>,
    /// Store reads finished, so a waiter can tell that one happened while it waited.
    reads: AtomicU64,
}

impl NotionToken {
    /// The token stored for the source, and a full re-check budget.
    pub(crate) async fn load(ctx: &SourceContext, limit: RateLimit) -> Result<NotionToken> {
        let seen = ctx.state().generation();
        let token = ctx.state().get(NOTION_TOKEN_KEY).await?;
        Ok(NotionToken {
            token: RwLock::new(token),
            seen: AtomicU64::new(seen),
            budget: Mutex::new(TokenBucket::for_limit(limit, ctx.now_ms())),
            flight: tokio::sync::Mutex::new(()),
            capture: tokio::sync::Mutex::new(()),
            reads: AtomicU64::new(0),
        })
    }

    /// The captured token, if any.
    pub(crate) fn get(&self) -> Option<String> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The captured token, re-read first if the source's state was written here
    /// since (the operator cleared it).
    pub(crate) async fn current(&self, ctx: &SourceContext) -> Option<String> {
        self.refresh(ctx).await;
        self.get()
    }

    fn set(&self, token: Option<String>) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// Re-reads the token when the source's state was written in this process since
    /// it was last read (the admin API cleared it).
    async fn refresh(&self, ctx: &SourceContext) {
        let now = ctx.state().generation();
        if self.seen.load(Ordering::Acquire) == now {
            return;
        }
        if let Ok(stored) = ctx.state().get(NOTION_TOKEN_KEY).await {
            self.set(stored);
            self.seen.store(now, Ordering::Release);
        }
    }

    /// The decision for a Notion delivery: judged with the known token, and, when
    /// refused for a token reason, judged again if the token changed since: in this
    /// process (a concurrent capture), or in the store (another process), the latter
    /// at most as often as the budget lets. Counted in
    /// `switchboard_ingress_notion_rechecks_total{source,outcome}`: `read` (a store
    /// read), `shared` (another re-check's read answered this one), `skipped` (over
    /// budget).
    pub(crate) async fn decide(
        &self,
        ctx: &SourceContext,
        spec: &WebhookSpec,
        secrets: &[Secret],
        req: &InboundRequest<'_>,
    ) -> IngestDecision {
        self.refresh(ctx).await;
        let judged_with = self.get();
        let decision = decide(spec, secrets, judged_with.as_deref(), req);
        let IngestDecision::Refuse(r) = &decision else {
            return decision;
        };
        let token_related = matches!(
            r.reason.as_ref(),
            "bad_signature" | "no_verification_token" | "verification_token_already_captured"
        );
        if !token_related {
            return decision;
        }
        let redecide = |token: Option<String>| {
            if token == judged_with {
                decision.clone()
            } else {
                decide(spec, secrets, token.as_deref(), req)
            }
        };
        let recheck = |outcome: &str| {
            ctx.metrics()
                .inc("notion_rechecks", &[("outcome", outcome)]);
        };
        let seen = self.reads.load(Ordering::Acquire);
        let _flight = self.flight.lock().await;
        if self.reads.load(Ordering::Acquire) != seen {
            recheck("shared");
            return redecide(self.get());
        }
        let allowed = self
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_take(req.received_at_ms)
            .is_ok();
        if !allowed {
            recheck("skipped");
            return redecide(self.get());
        }
        recheck("read");
        let stored = ctx.state().get(NOTION_TOKEN_KEY).await;
        self.reads.fetch_add(1, Ordering::Release);
        let Ok(stored) = stored else {
            return decision;
        };
        self.set(stored.clone());
        redecide(stored)
    }

    /// Captures `token` from Notion's unsigned verification request, unless a token
    /// is already stored (by this or another process): 409 then.
    pub(crate) async fn capture(&self, ctx: &SourceContext, token: Secret) -> Received {
        // The token came out of a JSON string, so it is UTF-8.
        let token = String::from_utf8_lossy(token.expose()).into_owned();
        let _capturing = self.capture.lock().await;
        // Atomic in the store too, so of several processes only one captures.
        match ctx.state().put_if_absent(NOTION_TOKEN_KEY, &token).await {
            Err(e) => {
                tracing::warn!(source = ctx.source_id(), error = %e, "cannot store the Notion token");
                Received::Reject(
                    Refusal::new(
                        503,
                        "store_unavailable",
                        "the event store cannot take writes right now; nothing was stored, retry later",
                    )
                    .header("retry-after", STORE_RETRY_AFTER_SECS.to_string()),
                )
            }
            Ok(Some(existing)) => {
                self.set(Some(existing));
                self.seen.store(ctx.state().generation(), Ordering::Release);
                Received::Reject(Refusal::new(
                    409,
                    "verification_token_already_captured",
                    "a verification token is already captured for this source",
                ))
            }
            Ok(None) => {
                self.set(Some(token));
                self.seen.store(ctx.state().generation(), Ordering::Release);
                tracing::info!(
                    source = ctx.source_id(),
                    "captured the Notion verification token; see GET /api/v1/sources/{{id}}"
                );
                Received::Respond {
                    response: InboundResponse::json(
                        200,
                        &json!({"captured": "verification_token"}),
                    ),
                    events: Vec::new(),
                }
            }
        }
    }
}
