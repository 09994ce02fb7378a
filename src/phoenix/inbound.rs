//! Decoding inbound frames on the hot path: straight from the frame's text into the
//! protocol types, with no intermediate `serde_json::Value`.
//!
//! [`Frame::decode`](super::Frame::decode) builds an owned tree of every frame, which
//! the gateway and the tests like for its convenience. The connector's socket sees one
//! frame per execute request, so [`InboundFrame::decode`] borrows instead: refs, topic
//! and event are slices of the text when they need no unescaping, and the payload stays
//! raw JSON until the event says what it is. A `proto` payload's base64 is decoded
//! into one buffer, and [`decode_proto_bytes`] hands that buffer to prost as
//! [`bytes::Bytes`], so every bytes field of the message (the execute payload) is a
//! slice of it rather than a copy.
//!
//! Errors carry the same [`FrameError`] reasons as the owned decoder, so drop counters
//! mean the same thing on both paths.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use prost::Message as _;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::frame::FrameError;
use crate::proto::StreamMessage;

/// One inbound Phoenix v2 frame, borrowed from its text.
#[derive(Debug)]
pub struct InboundFrame<'a> {
    /// Ref of the join this frame belongs to; `None` for heartbeats and broadcasts.
    pub join_ref: Option<Cow<'a, str>>,
    /// The frame's own ref; a reply echoes the ref of the push it answers.
    pub msg_ref: Option<Cow<'a, str>>,
    /// Channel topic.
    pub topic: Cow<'a, str>,
    /// Event name.
    pub event: Cow<'a, str>,
    /// The payload, still as JSON text.
    pub payload: &'a RawValue,
}

impl<'a> InboundFrame<'a> {
    /// Parses a text frame `[join_ref, ref, topic, event, payload]`.
    pub fn decode(text: &'a str) -> Result<Self, FrameError> {
        let (join_ref, msg_ref, topic, event, payload): (
            Ref<'a>,
            Ref<'a>,
            Str<'a>,
            Str<'a>,
            &'a RawValue,
        ) = serde_json::from_str(text).map_err(|e| {
            // Valid JSON of the wrong shape, or not JSON at all? Asked only on the
            // error path, so well-formed frames pay nothing for it.
            if serde_json::from_str::<de::IgnoredAny>(text).is_ok() {
                FrameError::BadShape(e.to_string())
            } else {
                FrameError::NotJson(e.to_string())
            }
        })?;
        Ok(InboundFrame {
            join_ref: join_ref.0,
            msg_ref: msg_ref.0,
            topic: topic.0,
            event: event.0,
            payload,
        })
    }

    /// The `status` and `response.reason` of a `phx_reply` payload; `("", None)` when
    /// the payload has neither.
    pub fn reply(&self) -> (Cow<'a, str>, Option<Cow<'a, str>>) {
        match serde_json::from_str::<Reply<'a>>(self.payload.get()) {
            Ok(r) => (r.status.0, r.response.and_then(|r| r.reason.map(|s| s.0))),
            Err(_) => (Cow::Borrowed(""), None),
        }
    }

    /// Decodes the `StreamMessage` of a `"proto"` frame's `{"data": "<base64>"}`.
    pub fn proto(&self) -> Result<StreamMessage, FrameError> {
        let data: ProtoData<'a> = serde_json::from_str(self.payload.get())
            .map_err(|_| FrameError::BadBase64("payload has no string \"data\" field".into()))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.data.0.as_bytes())
            .map_err(|e| FrameError::BadBase64(e.to_string()))?;
        decode_proto_bytes(bytes.into())
    }
}

/// Decodes a protobuf `StreamMessage` from a buffer it may keep slices of: the body of
/// a binary WebSocket frame, or the decoded base64 of a `proto` text frame.
pub fn decode_proto_bytes(bytes: bytes::Bytes) -> Result<StreamMessage, FrameError> {
    StreamMessage::decode(bytes).map_err(|e| FrameError::BadProtobuf(e.to_string()))
}

#[derive(Deserialize)]
struct ProtoData<'a> {
    #[serde(borrow)]
    data: Str<'a>,
}

#[derive(Deserialize)]
struct Reply<'a> {
    #[serde(borrow, default)]
    status: Str<'a>,
    #[serde(borrow, default)]
    response: Option<ReplyResponse<'a>>,
}

#[derive(Deserialize)]
struct ReplyResponse<'a> {
    #[serde(borrow, default)]
    reason: Option<Str<'a>>,
}

/// A JSON string, borrowed from the text when it has no escapes.
#[derive(Default)]
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// A ref: a string, `null`, or (as some clients send) a number taken as its decimal
/// text.
struct Ref<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Ref<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Ref<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a number or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Ref(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Ref(None))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Ref(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Ref(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Ref(Some(Cow::Owned(v))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Ref(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Ref(Some(Cow::Owned(v.to_string()))))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phoenix::{encode_proto, Frame, LOBBY_TOPIC};
    use crate::proto::{stream_message::Message, ExecuteRequest};

    #[test]
    fn agrees_with_the_owned_decoder_on_phoenix_js_frames() {
        for text in [
            r#"["3","3","connector:lobby","phx_join",{}]"#,
            r#"[null,"4","phoenix","heartbeat",{}]"#,
            r#"[3,4,"connector:lobby","proto",{"data":"MgA="}]"#,
            r#"[null,null,"we\"ird","x",[1,2]]"#,
        ] {
            let owned = Frame::decode(text).unwrap();
            let borrowed = InboundFrame::decode(text).unwrap();
            assert_eq!(borrowed.join_ref.as_deref(), owned.join_ref.as_deref());
            assert_eq!(borrowed.msg_ref.as_deref(), owned.msg_ref.as_deref());
            assert_eq!(borrowed.topic, owned.topic);
            assert_eq!(borrowed.event, owned.event);
            let payload: serde_json::Value = serde_json::from_str(borrowed.payload.get()).unwrap();
            assert_eq!(payload, owned.payload);
        }
    }

    #[test]
    fn unescaped_strings_are_borrowed() {
        let f = InboundFrame::decode(r#"["1","2","connector:lobby","proto",{}]"#).unwrap();
        assert!(matches!(f.topic, Cow::Borrowed(_)));
        assert!(matches!(f.msg_ref, Some(Cow::Borrowed(_))));
    }

    #[test]
    fn proto_payload_decodes_to_the_message_sent() {
        let msg = StreamMessage {
            message: Some(Message::ExecuteRequest(ExecuteRequest {
                request_id: "r1".into(),
                payload: bytes::Bytes::from_static(b"{\"a\":1}"),
                ..Default::default()
            })),
        };
        let text = encode_proto(Some("1"), Some("2"), LOBBY_TOPIC, &msg);
        assert_eq!(InboundFrame::decode(&text).unwrap().proto().unwrap(), msg);
    }

    #[test]
    fn reply_status_and_reason_are_read() {
        let f = InboundFrame::decode(
            r#"[null,"7","connector:lobby","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]"#,
        )
        .unwrap();
        let (status, reason) = f.reply();
        assert_eq!(status, "error");
        assert_eq!(reason.as_deref(), Some("unmatched topic"));
        let f = InboundFrame::decode(r#"[null,"7","phoenix","phx_reply",{}]"#).unwrap();
        assert_eq!(f.reply(), (Cow::Borrowed(""), None));
    }

    #[test]
    fn malformed_frames_get_the_owned_decoders_reasons() {
        let reason = |t: &str| InboundFrame::decode(t).unwrap_err().reason();
        assert_eq!(reason("not json"), "not_json");
        assert_eq!(reason("[1,2,3]"), "bad_shape");
        assert_eq!(reason(r#"{"a":1}"#), "bad_shape");
        assert_eq!(reason(r#"[null,null,5,"e",{}]"#), "bad_shape");
        assert_eq!(reason(r#"[null,null,"t","e",{},6]"#), "bad_shape");
        let proto = |data: &str| {
            let text = format!(r#"[null,null,"connector:lobby","proto",{{"data":"{data}"}}]"#);
            InboundFrame::decode(&text)
                .unwrap()
                .proto()
                .unwrap_err()
                .reason()
        };
        assert_eq!(proto("!!!"), "bad_base64");
        assert_eq!(proto("CgU="), "bad_protobuf");
        let no_data = InboundFrame::decode(r#"[null,null,"connector:lobby","proto",{}]"#).unwrap();
        assert_eq!(no_data.proto().unwrap_err().reason(), "bad_base64");
    }
}
