//! Answering one execute request: decode, call the connector (catching panics),
//! encode, time. Kept apart from the trait because it is the one place where
//! connector code runs on the request path, and its failure handling deserves its own
//! tests.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt;

use crate::connector::{BaseConnector, ExecuteContext};
use crate::encoding::{decode_wire_payload, encode_payload, Payload};
use crate::error::{Error, Result};
use crate::proto::{ExecuteRequest, ExecuteResponse, PayloadEncoding};

/// Runs one execute request through the connector and always produces a response.
///
/// Steps: decode the payload (an unsupported or unknown encoding, or undecodable bytes,
/// become an error response), call [`BaseConnector::execute_with_context`], encode the
/// result, and measure the duration. The response carries the request's `request_id`;
/// on failure `error` is `"{code}: {message}"` with a stable [`Error::code`], and the
/// payload is empty with encoding UNSPECIFIED.
///
/// A panic inside the connector becomes an error response with code `connector`. It is
/// caught with `futures_util::FutureExt::catch_unwind` rather than `tokio::spawn`: the
/// connector is borrowed (`&dyn`), so spawning would force `Arc` and `'static` on every
/// caller, and staying on the caller's task keeps cancellation exact (dropping this
/// future drops the connector's future). The connector's state after a panic is its own
/// business, hence `AssertUnwindSafe`. With `panic = "abort"` nothing can be caught.
#[cfg_attr(not(feature = "websocket"), allow(dead_code))]
pub(crate) async fn run_execute(
    connector: &dyn BaseConnector,
    req: ExecuteRequest,
    ctx: &ExecuteContext,
) -> ExecuteResponse {
    let started = Instant::now();
    let ExecuteRequest {
        request_id,
        payload,
        payload_encoding,
        context: _,
        capability_id,
    } = req;
    let outcome = execute_decoded(connector, &payload, payload_encoding, ctx, &capability_id).await;
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    match outcome {
        Ok(result) => ExecuteResponse {
            request_id,
            success: true,
            payload: encode_payload(&result).into(),
            payload_encoding: i32::from(result.encoding()),
            error: String::new(),
            duration_ms,
        },
        Err(e) => {
            tracing::debug!(request_id = %request_id, code = e.code(), error = %e, "execute failed");
            ExecuteResponse {
                request_id,
                success: false,
                payload: bytes::Bytes::new(),
                payload_encoding: i32::from(PayloadEncoding::Unspecified),
                error: format!("{}: {e}", e.code()),
                duration_ms,
            }
        }
    }
}

async fn execute_decoded(
    connector: &dyn BaseConnector,
    bytes: &[u8],
    encoding: i32,
    context: &ExecuteContext,
    capability_id: &str,
) -> Result<Payload> {
    let payload = decode_wire_payload(bytes, encoding)?;
    let capability_id = (!capability_id.is_empty()).then_some(capability_id);
    let call = connector.execute_with_context(payload, capability_id, context);
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            tracing::error!(connector_type = connector.connector_type(), panic = %message, "connector panicked in execute");
            Err(Error::Connector(format!("connector panicked: {message}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::EchoConnector;
    use serde_json::{json, Value};

    struct Failing;
    #[async_trait::async_trait]
    impl BaseConnector for Failing {
        fn connector_type(&self) -> &str {
            "failing"
        }
        async fn execute(&self, _: Payload, _: Option<&str>) -> Result<Payload> {
            Err(Error::Connector("upstream said no".into()))
        }
    }

    struct Panicking;
    #[async_trait::async_trait]
    impl BaseConnector for Panicking {
        fn connector_type(&self) -> &str {
            "panicking"
        }
        async fn execute(&self, _: Payload, _: Option<&str>) -> Result<Payload> {
            panic!("index out of bounds")
        }
    }

    /// Reports what it was called with, to check argument plumbing.
    struct Introspect;
    #[async_trait::async_trait]
    impl BaseConnector for Introspect {
        fn connector_type(&self) -> &str {
            "introspect"
        }
        async fn execute(&self, _: Payload, _: Option<&str>) -> Result<Payload> {
            unreachable!("execute_with_context is overridden")
        }
        async fn execute_with_context(
            &self,
            _: Payload,
            capability_id: Option<&str>,
            context: &ExecuteContext,
        ) -> Result<Payload> {
            Ok(json!({"capability": capability_id, "arn": context.get("connector_arn")}).into())
        }
    }

    /// Runs an execute with a detached context built from the request, as the runner
    /// builds an attached one.
    async fn run(connector: &dyn BaseConnector, req: ExecuteRequest) -> ExecuteResponse {
        let ctx = ExecuteContext::detached(req.request_id.clone(), req.context.clone());
        run_execute(connector, req, &ctx).await
    }

    fn request(payload: &[u8], encoding: PayloadEncoding) -> ExecuteRequest {
        ExecuteRequest {
            request_id: "req-1".into(),
            payload: bytes::Bytes::copy_from_slice(payload),
            payload_encoding: i32::from(encoding),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn json_payload_is_echoed_with_request_id_and_encoding() {
        let resp = run(
            &EchoConnector,
            request(br#"{"hello":"world"}"#, PayloadEncoding::Json),
        )
        .await;
        assert!(resp.success, "{}", resp.error);
        assert_eq!(resp.request_id, "req-1");
        assert_eq!(resp.payload_encoding, i32::from(PayloadEncoding::Json));
        assert_eq!(
            serde_json::from_slice::<Value>(&resp.payload).unwrap(),
            json!({"hello": "world"})
        );
        assert!(resp.error.is_empty(), "{}", resp.error);
    }

    #[tokio::test]
    async fn json_lines_payload_is_echoed_as_json_lines() {
        let resp = run(
            &EchoConnector,
            request(b"{\"a\":1}\n{\"b\":2}\n", PayloadEncoding::JsonLines),
        )
        .await;
        assert!(resp.success, "{}", resp.error);
        assert_eq!(resp.payload_encoding, i32::from(PayloadEncoding::JsonLines));
        assert_eq!(&resp.payload[..], b"{\"a\":1}\n{\"b\":2}\n");
    }

    #[tokio::test]
    async fn raw_bytes_are_echoed_byte_for_byte() {
        let bytes = [0u8, 1, 254, 255];
        let resp = run(&EchoConnector, request(&bytes, PayloadEncoding::RawBytes)).await;
        assert!(resp.success, "{}", resp.error);
        assert_eq!(resp.payload_encoding, i32::from(PayloadEncoding::RawBytes));
        assert_eq!(resp.payload[..], bytes);
    }

    #[tokio::test]
    async fn msgpack_gives_an_unsupported_encoding_error_response() {
        let resp = run(&EchoConnector, request(b"\x81", PayloadEncoding::Msgpack)).await;
        assert!(!resp.success);
        assert_eq!(resp.request_id, "req-1");
        assert!(
            resp.error.starts_with("unsupported_encoding: "),
            "{}",
            resp.error
        );
        assert!(resp.error.contains("MSGPACK"), "{}", resp.error);
        assert!(resp.payload.is_empty());
        assert_eq!(
            resp.payload_encoding,
            i32::from(PayloadEncoding::Unspecified)
        );
    }

    #[tokio::test]
    async fn unknown_encoding_number_gives_an_error_response() {
        let mut req = request(b"{}", PayloadEncoding::Json);
        req.payload_encoding = 99;
        let resp = run(&EchoConnector, req).await;
        assert!(!resp.success);
        assert!(
            resp.error.starts_with("unsupported_encoding: "),
            "{}",
            resp.error
        );
    }

    #[tokio::test]
    async fn bad_json_gives_a_payload_error_response_with_position() {
        let resp = run(&EchoConnector, request(b"{\"a\": }", PayloadEncoding::Json)).await;
        assert!(!resp.success);
        assert!(resp.error.starts_with("payload: "), "{}", resp.error);
        assert!(resp.error.contains("column"), "{}", resp.error);
    }

    #[tokio::test]
    async fn connector_error_becomes_an_error_response() {
        let resp = run(&Failing, request(b"{}", PayloadEncoding::Json)).await;
        assert!(!resp.success);
        assert!(resp.error.starts_with("connector: "), "{}", resp.error);
        assert!(resp.error.contains("upstream said no"), "{}", resp.error);
    }

    #[tokio::test]
    async fn connector_panic_becomes_an_error_response() {
        let resp = run(&Panicking, request(b"{}", PayloadEncoding::Json)).await;
        assert!(!resp.success);
        assert_eq!(resp.request_id, "req-1");
        assert!(resp.error.starts_with("connector: "), "{}", resp.error);
        assert!(resp.error.contains("index out of bounds"), "{}", resp.error);
    }

    #[tokio::test]
    async fn context_and_capability_reach_the_connector_and_empty_capability_is_none() {
        let mut req = request(b"null", PayloadEncoding::Unspecified);
        req.capability_id = "search".into();
        req.context
            .insert("connector_arn".into(), "matrix:t:x:i".into());
        let resp = run(&Introspect, req).await;
        let got: Value = serde_json::from_slice(&resp.payload).unwrap();
        assert_eq!(got, json!({"capability": "search", "arn": "matrix:t:x:i"}));

        let resp = run(&Introspect, request(b"", PayloadEncoding::Json)).await;
        let got: Value = serde_json::from_slice(&resp.payload).unwrap();
        assert_eq!(got["capability"], Value::Null);
    }

    #[test]
    fn run_execute_future_is_send_so_handles_can_spawn_it() {
        fn assert_send<T: Send>(_: T) {}
        let ctx = ExecuteContext::detached("r", Default::default());
        assert_send(run_execute(&EchoConnector, ExecuteRequest::default(), &ctx));
    }
}
