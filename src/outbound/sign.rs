//! Signing per Standard Webhooks (<https://www.standardwebhooks.com>), the inverse of
//! the verifier `ingress::signature::standard_webhooks`: three headers,
//! `webhook-id`, `webhook-timestamp` (unix seconds) and `webhook-signature`, the last
//! holding `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` once per secret,
//! space-separated, so a receiver rotating its secret verifies with either.
//!
//! Why Standard Webhooks: it is what webhook senders converge on (Svix, and libraries
//! in every language verify it), so a receiver needs no switchboard-specific code.
//! The id is derived from the delivery (event and binding), not drawn per attempt,
//! because the spec tells receivers to deduplicate on it: every retry of one outbox
//! row carries the same id.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256};

use crate::secret::Secret;

/// The header names, lower case as HTTP/2 requires.
pub(crate) const HEADER_ID: &str = "webhook-id";
/// See [`HEADER_ID`].
pub(crate) const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// See [`HEADER_ID`].
pub(crate) const HEADER_SIGNATURE: &str = "webhook-signature";

/// The prefix of a Standard Webhooks secret; the rest is the key in base64.
const SECRET_PREFIX: &str = "whsec_";

/// One signing key, decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Secret);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey([redacted])")
    }
}

impl SigningKey {
    /// A key from its text as Standard Webhooks writes it: `whsec_` and the key in
    /// base64 (the prefix is optional, as the reference libraries accept it without).
    /// The error never quotes the secret.
    pub fn parse(text: &str) -> Result<SigningKey, String> {
        let b64 = text.trim();
        let b64 = b64.strip_prefix(SECRET_PREFIX).unwrap_or(b64);
        let key = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| {
                "is not a Standard Webhooks secret (whsec_ followed by the key in base64)"
                    .to_owned()
            })?;
        if key.is_empty() {
            return Err("holds an empty key".into());
        }
        Ok(SigningKey(Secret::new(key)))
    }

    /// The raw key bytes.
    fn bytes(&self) -> &[u8] {
        self.0.expose()
    }
}

/// The `webhook-id` of the delivery of `event_id` to `binding_id`: `msg_` and 32 hex
/// digits of SHA-256 over both, the same for every attempt of that delivery and
/// different for any other pair (a dead-letter handler's delivery of the same event
/// has its own). Hashed rather than concatenated so it is short, header-safe whatever
/// the ids hold, and says nothing about them.
pub fn message_id(event_id: &str, binding_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(event_id.as_bytes());
    h.update([0]);
    h.update(binding_id.as_bytes());
    let digest = h.finalize();
    let mut id = String::with_capacity(36);
    id.push_str("msg_");
    for b in &digest[..16] {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// The `webhook-signature` value for `body` sent as message `id` at `timestamp`
/// (unix seconds): one `v1,<base64>` per key, space-separated, in the keys' order.
pub(crate) fn signature(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mut out = String::with_capacity(keys.len() * 48);
    for key in keys {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(key.bytes()).expect("HMAC takes keys of any length");
        for part in [id.as_bytes(), b".", ts.as_bytes(), b".", body] {
            mac.update(part);
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("v1,");
        base64::engine::general_purpose::STANDARD
            .encode_string(mac.finalize().into_bytes(), &mut out);
    }
    out
}

/// The three headers for `body` sent as message `id` at `timestamp`.
pub(crate) fn headers(
    keys: &[SigningKey],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> [(&'static str, String); 3] {
    [
        (HEADER_ID, id.to_owned()),
        (HEADER_TIMESTAMP, timestamp.to_string()),
        (HEADER_SIGNATURE, signature(keys, id, timestamp, body)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification and its reference libraries'
    /// tests (also the verifier's test vector in `ingress::signature`).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const EXPECTED: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn it_signs_the_specifications_example_as_the_reference_libraries_do() {
        let key = SigningKey::parse(SECRET).unwrap();
        assert_eq!(signature(&[key], ID, TS, BODY), EXPECTED);
        let bare = SigningKey::parse(SECRET.trim_start_matches("whsec_")).unwrap();
        assert_eq!(signature(&[bare], ID, TS, BODY), EXPECTED);
    }

    #[test]
    fn several_keys_give_space_separated_signatures_in_order() {
        let old = SigningKey::parse("whsec_b2xkLXNlY3JldA==").unwrap();
        let new = SigningKey::parse(SECRET).unwrap();
        let sig = signature(&[new, old.clone()], ID, TS, BODY);
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], EXPECTED);
        assert_eq!(parts[1], signature(&[old], ID, TS, BODY));
    }

    #[test]
    fn a_malformed_secret_is_refused_without_quoting_it() {
        let e = SigningKey::parse("whsec_not*base64").unwrap_err();
        assert!(!e.contains("not*base64"), "{e}");
        assert!(SigningKey::parse("whsec_").is_err());
        assert!(!format!("{:?}", SigningKey::parse(SECRET).unwrap()).contains("MfKQ"));
    }

    #[test]
    fn the_message_id_is_stable_per_delivery_and_differs_between_deliveries() {
        let a = message_id("evt_1", "hook");
        assert_eq!(a, message_id("evt_1", "hook"));
        assert_ne!(a, message_id("evt_1", "hook2"));
        assert_ne!(a, message_id("evt_2", "hook"));
        // No ambiguity from concatenation.
        assert_ne!(message_id("ab", "c"), message_id("a", "bc"));
        assert!(a.starts_with("msg_") && a.len() == 36, "{a}");
    }

    #[test]
    fn headers_carry_the_id_the_timestamp_and_the_signature() {
        let key = SigningKey::parse(SECRET).unwrap();
        let h = headers(&[key], ID, TS, BODY);
        assert_eq!(h[0], ("webhook-id", ID.to_owned()));
        assert_eq!(h[1], ("webhook-timestamp", "1614265330".to_owned()));
        assert_eq!(h[2], ("webhook-signature", EXPECTED.to_owned()));
    }
}
