//! The whole ingest decision on untrusted deliveries (`ingress::ingest::decide`, what
//! the listener runs for every `POST /hooks/{source}`): for every provider rule, any
//! headers and body must produce an answer, never a panic, and never a 5xx (a
//! sender's garbage is the sender's fault).
//!
//! Why: this is the runtime's internet-facing parser. Half of the inputs are signed by
//! the harness with the source's real secret (`common::sign`), so the fuzzer also
//! reaches what each rule does after the signature: JSON bodies, provider
//! timestamps, classification, dedupe keys and the Notion handshake.
#![no_main]

mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use switchboard::__private::ingress::ingest::decide_status;
use switchboard::ResolvedConfig;

const SOURCES: &str = r#"
[[sources]]
id = "gh"
provider = "github"
secret_env = "K"
[[sources]]
id = "slack"
provider = "slack"
secret_env = "K"
[[sources]]
id = "linear"
provider = "linear"
secret_env = "K"
[[sources]]
id = "notion"
provider = "notion"
[[sources]]
id = "stripe"
provider = "stripe"
secret_env = "K"
[[sources]]
id = "sw"
provider = "standard_webhooks"
secret_env = "K"
[[sources]]
id = "generic"
provider = "generic_hmac"
secret_env = "K"
header = "X-Sig"
require_json = false
kind_pointer = "/type"
[[sources]]
id = "canonical"
provider = "generic_hmac"
secret_env = "K"
scheme = "authorization"
dedupe_header = "X-Id"
"#;

const METHOD: &str = "POST";
const PATH: &str = "/hooks/x";

fn config() -> &'static ResolvedConfig {
    static CONFIG: OnceLock<ResolvedConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let config = switchboard::RuntimeConfig::from_toml(SOURCES)
            .expect("the target's sources parse")
            .resolve_with(|_| Some(common::SECRET.into()))
            .expect("the target's sources resolve");
        // The harness's signatures must verify, or half the inputs test nothing.
        for spec in &config.sources {
            let h = signed(&spec.id, spec.provider.as_str(), b"{}");
            let headers: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let (_, reason) = decide_status(
                spec,
                Some(common::NOTION_TOKEN),
                METHOD,
                PATH,
                &headers,
                b"{}",
                common::NOW_MS,
            );
            assert_ne!(reason, "bad_signature", "the harness signs for {}", spec.id);
        }
        config
    })
}

/// The signature headers of `body` for the source `id`.
fn signed(id: &str, provider: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    let generic = (id == "generic").then_some("X-Sig");
    let mut h = common::sign(provider, generic, METHOD, PATH, body);
    if id == "canonical" {
        h.push(("X-Id", "d1".into()));
    }
    h
}

fuzz_target!(|data: &[u8]| {
    // Layout: one flags byte (bit 0: sign), header lines "name: value" up to a blank
    // line, then the body.
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let split = data
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(data.len());
    let (head, body) = data.split_at(split);
    let body = body.get(2..).unwrap_or(&[]);
    let head = String::from_utf8_lossy(head);
    let given: Vec<(&str, &str)> = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    for spec in &config().sources {
        // The harness's signature goes first: a header is looked up by its first
        // occurrence, so the fuzzer's own lines add to it without replacing it.
        let sig = if flags & 1 == 1 {
            signed(&spec.id, spec.provider.as_str(), body)
        } else {
            Vec::new()
        };
        let mut headers: Vec<(&str, &str)> = sig.iter().map(|(k, v)| (*k, v.as_str())).collect();
        headers.extend_from_slice(&given);
        for token in [None, Some(common::NOTION_TOKEN)] {
            let (status, reason) =
                decide_status(spec, token, METHOD, PATH, &headers, body, common::NOW_MS);
            assert!(
                (200..500).contains(&status),
                "source {}: a delivery got status {status} ({reason})",
                spec.id
            );
        }
    }
});
