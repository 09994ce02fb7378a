//! `http_poll`: a poll source that GETs a JSON URL and turns the items of each page
//! into events.
//!
//! ```toml
//! [[sources]]
//! id = "orders"
//! provider = "http_poll"
//! url = "https://shop.example.com/admin/api/orders.json?status=any"
//! every = "30s"
//! headers = { "X-Shopify-Access-Token" = "SHOPIFY_TOKEN" }
//! items = "/orders"
//! kind = "order"
//! dedupe = 'string(item.id) + ":" + item.updated_at'
//! cursor = "link"
//! occurred_at_pointer = "/updated_at"
//! ```
//!
//! Options (every one but `url` optional):
//! - `url`: the first page, `http` or `https`.
//! - `every`: the time between polls once the last page is read (`"30s"`, `"5m"`, an
//!   integer of seconds). Default `"60s"`.
//! - `headers`: header name → the NAME of the environment variable holding its value,
//!   read when the source starts (`{ Authorization = "API_TOKEN" }`). Values are
//!   never logged, and go only to the configured origin (see below).
//! - `items`: a JSON pointer to the array of items in the body. Default `""`: the body
//!   is the array. A body without an array there is an error.
//! - `kind`: the events' kind. Default `"item"`. `kind_pointer`: a JSON pointer inside
//!   an item to a string used as its kind instead (`kind` when it is absent or empty).
//! - `dedupe`: a CEL expression over the item (the variable `item`) giving its dedupe
//!   key: `item.id`, or `string(item.id) + ":" + item.updated_at` to make each update
//!   an event. A number is rendered as text; an item for which it fails or gives
//!   `null` fails the poll (loudly, retried) rather than be dropped. Default: the
//!   SHA-256 of the item's JSON, so an unchanged item is one event and a changed one
//!   a new event.
//! - `cursor`: how the next page is found (below). Default: none, every poll reads
//!   `url`.
//! - `occurred_at_pointer`: a JSON pointer inside an item to when it happened: an
//!   RFC 3339 string, or a number of Unix seconds (below 10^11) or milliseconds (from
//!   10^11 on, i.e. after March 1973 in milliseconds). Anything else: no time.
//! - `timeout`: the limit on one request, body included. Default `"30s"`.
//! - `max_response_bytes`: the largest body read. Default 10 MiB; a larger one fails
//!   the poll.
//!
//! **Paging and the cursor.** The source's cursor, committed with each page's events,
//! is JSON: `{"base": url, "url": <the next URL to read>, "etag": <its ETag>}`.
//! - `cursor = { field = "/next_cursor", param = "cursor" }`: the value at the pointer
//!   `field` of the body (a non-empty string, or a number) is the next page's token;
//!   the next URL is `url` with the query parameter `param` (default `"cursor"`) set
//!   to it. A missing, `null` or empty value (or the token of the page just read)
//!   means this was the last page.
//! - `cursor = "link"`: the `Link` header's `rel="next"` target (RFC 8288, resolved
//!   against the page's URL) is the next page.
//!
//! With a next page the cursor moves to it and the source is polled again at once
//! ([`Polled::more`]). On the last page the cursor STAYS on that page's URL (the
//! last token, or the last page's link), with its `ETag`, and the next poll comes
//! after `every`: it re-reads that page, finding the items added to it and any next
//! page that appeared since; items already stored are duplicates of their dedupe key.
//! This suits APIs that list oldest first with a resumable token (change feeds,
//! `since` cursors, GitHub-style `Link` paging of an ascending list); a list newest
//! first without such a token can be polled without `cursor`, re-reading `url` and
//! keeping what is new by its dedupe key. If `url` is changed in the configuration,
//! a stored cursor of the old one (its `base`) is set aside and reading starts again
//! at `url` (dedupe keys keep earlier items from being stored twice).
//!
//! **ETag**: a page read with an `ETag` is asked for again with `If-None-Match`; a
//! `304 Not Modified` gives no events and keeps the cursor.
//!
//! **Errors** — a status other than 2xx or 304, a timeout, a body over the cap, not
//! JSON, or without an array at `items` — fail the poll: the runtime retries from the
//! same cursor after its jittered backoff, so a page is never skipped.
//!
//! **Egress**: the `[outbound]` egress policy guards the `http` handler, whose URLs
//! often come from users; an `http_poll` URL is the operator's own configuration, so
//! the policy does not apply (a private address is allowed). What is guarded is where
//! the `headers` go: a redirect or a `next` link to another scheme, host or port is not
//! followed (the redirect's 3xx, or the link, fails the poll).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, ETAG, IF_NONE_MATCH, LINK};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::http_client::{self, shown};
use crate::duration::{duration_or, DurationSetting};
use crate::error::{Error, Result};
use crate::inbound::{
    InboundConnector, InboundEvent, InboundSource, Polled, SourceContext, SourceKind,
};
use crate::triggers::filter::Expression;

/// Default `every`.
const DEFAULT_EVERY: Duration = Duration::from_secs(60);
/// Default `timeout`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `max_response_bytes`: 10 MiB.
const DEFAULT_MAX_RESPONSE_BYTES: usize = 10 * 1024 * 1024;
/// Default `kind`.
const DEFAULT_KIND: &str = "item";
/// Default query parameter of `cursor = { field }`.
const DEFAULT_CURSOR_PARAM: &str = "cursor";

/// The `http_poll` connector.
pub(crate) struct HttpPoll;

/// An `http_poll` source's options (see the module docs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpPollOptions {
    /// The first page's URL.
    url: Option<String>,
    /// Time between polls after the last page. Default 60 s.
    every: Option<DurationSetting>,
    /// Header name → environment variable holding the value.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// JSON pointer to the items' array. Default `""`.
    items: Option<String>,
    /// Fixed kind. Default `item`.
    kind: Option<String>,
    /// JSON pointer to an item's kind.
    kind_pointer: Option<String>,
    /// CEL over `item` giving the dedupe key. Default: SHA-256 of the item.
    dedupe: Option<String>,
    /// `"link"` or `{ field, param }`.
    cursor: Option<toml::Value>,
    /// Limit on one request. Default 30 s.
    timeout: Option<DurationSetting>,
    /// Largest body read. Default 10 MiB.
    max_response_bytes: Option<usize>,
    /// JSON pointer to an item's time.
    occurred_at_pointer: Option<String>,
}

/// How the next page is found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Paging {
    /// No paging: every poll reads `url`.
    None,
    /// A token at `pointer` in the body, sent as the query parameter `param`.
    Field { pointer: String, param: String },
    /// The `Link` header's `rel="next"`.
    Link,
}

impl Paging {
    fn parse(ctx: &SourceContext, v: Option<&toml::Value>) -> Result<Paging> {
        let bad = |what: &str| {
            ctx.invalid(&format!(
                "cursor: {what}; write cursor = \"link\" or cursor = {{ field = \"/next_cursor\", param = \"cursor\" }}"
            ))
        };
        match v {
            None => Ok(Paging::None),
            Some(toml::Value::String(s)) if s == "link" => Ok(Paging::Link),
            Some(toml::Value::String(s)) => Err(bad(&format!("{s:?} is not a mode"))),
            Some(toml::Value::Table(t)) => {
                if let Some(k) = t.keys().find(|k| *k != "field" && *k != "param") {
                    return Err(bad(&format!("{k:?} is not one of field, param")));
                }
                let pointer = match t.get("field") {
                    Some(toml::Value::String(p)) => pointer(ctx, "cursor.field", p)?,
                    _ => return Err(bad("field (a JSON pointer string) is missing")),
                };
                let param = match t.get("param") {
                    None => DEFAULT_CURSOR_PARAM.to_owned(),
                    Some(toml::Value::String(p)) if !p.is_empty() => p.clone(),
                    Some(_) => return Err(bad("param must be a non-empty string")),
                };
                Ok(Paging::Field { pointer, param })
            }
            Some(_) => Err(bad("neither a string nor a table")),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Paging::None => "none",
            Paging::Field { .. } => "field",
            Paging::Link => "link",
        }
    }
}

/// Checks a JSON pointer option: empty, or starting with `/`.
fn pointer(ctx: &SourceContext, option: &str, p: &str) -> Result<String> {
    if p.is_empty() || p.starts_with('/') {
        Ok(p.to_owned())
    } else {
        Err(ctx.invalid(&format!(
            "{option}: {p:?} is not a JSON pointer; write \"\" or one starting with '/'"
        )))
    }
}

#[async_trait]
impl InboundConnector for HttpPoll {
    fn provider(&self) -> &str {
        "http_poll"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Poll]
    }

    async fn init(&self, ctx: SourceContext) -> Result<Box<dyn InboundSource>> {
        let o: HttpPollOptions = ctx.options()?;
        super::checks::no_secrets(&ctx)?;
        let url = o
            .url
            .as_deref()
            .ok_or_else(|| ctx.invalid("http_poll sources need `url`"))?;
        let url = http_client::parse_url(&ctx, url)?;
        let every = duration_or(o.every.as_ref(), DEFAULT_EVERY, true)
            .map_err(|e| ctx.invalid(&format!("every: {e}")))?;
        let timeout = duration_or(o.timeout.as_ref(), DEFAULT_TIMEOUT, true)
            .map_err(|e| ctx.invalid(&format!("timeout: {e}")))?;
        let headers = http_client::headers_from_env(&ctx, &o.headers, http_client::process_env)?;
        let dedupe = o
            .dedupe
            .as_deref()
            .map(|d| Expression::compile_item(d).map_err(|e| ctx.invalid(&format!("dedupe: {e}"))))
            .transpose()?;
        let kind = o.kind.unwrap_or_else(|| DEFAULT_KIND.to_owned());
        if kind.is_empty() {
            return Err(ctx.invalid("kind must not be empty"));
        }
        let max_response_bytes = o.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
        if max_response_bytes == 0 {
            return Err(ctx.invalid("max_response_bytes must be positive"));
        }
        Ok(Box::new(HttpPollSource {
            id: ctx.source_id().to_owned(),
            client: http_client::client(headers, Some(timeout))?,
            paging: Paging::parse(&ctx, o.cursor.as_ref())?,
            items: pointer(&ctx, "items", o.items.as_deref().unwrap_or(""))?,
            kind_pointer: o
                .kind_pointer
                .as_deref()
                .map(|p| pointer(&ctx, "kind_pointer", p))
                .transpose()?,
            occurred_at_pointer: o
                .occurred_at_pointer
                .as_deref()
                .map(|p| pointer(&ctx, "occurred_at_pointer", p))
                .transpose()?,
            kind,
            dedupe,
            every,
            max_response_bytes,
            url,
            ctx,
        }))
    }
}

/// A running `http_poll` source.
struct HttpPollSource {
    id: String,
    ctx: SourceContext,
    client: reqwest::Client,
    url: Url,
    every: Duration,
    paging: Paging,
    items: String,
    kind: String,
    kind_pointer: Option<String>,
    dedupe: Option<Expression>,
    occurred_at_pointer: Option<String>,
    max_response_bytes: usize,
}

/// What the source keeps between polls (see the module docs), as the JSON committed
/// with each page's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// The configured `url` this cursor belongs to.
    base: String,
    /// The next URL to read.
    url: String,
    /// The `ETag` `url` answered with last, when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
}

impl Cursor {
    /// The stored cursor, when it is one of `base`'s.
    fn read(stored: Option<&str>, base: &Url) -> Option<(Url, Option<String>)> {
        let c: Cursor = serde_json::from_str(stored?).ok()?;
        if c.base != base.as_str() {
            return None;
        }
        Some((Url::parse(&c.url).ok()?, c.etag))
    }

    fn write(base: &Url, url: &Url, etag: Option<String>) -> String {
        serde_json::to_string(&Cursor {
            base: base.to_string(),
            url: url.to_string(),
            etag,
        })
        .expect("a cursor is plain JSON")
    }
}

/// One response: not modified, or a page.
enum Fetched {
    NotModified,
    Page {
        /// The URL that answered (after redirects).
        url: Url,
        body: Value,
        etag: Option<String>,
        links: Vec<String>,
    },
}

impl HttpPollSource {
    async fn fetch(&self, url: &Url, etag: Option<&str>) -> Result<Fetched> {
        let mut req = self
            .client
            .get(url.clone())
            .header(ACCEPT, "application/json");
        if let Some(etag) = etag {
            req = req.header(IF_NONE_MATCH, etag);
        }
        let mut resp = req
            .send()
            .await
            .map_err(|e| http_client::request_error(url, &e))?;
        let status = resp.status();
        let metrics = self.ctx.metrics();
        metrics.inc("http_poll_responses", &[("status", status.as_str())]);
        if status == StatusCode::NOT_MODIFIED {
            return Ok(Fetched::NotModified);
        }
        if !status.is_success() {
            return Err(Error::Connector(format!(
                "GET {}: answered {status}",
                shown(url)
            )));
        }
        let header = |v: &reqwest::header::HeaderValue| v.to_str().ok().map(str::to_owned);
        let new_etag = resp.headers().get(ETAG).and_then(header);
        let links = resp
            .headers()
            .get_all(LINK)
            .iter()
            .filter_map(header)
            .collect();
        let answered = resp.url().clone();
        let cap = self.max_response_bytes;
        let too_large = || {
            Error::Connector(format!(
                "GET {}: the body is over max_response_bytes ({cap})",
                shown(url)
            ))
        };
        if resp.content_length().is_some_and(|n| n > cap as u64) {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| http_client::request_error(url, &e))?
        {
            if bytes.len() + chunk.len() > cap {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let body = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Connector(format!("GET {}: the body is not JSON: {e}", shown(url)))
        })?;
        Ok(Fetched::Page {
            url: answered,
            body,
            etag: new_etag,
            links,
        })
    }

    /// The next page after `page` (the URL that answered `body` with `links`).
    fn next_page(&self, page: &Url, body: &Value, links: &[String]) -> Result<Option<Url>> {
        let next = match &self.paging {
            Paging::None => None,
            Paging::Field { pointer, param } => {
                page_token(body, pointer)?.map(|token| with_param(&self.url, param, &token))
            }
            Paging::Link => match next_link(links.iter().map(String::as_str)) {
                None => None,
                Some(target) => {
                    let next = page.join(&target).map_err(|e| {
                        Error::Connector(format!("the next link {target:?} is not a URL: {e}"))
                    })?;
                    if !http_client::same_origin(&next, &self.url) {
                        return Err(Error::Connector(format!(
                            "the next link leads to another origin ({}); the source's headers go only to {}",
                            shown(&next),
                            shown(&self.url)
                        )));
                    }
                    Some(next)
                }
            },
        };
        Ok(next.filter(|n| n != page))
    }

    /// `item` as an event; `at` is its place in the page, for errors.
    fn event(&self, item: &Value, at: usize) -> Result<InboundEvent> {
        let kind = self
            .kind_pointer
            .as_deref()
            .and_then(|p| item.pointer(p))
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
            .unwrap_or(&self.kind);
        let key = match &self.dedupe {
            None => hex(&Sha256::digest(item.to_string().as_bytes())),
            Some(e) => match e.eval_item_key(item) {
                Ok(Some(k)) if !k.is_empty() => k,
                Ok(_) => {
                    return Err(Error::Connector(format!(
                        "item {at} of the page: dedupe gave no key"
                    )))
                }
                Err(why) => {
                    return Err(Error::Connector(format!(
                        "item {at} of the page: dedupe: {why}"
                    )))
                }
            },
        };
        let occurred = self
            .occurred_at_pointer
            .as_deref()
            .and_then(|p| item.pointer(p))
            .and_then(occurred_at_ms);
        Ok(InboundEvent::new(kind, key, item.clone()).occurred_at(occurred))
    }
}

#[async_trait]
impl InboundSource for HttpPollSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Poll
    }

    async fn poll(&self, cursor: Option<&str>, now_ms: i64) -> Result<Polled> {
        let stored = Cursor::read(cursor, &self.url);
        if cursor.is_some() && stored.is_none() {
            tracing::info!(source = %self.id, url = %shown(&self.url), "the stored cursor is not one of this url's; reading from the url");
        }
        let (url, etag) = stored.unwrap_or_else(|| (self.url.clone(), None));
        let later = now_ms.saturating_add(self.every.as_millis() as i64);
        let (answered, body, new_etag, links) = match self.fetch(&url, etag.as_deref()).await? {
            Fetched::NotModified => return Ok(Polled::new(Vec::new(), None).next_poll_at(later)),
            Fetched::Page {
                url,
                body,
                etag,
                links,
            } => (url, body, etag, links),
        };
        let events = page_items(&body, &self.items)?
            .iter()
            .enumerate()
            .map(|(at, item)| self.event(item, at))
            .collect::<Result<Vec<_>>>()?;
        Ok(
            match self
                .next_page(&answered, &body, &links)?
                .filter(|n| *n != url)
            {
                Some(next) => {
                    Polled::new(events, Some(Cursor::write(&self.url, &next, None))).more()
                }
                None => Polled::new(events, Some(Cursor::write(&self.url, &url, new_etag)))
                    .next_poll_at(later),
            },
        )
    }

    async fn describe(&self, _full: bool) -> Value {
        serde_json::json!({
            "url": shown(&self.url),
            "every_ms": self.every.as_millis() as u64,
            "cursor": self.paging.label(),
        })
    }
}

/// The items at `pointer` of `body`: an array, or an error.
fn page_items<'a>(body: &'a Value, pointer: &str) -> Result<&'a Vec<Value>> {
    match body.pointer(pointer) {
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(Error::Connector(format!(
            "the body has no array at items {pointer:?}"
        ))),
        None => Err(Error::Connector(format!(
            "the body has nothing at items {pointer:?}"
        ))),
    }
}

/// The next page's token at `pointer` of `body`: a non-empty string or a number;
/// absent, `null`, `false` or `""` is none; anything else is an error.
fn page_token(body: &Value, pointer: &str) -> Result<Option<String>> {
    match body.pointer(pointer) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::String(s)) => Ok((!s.is_empty()).then(|| s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(Error::Connector(format!(
            "the cursor field {pointer:?} holds {other}, not a string or a number"
        ))),
    }
}

/// `base` with the query parameter `name` set to `value` (replacing any there).
fn with_param(base: &Url, name: &str, value: &str) -> Url {
    let kept: Vec<(String, String)> = base
        .query_pairs()
        .filter(|(k, _)| k != name)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut url = base.clone();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair(name, value);
    url
}

/// The target of the first link with relation `next` among `Link` header values
/// (RFC 8288: `<url>; rel="next"; …, <url>; rel="last"`; `rel` may list several
/// relations, compared case-insensitively).
fn next_link<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<String> {
    for value in values {
        let mut rest = value;
        loop {
            rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
            let Some(after) = rest.strip_prefix('<') else {
                break;
            };
            let Some(end) = after.find('>') else {
                break;
            };
            let target = after[..end].trim();
            rest = &after[end + 1..];
            let mut is_next = false;
            while let Some(param) = rest.trim_start().strip_prefix(';') {
                let (name, value, after) = link_param(param);
                if name.eq_ignore_ascii_case("rel")
                    && value
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
                {
                    is_next = true;
                }
                rest = after;
            }
            if is_next {
                return Some(target.to_owned());
            }
        }
    }
    None
}

/// One `name[=value]` link parameter (after its `;`): name, value (unquoted) and
/// the rest of the header.
fn link_param(text: &str) -> (&str, String, &str) {
    let text = text.trim_start();
    let name_end = text
        .find(|c: char| c == '=' || c == ';' || c == ',' || c.is_whitespace())
        .unwrap_or(text.len());
    let name = &text[..name_end];
    let rest = text[name_end..].trim_start();
    let Some(value) = rest.strip_prefix('=') else {
        return (name, String::new(), rest);
    };
    let value = value.trim_start();
    if let Some(quoted) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => {
                    out.push(c);
                    escaped = false;
                }
                '\\' => escaped = true,
                '"' => return (name, out, &quoted[i + 1..]),
                _ => out.push(c),
            }
        }
        (name, out, "")
    } else {
        let end = value
            .find(|c: char| c == ';' || c == ',' || c.is_whitespace())
            .unwrap_or(value.len());
        (name, value[..end].to_owned(), &value[end..])
    }
}

/// An item's time: an RFC 3339 string, or Unix seconds (below 10^11) or milliseconds.
fn occurred_at_ms(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp_millis()),
        Value::Number(n) => {
            let x = n.as_f64().filter(|x| x.is_finite())?;
            let ms = if x.abs() < 1e11 { x * 1000.0 } else { x };
            (ms.abs() < 1e16).then_some(ms as i64)
        }
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "http_poll_tests.rs"]
mod tests;
