//! Helpers the fuzz targets share: signing a delivery as each provider rule expects,
//! so that a target reaches what a rule does *after* the signature (body parsing,
//! timestamps, classification) instead of stopping at `bad_signature` every time.
#![allow(dead_code)]

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The signing secret every source of the targets' configurations resolves to.
pub const SECRET: &str = "whsec_a2V5";
/// The Standard Webhooks key inside [`SECRET`]: base64 `a2V5`.
pub const STANDARD_WEBHOOKS_KEY: &[u8] = b"key";
/// The Notion verification token the targets pretend was captured.
pub const NOTION_TOKEN: &str = "tok";
/// The receive time of every delivery, Unix milliseconds.
pub const NOW_MS: i64 = 1_700_000_000_000;
/// [`NOW_MS`] in seconds, as text: a fresh timestamp for every rule.
pub const NOW_S: &str = "1700000000";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The headers that make `body` a correctly signed, fresh delivery for a source of
/// `provider` (its rule's label) keyed with [`SECRET`]; `generic_header` names the
/// header of a `generic_hmac` source with the header scheme (hex, no prefix), `None`
/// for the canonical Authorization scheme. Empty for a rule without a signature.
pub fn sign(
    provider: &str,
    generic_header: Option<&'static str>,
    method: &str,
    path: &str,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let key = SECRET.as_bytes();
    match provider {
        "github" => vec![(
            "X-Hub-Signature-256",
            format!("sha256={}", hex(&mac(key, &[body]))),
        )],
        "linear" => vec![("Linear-Signature", hex(&mac(key, &[body])))],
        "notion" => vec![(
            "X-Notion-Signature",
            format!("sha256={}", hex(&mac(NOTION_TOKEN.as_bytes(), &[body]))),
        )],
        "slack" => vec![
            ("X-Slack-Request-Timestamp", NOW_S.to_owned()),
            (
                "X-Slack-Signature",
                format!(
                    "v0={}",
                    hex(&mac(key, &[b"v0:", NOW_S.as_bytes(), b":", body]))
                ),
            ),
        ],
        "stripe" => vec![(
            "Stripe-Signature",
            format!(
                "t={NOW_S},v1={}",
                hex(&mac(key, &[NOW_S.as_bytes(), b".", body]))
            ),
        )],
        "standard_webhooks" => vec![
            ("webhook-id", "msg_1".to_owned()),
            ("webhook-timestamp", NOW_S.to_owned()),
            (
                "webhook-signature",
                format!(
                    "v1,{}",
                    base64(&mac(
                        STANDARD_WEBHOOKS_KEY,
                        &[b"msg_1", b".", NOW_S.as_bytes(), b".", body]
                    ))
                ),
            ),
        ],
        "generic_hmac" => match generic_header {
            Some(h) => vec![(h, hex(&mac(key, &[body])))],
            None => {
                let digest = hex(&Sha256::digest(body));
                let signed = format!("{}\n{path}\n{NOW_S}\n{digest}", method.to_uppercase());
                vec![(
                    "Authorization",
                    format!(
                        "HMAC-SHA256 timestamp={NOW_S},signature={}",
                        hex(&mac(key, &[signed.as_bytes()]))
                    ),
                )]
            }
        },
        _ => Vec::new(),
    }
}
