//! The ingest side's shared state: the hosted sources and everything the ingress
//! endpoint ([`super::endpoint`]), the poll and stream drivers and, a layer up, the
//! runtime's sources API and console read. Its own module so that all of them depend
//! on it and none on the others.

use std::collections::HashMap;
use std::sync::Arc;

use super::hosted::{self, Committer, Connectors, HostedSource};
use super::metrics::IngressMetrics;
use super::source::SourceSpec;
use crate::inbound::metrics::CustomCounters;
use crate::store::Store;
use crate::triggers::binding_match::BindingMatcher;
use crate::triggers::live::LiveTriggers;

/// Everything the handlers share.
pub(crate) struct Ingress {
    pub(crate) sources: HashMap<String, Arc<HostedSource>>,
    /// The sources in configuration order, for listings and drivers.
    pub(crate) order: Vec<Arc<HostedSource>>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<IngressMetrics>,
    /// The sources' own counters, appended to `/metrics`.
    pub(crate) counters: Arc<CustomCounters>,
    /// The trigger bindings each stored event is matched against.
    pub(crate) router: BindingMatcher,
    /// How every source's events are stored.
    pub(crate) committer: Committer,
}

impl Ingress {
    /// Starts every source through its connector and builds the shared state.
    pub(crate) async fn new(
        sources: &[SourceSpec],
        connectors: &Connectors,
        triggers: Arc<LiveTriggers>,
        store: Store,
    ) -> crate::Result<Ingress> {
        let counters = Arc::new(CustomCounters::default());
        let state = Arc::new(hosted::StoreState(store.clone()));
        let order = hosted::start(sources, connectors, state, &counters).await?;
        let metrics = Arc::new(IngressMetrics::new());
        let router = BindingMatcher::new(triggers, metrics.matches.clone());
        Ok(Ingress {
            sources: hosted::by_id(&order),
            order,
            committer: Committer {
                store: store.clone(),
                router: router.clone(),
            },
            store,
            router,
            metrics,
            counters,
        })
    }

    /// Replaces each source's secrets with those of `specs` (the configuration read
    /// again at a reload, secrets included). Sources are started once: one that the
    /// file adds or removes since is left as it is, with a warning.
    pub(crate) fn refresh_secrets(&self, specs: &[SourceSpec]) {
        for spec in specs {
            match self.sources.get(&spec.id) {
                Some(s) => s.secrets.replace(spec.secrets.clone()),
                None => tracing::warn!(
                    source = %spec.id,
                    "a reload found a source that was not configured at start; restart to add it"
                ),
            }
        }
    }
}
