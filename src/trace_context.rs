//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): reading a sender's
//! `traceparent`, so that the trace a sender started continues through ingress
//! instead of being replaced, and a malformed header is ignored rather than trusted.
//!
//! A decision core in the crate's sense: a plain function of a string. The rules are
//! the Recommendation's for a receiver: `traceparent` is
//! `version-traceid-parentid-flags` in lower-case hex. Version `ff` is invalid;
//! version `00` is exactly 55 characters; a later version may append fields after a
//! `-`, which are ignored (its first four fields are read as `00`'s). A trace id or
//! parent id of all zeros is invalid, and so is upper-case hex (the spec allows lower
//! case only) and anything that does not parse: a receiver then ignores the header and
//! starts a trace of its own, and never fails the request over it.
#![cfg_attr(not(feature = "runtime"), allow(dead_code))]

/// A `traceparent`'s fields: the trace, the span that is the parent of whatever the
/// holder does next, and the trace flags (bit 0: sampled).
///
/// What each hop passes on: ingress stores the context it created an event under, the
/// dispatcher derives each attempt's context from it, and the execute context carries
/// the attempt's to the connector (PROTOCOL.md leaves unknown context keys alone, so a
/// peer SDK that knows nothing of it still works).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceParent {
    /// The trace id; never zero.
    pub(crate) trace_id: u128,
    /// The parent span's id; never zero.
    pub(crate) parent_id: u64,
    /// The trace flags; only the sampled bit is kept when written out (the
    /// Recommendation's version 00 defines no other).
    pub(crate) flags: u8,
}

impl TraceParent {
    /// `header` as a `traceparent` when valid (module doc), else `None`.
    pub(crate) fn parse(header: &str) -> Option<Self> {
        let h = header.trim_matches(|c| c == ' ' || c == '\t');
        let version = lower_hex(h.get(0..2)?)?;
        if version == 0xff || h.as_bytes().get(2) != Some(&b'-') {
            return None;
        }
        let fixed = h.get(..55)?;
        match (version, h.as_bytes().get(55)) {
            (_, None) | (1.., Some(b'-')) => {}
            _ => return None,
        }
        let b = fixed.as_bytes();
        // ASCII first: the slices below are byte ranges.
        if !fixed.is_ascii() || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let trace_id = lower_hex(&fixed[3..35])?;
        let parent_id = u64::try_from(lower_hex(&fixed[36..52])?).ok()?;
        let flags = u8::try_from(lower_hex(&fixed[53..55])?).ok()?;
        (trace_id != 0 && parent_id != 0).then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The version-00 header: `00-<trace id>-<parent id>-<flags>`.
    pub(crate) fn header(self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(55);
        let _ = write!(
            out,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.parent_id,
            self.flags & 1
        );
        out
    }

    /// The trace id as 32 lower-case hex digits (how stores, the console and the
    /// execute context's `switchboard.trace_id` spell it).
    pub(crate) fn trace_id_hex(self) -> String {
        format!("{:032x}", self.trace_id)
    }
}

/// The trace id of `header` when it is a valid `traceparent` (module doc), else `None`.
pub(crate) fn traceparent_trace_id(header: &str) -> Option<u128> {
    TraceParent::parse(header).map(|t| t.trace_id)
}

/// `header` trimmed when it is a `tracestate` a receiver may pass on, else `None`:
/// at most 32 comma-separated `key=value` members (empty members are allowed and
/// dropped by nobody here), keys lower-case `[a-z0-9_*/-]` (with one `@` for a
/// multi-tenant key) starting with a letter or digit, values of printable ASCII
/// without `,` and `=` not ending in a space, at most 512 characters in all (the
/// Recommendation lets a receiver truncate above that; this one keeps none). A
/// `tracestate` is only meaningful beside a valid `traceparent`; the caller checks that.
pub(crate) fn tracestate(header: &str) -> Option<&str> {
    let h = header.trim_matches(|c| c == ' ' || c == '\t');
    if h.is_empty() || h.len() > 512 {
        return None;
    }
    let mut members = 0;
    for member in h.split(',') {
        let member = member.trim_matches(|c| c == ' ' || c == '\t');
        if member.is_empty() {
            continue;
        }
        members += 1;
        let (key, value) = member.split_once('=')?;
        if members > 32 || !valid_key(key) || !valid_value(value) {
            return None;
        }
    }
    (members > 0).then_some(h)
}

fn valid_key(key: &str) -> bool {
    let simple = |k: &str, max: usize| {
        let b = k.as_bytes();
        !b.is_empty()
            && b.len() <= max
            && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/".contains(c))
    };
    match key.split_once('@') {
        None => simple(key, 256),
        Some((tenant, system)) => simple(tenant, 241) && simple(system, 14),
    }
}

fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

/// `s` as a number when it is all lower-case hex digits (at most 32 of them).
fn lower_hex(s: &str) -> Option<u128> {
    let ok = !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    if ok {
        u128::from_str_radix(s, 16).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const ID: u128 = 0x4bf92f3577b34da6a3ce929d0e0e4736;

    #[test]
    fn a_valid_traceparent_gives_its_trace_id_with_or_without_surrounding_whitespace() {
        assert_eq!(traceparent_trace_id(TP), Some(ID));
        assert_eq!(traceparent_trace_id(&format!(" {TP}\t")), Some(ID));
    }

    #[test]
    fn a_later_version_is_read_by_its_first_four_fields() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-ever";
        assert_eq!(traceparent_trace_id(later), Some(ID));
        assert_eq!(traceparent_trace_id(&format!("cc{}", &TP[2..])), Some(ID));
        // A later version's extra fields must follow a dash.
        assert_eq!(traceparent_trace_id(&format!("cc{}x", &TP[2..])), None);
    }

    #[test]
    fn anything_the_recommendation_calls_invalid_is_ignored() {
        for bad in [
            "",
            "00",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // 00 is exact
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", // dash misplaced
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", // flags not hex
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-\u{e9}",
            "00-\u{e9}bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", // a char astride a field
            "00-4bf92f3577b34da6a3ce929d0e0e473\u{e9}00f067aa0ba902b7-0",
        ] {
            assert_eq!(traceparent_trace_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_context_parses_and_writes_back() {
        let t = TraceParent::parse(TP).unwrap();
        assert_eq!(
            (t.trace_id, t.parent_id, t.flags),
            (ID, 0x00f067aa0ba902b7, 1)
        );
        assert_eq!(t.header(), TP);
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        // Unknown flag bits are not passed on by a version-00 writer.
        let odd = TraceParent::parse(&format!("{}ff", &TP[..53])).unwrap();
        assert_eq!(&odd.header()[53..], "01");
        let unsampled = TraceParent::parse(&format!("{}00", &TP[..53])).unwrap();
        assert_eq!(unsampled.flags, 0);
    }

    #[test]
    fn tracestate_keeps_valid_lists_and_drops_broken_ones() {
        assert_eq!(tracestate("congo=t61rcWkgMzE"), Some("congo=t61rcWkgMzE"));
        assert_eq!(
            tracestate(" rojo=00f067aa0ba902b7, congo=t61rcWkgMzE ,"),
            Some("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE ,")
        );
        assert_eq!(tracestate("t@vendor=x"), Some("t@vendor=x"));
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        let long = format!("k={}", "v".repeat(600));
        for bad in [
            "",
            "   ",
            "novalue",
            "Upper=x",
            "k=",
            "k=a,b=",
            "k=v=w",
            "@v=x",
            "k=é",
            many.as_str(),
            long.as_str(),
        ] {
            assert_eq!(tracestate(bad), None, "{bad:?}");
        }
    }
}
