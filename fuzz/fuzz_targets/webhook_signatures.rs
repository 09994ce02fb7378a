//! Untrusted signature headers: the public provider rules (`github`,
//! `standard_webhooks`) must refuse garbage with a `Rejection`, never panic, and a
//! refusal's text must never echo the secret.
//!
//! Why: these run on every delivery before anything else, on headers anyone can send.
//! The other rules (Slack, Stripe, Linear, Notion, generic HMAC, the canonical
//! Authorization form) are `pub(crate)` and are reached through the whole decision in
//! the `ingest_decision` target.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::__private::ingress::signature::{github, standard_webhooks};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (header, body) = text.split_once('\n').unwrap_or((text, ""));
    let body = body.as_bytes();
    // A refusal may quote the header it could not read, so the secret is looked
    // for only where the input did not bring it along.
    let echoes = |r: &dyn std::fmt::Display, secret: &str| {
        !text.contains(secret) && r.to_string().contains(secret)
    };
    let k: &[&[u8]] = &[b"s3cr3t-key"];
    if let Err(r) = github(k, &[("X-Hub-Signature-256", header)], body) {
        let _ = r.reason();
        assert!(!echoes(&r, "s3cr3t-key"), "{r}");
    }
    let hs = [
        ("webhook-id", header),
        ("webhook-timestamp", header),
        ("webhook-signature", header),
    ];
    for (now, tolerance) in [(0, 300), (i64::MAX, i64::MAX), (i64::MIN, 0)] {
        if let Err(r) = standard_webhooks(&["whsec_a2V5"], &hs, body, now, tolerance) {
            let _ = r.reason();
            assert!(!echoes(&r, "a2V5"), "{r}");
        }
    }
});
