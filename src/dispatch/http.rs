//! The `http` handler's attempt: the event POSTed to the binding's URL through the
//! runtime's [`HttpDelivery`], and the answer turned into an outcome.
//!
//! What is sent: the row's payload bytes exactly as stored (a webhook's body as its
//! sender sent it; for a dead-letter handler's row, its dead-letter document), as
//! `invoke` handlers get it, because a receiver most often wants the original
//! document rather than a wrapper around it. `content-type` is `application/json`
//! when those bytes are JSON (`application/octet-stream` otherwise). The delivery's
//! identity travels in headers: the Standard Webhooks trio (`webhook-id` is stable
//! across the attempts of one row, so receivers deduplicate on it) and the context
//! every handler gets, as `switchboard-event-id`, `-trace-id`, `-binding`,
//! `-binding-version`, `-attempt` and `-depth`.
//!
//! What an answer means ([`outcome`]): 2xx is done; 429 and 503 are retried, at the
//! time their `Retry-After` asks when they send one; 408 and 425 are retried; any other
//! 4xx (and a 3xx that was not followed, a redirect loop, an eleventh redirect) is a
//! failure retrying cannot cure, dead-lettered at once unless the handler sets
//! `retry_4xx`; 5xx, timeouts and connection errors are retried per the binding's
//! policy. A destination the egress policy refuses, as the URL or at a redirect, by
//! address or by name, is `egress_refused` and dead-lettered at once whatever
//! `retry_4xx` says: only the operator's `allow` can change that answer. An open
//! breaker is retried.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use std::collections::HashMap;

use crate::context_keys::{
    CONTEXT_ATTEMPT, CONTEXT_BACKFILL, CONTEXT_BINDING, CONTEXT_BINDING_VERSION, CONTEXT_DEPTH,
    CONTEXT_EVENT_ID, CONTEXT_TRACEPARENT, CONTEXT_TRACESTATE, CONTEXT_TRACE_ID,
};
use crate::encoding::Payload;
use crate::outbound::http::{HttpDelivery, HttpError, HttpRequest, HttpResponse, Signing};
use crate::outbound::{retry_after, sign};
use crate::outbox::outcome::{AttemptFailure, FailureKind};

/// How much of an error answer's body goes into the failure's message: enough for a
/// receiver's error text, not a whole page.
const BODY_EXCERPT: usize = 300;

/// The context keys sent as headers, and their header names.
const CONTEXT_HEADERS: [(&str, &str); 9] = [
    (CONTEXT_EVENT_ID, "switchboard-event-id"),
    (CONTEXT_TRACE_ID, "switchboard-trace-id"),
    // The W3C headers themselves, so the receiver's own tracing continues the trace.
    (CONTEXT_TRACEPARENT, "traceparent"),
    (CONTEXT_TRACESTATE, "tracestate"),
    (CONTEXT_BINDING, "switchboard-binding"),
    (CONTEXT_BINDING_VERSION, "switchboard-binding-version"),
    (CONTEXT_ATTEMPT, "switchboard-attempt"),
    (CONTEXT_DEPTH, "switchboard-depth"),
    (CONTEXT_BACKFILL, "switchboard-backfill"),
];

/// The handler's options, as the binding holds them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpTarget<'a> {
    /// The URL.
    pub(crate) url: &'a str,
    /// The secrets' variables.
    pub(crate) secret_env: &'a [String],
    /// The secrets' files.
    pub(crate) secret_file: &'a [String],
    /// Bound on the request.
    pub(crate) timeout: Duration,
    /// Retry 4xx answers.
    pub(crate) retry_4xx: bool,
}

/// One delivery's facts (the parts of an attempt's input the request needs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpInput<'a> {
    /// The event's id.
    pub(crate) event_id: &'a str,
    /// The binding's id.
    pub(crate) binding_id: &'a str,
    /// The payload bytes.
    pub(crate) payload: &'a [u8],
    /// The context every handler gets.
    pub(crate) context: &'a HashMap<String, String>,
}

/// The request for `input` to `target`, signed with `keys`.
pub(crate) fn request(
    input: HttpInput<'_>,
    target: HttpTarget<'_>,
    keys: Vec<sign::SigningKey>,
) -> HttpRequest {
    let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(input.payload).is_ok();
    let mut headers = Vec::with_capacity(CONTEXT_HEADERS.len() + 1);
    headers.push((
        "content-type".to_owned(),
        if is_json {
            "application/json"
        } else {
            "application/octet-stream"
        }
        .to_owned(),
    ));
    for (key, header) in CONTEXT_HEADERS {
        if let Some(v) = input.context.get(key) {
            headers.push((header.to_owned(), v.clone()));
        }
    }
    HttpRequest {
        method: reqwest::Method::POST,
        url: target.url.to_owned(),
        headers,
        body: Bytes::copy_from_slice(input.payload),
        sign: Some(Signing {
            id: sign::message_id(input.event_id, input.binding_id),
            keys,
        }),
        timeout: target.timeout,
    }
}

/// Runs one attempt of an `http` binding.
pub(crate) async fn deliver(
    client: &HttpDelivery,
    input: HttpInput<'_>,
    target: HttpTarget<'_>,
) -> Result<Payload, AttemptFailure> {
    let keys = client
        .keys(target.secret_env, target.secret_file)
        .map_err(|e| {
            AttemptFailure::new(
                FailureKind::Platform,
                format!("binding {:?}: {e}", input.binding_id),
            )
        })?;
    match client.deliver(request(input, target, keys)).await {
        Ok(resp) => outcome(&resp, target.retry_4xx, crate::clock::now_ms()),
        Err(e) => Err(failure(e, target.retry_4xx)),
    }
}

/// What an answer means (see the module docs); `now_ms` reads an HTTP-date
/// `Retry-After`.
pub(crate) fn outcome(
    resp: &HttpResponse,
    retry_4xx: bool,
    now_ms: i64,
) -> Result<Payload, AttemptFailure> {
    let status = resp.status;
    if (200..300).contains(&status) {
        let body = serde_json::from_slice::<Value>(&resp.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&resp.body).into_owned()));
        return Ok(Payload::Json(
            serde_json::json!({ "status": status, "body": body }),
        ));
    }
    let message = format!("POST {} answered {status}{}", resp.url, excerpt(&resp.body));
    let kind = match status {
        429 | 503 => FailureKind::Overloaded,
        408 | 504 => FailureKind::Timeout,
        _ => FailureKind::Handler,
    };
    let failure = AttemptFailure::new(kind, message);
    Err(match status {
        429 | 503 => {
            let delay = resp
                .headers
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after::parse(v, now_ms));
            match delay {
                Some(d) => failure.retry_after(d),
                None => failure,
            }
        }
        408 | 425 => failure,
        300..=499 if !retry_4xx => failure.permanent(),
        _ => failure,
    })
}

/// `": <the body's start>"`, or nothing for an empty body.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let cut: String = text.chars().take(BODY_EXCERPT).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!(": {cut}{more}")
}

/// A request that got no answer, as an attempt's failure.
pub(crate) fn failure(e: HttpError, retry_4xx: bool) -> AttemptFailure {
    let kind = match &e {
        HttpError::Invalid(_) => FailureKind::Validation,
        HttpError::Refused(_) => FailureKind::Egress,
        HttpError::BreakerOpen { .. } => FailureKind::BreakerOpen,
        HttpError::Timeout(_) => FailureKind::Timeout,
        HttpError::Redirect(_) | HttpError::TooLarge { .. } | HttpError::Transport(_) => {
            FailureKind::Handler
        }
    };
    let permanent = match &e {
        HttpError::Invalid(_) | HttpError::Refused(_) => true,
        HttpError::Redirect(_) => !retry_4xx,
        _ => false,
    };
    let f = AttemptFailure::new(kind, e.to_string());
    if permanent {
        f.permanent()
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> HttpResponse {
        let mut map = reqwest::header::HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        HttpResponse {
            status,
            headers: map,
            body: Bytes::from(body.to_owned()),
            url: "https://example.com/hook".into(),
        }
    }

    fn failed(status: u16, headers: &[(&str, &str)], retry_4xx: bool) -> AttemptFailure {
        outcome(&answer(status, headers, "nope"), retry_4xx, 0).unwrap_err()
    }

    #[test]
    fn a_2xx_is_done_with_the_status_and_the_body() {
        let p = outcome(&answer(202, &[], r#"{"ok":true}"#), false, 0).unwrap();
        assert_eq!(
            p,
            Payload::Json(serde_json::json!({"status": 202, "body": {"ok": true}}))
        );
        let p = outcome(&answer(200, &[], "thanks"), false, 0).unwrap();
        assert_eq!(
            p,
            Payload::Json(serde_json::json!({"status": 200, "body": "thanks"}))
        );
    }

    #[test]
    fn a_4xx_is_permanent_unless_retry_4xx_and_408_425_429_are_always_retried() {
        for status in [400, 401, 404, 410, 422, 301] {
            let f = failed(status, &[], false);
            assert!(f.permanent, "{status}");
            assert_eq!(f.kind, FailureKind::Handler);
            assert!(
                f.message.starts_with(&format!(
                    "POST https://example.com/hook answered {status}: nope"
                )),
                "{}",
                f.message
            );
            assert!(
                !failed(status, &[], true).permanent,
                "{status} with retry_4xx"
            );
        }
        for status in [408, 425, 429] {
            assert!(!failed(status, &[], false).permanent, "{status}");
        }
    }

    #[test]
    fn a_5xx_is_retried_per_the_policy() {
        for status in [500, 502, 503, 504] {
            let f = failed(status, &[], false);
            assert!(!f.permanent && f.retry_after_ms.is_none(), "{status}");
        }
        assert_eq!(failed(503, &[], false).kind, FailureKind::Overloaded);
        assert_eq!(failed(504, &[], false).kind, FailureKind::Timeout);
    }

    #[test]
    fn retry_after_on_429_and_503_sets_the_next_attempts_delay_in_either_form() {
        assert_eq!(
            failed(429, &[("retry-after", "30")], false).retry_after_ms,
            Some(30_000)
        );
        // 1994-11-06T08:49:37Z is 784111777 s; "now" is 60 s before.
        let at = outcome(
            &answer(503, &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")], ""),
            false,
            784_111_717_000,
        )
        .unwrap_err();
        assert_eq!(at.retry_after_ms, Some(60_000));
        assert_eq!(
            failed(429, &[("retry-after", "later")], false).retry_after_ms,
            None,
            "not understood: the policy's backoff"
        );
        assert_eq!(
            failed(500, &[("retry-after", "30")], false).retry_after_ms,
            None,
            "only 429 and 503"
        );
    }

    #[test]
    fn transport_failures_map_to_kinds_and_refusals_are_permanent() {
        let f = failure(HttpError::Refused("no".into()), true);
        assert_eq!((f.kind, f.permanent), (FailureKind::Egress, true));
        let f = failure(
            HttpError::BreakerOpen {
                endpoint: "e".into(),
                retry_in_ms: 5,
            },
            false,
        );
        assert_eq!((f.kind.as_str(), f.permanent), ("breaker_open", false));
        let f = failure(HttpError::Redirect("loop".into()), false);
        assert_eq!((f.kind, f.permanent), (FailureKind::Handler, true));
        assert!(!failure(HttpError::Redirect("loop".into()), true).permanent);
        let f = failure(HttpError::Timeout(Duration::from_secs(1)), false);
        assert_eq!((f.kind, f.permanent), (FailureKind::Timeout, false));
        let f = failure(HttpError::Transport("refused".into()), false);
        assert_eq!((f.kind, f.permanent), (FailureKind::Handler, false));
    }

    #[test]
    fn a_long_error_body_is_cut_in_the_message() {
        let long = "x".repeat(10_000);
        let f = outcome(&answer(400, &[], &long), false, 0).unwrap_err();
        assert!(
            f.message.len() < 400 && f.message.ends_with('…'),
            "{}",
            f.message.len()
        );
    }
}
