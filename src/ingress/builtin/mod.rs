//! The built-in inbound connectors, each an implementation of the public
//! [`InboundConnector`] trait and registered by default: the signed webhook providers
//! ([`webhook`]: GitHub, Slack, Linear, Stripe, Standard Webhooks, and Notion with its
//! captured token, [`notion`]), generic HMAC ([`generic`]), cron ([`cron_source`],
//! a poll source whose cursor is its last fire), `http_poll` ([`http_poll`], a poll
//! source over a paged JSON API) and `sse` ([`sse`], a stream source over
//! Server-Sent Events, parsed by [`sse_parser`]); the last two share
//! [`http_client`].
//!
//! They are the first users of the public API: nothing in the ingest path knows a
//! provider. Their decisions stay sans-IO (`super::ingest::decide`, `super::cron`),
//! wrapped by the trait at the boundary, so the fuzz targets and unit tests keep
//! driving the pure functions.

mod checks;
pub(crate) mod cron_source;
#[cfg(test)]
mod decide_tests;
pub(crate) mod generic;
mod github_api;
pub(crate) mod http_client;
pub(crate) mod http_poll;
pub(crate) mod notion;
pub(crate) mod sse;
pub(crate) mod sse_parser;
pub(crate) mod webhook;

use std::sync::Arc;

use super::hosted::Connectors;
use crate::inbound::InboundConnector;

/// The registry every runtime starts with: the built-ins, and `svix` as an alias of
/// `standard_webhooks` (Svix is its reference implementation).
pub(crate) fn registry() -> Connectors {
    let mut registry = Connectors::new();
    for c in connectors() {
        registry
            .add(c)
            .expect("the built-ins have distinct, valid provider ids");
    }
    registry.alias("svix", "standard_webhooks");
    registry
}

/// Every built-in connector, in a stable order.
fn connectors() -> Vec<Arc<dyn InboundConnector>> {
    use super::classify::Provider;
    let mut all: Vec<Arc<dyn InboundConnector>> = [
        Provider::Github,
        Provider::Slack,
        Provider::Linear,
        Provider::Stripe,
        Provider::StandardWebhooks,
    ]
    .into_iter()
    .map(|p| Arc::new(webhook::SignedWebhooks(p)) as Arc<dyn InboundConnector>)
    .collect();
    all.push(Arc::new(webhook::SignedWebhooks(Provider::Notion)));
    all.push(Arc::new(generic::GenericHmac));
    all.push(Arc::new(cron_source::Cron));
    all.push(Arc::new(http_poll::HttpPoll));
    all.push(Arc::new(sse::Sse));
    all
}

/// The rule a built-in webhook provider would verify `ctx`'s deliveries with, or
/// `None` for a provider that is not one (cron, a program's own). For the fuzz
/// targets and unit tests, which drive the pure decision.
pub(crate) fn webhook_spec(
    provider: &str,
    ctx: &crate::inbound::SourceContext,
) -> crate::Result<Option<crate::ingress::ingest::WebhookSpec>> {
    use super::classify::Provider;
    if provider == "generic_hmac" {
        return Ok(Some(generic::generic_spec(ctx)?.0));
    }
    match Provider::parse(provider) {
        Some(p) => Ok(Some(webhook::signed_spec(p, ctx)?.0)),
        None => Ok(None),
    }
}
