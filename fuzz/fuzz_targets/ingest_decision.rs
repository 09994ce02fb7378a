//! The whole ingest decision on untrusted requests: for every provider rule, any
//! headers and body must produce a `Decision` (mostly a refusal), never a panic. The
//! Notion rule parses unsigned bodies (its handshake), so JSON parsing is reached too.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use switchboard::webhooks::config::{RuntimeConfig, SourceSpec};
use switchboard::webhooks::ingest::{decide, Request};

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
[[sources]]
id = "canonical"
provider = "generic_hmac"
secret_env = "K"
scheme = "authorization"
"#;

fn specs() -> &'static [SourceSpec] {
    static SPECS: OnceLock<Vec<SourceSpec>> = OnceLock::new();
    SPECS.get_or_init(|| {
        RuntimeConfig::from_toml(SOURCES)
            .unwrap()
            .resolve_with(|_| Some("whsec_a2V5".into()))
            .unwrap()
            .sources
    })
}

fuzz_target!(|data: &[u8]| {
    // Layout: header lines "name: value" up to a blank line, then the body.
    let split = data.windows(2).position(|w| w == b"\n\n").unwrap_or(data.len());
    let (head, body) = data.split_at(split);
    let body = body.get(2..).unwrap_or(&[]);
    let head = String::from_utf8_lossy(head);
    let headers: Vec<(&str, &str)> = head.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim(), v.trim())).collect();
    for spec in specs() {
        for token in [None, Some("tok")] {
            let req = Request { method: "POST", path: "/hooks/x", headers: &headers, body, now_ms: 1_700_000_000_000 };
            let _ = decide(spec, token, &req);
        }
    }
});
