//! The deliver section's webhook sender: GitHub `issues` deliveries, signed as GitHub
//! signs them (`X-Hub-Signature-256: sha256=` + hex HMAC-SHA256 of the raw body with
//! the hook's secret), posted to the runtime's ingress over HTTP.

use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The hook id every delivery names (`X-GitHub-Hook-ID`); with the delivery id it
/// forms the dedupe key.
const HOOK_ID: &str = "424242";

/// One signed delivery.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    /// The issue number, which the connectors echo back: how the demo matches what
    /// arrived to what was sent.
    pub(super) issue: u64,
    /// `opened` or `closed`.
    pub(super) action: &'static str,
    /// `X-GitHub-Delivery`.
    pub(super) id: String,
    signature: String,
    body: Vec<u8>,
}

impl Delivery {
    /// Delivery `issue` of a run: every fourth (1, 5, 9, …) closes an issue, the rest
    /// open one.
    pub(super) fn new(secret: &[u8], run: u32, issue: u64) -> Delivery {
        let action = if issue % 4 == 1 { "closed" } else { "opened" };
        let body = json!({
            "action": action,
            "issue": {
                "number": issue,
                "title": format!("Demo issue {issue}"),
                "state": if action == "closed" { "closed" } else { "open" },
            },
            "repository": { "full_name": "acme/widgets" },
            "sender": { "login": "octocat" },
        });
        let body = serde_json::to_vec(&body).expect("a JSON value serialises");
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
        mac.update(&body);
        let signature = format!("sha256={}", hex(&mac.finalize().into_bytes()));
        Delivery {
            issue,
            action,
            // GitHub's delivery ids are GUIDs; these have the shape.
            id: format!("{run:08x}-0000-4000-8000-{issue:012x}"),
            signature,
            body,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How the ingress answered one POST.
#[derive(Debug, Clone)]
pub(super) struct Posted {
    pub(super) issue: u64,
    pub(super) status: u16,
    /// The stored event's id (the first delivery's, for a duplicate).
    pub(super) event_id: Option<String>,
    pub(super) duplicate: bool,
    /// When the request was sent.
    pub(super) sent: Instant,
    /// Request to answer.
    pub(super) took: Duration,
}

/// POSTs `d` to `url` (the source's `/hooks/{id}`).
pub(super) async fn post(client: &reqwest::Client, url: &str, d: &Delivery) -> Posted {
    let sent = Instant::now();
    let resp = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("User-Agent", "GitHub-Hookshot/switchboard-demo")
        .header("X-GitHub-Event", "issues")
        .header("X-GitHub-Delivery", &d.id)
        .header("X-GitHub-Hook-ID", HOOK_ID)
        .header("X-Hub-Signature-256", &d.signature)
        .body(d.body.clone())
        .send()
        .await;
    let (status, v) = match resp {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
        Err(e) => {
            tracing::warn!(error = %e, delivery = %d.id, "webhook POST failed");
            (0, Value::Null)
        }
    };
    Posted {
        issue: d.issue,
        status,
        event_id: v["id"].as_str().map(str::to_owned),
        duplicate: v["duplicate"] == json!(true),
        sent,
        took: sent.elapsed(),
    }
}
