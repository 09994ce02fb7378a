//! `generic_hmac`: any sender that signs the raw body with a shared secret, either as
//! a MAC in a header of the source's choosing or in the canonical
//! `Authorization: HMAC-SHA256 timestamp=…,signature=…` form.

use async_trait::async_trait;
use serde::Deserialize;

use super::checks::{require_secret, tolerance};
use super::webhook::WebhookSource;
use crate::error::Result;
use crate::inbound::{InboundConnector, InboundSource, SourceContext, SourceKind};
use crate::ingress::ingest::{GenericRule, GenericScheme, Rule, WebhookSpec};
use crate::ingress::signature::MacEncoding;

/// The `generic_hmac` connector.
pub(crate) struct GenericHmac;

/// A `generic_hmac` source's options.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GenericOptions {
    /// `header` (default) or `authorization`.
    scheme: Option<String>,
    /// Header scheme: the header carrying the MAC.
    header: Option<String>,
    /// Header scheme: a prefix before the MAC, e.g. `sha256=`.
    prefix: Option<String>,
    /// Header scheme: `hex` (default) or `base64`.
    encoding: Option<String>,
    /// Header whose value is the dedupe key. Default: SHA-256 of the body.
    dedupe_header: Option<String>,
    /// The event kind, fixed. Default `webhook`.
    kind: Option<String>,
    /// JSON pointer (`/type`) to the kind inside the body; wins over `kind`.
    kind_pointer: Option<String>,
    /// Refuse bodies that are not JSON (400). Default true.
    require_json: Option<bool>,
    /// Authorization scheme: the signed-timestamp tolerance. Default 300 s.
    timestamp_tolerance_secs: Option<i64>,
}

/// `name` as a `&'static str`, the type the signature functions (and their
/// refusals' `MissingHeader`) take header names as. Each distinct name is allocated
/// once for the life of the process and kept in one set, so a source started again
/// (a test, a fuzz target building rules per input) allocates nothing new and
/// nothing is lost track of.
fn intern(name: String) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(known) = names.get(name.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

/// The rule of a generic source, or what is wrong with its options.
pub(crate) fn rule(ctx: &SourceContext, o: &GenericOptions) -> Result<GenericRule> {
    let scheme = match o.scheme.as_deref().unwrap_or("header") {
        "header" => {
            let header = o.header.clone().ok_or_else(|| {
                ctx.invalid("generic_hmac needs `header` (or scheme = \"authorization\")")
            })?;
            let encoding = match o.encoding.as_deref().unwrap_or("hex") {
                "hex" => MacEncoding::Hex,
                "base64" => MacEncoding::Base64,
                other => {
                    return Err(ctx.invalid(&format!(
                        "encoding = {other:?}: expected \"hex\" or \"base64\""
                    )))
                }
            };
            GenericScheme::Header {
                header: intern(header),
                prefix: o.prefix.clone().unwrap_or_default(),
                encoding,
            }
        }
        "authorization" => {
            if o.header.is_some() || o.prefix.is_some() || o.encoding.is_some() {
                return Err(ctx.invalid(
                    "header, prefix and encoding do not apply to scheme = \"authorization\"",
                ));
            }
            GenericScheme::Authorization
        }
        other => {
            return Err(ctx.invalid(&format!(
                "scheme = {other:?}: expected \"header\" or \"authorization\""
            )))
        }
    };
    if let Some(p) = &o.kind_pointer {
        if !p.starts_with('/') {
            return Err(ctx.invalid(&format!(
                "kind_pointer {p:?} is not a JSON pointer (it starts with '/')"
            )));
        }
    }
    Ok(GenericRule {
        scheme,
        dedupe_header: o.dedupe_header.clone(),
        kind: o.kind.clone().unwrap_or_else(|| "webhook".into()),
        kind_pointer: o.kind_pointer.clone(),
        require_json: o.require_json.unwrap_or(true),
    })
}

#[async_trait]
impl InboundConnector for GenericHmac {
    fn provider(&self) -> &str {
        "generic_hmac"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Webhook]
    }

    async fn init(&self, ctx: SourceContext) -> Result<Box<dyn InboundSource>> {
        let (spec, secret_headers) = generic_spec(&ctx)?;
        Ok(Box::new(WebhookSource {
            spec,
            ctx,
            notion: None,
            secret_headers,
            github: None,
        }))
    }
}

/// A generic source's rule from its options and secrets, and the headers to blank
/// in what is stored (its configured signature header, whatever its name).
pub(crate) fn generic_spec(ctx: &SourceContext) -> Result<(WebhookSpec, Vec<String>)> {
    let o: GenericOptions = ctx.options()?;
    require_secret(ctx)?;
    let rule = rule(ctx, &o)?;
    let secret_headers = match &rule.scheme {
        GenericScheme::Header { header, .. } => vec![header.to_ascii_lowercase()],
        GenericScheme::Authorization => Vec::new(),
    };
    let spec = WebhookSpec {
        rule: Rule::Generic(rule),
        tolerance_s: tolerance(ctx, o.timestamp_tolerance_secs, None, 300)?,
    };
    Ok((spec, secret_headers))
}
