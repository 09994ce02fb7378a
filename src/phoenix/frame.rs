//! The Phoenix v2 text frame: `[join_ref, ref, topic, event, payload]`.
//!
//! Data frames carry a protobuf `StreamMessage` as standard base64 in
//! `{"data": "..."}` under the `"proto"` event (PROTOCOL.md §3). Encoding of data
//! frames is the hot path, so [`encode_proto`] writes the JSON text directly instead of
//! building a `serde_json::Value`.

use base64::Engine as _;
use prost::Message as _;
use serde_json::Value;

use crate::proto::StreamMessage;

/// The one channel connectors join.
pub const LOBBY_TOPIC: &str = "connector:lobby";
/// The topic of Phoenix heartbeats.
pub const PHOENIX_TOPIC: &str = "phoenix";
/// Event name of data frames.
pub const EVENT_PROTO: &str = "proto";
/// Reserved Phoenix events.
pub const EVENT_JOIN: &str = "phx_join";
/// Reply to a push.
pub const EVENT_REPLY: &str = "phx_reply";
/// The channel crashed on the server.
pub const EVENT_ERROR: &str = "phx_error";
/// The channel was closed by the server (or the client leaves).
pub const EVENT_CLOSE: &str = "phx_close";
/// Client leave.
pub const EVENT_LEAVE: &str = "phx_leave";
/// Phoenix heartbeat.
pub const EVENT_HEARTBEAT: &str = "heartbeat";
/// The lobby join's payload key by which a connector says it reads binary frames
/// (raw protobuf `StreamMessage`s, no envelope, no base64), valued [`FRAMES_BINARY`].
/// A gateway of the family that knows it may send data in binary frames from the
/// join on; one that does not ignores it (join payloads are free-form), and the
/// connector keeps to text until it receives a binary frame.
pub const JOIN_FRAMES_KEY: &str = "frames";
/// See [`JOIN_FRAMES_KEY`].
pub const FRAMES_BINARY: &str = "binary";

/// Why a text frame or its payload was refused. Each variant is a drop reason the
/// transports count separately.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not JSON at all.
    #[error("frame is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not a 5-element array of the right types.
    #[error("frame is not a [join_ref, ref, topic, event, payload] array: {0}")]
    BadShape(String),
    /// A `proto` payload without a string `data` field, or whose base64 is invalid.
    #[error("bad base64 in proto payload: {0}")]
    BadBase64(String),
    /// The base64 decoded, but not to a `StreamMessage`.
    #[error("bad protobuf in proto payload: {0}")]
    BadProtobuf(String),
    /// The frame exceeds the configured size limit.
    #[error("frame of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size of the frame.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

impl FrameError {
    /// A short, stable label for drop counters.
    pub fn reason(&self) -> &'static str {
        match self {
            FrameError::NotJson(_) => "not_json",
            FrameError::BadShape(_) => "bad_shape",
            FrameError::BadBase64(_) => "bad_base64",
            FrameError::BadProtobuf(_) => "bad_protobuf",
            FrameError::TooLarge { .. } => "too_large",
        }
    }
}

/// One Phoenix v2 message.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Ref of the join push this frame belongs to; `None` for heartbeats and broadcasts.
    pub join_ref: Option<String>,
    /// This message's ref; replies echo the ref of the push they answer.
    pub msg_ref: Option<String>,
    /// Channel topic.
    pub topic: String,
    /// Event name.
    pub event: String,
    /// JSON payload.
    pub payload: Value,
}

impl Frame {
    /// Builds a frame.
    pub fn new(
        join_ref: Option<String>,
        msg_ref: Option<String>,
        topic: impl Into<String>,
        event: impl Into<String>,
        payload: Value,
    ) -> Self {
        Frame {
            join_ref,
            msg_ref,
            topic: topic.into(),
            event: event.into(),
            payload,
        }
    }

    /// Parses a text frame.
    pub fn decode(text: &str) -> Result<Frame, FrameError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| FrameError::NotJson(e.to_string()))?;
        let Value::Array(mut items) = value else {
            return Err(FrameError::BadShape("top level is not an array".into()));
        };
        if items.len() != 5 {
            return Err(FrameError::BadShape(format!(
                "array has {} elements, not 5",
                items.len()
            )));
        }
        let payload = items.pop().unwrap_or(Value::Null);
        let event = take_string(&mut items[3], "event")?;
        let topic = take_string(&mut items[2], "topic")?;
        let msg_ref = take_opt_string(&mut items[1], "ref")?;
        let join_ref = take_opt_string(&mut items[0], "join_ref")?;
        Ok(Frame {
            join_ref,
            msg_ref,
            topic,
            event,
            payload,
        })
    }

    /// Serialises to the text form.
    pub fn encode(&self) -> String {
        serde_json::to_string(&(
            &self.join_ref,
            &self.msg_ref,
            &self.topic,
            &self.event,
            &self.payload,
        ))
        .expect("a frame of strings and a JSON value always serialises")
    }

    /// The `status` of a `phx_reply` payload (`"ok"`, `"error"`), if this is one.
    pub fn reply_status(&self) -> Option<&str> {
        (self.event == EVENT_REPLY).then(|| self.payload.get("status")?.as_str())?
    }

    /// The `response.reason` of an error reply, e.g. `"unmatched topic"`.
    pub fn reply_reason(&self) -> Option<&str> {
        self.payload.get("response")?.get("reason")?.as_str()
    }

    /// Decodes the `StreamMessage` of a `"proto"` frame.
    pub fn proto(&self) -> Result<StreamMessage, FrameError> {
        decode_proto(&self.payload)
    }
}

fn take_string(v: &mut Value, what: &str) -> Result<String, FrameError> {
    match v.take() {
        Value::String(s) => Ok(s),
        other => Err(FrameError::BadShape(format!(
            "{what} is {other}, not a string"
        ))),
    }
}

fn take_opt_string(v: &mut Value, what: &str) -> Result<Option<String>, FrameError> {
    match v.take() {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        // Some clients send numeric refs; accept them as their decimal text.
        Value::Number(n) => Ok(Some(n.to_string())),
        other => Err(FrameError::BadShape(format!(
            "{what} is {other}, not a string or null"
        ))),
    }
}

/// Decodes the `StreamMessage` carried in a `{"data": "<base64>"}` payload.
pub fn decode_proto(payload: &Value) -> Result<StreamMessage, FrameError> {
    let data = payload
        .get("data")
        .and_then(Value::as_str)
        .ok_or_else(|| FrameError::BadBase64("payload has no string \"data\" field".into()))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| FrameError::BadBase64(e.to_string()))?;
    StreamMessage::decode(bytes.as_slice()).map_err(|e| FrameError::BadProtobuf(e.to_string()))
}

/// Encodes a `"proto"` data frame carrying `msg`, writing the JSON text directly.
/// `msg_ref` is `None` for server pushes, as Phoenix writes them.
pub fn encode_proto(
    join_ref: Option<&str>,
    msg_ref: Option<&str>,
    topic: &str,
    msg: &StreamMessage,
) -> String {
    let bytes = msg.encode_to_vec();
    let b64_len = bytes.len().div_ceil(3) * 4;
    let mut out = String::with_capacity(b64_len + topic.len() + 64);
    out.push('[');
    push_opt_json_str(&mut out, join_ref);
    out.push(',');
    push_opt_json_str(&mut out, msg_ref);
    out.push(',');
    push_json_str(&mut out, topic);
    out.push_str(",\"proto\",{\"data\":\"");
    base64::engine::general_purpose::STANDARD.encode_string(&bytes, &mut out);
    out.push_str("\"}]");
    out
}

fn push_opt_json_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_json_str(out, s),
        None => out.push_str("null"),
    }
}

fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).expect("strings serialise"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{stream_message::Message, HeartbeatRequest};
    use serde_json::json;

    // Frames exactly as phoenix.js 1.7 (serializer vsn 2.0.0) writes them.
    const JS_JOIN: &str = r#"["3","3","connector:lobby","phx_join",{}]"#;
    const JS_HEARTBEAT: &str = r#"[null,"4","phoenix","heartbeat",{}]"#;
    const JS_PUSH: &str = r#"["3","5","connector:lobby","proto",{"data":"MgA="}]"#;
    const SERVER_REPLY: &str =
        r#"["3","3","connector:lobby","phx_reply",{"status":"ok","response":{}}]"#;

    #[test]
    fn decodes_phoenix_js_join() {
        let f = Frame::decode(JS_JOIN).unwrap();
        assert_eq!(f.join_ref.as_deref(), Some("3"));
        assert_eq!(f.msg_ref.as_deref(), Some("3"));
        assert_eq!(f.topic, LOBBY_TOPIC);
        assert_eq!(f.event, EVENT_JOIN);
        assert_eq!(f.payload, json!({}));
    }

    #[test]
    fn decodes_phoenix_js_heartbeat_with_null_join_ref() {
        let f = Frame::decode(JS_HEARTBEAT).unwrap();
        assert_eq!(f.join_ref, None);
        assert_eq!(f.topic, PHOENIX_TOPIC);
        assert_eq!(f.event, EVENT_HEARTBEAT);
    }

    #[test]
    fn encode_matches_phoenix_js_byte_for_byte() {
        for text in [JS_JOIN, JS_HEARTBEAT, JS_PUSH] {
            assert_eq!(Frame::decode(text).unwrap().encode(), text);
        }
    }

    #[test]
    fn reply_status_and_reason_are_read_from_the_payload() {
        let f = Frame::decode(SERVER_REPLY).unwrap();
        assert_eq!(f.reply_status(), Some("ok"));
        let err = Frame::decode(
            r#"[null,"7","connector:lobby","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]"#,
        )
        .unwrap();
        assert_eq!(err.reply_status(), Some("error"));
        assert_eq!(err.reply_reason(), Some("unmatched topic"));
    }

    #[test]
    fn proto_frames_round_trip() {
        let msg = StreamMessage {
            message: Some(Message::HeartbeatRequest(HeartbeatRequest {
                gateway_id: "t.echo.1".into(),
                timestamp_ms: 42,
            })),
        };
        let text = encode_proto(Some("1"), Some("9"), LOBBY_TOPIC, &msg);
        let f = Frame::decode(&text).unwrap();
        assert_eq!(f.event, EVENT_PROTO);
        assert_eq!(f.proto().unwrap(), msg);
        // The fast encoder agrees with the generic one.
        assert_eq!(f.encode(), text);
    }

    #[test]
    fn empty_stream_message_is_valid() {
        // "MgA=" is field 6 (heartbeat_request) with zero length.
        let f = Frame::decode(JS_PUSH).unwrap();
        assert!(matches!(
            f.proto().unwrap().message,
            Some(Message::HeartbeatRequest(_))
        ));
    }

    #[test]
    fn malformed_frames_get_distinct_errors() {
        assert_eq!(Frame::decode("not json").unwrap_err().reason(), "not_json");
        assert_eq!(Frame::decode("[1,2,3]").unwrap_err().reason(), "bad_shape");
        assert_eq!(
            Frame::decode(r#"{"a":1}"#).unwrap_err().reason(),
            "bad_shape"
        );
        assert_eq!(
            Frame::decode(r#"[null,null,5,"e",{}]"#)
                .unwrap_err()
                .reason(),
            "bad_shape"
        );
        assert_eq!(
            decode_proto(&json!({"data": "!!!"})).unwrap_err().reason(),
            "bad_base64"
        );
        assert_eq!(decode_proto(&json!({})).unwrap_err().reason(), "bad_base64");
        // 0x0a 0x05 claims a 5-byte field 1 but has none.
        assert_eq!(
            decode_proto(&json!({"data": "CgU="})).unwrap_err().reason(),
            "bad_protobuf"
        );
    }

    #[test]
    fn strings_needing_escapes_are_escaped() {
        let msg = StreamMessage::default();
        let text = encode_proto(None, None, "we\"ird", &msg);
        assert_eq!(Frame::decode(&text).unwrap().topic, "we\"ird");
    }
}
