//! A pure, incremental parser of `text/event-stream` (the WHATWG HTML standard,
//! "Server-sent events", §9.2.6 "Interpreting an event stream"): bytes in, in chunks
//! split anywhere, events out.
//!
//! - One UTF-8 byte order mark at the very start of the stream is dropped.
//! - Lines end with CRLF, LF or CR (a CR at the end of a chunk and an LF at the start
//!   of the next are one line end). Lines are decoded as UTF-8 with replacement of
//!   invalid sequences, once whole, so a character split between chunks is intact.
//! - `:` starts a comment (ignored); `field: value` drops one space after the colon; a
//!   line without a colon is a field with an empty value.
//! - `data` appends its value and a LF to the data buffer; `event` sets the type; `id`
//!   sets the last event ID (ignored when it contains NUL; it persists across events,
//!   as a reconnect's `Last-Event-ID`); `retry` (ASCII digits only) sets the
//!   reconnection time; other fields are ignored.
//! - An empty line dispatches: nothing when the data buffer is empty, otherwise an
//!   event whose data is the buffer less its final LF and whose type is the buffer or
//!   `message`; the data and type buffers are then cleared.
//! - An event still being received when the stream ends is discarded.
//!
//! One bound is added: a line, or an event's data, longer than `max_event_bytes` is an
//! error, so a server cannot make the parser hold an unbounded buffer.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The type: the `event` field, or `message`.
    pub(crate) event: String,
    /// The `data` lines, joined with LF.
    pub(crate) data: String,
    /// The `id` field given within this event's lines, if any.
    pub(crate) id: Option<String>,
    /// The last event ID as of this event (set by this or an earlier event; empty for
    /// none): what a reconnect sends as `Last-Event-ID`.
    pub(crate) last_event_id: String,
}

/// The parser's state between chunks.
#[derive(Debug)]
pub(crate) struct SseParser {
    max_event_bytes: usize,
    /// The bytes of the line being received.
    line: Vec<u8>,
    /// How many bytes of a leading BOM were seen; `None` once past the start.
    bom: Option<usize>,
    /// The previous byte was a CR: an LF now ends nothing.
    after_cr: bool,
    data: String,
    event: String,
    id: Option<String>,
    last_event_id: String,
    retry_ms: Option<u64>,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

impl SseParser {
    /// A parser at the start of a stream, resuming after `last_event_id` (the
    /// `Last-Event-ID` sent, which events without an `id` of their own carry on).
    pub(crate) fn new(max_event_bytes: usize, last_event_id: &str) -> SseParser {
        SseParser {
            max_event_bytes,
            line: Vec::new(),
            bom: Some(0),
            after_cr: false,
            data: String::new(),
            event: String::new(),
            id: None,
            last_event_id: last_event_id.to_owned(),
            retry_ms: None,
        }
    }

    /// The reconnection time the stream last asked for (`retry:`), milliseconds.
    pub(crate) fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Takes the next chunk; returns the events it completed, in order. `Err` (a line
    /// or event over the bound) leaves the parser unusable: drop the connection.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut out = Vec::new();
        let mut bytes = chunk;
        if let Some(seen) = self.bom {
            let mut seen = seen;
            while seen < BOM.len() {
                match bytes.first() {
                    None => {
                        self.bom = Some(seen);
                        return Ok(out);
                    }
                    Some(&b) if b == BOM[seen] => {
                        seen += 1;
                        bytes = &bytes[1..];
                    }
                    Some(_) => {
                        // Not a BOM after all: what was held is the line's start.
                        self.line.extend_from_slice(&BOM[..seen]);
                        break;
                    }
                }
            }
            self.bom = None;
        }
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.push_line(bytes)?;
                    break;
                }
                Some(end) => {
                    self.push_line(&bytes[..end])?;
                    self.after_cr = bytes[end] == b'\r';
                    bytes = &bytes[end + 1..];
                    self.end_line(&mut out)?;
                }
            }
        }
        Ok(out)
    }

    fn push_line(&mut self, part: &[u8]) -> Result<(), String> {
        if self.line.len() + part.len() > self.max_event_bytes {
            return Err(format!(
                "a line of the event stream is over {} bytes",
                self.max_event_bytes
            ));
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    /// A whole line was received.
    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), String> {
        let bytes = std::mem::take(&mut self.line);
        if bytes.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let text = String::from_utf8_lossy(&bytes);
        if text.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    return Err(format!(
                        "an event's data is over {} bytes",
                        self.max_event_bytes
                    ));
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_owned());
                self.last_event_id = value.to_owned();
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry_ms = value.parse().ok();
            }
            _ => {}
        }
        Ok(())
    }

    /// An empty line: the event so far, if it has data.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let id = self.id.take();
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        out.push(SseEvent {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data,
            id,
            last_event_id: self.last_event_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str, id: Option<&str>, last: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(Into::into),
            last_event_id: last.into(),
        }
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new(1 << 20, "");
        chunks.iter().flat_map(|c| p.feed(c).unwrap()).collect()
    }

    /// A stream using every rule, and what it gives.
    const STREAM: &[u8] = b"\xEF\xBB\xBF: a comment\r\nretry: 2500\r\nid: 1\r\nevent: created\r\ndata: {\"a\":\r\ndata:1}\r\n\r\ndata: no id of its own\rdata:  two spaces\r\revent\ndata\n\nid: 3\ndata: caf\xC3\xA9 \xE2\x9C\x93\n\nid\ndata: x:y\n\ndata: half";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("created", "{\"a\":\n1}", Some("1"), "1"),
            ev("message", "no id of its own\n two spaces", None, "1"),
            ev("message", "", None, "1"),
            ev("message", "caf\u{e9} \u{2713}", Some("3"), "3"),
            ev("message", "x:y", Some(""), ""),
        ]
    }

    #[test]
    fn a_whole_stream_parses_per_the_standard() {
        let mut p = SseParser::new(1 << 20, "");
        assert_eq!(p.feed(STREAM).unwrap(), expected());
        assert_eq!(p.retry_ms(), Some(2500));
    }

    #[test]
    fn a_split_at_every_byte_changes_nothing() {
        for at in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(at);
            assert_eq!(parse_all(&[a, b]), expected(), "split at {at}");
        }
        for i in 0..STREAM.len() {
            for j in i..=STREAM.len() {
                let got = parse_all(&[&STREAM[..i], &STREAM[i..j], &STREAM[j..]]);
                assert_eq!(got, expected(), "splits at {i} and {j}");
            }
        }
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(parse_all(&bytes), expected(), "one byte at a time");
    }

    #[test]
    fn a_bom_is_dropped_only_at_the_start_and_only_whole() {
        assert_eq!(
            parse_all(&[b"\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\n"]),
            vec![ev("message", "a", None, "")],
            "a BOM later is part of a field name (ignored)"
        );
        assert_eq!(
            parse_all(&[b"\xEF\xBB", b"data: a\n\n"]),
            vec![],
            "two thirds of a BOM make a field name, not a data line"
        );
        assert_eq!(
            parse_all(&[b"\xEF", b"\xBB", b"\xBF", b"data: a\n\n"]),
            vec![ev("message", "a", None, "")]
        );
    }

    #[test]
    fn crlf_split_between_chunks_is_one_line_end() {
        assert_eq!(
            parse_all(&[b"data: a\r", b"\n\r", b"\ndata: b\r\r"]),
            vec![ev("message", "a", None, ""), ev("message", "b", None, "")]
        );
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched_and_the_resumed_id_carries_on() {
        let mut p = SseParser::new(1 << 20, "41");
        assert_eq!(
            p.feed(b"data: {\"n\":42}\n\nid: 43\ndata: {\"n\":")
                .unwrap(),
            vec![ev("message", "{\"n\":42}", None, "41")]
        );
    }

    #[test]
    fn ids_with_nul_and_bad_retries_are_ignored() {
        let mut p = SseParser::new(1 << 20, "");
        let got = p
            .feed(b"id: 1\n\nid: a\0b\nretry: 10x\nretry:\ndata: d\n\n")
            .unwrap();
        assert_eq!(got, vec![ev("message", "d", None, "1")]);
        assert_eq!(p.retry_ms(), None);
    }

    #[test]
    fn lines_and_data_are_bounded() {
        let mut p = SseParser::new(16, "");
        assert!(p.feed(b"data: 0123456789").unwrap().is_empty());
        assert!(p.feed(b"abcdef").unwrap_err().contains("line"));
        let mut p = SseParser::new(16, "");
        let err = p
            .feed(b"data: 0123456\ndata: 0123456\ndata: 0123456\n")
            .unwrap_err();
        assert!(err.contains("data"), "{err}");
    }
}
