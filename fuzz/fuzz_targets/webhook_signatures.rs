//! Untrusted signature headers: every provider rule must refuse garbage with a
//! `Rejection`, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::webhooks::signature::{canonical_authorization, github, slack, standard_webhooks, stripe};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (header, body) = text.split_once('\n').unwrap_or((text, ""));
    let body = body.as_bytes();
    let k: &[&[u8]] = &[b"k"];
    let _ = github(k, &[("X-Hub-Signature-256", header)], body);
    let _ = slack(k, &[("X-Slack-Request-Timestamp", header), ("X-Slack-Signature", header)], body, 0, 300);
    let _ = stripe(k, &[("Stripe-Signature", header)], body, 0, 300);
    let _ = canonical_authorization(k, &[("Authorization", header)], "POST", "/", body, 0, 300);
    let hs = [("webhook-id", header), ("webhook-timestamp", header), ("webhook-signature", header)];
    let _ = standard_webhooks(&["whsec_a2V5"], &hs, body, 0, 300);
});
