//! The signed webhook providers as inbound connectors: one connector per provider
//! id (`github`, `slack`, `linear`, `notion`, `stripe`, `standard_webhooks`, and its
//! alias `svix`), all running [`WebhookSource`], which calls the pure
//! [`decide`](crate::ingress::ingest::decide) with the source's current secrets and
//! turns its answer into a [`Received`].

use async_trait::async_trait;
use serde::Deserialize;

use super::checks::{require_secret, tolerance};
use super::github_api::{GithubApi, DEFAULT_API_URL};
use super::notion::{NotionToken, DEFAULT_NOTION_RECHECK_LIMIT};
use crate::connector::{Capability, ExecuteContext};
use crate::encoding::Payload;
use crate::error::Error;
use crate::error::Result;
use crate::inbound::RateLimit;
use crate::inbound::{
    InboundConnector, InboundEvent, InboundRequest, InboundSource, Received, Refusal,
    SourceContext, SourceKind,
};
use crate::ingress::classify::Provider;
use crate::ingress::ingest::{decide, IngestDecision, Rule, WebhookSpec};

/// A built-in signed webhook provider.
pub(crate) struct SignedWebhooks(pub(crate) Provider);

/// The options every signed provider takes (Notion also `notion_recheck_limit`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedOptions {
    /// Signed-timestamp tolerance either way. Defaults: Linear 60 s, others 300 s.
    timestamp_tolerance_secs: Option<i64>,
    /// Linear only: extra seconds on top of the window for clock skew.
    timestamp_grace_secs: Option<i64>,
    /// Notion only: the budget of stored-token re-checks.
    notion_recheck_limit: Option<RateLimit>,
    /// GitHub only: the REST API root for `github.api`.
    api_url: Option<String>,
    /// GitHub only: the environment variable holding the API token.
    api_token_env: Option<String>,
}

#[async_trait]
impl InboundConnector for SignedWebhooks {
    fn provider(&self) -> &str {
        self.0.as_str()
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Webhook]
    }

    async fn init(&self, ctx: SourceContext) -> Result<Box<dyn InboundSource>> {
        let (spec, recheck) = signed_spec(self.0, &ctx)?;
        let notion = match recheck {
            Some(limit) => Some(NotionToken::load(&ctx, limit).await?),
            None => None,
        };
        let github = github_api(self.0, &ctx)?;
        Ok(Box::new(WebhookSource {
            spec,
            ctx,
            notion,
            secret_headers: Vec::new(),
            github,
        }))
    }
}

/// A signed provider's rule from its source's options and secrets (and, for Notion,
/// the budget of token re-checks). Synchronous, so the fuzz targets build the same
/// rule the connector does.
pub(crate) fn signed_spec(
    provider: Provider,
    ctx: &SourceContext,
) -> Result<(WebhookSpec, Option<RateLimit>)> {
    let o: SignedOptions = ctx.options()?;
    if provider != Provider::Linear && o.timestamp_grace_secs.is_some() {
        return Err(ctx.invalid("timestamp_grace_secs applies to provider linear only"));
    }
    if provider != Provider::Notion && o.notion_recheck_limit.is_some() {
        return Err(ctx.invalid("notion_recheck_limit applies to provider notion only"));
    }
    if provider != Provider::Notion {
        require_secret(ctx)?;
    }
    if provider == Provider::StandardWebhooks {
        check_standard_secrets(ctx)?;
    }
    let default = if provider == Provider::Linear {
        60
    } else {
        300
    };
    let spec = WebhookSpec {
        rule: Rule::Provider(provider),
        tolerance_s: tolerance(
            ctx,
            o.timestamp_tolerance_secs,
            o.timestamp_grace_secs,
            default,
        )?,
    };
    let recheck = if provider == Provider::Notion {
        let limit = o
            .notion_recheck_limit
            .unwrap_or(DEFAULT_NOTION_RECHECK_LIMIT);
        limit
            .check("notion_recheck_limit")
            .map_err(|e| ctx.invalid(&e))?;
        Some(limit)
    } else {
        None
    };
    Ok((spec, recheck))
}

/// The GitHub API client of a `github` source that names `api_token_env`.
fn github_api(provider: Provider, ctx: &SourceContext) -> Result<Option<GithubApi>> {
    let o: SignedOptions = ctx.options()?;
    if provider != Provider::Github {
        if o.api_url.is_some() || o.api_token_env.is_some() {
            return Err(ctx.invalid("api_url and api_token_env apply to provider github only"));
        }
        return Ok(None);
    }
    let Some(var) = o.api_token_env else {
        if o.api_url.is_some() {
            return Err(ctx.invalid("api_url needs api_token_env"));
        }
        return Ok(None);
    };
    let token = ctx.env_secret(&var)?;
    let base = o.api_url.as_deref().unwrap_or(DEFAULT_API_URL);
    if !(base.starts_with("https://") || base.starts_with("http://")) {
        return Err(ctx.invalid(&format!("api_url {base:?} is not an http(s) URL")));
    }
    GithubApi::new(base, token).map(Some)
}

/// Standard Webhooks secrets are base64 after an optional `whsec_` prefix; a secret
/// in another form could never verify, so it is refused at start.
fn check_standard_secrets(ctx: &SourceContext) -> Result<()> {
    use base64::Engine as _;
    for (i, s) in ctx.secrets().iter().enumerate() {
        let text = String::from_utf8_lossy(s.expose());
        let b64 = text.strip_prefix("whsec_").unwrap_or(&text);
        if base64::engine::general_purpose::STANDARD
            .decode(b64)
            .is_err()
        {
            return Err(ctx.invalid(&format!(
                "secret {} of secret_env is not a Standard Webhooks secret (base64 after an optional whsec_ prefix)",
                i + 1
            )));
        }
    }
    Ok(())
}

/// A running built-in webhook source.
pub(crate) struct WebhookSource {
    pub(crate) spec: WebhookSpec,
    pub(crate) ctx: SourceContext,
    /// Notion: the captured verification token.
    pub(crate) notion: Option<NotionToken>,
    /// Headers that carry a secret beyond the standard list (generic HMAC's
    /// configured signature header), blanked in what is stored.
    pub(crate) secret_headers: Vec<String>,
    /// GitHub: the API client behind `github.api`, when a token is configured.
    pub(crate) github: Option<GithubApi>,
}

impl WebhookSource {
    /// Turns the pure decision into the trait's answer.
    async fn answer(&self, decision: IngestDecision) -> Received {
        match decision {
            IngestDecision::Store(e) => Received::event(*e),
            IngestDecision::Respond(response) => Received::Respond {
                response,
                events: Vec::<InboundEvent>::new(),
            },
            IngestDecision::CaptureNotionToken(token) => match &self.notion {
                Some(n) => n.capture(&self.ctx, token).await,
                None => Received::Reject(Refusal::new(400, "malformed", "unexpected handshake")),
            },
            IngestDecision::Refuse(refusal) => Received::Reject(self.no_retry(refusal)),
        }
    }

    /// Slack retries a failed delivery three times; a 4xx will not get better.
    fn no_retry(&self, refusal: Refusal) -> Refusal {
        let slack = self.spec.rule == Rule::Provider(Provider::Slack);
        if slack && (400..500).contains(&refusal.status) {
            refusal.header("x-slack-no-retry", "1")
        } else {
            refusal
        }
    }
}

#[async_trait]
impl InboundSource for WebhookSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Webhook
    }

    async fn receive(&self, request: &InboundRequest<'_>) -> Received {
        let secrets = self.ctx.secrets();
        let decision = match &self.notion {
            None => decide(&self.spec, &secrets, None, request),
            Some(n) => n.decide(&self.ctx, &self.spec, &secrets, request).await,
        };
        self.answer(decision).await
    }

    fn secret_headers(&self) -> &[String] {
        &self.secret_headers
    }

    fn capabilities(&self) -> Vec<Capability> {
        match &self.github {
            Some(_) => vec![GithubApi::capability()],
            None => Vec::new(),
        }
    }

    async fn execute(
        &self,
        capability: Option<&str>,
        payload: Payload,
        _ctx: &ExecuteContext,
    ) -> Result<Payload> {
        match (&self.github, capability) {
            (Some(api), Some("github.api") | None) => api.call(payload).await,
            _ => Err(Error::Connector(format!(
                "this source has no capability {:?}",
                capability.unwrap_or("")
            ))),
        }
    }

    async fn describe(&self, full: bool) -> serde_json::Value {
        let mut v = serde_json::json!({});
        // Only rules that check a signed timestamp have a tolerance to show.
        let timed = match &self.spec.rule {
            Rule::Provider(Provider::Github) | Rule::Provider(Provider::Notion) => false,
            Rule::Provider(_) => true,
            Rule::Generic(g) => {
                matches!(
                    g.scheme,
                    crate::ingress::ingest::GenericScheme::Authorization
                )
            }
        };
        if timed {
            v["timestamp_tolerance_secs"] = self.spec.tolerance_s.into();
        }
        if let Some(n) = &self.notion {
            let token = n.current(&self.ctx).await;
            v["verification_token_captured"] = token.is_some().into();
            if full {
                v["verification_token"] = token.into();
            }
        }
        v
    }
}
