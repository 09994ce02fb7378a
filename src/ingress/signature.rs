//! Webhook signature schemes, one function per provider rule, with no I/O and no
//! clock: headers come in through [`Headers`], the current time as `now_unix`.
//!
//! Every scheme accepts a list of secrets (rotation: any one verifies), compares
//! signatures in constant time, and refuses with a [`Rejection`] whose
//! [`Rejection::reason`] is a stable label for per-source counters. Secrets never
//! appear in a rejection's text.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Read access to request headers, case-insensitively.
pub trait Headers {
    /// The value of header `name` (any case), if present and valid UTF-8.
    fn header(&self, name: &str) -> Option<&str>;
}

impl Headers for [(&str, &str)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

impl<const N: usize> Headers for [(&str, &str); N] {
    fn header(&self, name: &str) -> Option<&str> {
        self.as_slice().header(name)
    }
}

/// Why a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A required header is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header or field is present but unreadable.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// Which header or field.
        what: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// No configured secret produces the signature.
    #[error("signature does not match any configured secret")]
    BadSignature,
    /// The signed timestamp is older than the tolerance.
    #[error("timestamp is {age_s} s old; the tolerance is {tolerance_s} s")]
    Stale {
        /// Age of the timestamp.
        age_s: i64,
        /// The tolerance.
        tolerance_s: i64,
    },
    /// The signed timestamp is further in the future than the tolerance.
    #[error("timestamp is {ahead_s} s in the future; the tolerance is {tolerance_s} s")]
    Future {
        /// How far ahead.
        ahead_s: i64,
        /// The tolerance.
        tolerance_s: i64,
    },
}

impl From<Rejection> for crate::inbound::Refusal {
    /// The refusal a sender gets: 400 for a header it sent unreadable, 401 for the
    /// rest (absent, wrong or stale signatures), with [`Rejection::reason`] as its
    /// label and the rejection's text as its detail.
    fn from(r: Rejection) -> Self {
        let status = match r {
            Rejection::Malformed { .. } => 400,
            _ => 401,
        };
        crate::inbound::Refusal::new(status, r.reason(), r.to_string())
    }
}

impl Rejection {
    /// A stable label for counters and the audit table.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::MissingHeader(_) => "missing_header",
            Rejection::Malformed { .. } => "malformed",
            Rejection::BadSignature => "bad_signature",
            Rejection::Stale { .. } => "stale_timestamp",
            Rejection::Future { .. } => "future_timestamp",
        }
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// True when `expected` equals one of the candidate MACs, in constant time per
/// comparison (a length mismatch is not secret).
fn any_matches(secrets: &[&[u8]], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    let mut ok = subtle::Choice::from(0);
    for secret in secrets {
        let want = mac(secret, parts);
        for c in candidates {
            if c.len() == want.len() {
                ok |= want.ct_eq(c);
            }
        }
    }
    ok.into()
}

/// `Ok` when one secret's MAC over `parts` equals one of `candidates`.
fn verify(secrets: &[&[u8]], parts: &[&[u8]], candidates: &[Vec<u8>]) -> Result<(), Rejection> {
    if any_matches(secrets, parts, candidates) {
        Ok(())
    } else {
        Err(Rejection::BadSignature)
    }
}

fn require<'a>(h: &'a (impl Headers + ?Sized), name: &'static str) -> Result<&'a str, Rejection> {
    h.header(name).ok_or(Rejection::MissingHeader(name))
}

fn hex_decode(what: &'static str, s: &str) -> Result<Vec<u8>, Rejection> {
    let bad = |why: &str| Rejection::Malformed {
        what,
        why: why.to_owned(),
    };
    if s.len() % 2 != 0 {
        return Err(bad("odd number of hex digits"));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(bad("not hexadecimal")),
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Checks `ts` (unix seconds) against `now_unix` within `tolerance_s` either way.
pub(crate) fn check_timestamp(ts: i64, now_unix: i64, tolerance_s: i64) -> Result<(), Rejection> {
    // Saturating: a sender's i64::MIN must read as very old, not overflow.
    let delta = now_unix.saturating_sub(ts);
    if delta > tolerance_s {
        return Err(Rejection::Stale {
            age_s: delta,
            tolerance_s,
        });
    }
    if delta.saturating_neg() > tolerance_s {
        return Err(Rejection::Future {
            ahead_s: delta.saturating_neg(),
            tolerance_s,
        });
    }
    Ok(())
}

fn parse_ts(what: &'static str, s: &str) -> Result<i64, Rejection> {
    s.trim().parse().map_err(|_| Rejection::Malformed {
        what,
        why: format!("{s:?} is not an integer"),
    })
}

/// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`.
pub fn github(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
) -> Result<(), Rejection> {
    prefixed_hex_body(secrets, h, body, "X-Hub-Signature-256", "sha256=")
}

/// Notion: `X-Notion-Signature: sha256=<hex HMAC(verification_token, body)>`; the key is
/// the `verification_token` Notion sent in its first, unsigned request.
pub(crate) fn notion(
    verification_tokens: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
) -> Result<(), Rejection> {
    prefixed_hex_body(
        verification_tokens,
        h,
        body,
        "X-Notion-Signature",
        "sha256=",
    )
}

/// How a generic HMAC header encodes the MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MacEncoding {
    /// Lower- or upper-case hexadecimal.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

/// Generic HMAC-SHA256 of the raw body in `header`, after an optional `prefix`
/// (e.g. `sha256=`), encoded as hex or base64.
pub(crate) fn generic_header(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
    header: &'static str,
    prefix: &str,
    encoding: MacEncoding,
) -> Result<(), Rejection> {
    let given = strip_and_decode(header, require(h, header)?, prefix, encoding)?;
    verify(secrets, &[body], &[given])
}

/// The canonical `Authorization: HMAC-SHA256 timestamp=<unix>,signature=<hex>` form.
///
/// The signed string is `"{METHOD}\n{path}\n{timestamp}\n{hex SHA-256 of the body}"`
/// (method upper-case, path as received including any query). Binding method and path
/// stops a captured signature from being replayed against another endpoint; hashing
/// the body keeps the signed string small.
pub(crate) fn canonical_authorization(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    method: &str,
    path: &str,
    body: &[u8],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<(), Rejection> {
    use sha2::Digest as _;
    let auth = require(h, "Authorization")?;
    let malformed = |why: &str| Rejection::Malformed {
        what: "Authorization",
        why: why.to_owned(),
    };
    let params = auth
        .strip_prefix("HMAC-SHA256 ")
        .ok_or_else(|| malformed("expected the scheme HMAC-SHA256"))?;
    let (mut ts, mut sig) = (None, None);
    for item in params.split(',') {
        match item.trim().split_once('=') {
            Some(("timestamp", v)) => ts = Some(v),
            Some(("signature", v)) => sig = Some(v),
            _ => {}
        }
    }
    let ts_text = ts.ok_or_else(|| malformed("no timestamp="))?;
    let given = hex_decode(
        "Authorization",
        sig.ok_or_else(|| malformed("no signature="))?,
    )?;
    check_timestamp(
        parse_ts("Authorization timestamp", ts_text)?,
        now_unix,
        tolerance_s,
    )?;
    let body_hash = hex_encode(&sha2::Sha256::digest(body));
    let method = method.to_ascii_uppercase();
    let parts: [&[u8]; 7] = [
        method.as_bytes(),
        b"\n",
        path.as_bytes(),
        b"\n",
        ts_text.as_bytes(),
        b"\n",
        body_hash.as_bytes(),
    ];
    verify(secrets, &parts, &[given])
}

/// Strips `prefix` from a signature header's value and decodes the MAC.
fn strip_and_decode(
    header: &'static str,
    value: &str,
    prefix: &str,
    encoding: MacEncoding,
) -> Result<Vec<u8>, Rejection> {
    let value = value
        .strip_prefix(prefix)
        .ok_or_else(|| Rejection::Malformed {
            what: header,
            why: format!("expected the prefix {prefix:?}"),
        })?;
    match encoding {
        MacEncoding::Hex => hex_decode(header, value),
        MacEncoding::Base64 => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|e| Rejection::Malformed {
                    what: header,
                    why: e.to_string(),
                })
        }
    }
}

fn prefixed_hex_body(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
    header: &'static str,
    prefix: &str,
) -> Result<(), Rejection> {
    generic_header(secrets, h, body, header, prefix, MacEncoding::Hex)
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Slack: `X-Slack-Signature: v0=<hex HMAC(secret, "v0:{ts}:{body}")>` with
/// `X-Slack-Request-Timestamp` within `tolerance_s` (Slack says 5 minutes).
pub(crate) fn slack(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<(), Rejection> {
    let ts_text = require(h, "X-Slack-Request-Timestamp")?;
    let sig = require(h, "X-Slack-Signature")?;
    let ts = parse_ts("X-Slack-Request-Timestamp", ts_text)?;
    check_timestamp(ts, now_unix, tolerance_s)?;
    let given = strip_and_decode("X-Slack-Signature", sig, "v0=", MacEncoding::Hex)?;
    let parts: [&[u8]; 4] = [b"v0:", ts_text.as_bytes(), b":", body];
    verify(secrets, &parts, &[given])
}

/// Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]` over `"{t}.{body}"`; the
/// key is the `whsec_…` string as-is. Any `v1` may match (Stripe sends one per active
/// secret while rolling).
pub(crate) fn stripe(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<(), Rejection> {
    let header = require(h, "Stripe-Signature")?;
    let mut t = None;
    let mut v1 = Vec::new();
    for item in header.split(',') {
        match item.trim().split_once('=') {
            Some(("t", v)) => t = Some(v),
            Some(("v1", v)) => v1.push(hex_decode("Stripe-Signature", v)?),
            _ => {}
        }
    }
    let t_text = t.ok_or_else(|| Rejection::Malformed {
        what: "Stripe-Signature",
        why: "no t= element".into(),
    })?;
    if v1.is_empty() {
        return Err(Rejection::Malformed {
            what: "Stripe-Signature",
            why: "no v1= signature".into(),
        });
    }
    check_timestamp(
        parse_ts("Stripe-Signature t", t_text)?,
        now_unix,
        tolerance_s,
    )?;
    verify(secrets, &[t_text.as_bytes(), b".", body], &v1)
}

/// Standard Webhooks (and Svix's `svix-*` names): `webhook-id`, `webhook-timestamp`,
/// `webhook-signature` (space-separated `v1,<base64>`) over `"{id}.{ts}.{body}"`; the key
/// is the base64 after `whsec_`. Returns the message id (the dedupe key).
pub fn standard_webhooks<'h>(
    secrets: &[&str],
    h: &'h (impl Headers + ?Sized),
    body: &[u8],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<&'h str, Rejection> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let pick = |std: &'static str, svix: &'static str| {
        h.header(std)
            .or_else(|| h.header(svix))
            .ok_or(Rejection::MissingHeader(std))
    };
    let id = pick("webhook-id", "svix-id")?;
    let ts_text = pick("webhook-timestamp", "svix-timestamp")?;
    let sigs = pick("webhook-signature", "svix-signature")?;
    check_timestamp(
        parse_ts("webhook-timestamp", ts_text)?,
        now_unix,
        tolerance_s,
    )?;
    let candidates: Vec<Vec<u8>> = sigs
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|s| b64.decode(s).ok())
        .collect();
    let keys = secrets
        .iter()
        .map(|s| {
            b64.decode(s.strip_prefix("whsec_").unwrap_or(s))
                .map_err(|_| Rejection::Malformed {
                    what: "configured secret",
                    why: "not base64 after whsec_".into(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let parts: [&[u8]; 5] = [id.as_bytes(), b".", ts_text.as_bytes(), b".", body];
    verify(&keys, &parts, &candidates).map(|()| id)
}

/// Linear: `Linear-Signature` = hex HMAC-SHA256 of the raw body. (The freshness check
/// on the body's `webhookTimestamp` is the caller's, with [`check_timestamp`].)
pub(crate) fn linear(
    secrets: &[&[u8]],
    h: &(impl Headers + ?Sized),
    body: &[u8],
) -> Result<(), Rejection> {
    let given = hex_decode("Linear-Signature", require(h, "Linear-Signature")?)?;
    verify(secrets, &[body], &[given])
}

#[cfg(test)]
mod tests;
