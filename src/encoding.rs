//! Payload encodings: turning the bytes of an `ExecuteRequest` into a typed [`Payload`]
//! and back (PROTOCOL.md §2, `PayloadEncoding`).
//!
//! The wire carries a payload as opaque bytes plus a [`PayloadEncoding`] tag. Connector
//! authors should not have to parse bytes themselves, so this module owns that step:
//! [`decode_payload`] turns bytes into a [`Payload`] and [`encode_payload`] turns a
//! [`Payload`] back into bytes whose tag is [`Payload::encoding`]. JSON, RAW_BYTES and
//! JSON_LINES are implemented; the columnar and binary formats (ARROW_IPC, PROTOBUF,
//! MSGPACK, PARQUET) are refused with [`Error::UnsupportedEncoding`] so that a caller
//! gets an error response with a stable code instead of garbage.

use serde_json::Value;

use crate::error::{Error, Result};
pub use crate::proto::PayloadEncoding;

/// A decoded payload, as a connector's `execute` receives and returns it.
///
/// Each variant corresponds to exactly one wire encoding, so a response's encoding tag
/// follows from the value the connector returns and can never disagree with its bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// One JSON value (`JSON`); the common case for request/response connectors.
    Json(Value),
    /// Opaque bytes (`RAW_BYTES`), passed through untouched, for files and blobs.
    Bytes(Vec<u8>),
    /// A sequence of JSON values (`JSON_LINES`), one per line on the wire, for record
    /// batches that are too large or too streaming-shaped to wrap in one array.
    JsonLines(Vec<Value>),
}

impl Payload {
    /// The wire encoding of this payload, so the response tag matches the bytes that
    /// [`encode_payload`] produces.
    pub fn encoding(&self) -> PayloadEncoding {
        match self {
            Payload::Json(_) => PayloadEncoding::Json,
            Payload::Bytes(_) => PayloadEncoding::RawBytes,
            Payload::JsonLines(_) => PayloadEncoding::JsonLines,
        }
    }

    /// The JSON value if this is a [`Payload::Json`]; saves a `match` in connectors that
    /// only accept JSON.
    pub fn as_json(&self) -> Option<&Value> {
        match self {
            Payload::Json(v) => Some(v),
            _ => None,
        }
    }

    /// The bytes if this is a [`Payload::Bytes`], for connectors that handle blobs.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Payload::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The records if this is a [`Payload::JsonLines`], for batch connectors.
    pub fn as_json_lines(&self) -> Option<&[Value]> {
        match self {
            Payload::JsonLines(lines) => Some(lines),
            _ => None,
        }
    }

    /// Consumes the payload and returns its JSON value if it is a [`Payload::Json`],
    /// so a connector can take ownership without cloning.
    pub fn into_json(self) -> Option<Value> {
        match self {
            Payload::Json(v) => Some(v),
            _ => None,
        }
    }

    /// The payload's size on the wire in bytes, for metrics and size limits; computed
    /// without keeping the encoded buffer.
    pub fn encoded_len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            other => encode_payload(other).len(),
        }
    }
}

/// A JSON value becomes a [`Payload::Json`], so `Ok(json!({..}).into())` works in
/// `execute`.
impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Payload::Json(v)
    }
}

/// Owned bytes become a [`Payload::Bytes`] (RAW_BYTES).
impl From<Vec<u8>> for Payload {
    fn from(b: Vec<u8>) -> Self {
        Payload::Bytes(b)
    }
}

/// Borrowed bytes are copied into a [`Payload::Bytes`] (RAW_BYTES).
impl From<&[u8]> for Payload {
    fn from(b: &[u8]) -> Self {
        Payload::Bytes(b.to_vec())
    }
}

/// A vector of JSON values becomes [`Payload::JsonLines`], one record per line. Wrap
/// it in `Value::Array` first if a single JSON array is meant instead.
impl From<Vec<Value>> for Payload {
    fn from(lines: Vec<Value>) -> Self {
        Payload::JsonLines(lines)
    }
}

/// Decodes the bytes of a payload tagged `encoding`.
///
/// * `PAYLOAD_ENCODING_UNSPECIFIED` is treated as JSON: proto3 sends an unset enum as 0,
///   and senders of this protocol family that never set the tag send JSON, so refusing
///   it would break them for no gain.
/// * `JSON`: one JSON value. Empty bytes decode to `null`, because proto3 cannot tell an
///   absent `bytes` field from an empty one and a request without arguments is common.
/// * `RAW_BYTES`: the bytes unchanged.
/// * `JSON_LINES`: one JSON value per line; blank lines (including a trailing newline)
///   are skipped and a trailing `\r` is tolerated.
/// * `ARROW_IPC`, `PROTOBUF`, `MSGPACK`, `PARQUET`: [`Error::UnsupportedEncoding`] with
///   the encoding's wire name, so the caller learns what to send instead.
///
/// Invalid JSON yields [`Error::Payload`] naming the line and column (and for
/// JSON_LINES the record's line number) so the sender can find the fault.
pub fn decode_payload(bytes: &[u8], encoding: PayloadEncoding) -> Result<Payload> {
    match encoding {
        PayloadEncoding::Unspecified | PayloadEncoding::Json => {
            decode_json(bytes).map(Payload::Json)
        }
        PayloadEncoding::RawBytes => Ok(Payload::Bytes(bytes.to_vec())),
        PayloadEncoding::JsonLines => decode_json_lines(bytes).map(Payload::JsonLines),
        PayloadEncoding::ArrowIpc
        | PayloadEncoding::Protobuf
        | PayloadEncoding::Msgpack
        | PayloadEncoding::Parquet => Err(Error::UnsupportedEncoding(
            encoding.as_str_name().to_owned(),
        )),
    }
}

/// Decodes a payload whose encoding is still the raw wire number, as it arrives in an
/// `ExecuteRequest`; a number this build does not know is an unsupported encoding, not
/// a decoding panic.
pub(crate) fn decode_wire_payload(bytes: &[u8], encoding: i32) -> Result<Payload> {
    let encoding = PayloadEncoding::try_from(encoding)
        .map_err(|_| Error::UnsupportedEncoding(format!("unknown encoding number {encoding}")))?;
    decode_payload(bytes, encoding)
}

/// Encodes a payload into the bytes that [`Payload::encoding`] describes. JSON_LINES
/// output ends every record with `\n` so concatenated batches stay valid.
pub fn encode_payload(payload: &Payload) -> Vec<u8> {
    match payload {
        Payload::Json(v) => json_bytes(v),
        Payload::Bytes(b) => b.clone(),
        Payload::JsonLines(lines) => {
            let mut out = Vec::new();
            for line in lines {
                out.extend_from_slice(&json_bytes(line));
                out.push(b'\n');
            }
            out
        }
    }
}

/// Serialises one value. Serialising a `serde_json::Value` into memory cannot fail (its
/// map keys are always strings), so the fallback is unreachable in practice; it exists
/// so that a future serde_json change can never turn into a panic on the execute path.
fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec())
}

fn decode_json(bytes: &[u8]) -> Result<Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Payload(format!(
            "invalid JSON at line {}, column {}: {}",
            e.line(),
            e.column(),
            message_without_position(&e)
        ))
    })
}

/// serde_json appends " at line L column C" to its messages; the callers here state the
/// position themselves (for JSON_LINES relative to the whole payload), so strip it.
fn message_without_position(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    full.strip_suffix(&suffix)
        .map(str::to_owned)
        .unwrap_or(full)
}

fn decode_json_lines(bytes: &[u8]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (index, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value = serde_json::from_slice(line).map_err(|e| {
            Error::Payload(format!(
                "invalid JSON_LINES record on line {}, column {}: {}",
                index + 1,
                e.column(),
                message_without_position(&e)
            ))
        })?;
        out.push(value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unspecified_encoding_is_decoded_as_json() {
        let p = decode_payload(br#"{"a":1}"#, PayloadEncoding::Unspecified).unwrap();
        assert_eq!(p, Payload::Json(json!({"a": 1})));
    }

    #[test]
    fn empty_json_payload_is_null() {
        assert_eq!(
            decode_payload(b"", PayloadEncoding::Json).unwrap(),
            Payload::Json(Value::Null)
        );
    }

    #[test]
    fn raw_bytes_pass_through_unchanged() {
        let bytes = vec![0u8, 159, 146, 150];
        let p = decode_payload(&bytes, PayloadEncoding::RawBytes).unwrap();
        assert_eq!(p.as_bytes(), Some(&bytes[..]));
        assert_eq!(encode_payload(&p), bytes);
    }

    #[test]
    fn json_lines_skip_blank_lines_and_tolerate_crlf() {
        let p = decode_payload(b"{\"a\":1}\r\n\n  \n[2]\n", PayloadEncoding::JsonLines).unwrap();
        assert_eq!(p, Payload::JsonLines(vec![json!({"a": 1}), json!([2])]));
    }

    #[test]
    fn json_lines_error_names_the_line() {
        let err = decode_payload(b"1\n2\n{oops\n", PayloadEncoding::JsonLines).unwrap_err();
        assert_eq!(err.code(), "payload");
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    #[test]
    fn invalid_json_error_names_the_position() {
        let err = decode_payload(b"{\n  \"a\": tru }", PayloadEncoding::Json).unwrap_err();
        assert_eq!(err.code(), "payload");
        let msg = err.to_string();
        assert!(msg.contains("at line 2, column"), "{msg}");
        assert_eq!(
            msg.matches("line").count(),
            1,
            "position stated once: {msg}"
        );
    }

    #[test]
    fn columnar_and_binary_encodings_are_unsupported_by_name() {
        for (enc, name) in [
            (PayloadEncoding::ArrowIpc, "ARROW_IPC"),
            (PayloadEncoding::Protobuf, "PROTOBUF"),
            (PayloadEncoding::Msgpack, "MSGPACK"),
            (PayloadEncoding::Parquet, "PARQUET"),
        ] {
            match decode_payload(b"x", enc) {
                Err(Error::UnsupportedEncoding(n)) => assert_eq!(n, name),
                other => panic!("{enc:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_wire_encoding_number_is_unsupported() {
        let err = decode_wire_payload(b"{}", 42).unwrap_err();
        assert_eq!(err.code(), "unsupported_encoding");
        assert!(err.to_string().contains("42"));
    }

    #[test]
    fn encode_then_decode_round_trips_every_variant() {
        for p in [
            Payload::Json(json!({"k": [1, "two", null]})),
            Payload::Bytes(b"\x00\xffbytes".to_vec()),
            Payload::JsonLines(vec![json!(1), json!({"x": "y"})]),
            Payload::JsonLines(vec![]),
        ] {
            let bytes = encode_payload(&p);
            assert_eq!(p.encoded_len(), bytes.len());
            assert_eq!(decode_payload(&bytes, p.encoding()).unwrap(), p);
        }
    }

    #[test]
    fn json_lines_encoding_ends_each_record_with_newline() {
        let p = Payload::JsonLines(vec![json!(1), json!(2)]);
        assert_eq!(encode_payload(&p), b"1\n2\n");
    }

    #[test]
    fn from_impls_pick_the_matching_variant() {
        assert_eq!(Payload::from(json!(1)).encoding(), PayloadEncoding::Json);
        assert_eq!(
            Payload::from(vec![1u8]).encoding(),
            PayloadEncoding::RawBytes
        );
        assert_eq!(Payload::from(&b"ab"[..]).as_bytes(), Some(&b"ab"[..]));
        assert_eq!(
            Payload::from(vec![json!(1)]).encoding(),
            PayloadEncoding::JsonLines
        );
        assert_eq!(Payload::from(json!("s")).into_json(), Some(json!("s")));
        assert!(Payload::Bytes(vec![]).as_json().is_none());
        assert_eq!(
            Payload::JsonLines(vec![json!(3)]).as_json_lines(),
            Some(&[json!(3)][..])
        );
    }
}
