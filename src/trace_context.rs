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

/// The trace id of `header` when it is a valid `traceparent` (module doc), else `None`.
pub(crate) fn traceparent_trace_id(header: &str) -> Option<u128> {
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
    let parent_id = lower_hex(&fixed[36..52])?;
    lower_hex(&fixed[53..55])?;
    (trace_id != 0 && parent_id != 0).then_some(trace_id)
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
}
