//! Connector-to-connector invoke, the caller's side: [`InvokeOptions`],
//! [`InvokeResponse`], and [`Invoker`], the seam through which an [`ExecuteContext`]
//! reaches its registration's gateway connection.
//!
//! A registration invokes a capability of another connector through the gateway: its
//! socket sends an `invoke_request` with a request id from the socket's counter, the
//! gateway executes it on the target and answers with an `invoke_response`. The
//! caller awaits the answer; dropping the future (a `select!`, a timeout of the
//! caller's own) tells the socket to forget the request, so nothing is left pending.
//!
//! This is the connector's vocabulary, so it lives with the connector: the
//! multiplexer implements [`Invoker`] for each registration (`mux::socket_invoker`),
//! and nothing here knows how a socket works.
//!
//! [`ExecuteContext`]: crate::ExecuteContext

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::encoding::{decode_wire_payload, Payload};
use crate::error::{Error, Result};
use crate::proto::{InvokeCapabilityResponse, PayloadEncoding};

/// How long an invoke waits for its answer unless [`InvokeOptions::timeout`] says
/// otherwise: the reference gateway's default execute deadline, so the gateway's
/// timeout answer and the caller's own deadline agree.
pub const DEFAULT_INVOKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of one invoke. `#[non_exhaustive]`: start from `InvokeOptions::default()`
/// and chain the `with_*` setters.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct InvokeOptions {
    /// How long to wait for the answer (default [`DEFAULT_INVOKE_TIMEOUT`]); sent to the
    /// gateway as `timeout_ms`, so it stops waiting on the target at the same time.
    pub timeout: Option<Duration>,
    /// The wire encoding to declare for a [`Payload::Bytes`] payload that is already
    /// encoded in a format this crate does not decode (PROTOBUF, MSGPACK, ...). Other
    /// payloads declare their own encoding, and setting this for them is an error.
    pub encoding: Option<PayloadEncoding>,
    /// Context entries sent with the request; the target sees them in its execute
    /// context.
    pub context: HashMap<String, String>,
}

impl InvokeOptions {
    /// Sets [`InvokeOptions::timeout`].
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets [`InvokeOptions::encoding`].
    #[must_use]
    pub fn with_encoding(mut self, encoding: PayloadEncoding) -> Self {
        self.encoding = Some(encoding);
        self
    }

    /// Adds one [`InvokeOptions::context`] entry.
    #[must_use]
    pub fn with_context(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.context.insert(key.into(), value.into());
        self
    }

    /// The wire encoding an invoke of `payload` declares: the payload's own, or
    /// [`InvokeOptions::encoding`] for [`Payload::Bytes`]; setting it for any other
    /// payload is an [`Error::Config`].
    #[cfg(feature = "websocket")]
    pub(crate) fn encoding_for(&self, payload: &Payload) -> Result<PayloadEncoding> {
        match (self.encoding, payload) {
            (None, p) => Ok(p.encoding()),
            (Some(e), Payload::Bytes(_)) => Ok(e),
            (Some(e), p) => Err(Error::Config(format!(
                "InvokeOptions::encoding ({e:?}) applies only to Payload::Bytes; a {:?} payload declares its own encoding",
                p.encoding()
            ))),
        }
    }
}

/// A registration's way to send invokes through its gateway connection: what an
/// [`ExecuteContext`](crate::ExecuteContext) holds, shared by every execute of the
/// registration (one per registration, so an execute costs no allocation for it).
/// The multiplexer implements it; a detached context has none.
pub(crate) trait Invoker: Send + Sync + fmt::Debug {
    /// Invokes `capability_id` of `target` (an ARN or a dot key) and waits for the
    /// answer.
    fn invoke<'a>(
        &'a self,
        target: &'a str,
        capability_id: &'a str,
        payload: Payload,
        options: InvokeOptions,
    ) -> BoxFuture<'a, Result<InvokeResponse>>;

    /// Sends an invoke the gateway does not answer; done once it is queued.
    fn invoke_fire_and_forget<'a>(
        &'a self,
        target: &'a str,
        capability_id: &'a str,
        payload: Payload,
        options: InvokeOptions,
    ) -> BoxFuture<'a, Result<()>>;
}

/// A successful invoke's answer: the target's payload, as bytes plus their encoding
/// (decode with [`InvokeResponse::payload`]), its duration, and the context the
/// gateway returned.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InvokeResponse {
    /// The target's payload bytes.
    pub bytes: bytes::Bytes,
    /// Their encoding.
    pub encoding: PayloadEncoding,
    /// How long the target took, as it reported.
    pub duration_ms: i64,
    /// The context the gateway sent back (the reference gateway adds `target_arn`).
    pub context: HashMap<String, String>,
}

impl InvokeResponse {
    /// The payload decoded by its encoding; fails for encodings this crate does not
    /// decode (the bytes stay available in [`InvokeResponse::bytes`]).
    pub fn payload(&self) -> Result<Payload> {
        decode_wire_payload(&self.bytes, self.encoding as i32)
    }

    /// The payload as JSON; an error names the encoding when it is not JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        match self.payload()? {
            Payload::Json(v) => Ok(v),
            other => Err(Error::Payload(format!(
                "the invoke answered with {:?}, not JSON",
                other.encoding()
            ))),
        }
    }

    #[cfg_attr(not(feature = "websocket"), allow(dead_code))]
    pub(crate) fn from_wire(resp: InvokeCapabilityResponse) -> Result<Self> {
        if !resp.success {
            return Err(remote_error(resp));
        }
        Ok(InvokeResponse {
            bytes: resp.payload,
            encoding: PayloadEncoding::try_from(resp.payload_encoding)
                .unwrap_or(PayloadEncoding::Unspecified),
            duration_ms: resp.duration_ms,
            context: resp.context,
        })
    }
}

/// A failed answer as an [`Error::Remote`]: the code from `error_details["code"]`,
/// else from a `"code: message"` error text (how this crate's connectors answer), else
/// `remote`.
fn remote_error(resp: InvokeCapabilityResponse) -> Error {
    let from_text = resp
        .error
        .split_once(": ")
        .filter(|(code, _)| {
            !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .map(|(code, _)| code.to_owned());
    let code = resp
        .error_details
        .get("code")
        .cloned()
        .or(from_text)
        .unwrap_or_else(|| "remote".to_owned());
    Error::Remote {
        code,
        message: resp.error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_answer_becomes_a_remote_error_with_its_code() {
        let resp = |error: &str, code: Option<&str>| InvokeCapabilityResponse {
            error: error.into(),
            error_details: code
                .map(|c| HashMap::from([("code".to_owned(), c.to_owned())]))
                .unwrap_or_default(),
            ..Default::default()
        };
        let code = |e: Error| match e {
            Error::Remote { code, .. } => code,
            other => panic!("not remote: {other:?}"),
        };
        assert_eq!(
            code(remote_error(resp("x", Some("not_found")))),
            "not_found"
        );
        assert_eq!(
            code(remote_error(resp("timeout: too slow", None))),
            "timeout"
        );
        assert_eq!(
            code(remote_error(resp("Something broke: badly", None))),
            "remote"
        );
        assert_eq!(code(remote_error(resp("", None))), "remote");
    }

    #[test]
    fn a_successful_answer_keeps_payload_encoding_and_context() {
        let resp = InvokeCapabilityResponse {
            success: true,
            payload: bytes::Bytes::from_static(br#"{"ok":true}"#),
            payload_encoding: PayloadEncoding::Json as i32,
            duration_ms: 4,
            context: HashMap::from([("target_arn".to_owned(), "matrix:t:x:i".to_owned())]),
            ..Default::default()
        };
        let r = InvokeResponse::from_wire(resp).unwrap();
        assert_eq!(r.json().unwrap(), serde_json::json!({"ok": true}));
        assert_eq!(r.duration_ms, 4);
        assert_eq!(r.context["target_arn"], "matrix:t:x:i");
    }
}
