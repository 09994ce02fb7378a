//! Header redaction for everything that is stored, logged or shown by the admin API.
//!
//! A header whose name contains any of [`SENSITIVE`] (case-insensitively) keeps its name
//! and loses its value: operators still see that a signature or token was sent, never
//! what it was. Matching on substrings errs on the side of hiding (`x-api-token`,
//! `set-cookie`, `x-hub-signature-256` are all caught).

use std::collections::BTreeMap;

/// Substrings that make a header sensitive.
pub(crate) const SENSITIVE: [&str; 6] = [
    "authorization",
    "cookie",
    "secret",
    "token",
    "signature",
    "api-key",
];

/// What a redacted value becomes.
pub(crate) const REDACTED: &str = "[redacted]";

/// Whether a header of this name must not be stored or shown. Compared in place,
/// ignoring ASCII case: it runs for every header of every delivery, so it copies
/// nothing.
pub(crate) fn is_sensitive(name: &str) -> bool {
    let name = name.as_bytes();
    SENSITIVE.iter().any(|s| {
        name.windows(s.len())
            .any(|w| w.eq_ignore_ascii_case(s.as_bytes()))
    })
}

/// Lower-cases names and blanks sensitive values.
pub(crate) fn redact_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    headers
        .into_iter()
        .map(|(k, v)| {
            let value = if is_sensitive(k) { REDACTED } else { v };
            (k.to_ascii_lowercase(), value.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_signatures_are_blanked_and_the_rest_kept() {
        let out = redact_headers([
            ("Authorization", "Bearer abc"),
            ("Cookie", "s=1"),
            ("X-Hub-Signature-256", "sha256=ff"),
            ("X-Slack-Signature", "v0=aa"),
            ("X-Api-Token", "t"),
            ("X-Client-Secret", "s"),
            ("X-API-Key", "k"),
            ("Content-Type", "application/json"),
            ("X-GitHub-Delivery", "72d3162e"),
        ]);
        for k in [
            "authorization",
            "cookie",
            "x-hub-signature-256",
            "x-slack-signature",
            "x-api-token",
            "x-client-secret",
            "x-api-key",
        ] {
            assert_eq!(out[k], REDACTED, "{k}");
        }
        assert_eq!(out["content-type"], "application/json");
        assert_eq!(out["x-github-delivery"], "72d3162e");
    }
}
