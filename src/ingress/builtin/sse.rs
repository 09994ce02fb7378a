//! `sse`: a stream source reading Server-Sent Events (`text/event-stream`).
//!
//! ```toml
//! [[sources]]
//! id = "deploys"
//! provider = "sse"
//! url = "https://ci.example.com/events"
//! headers = { Authorization = "CI_TOKEN" }
//! ```
//!
//! **Why SSE rather than a WebSocket feed**: SSE is plain HTTP (a GET whose body never
//! ends), so proxies, TLS, authentication headers and this crate's HTTP client work
//! unchanged; resumption is in the protocol (every event may carry an `id`, and a
//! reconnect sends the last one as `Last-Event-ID`), which is exactly the stored cursor
//! the stream driver needs; and many real feeds emit it (GitHub's and Wikimedia's
//! event streams, CI and deployment servers, LLM APIs, Mercure). A WebSocket feed in
//! the style of Slack's Socket Mode would need its own framing, acks and resume
//! handshake per provider, and would duplicate the WebSocket transport the mux
//! already has, for less.
//!
//! Options (every one but `url` optional):
//! - `url`: the stream, `http` or `https`.
//! - `headers`: header name → the NAME of the environment variable holding its value,
//!   read when the source starts. Never logged.
//! - `kind`: a fixed kind for every event. Default: the event's `event:` field, or
//!   `message`.
//! - `dedupe`: a CEL expression over the parsed data (the variable `item`) giving the
//!   dedupe key of an event WITHOUT an `id:` of its own; an event with an `id:` is
//!   deduplicated by it. Without `dedupe` (or where it fails or gives `null`, which is
//!   logged and counted as `sse_dedupe_fallbacks`), the key is the SHA-256 of the last
//!   event id, the type and the data: the same event resent after the same id is one
//!   event.
//! - `require_json`: whether `data` must be JSON (default `true`). An event whose
//!   data is not is skipped (logged, counted as `sse_skipped{reason="not_json"}`),
//!   though its id still moves the cursor. With `false`, such data is the payload as a
//!   JSON string.
//! - `max_event_bytes`: the longest line or event data accepted. Default 1 MiB; past
//!   it the connection is dropped (and retried).
//! - `idle_timeout`: a connection on which nothing (not even a `:` comment) arrives
//!   for this long is dropped and reopened. Default `"5m"`.
//!
//! **The stream**: a GET with `Accept: text/event-stream`, and `Last-Event-ID: <cursor>`
//! when a cursor is stored. Each event is committed alone with its last event id as
//! the cursor ([`crate::EventSink::emit`]), so a dropped connection resumes exactly
//! after the last stored event; an event in flight when it dropped was not stored and
//! is sent again by the server, and one sent twice is a duplicate of its id. The stream
//! ends `Ok` when the server closes it, with an error on a non-2xx answer, a body that
//! is not `text/event-stream`, a transport error, or the idle timeout; either way the
//! runtime reconnects with its jittered backoff. A `retry:` field is parsed and shown
//! by the admin API, but the runtime's backoff (250 ms doubling to 30 s, reset by an
//! event) paces reconnects.
//!
//! As for `http_poll`, the URL is the operator's, so the `[outbound]` egress policy
//! does not apply; redirects are followed only within the URL's origin.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::http_client::{self, shown};
use super::sse_parser::{SseEvent, SseParser};
use crate::duration::{duration_or, DurationSetting};
use crate::error::{Error, Result};
use crate::inbound::{
    EventSink, InboundConnector, InboundEvent, InboundSource, SourceContext, SourceKind,
};
use crate::triggers::filter::Expression;

/// Default `max_event_bytes`: 1 MiB.
const DEFAULT_MAX_EVENT_BYTES: usize = 1024 * 1024;
/// Default `idle_timeout`.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The `sse` connector.
pub(crate) struct Sse;

/// An `sse` source's options (see the module docs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SseOptions {
    /// The stream's URL.
    url: Option<String>,
    /// Header name → environment variable holding the value.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// A fixed kind. Default: the `event:` field.
    kind: Option<String>,
    /// CEL over the parsed data, for events without an id.
    dedupe: Option<String>,
    /// Whether data must be JSON. Default true.
    require_json: Option<bool>,
    /// Longest line or data. Default 1 MiB.
    max_event_bytes: Option<usize>,
    /// Silence after which the connection is reopened. Default 5 min.
    idle_timeout: Option<DurationSetting>,
}

#[async_trait]
impl InboundConnector for Sse {
    fn provider(&self) -> &str {
        "sse"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        vec![SourceKind::Stream]
    }

    async fn init(&self, ctx: SourceContext) -> Result<Box<dyn InboundSource>> {
        let o: SseOptions = ctx.options()?;
        super::checks::no_secrets(&ctx)?;
        let url = o
            .url
            .as_deref()
            .ok_or_else(|| ctx.invalid("sse sources need `url`"))?;
        let url = http_client::parse_url(&ctx, url)?;
        let headers = http_client::headers_from_env(&ctx, &o.headers, http_client::process_env)?;
        let idle = duration_or(o.idle_timeout.as_ref(), DEFAULT_IDLE_TIMEOUT, true)
            .map_err(|e| ctx.invalid(&format!("idle_timeout: {e}")))?;
        let dedupe = o
            .dedupe
            .as_deref()
            .map(|d| Expression::compile_item(d).map_err(|e| ctx.invalid(&format!("dedupe: {e}"))))
            .transpose()?;
        if o.kind.as_deref() == Some("") {
            return Err(ctx.invalid("kind must not be empty"));
        }
        let max_event_bytes = o.max_event_bytes.unwrap_or(DEFAULT_MAX_EVENT_BYTES);
        if max_event_bytes == 0 {
            return Err(ctx.invalid("max_event_bytes must be positive"));
        }
        Ok(Box::new(SseSource {
            id: ctx.source_id().to_owned(),
            client: http_client::client(headers, None)?,
            url,
            kind: o.kind,
            dedupe,
            require_json: o.require_json.unwrap_or(true),
            max_event_bytes,
            idle,
            retry_ms: AtomicU64::new(u64::MAX),
            ctx,
        }))
    }
}

/// A running `sse` source.
struct SseSource {
    id: String,
    ctx: SourceContext,
    client: reqwest::Client,
    url: Url,
    kind: Option<String>,
    dedupe: Option<Expression>,
    require_json: bool,
    max_event_bytes: usize,
    idle: Duration,
    /// The last `retry:` the stream sent (`u64::MAX`: none), for the admin view.
    retry_ms: AtomicU64,
}

impl SseSource {
    /// `ev` as an event to store, or `None` when it is skipped (data not JSON).
    fn event(&self, ev: &SseEvent) -> Option<InboundEvent> {
        let payload = match serde_json::from_str::<Value>(&ev.data) {
            Ok(v) => v,
            Err(_) if !self.require_json => Value::String(ev.data.clone()),
            Err(e) => {
                tracing::warn!(source = %self.id, event = %ev.event, error = %e, "an event's data is not JSON; skipped (require_json = false keeps it)");
                self.ctx
                    .metrics()
                    .inc("sse_skipped", &[("reason", "not_json")]);
                return None;
            }
        };
        let key = match (&ev.id, &self.dedupe) {
            (Some(id), _) if !id.is_empty() => id.clone(),
            (_, Some(expr)) => match expr.eval_item_key(&payload) {
                Ok(Some(k)) if !k.is_empty() => k,
                outcome => {
                    let why = outcome.err().unwrap_or_else(|| "no key".into());
                    tracing::warn!(source = %self.id, error = %why, "dedupe gave no key for an event; keyed by its hash");
                    self.ctx.metrics().inc("sse_dedupe_fallbacks", &[]);
                    hashed(ev)
                }
            },
            _ => hashed(ev),
        };
        let kind = self.kind.as_deref().unwrap_or(&ev.event);
        Some(InboundEvent::new(kind, key, payload).with_body(ev.data.as_bytes()))
    }

    async fn open(&self, cursor: Option<&str>) -> Result<reqwest::Response> {
        let mut req = self
            .client
            .get(self.url.clone())
            .header(ACCEPT, "text/event-stream")
            .header(CACHE_CONTROL, "no-cache");
        if let Some(last) = cursor.filter(|c| !c.is_empty()) {
            let value = HeaderValue::from_str(last).map_err(|_| {
                Error::Connector("the stored cursor is not a valid Last-Event-ID".into())
            })?;
            req = req.header("last-event-id", value);
        }
        let resp = tokio::time::timeout(self.idle, req.send())
            .await
            .map_err(|_| {
                Error::Connector(format!(
                    "GET {}: no answer within idle_timeout",
                    shown(&self.url)
                ))
            })?
            .map_err(|e| http_client::request_error(&self.url, &e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Error::Connector(format!(
                "GET {}: answered {status}",
                shown(&self.url)
            )));
        }
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !content_type
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
        {
            return Err(Error::Connector(format!(
                "GET {}: answered {content_type:?}, not text/event-stream",
                shown(&self.url)
            )));
        }
        Ok(resp)
    }
}

/// The key of an event with no id of its own: SHA-256 of its last event id, type and
/// data.
fn hashed(ev: &SseEvent) -> String {
    let mut h = Sha256::new();
    for part in [&ev.last_event_id, &ev.event, &ev.data] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[async_trait]
impl InboundSource for SseSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Stream
    }

    async fn stream(&self, cursor: Option<String>, sink: EventSink) -> Result<()> {
        let mut resp = self.open(cursor.as_deref()).await?;
        tracing::info!(source = %self.id, url = %shown(&self.url), resumed_after = cursor.as_deref().unwrap_or(""), "event stream open");
        let mut parser = SseParser::new(self.max_event_bytes, cursor.as_deref().unwrap_or(""));
        loop {
            let chunk = match tokio::time::timeout(self.idle, resp.chunk()).await {
                Err(_) => {
                    return Err(Error::Connector(format!(
                        "GET {}: nothing for idle_timeout ({:?})",
                        shown(&self.url),
                        self.idle
                    )))
                }
                Ok(Err(e)) => return Err(http_client::request_error(&self.url, &e)),
                Ok(Ok(None)) => return Ok(()),
                Ok(Ok(Some(chunk))) => chunk,
            };
            let events = parser
                .feed(&chunk)
                .map_err(|e| Error::Connector(format!("GET {}: {e}", shown(&self.url))))?;
            if let Some(r) = parser.retry_ms() {
                self.retry_ms.store(r, Ordering::Release);
            }
            for ev in events {
                let cursor = (!ev.last_event_id.is_empty()).then(|| ev.last_event_id.clone());
                match self.event(&ev) {
                    Some(event) => {
                        sink.emit(vec![event], cursor).await?;
                    }
                    None if cursor.is_some() => {
                        sink.emit(Vec::new(), cursor).await?;
                    }
                    None => {}
                }
            }
        }
    }

    async fn describe(&self, _full: bool) -> Value {
        let retry = self.retry_ms.load(Ordering::Acquire);
        serde_json::json!({
            "url": shown(&self.url),
            "retry_ms": (retry != u64::MAX).then_some(retry),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn source(options: &str) -> Result<Box<dyn InboundSource>> {
        Sse.init(SourceContext::detached(
            "feed",
            "sse",
            "acme",
            toml::from_str(options).unwrap(),
            Vec::new(),
        ))
        .await
    }

    fn running(kind: Option<&str>, dedupe: Option<&str>, require_json: bool) -> SseSource {
        SseSource {
            id: "feed".into(),
            ctx: SourceContext::detached("feed", "sse", "acme", toml::Table::new(), Vec::new()),
            client: reqwest::Client::new(),
            url: Url::parse("http://127.0.0.1/events").unwrap(),
            kind: kind.map(Into::into),
            dedupe: dedupe.map(|d| Expression::compile_item(d).unwrap()),
            require_json,
            max_event_bytes: 1024,
            idle: Duration::from_secs(1),
            retry_ms: AtomicU64::new(u64::MAX),
        }
    }

    fn sse(event: &str, data: &str, id: Option<&str>, last: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(Into::into),
            last_event_id: last.into(),
        }
    }

    #[tokio::test]
    async fn options_are_checked_at_init() {
        assert_eq!(
            source("url = \"https://a.example/events\"\ndedupe = \"item.id\"")
                .await
                .unwrap()
                .kind(),
            SourceKind::Stream
        );
        for (options, expected) in [
            ("kind = \"x\"", "need `url`"),
            ("url = \"wss://a/\"", "http or https"),
            (
                "url = \"https://a/\"\nidle_timeout = \"0s\"",
                "idle_timeout: must be positive",
            ),
            (
                "url = \"https://a/\"\ndedupe = \"data.id\"",
                "dedupe: unknown variable \"data\"",
            ),
            (
                "url = \"https://a/\"\nmax_event_bytes = 0",
                "max_event_bytes must be positive",
            ),
            (
                "url = \"https://a/\"\nevery = \"1s\"",
                "option every does not apply to provider sse",
            ),
        ] {
            let err = source(options).await.err().expect(options).to_string();
            assert!(err.contains(expected), "{options}: {err}");
        }
    }

    #[test]
    fn an_event_is_keyed_by_its_id_else_the_expression_else_its_hash() {
        let s = running(None, Some("item.n"), true);
        let e = s
            .event(&sse("created", "{\"n\": 5}", Some("e-9"), "e-9"))
            .unwrap();
        assert_eq!((e.kind.as_str(), e.dedupe_key.as_str()), ("created", "e-9"));
        assert_eq!(e.body.as_deref(), Some(&b"{\"n\": 5}"[..]));
        assert_eq!(e.payload["n"], 5);
        let e = s.event(&sse("message", "{\"n\": 6}", None, "e-9")).unwrap();
        assert_eq!(e.dedupe_key, "6");
        let fallback = s.event(&sse("message", "{}", None, "e-9")).unwrap();
        assert_eq!(fallback.dedupe_key.len(), 64);

        let plain = running(Some("tick"), None, true);
        let a = plain.event(&sse("message", "1", None, "7")).unwrap();
        assert_eq!(a.kind, "tick");
        assert_eq!(
            a.dedupe_key,
            plain
                .event(&sse("message", "1", None, "7"))
                .unwrap()
                .dedupe_key
        );
        assert_ne!(
            a.dedupe_key,
            plain
                .event(&sse("message", "1", None, "8"))
                .unwrap()
                .dedupe_key
        );
        assert_ne!(
            a.dedupe_key,
            plain
                .event(&sse("other", "1", None, "7"))
                .unwrap()
                .dedupe_key
        );
    }

    #[test]
    fn data_that_is_not_json_is_skipped_unless_allowed() {
        assert!(running(None, None, true)
            .event(&sse("message", "hello", Some("1"), "1"))
            .is_none());
        let kept = running(None, None, false)
            .event(&sse("message", "hello", Some("1"), "1"))
            .unwrap();
        assert_eq!(kept.payload, Value::String("hello".into()));
    }
}
