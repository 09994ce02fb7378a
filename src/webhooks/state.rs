//! The ingest side's shared state: the live sources (their specs, rate-limit and
//! audit budgets, captured Notion tokens) and everything the ingress handler
//! ([`super::server`]) and the admin API ([`super::admin`]) both read. Its own module
//! so that both depend on it and neither on the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::binding_match::BindingMatcher;
use super::classify::Provider;
use super::metrics::IngressMetrics;
use super::notion::{NotionToken, NOTION_TOKEN_KEY};
use super::rate_limit::TokenBucket;
use super::source::{Rule, Secret, SourceSpec};
use crate::store::{now_ms, Store};
use crate::triggers::live::LiveTriggers;

/// One source at run time.
pub(crate) struct LiveSource {
    pub(crate) spec: SourceSpec,
    pub(super) bucket: Option<Mutex<TokenBucket>>,
    pub(super) audit_bucket: Mutex<TokenBucket>,
    /// Serialises Notion token captures in this process, so two concurrent unsigned
    /// verification requests cannot both be captured (the second gets 409).
    pub(super) capture: tokio::sync::Mutex<()>,
    /// Notion: the captured token and its bounded re-check ([`super::notion`]).
    pub(crate) notion: NotionToken,
}

impl LiveSource {
    /// The captured Notion verification token, if any.
    pub(crate) fn notion_token(&self) -> Option<String> {
        self.notion.get()
    }

    /// Replaces (or clears) the captured token.
    pub(crate) fn set_notion_token(&self, token: Option<String>) {
        self.notion.set(token);
    }
}

/// Everything the handlers share.
pub(crate) struct Ingress {
    pub(crate) sources: HashMap<String, Arc<LiveSource>>,
    /// Source ids in configuration order, for listings.
    pub(crate) order: Vec<String>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<IngressMetrics>,
    /// The trigger bindings each stored event is matched against.
    pub(crate) router: BindingMatcher,
    pub(crate) admin_token: Option<Secret>,
    /// Metrics of other parts (the dispatcher, the bindings), appended to `/metrics`.
    pub(crate) more_metrics: std::sync::OnceLock<Arc<dyn MoreMetrics>>,
}

/// A part of the process whose metrics `/metrics` appends to ingest's own: rendered
/// at each scrape, so gauges that need a store read (outbox depth) are fresh.
#[async_trait::async_trait]
pub(crate) trait MoreMetrics: Send + Sync {
    /// The part's exposition, ending with `# EOF`.
    async fn render(&self) -> String;
}

impl Ingress {
    /// Builds the state, loading captured Notion tokens from the store.
    pub(crate) async fn new(
        sources: Vec<SourceSpec>,
        triggers: Arc<LiveTriggers>,
        store: Store,
        admin_token: Option<Secret>,
    ) -> crate::Result<Ingress> {
        let now = now_ms();
        let mut map = HashMap::new();
        let mut order = Vec::new();
        for spec in sources {
            let notion_token = match spec.rule {
                Rule::Provider(Provider::Notion) => {
                    store
                        .backend()
                        .get_state(&spec.id, NOTION_TOKEN_KEY)
                        .await?
                }
                _ => None,
            };
            let bucket = spec
                .rate_limit
                .map(|r| Mutex::new(TokenBucket::for_limit(r, now)));
            order.push(spec.id.clone());
            map.insert(
                spec.id.clone(),
                Arc::new(LiveSource {
                    bucket,
                    audit_bucket: Mutex::new(TokenBucket::for_limit(
                        spec.rejection_audit_limit,
                        now,
                    )),
                    capture: tokio::sync::Mutex::new(()),
                    notion: NotionToken::new(notion_token, spec.notion_recheck_limit, now),
                    spec,
                }),
            );
        }
        let metrics = Arc::new(IngressMetrics::new());
        Ok(Ingress {
            sources: map,
            order,
            store,
            router: BindingMatcher::new(triggers, metrics.clone()),
            metrics,
            admin_token,
            more_metrics: std::sync::OnceLock::new(),
        })
    }
}
