//! An event as a backend writes it, prepared by the request that produced it.
//!
//! The group commit's writer is serial: every microsecond it spends on one event is a
//! microsecond no other event can use. So whatever can be done per event before the
//! batch is done in the request's own task, on whichever core it runs on: the headers
//! serialised to JSON, the body compressed, the parsed payload (which the store never
//! writes) dropped there rather than in the writer.
//!
//! Compression (SQLite only; `sqlite_body_compression`): SQLite's commit rate is
//! bounded by the bytes each row puts in the WAL and later in the database file
//! (`benches/ingest.rs`: the store alone commits about twice as many 1 KiB rows as
//! 5 KiB ones), and webhook bodies are JSON that zstd at level 1 shrinks 1.5–4× for a
//! few microseconds. A body of at least `min_bytes` ([`BodyCompression::Zstd`]) is
//! stored compressed when that saves at least an eighth of it; otherwise, and for every
//! body on PostgreSQL (whose TOAST compresses large values itself), it is stored as
//! received. The `body_codec` column says which, so rows written before compression
//! existed, or with it turned off, read back unchanged. Readers decompress inside
//! SQLite through the `switchboard_body(codec, body)` SQL function that every
//! connection registers ([`register_sql_function`]), so every query that hands a body
//! to a caller returns the bytes that were received.

use crate::triggers::TriggerEvent;

/// `body_codec` of a body stored as received.
pub(crate) const RAW: i64 = 0;
/// `body_codec` of a zstd frame of the body.
pub(crate) const ZSTD: i64 = 1;

/// How the SQLite store compresses event bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyCompression {
    /// Bodies are stored as received.
    None,
    /// Bodies of at least `min_bytes` are stored as zstd frames at `level`.
    Zstd {
        /// Smallest body worth compressing. Default [`DEFAULT_MIN_BYTES`].
        min_bytes: usize,
        /// zstd level; 1 (the default) is the fastest and already takes most of the
        /// gain on JSON.
        level: i32,
    },
}

/// Default smallest body that is compressed: below about half a kilobyte zstd's frame
/// header and the lack of repetition leave little to gain.
pub(crate) const DEFAULT_MIN_BYTES: usize = 512;

#[cfg(test)]
impl BodyCompression {
    /// zstd at level 1 for bodies of at least [`DEFAULT_MIN_BYTES`]: what
    /// `sqlite_body_compression = "zstd"` asks for.
    pub(crate) fn zstd() -> Self {
        BodyCompression::Zstd {
            min_bytes: DEFAULT_MIN_BYTES,
            level: 1,
        }
    }
}

/// Off by default: on the 2-core machine of `benches/ingest.rs` compressing costs the
/// request path more than the smaller rows save the writer.
impl Default for BodyCompression {
    fn default() -> Self {
        BodyCompression::None
    }
}

/// The columns of an event that are computed from it before the batch: its headers as
/// JSON, and its body as stored (`codec` says how).
#[derive(Debug, Default)]
pub struct Prepared {
    /// The redacted headers, as JSON text.
    pub(crate) headers_json: String,
    /// [`RAW`] or [`ZSTD`].
    pub(crate) codec: i64,
    /// The body as stored.
    pub(crate) body: Vec<u8>,
}

impl Prepared {
    /// Takes the body out of `event` (stored as is, or compressed per `compression`),
    /// serialises its headers and drops its parsed payload, which no backend writes.
    pub(crate) fn take(event: &mut TriggerEvent, compression: BodyCompression) -> Prepared {
        let headers_json = headers_json(&event.headers);
        event.payload = serde_json::Value::Null;
        let body = std::mem::take(&mut event.body);
        let (codec, body) = encode(body, compression);
        Prepared {
            headers_json,
            codec,
            body,
        }
    }
}

/// `headers` as a JSON object, written into a buffer sized for it up front (a dozen
/// headers would otherwise grow the string three or four times).
fn headers_json(headers: &std::collections::BTreeMap<String, String>) -> String {
    let size = 2 + headers
        .iter()
        .map(|(k, v)| k.len() + v.len() + 6)
        .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    match serde_json::to_writer(&mut out, headers) {
        Ok(()) => String::from_utf8(out).unwrap_or_else(|_| "{}".into()),
        Err(_) => "{}".into(),
    }
}

/// The stored form of `body`: compressed when `compression` asks for it, the body is
/// large enough and compression saves at least an eighth; otherwise the body itself.
pub(crate) fn encode(body: Vec<u8>, compression: BodyCompression) -> (i64, Vec<u8>) {
    let BodyCompression::Zstd { min_bytes, level } = compression else {
        return (RAW, body);
    };
    if body.len() < min_bytes.max(1) {
        return (RAW, body);
    }
    match compress(&body, level) {
        Some(packed) if packed.len() <= body.len() - body.len() / 8 => (ZSTD, packed),
        _ => (RAW, body),
    }
}

/// Compresses with this thread's zstd context. A context costs a few hundred
/// kilobytes to set up, more than compressing a webhook body takes, so each thread
/// keeps one (per level) instead of making one per body.
fn compress(body: &[u8], level: i32) -> Option<Vec<u8>> {
    thread_local! {
        static CONTEXT: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
            const { std::cell::RefCell::new(None) };
    }
    CONTEXT.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, context) = slot.as_mut()?;
        context.compress(body).ok()
    })
}

/// The body that was received, from its stored form.
pub(crate) fn decode(codec: i64, stored: &[u8]) -> Result<Vec<u8>, String> {
    match codec {
        RAW => Ok(stored.to_vec()),
        ZSTD => decompress(stored).map_err(|e| format!("a stored body does not decompress: {e}")),
        other => Err(format!(
            "a stored body has codec {other}, which this build does not know; run a newer switchboard"
        )),
    }
}

/// Largest body a stored frame may claim to hold: bounds the buffer a corrupt frame
/// header could make a reader allocate (bodies are limited by `max_body_bytes`, 10 MiB
/// by default).
const MAX_DECODED_BYTES: u64 = 1 << 30;

/// Decompresses with this thread's zstd context (see [`compress`]); frames written by
/// [`encode`] record their content size, which sizes the output exactly.
fn decompress(frame: &[u8]) -> Result<Vec<u8>, String> {
    thread_local! {
        static CONTEXT: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let size = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) if n <= MAX_DECODED_BYTES => n as usize,
        Ok(Some(n)) => return Err(format!("the frame claims {n} bytes")),
        Ok(None) => return Err("the frame does not record its size".into()),
        Err(_) => return Err("not a zstd frame".into()),
    };
    CONTEXT.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let context = slot.as_mut().ok_or("no zstd context")?;
        context.decompress(frame, size).map_err(|e| e.to_string())
    })
}

/// Registers `switchboard_body(codec, body)` on `conn`: the received bytes of a stored
/// body (NULL stays NULL), or an SQL error naming what is wrong with it.
pub(crate) fn register_sql_function(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    use rusqlite::types::ValueRef;
    conn.create_scalar_function(
        "switchboard_body",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let codec: i64 = ctx.get(0)?;
            match ctx.get_raw(1) {
                ValueRef::Null => Ok(None),
                ValueRef::Blob(b) | ValueRef::Text(b) if codec == RAW => Ok(Some(b.to_vec())),
                ValueRef::Blob(b) => decode(codec, b)
                    .map(Some)
                    .map_err(|e| rusqlite::Error::UserFunctionError(e.into())),
                _ => Err(rusqlite::Error::UserFunctionError(
                    "switchboard_body: the body is not a blob".into(),
                )),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(n: usize) -> Vec<u8> {
        let items: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"id":{i},"url":"https://api.github.com/repos/o/r/issues/{i}"}}"#))
            .collect();
        format!("[{}]", items.join(",")).into_bytes()
    }

    #[test]
    fn a_large_json_body_is_compressed_and_decodes_to_the_same_bytes() {
        let body = json(40);
        let (codec, stored) = encode(body.clone(), BodyCompression::zstd());
        assert_eq!(codec, ZSTD);
        assert!(
            stored.len() * 2 < body.len(),
            "{} of {}",
            stored.len(),
            body.len()
        );
        assert_eq!(decode(codec, &stored).unwrap(), body);
    }

    #[test]
    fn small_incompressible_or_unwanted_bodies_are_stored_as_received() {
        let small = json(1);
        assert!(small.len() < DEFAULT_MIN_BYTES);
        assert_eq!(encode(small.clone(), BodyCompression::zstd()), (RAW, small));
        // Random bytes do not shrink by an eighth.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8
            })
            .collect();
        let (codec, _) = encode(noise.clone(), BodyCompression::zstd());
        assert_eq!(codec, RAW);
        let big = json(40);
        assert_eq!(encode(big.clone(), BodyCompression::None), (RAW, big));
        // The threshold is inclusive.
        let at = json(40);
        let min_bytes = at.len();
        let c = BodyCompression::Zstd {
            min_bytes,
            level: 1,
        };
        assert_eq!(encode(at, c).0, ZSTD);
    }

    #[test]
    fn a_corrupt_frame_or_unknown_codec_is_a_clear_error() {
        let err = decode(ZSTD, b"not a zstd frame").unwrap_err();
        assert!(err.contains("does not decompress"), "{err}");
        let err = decode(7, b"{}").unwrap_err();
        assert!(err.contains("codec 7"), "{err}");
    }

    #[test]
    fn the_sql_function_returns_received_bytes_for_either_codec() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        register_sql_function(&conn).unwrap();
        let body = json(40);
        let (codec, stored) = encode(body.clone(), BodyCompression::zstd());
        let out: Vec<u8> = conn
            .query_row("SELECT switchboard_body(?1, ?2)", (codec, &stored), |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(out, body);
        let out: Vec<u8> = conn
            .query_row("SELECT switchboard_body(0, ?1)", [&body], |r| r.get(0))
            .unwrap();
        assert_eq!(out, body);
        let null: Option<Vec<u8>> = conn
            .query_row("SELECT switchboard_body(1, NULL)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(null, None);
        let err = conn
            .query_row("SELECT switchboard_body(1, X'0102')", [], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .unwrap_err();
        assert!(err.to_string().contains("does not decompress"), "{err}");
    }
}
