//! The built-in webhook providers' pure decision (`ingress::ingest::decide`), each
//! rule built from its `[[sources]]` text as the provider's connector builds it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::inbound::SourceContext;
use crate::inbound::{InboundRequest, InboundResponse};
use crate::ingress::hosted::{materialise, stored_headers, Origin, Stamp};
use crate::ingress::ingest::*;
use crate::ingress::source::{SourceConfig, DEFAULT_MAX_BODY_BYTES};
use crate::secret::Secret;
use crate::triggers::{IdSeed, SignatureStatus, TriggerEvent};

const NOW_MS: i64 = 1_700_000_000_000;

fn hex_mac(key: &[u8], parts: &[&[u8]]) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A built-in webhook source's rule, secrets and secret headers, built from its
/// `[[sources]]` text as its connector builds them.
struct Spec {
    spec: WebhookSpec,
    secrets: Vec<Secret>,
    secret_headers: Vec<String>,
    provider: String,
}

fn spec(toml_source: &str) -> Spec {
    let text = format!("id = \"s\"\n{toml_source}");
    let env = |n: &str| match n {
        "NEW" => Some("new-secret".to_owned()),
        "OLD" => Some("old-secret".to_owned()),
        _ => None,
    };
    // The runtime's defaults: tenant "default", the default body limit.
    let config: SourceConfig = toml::from_str(&text).unwrap();
    let source = config
        .resolve("default", DEFAULT_MAX_BODY_BYTES, &env)
        .unwrap();
    let ctx = SourceContext::detached(
        &source.id,
        &source.provider,
        &source.tenant,
        source.options.clone(),
        source.secrets.clone(),
    );
    let secret_headers = match source.provider.as_str() {
        "generic_hmac" => super::generic::generic_spec(&ctx).unwrap().1,
        _ => Vec::new(),
    };
    Spec {
        spec: super::webhook_spec(&source.provider, &ctx)
            .unwrap()
            .expect("a built-in webhook provider"),
        secrets: source.secrets,
        secret_headers,
        provider: source.provider,
    }
}

/// A decision, and the event the runtime would store for it (ids from [`IDS`]).
struct Ran {
    decision: IngestDecision,
    event: Option<TriggerEvent>,
}

fn run(s: &Spec, token: Option<&str>, headers: &[(&str, &str)], body: &[u8]) -> Ran {
    let req = InboundRequest::new("POST", "/hooks/s", headers, body, NOW_MS);
    let decision = decide(&s.spec, &s.secrets, token, &req);
    let event = match &decision {
        IngestDecision::Store(e) => {
            let stored = stored_headers(headers, &s.secret_headers);
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| *v)
            };
            let origin = Origin::untraced(NOW_MS, SignatureStatus::Verified)
                .with_sender_context(header("traceparent"), header("tracestate"));
            let stamp = Stamp {
                source: "s",
                provider: &s.provider,
                tenant: "default",
            };
            Some(materialise(stamp, (**e).clone(), &origin, stored, IDS).unwrap())
        }
        _ => None,
    };
    Ran { decision, event }
}

/// The randomness every test request carries: decisions are functions of their inputs.
const IDS: IdSeed = IdSeed {
    event: 0x0123_4567_89ab_cdef,
    trace: 0xfeed_0000_0000_0000_0000_0000_0000_beef,
    span: 0x5eed_0000_0000_0001,
};

fn stored(r: Ran) -> TriggerEvent {
    match r.event {
        Some(e) => e,
        None => panic!("expected Store, got {:?}", r.decision),
    }
}

fn refused(r: Ran) -> (u16, &'static str) {
    match r.decision {
        IngestDecision::Refuse(r) => match r.reason {
            std::borrow::Cow::Borrowed(reason) => (r.status, reason),
            std::borrow::Cow::Owned(o) => panic!("a built-in's reasons are static: {o}"),
        },
        other => panic!("expected Refuse, got {other:?}"),
    }
}

#[test]
fn github_accepts_either_rotated_secret_and_redacts_the_signature() {
    let s = spec("provider = \"github\"\nsecret_env = [\"NEW\", \"OLD\"]");
    let body = br#"{"action":"opened"}"#;
    for key in [&b"new-secret"[..], b"old-secret"] {
        let sig = format!("sha256={}", hex_mac(key, &[body]));
        let h = [
            ("X-Hub-Signature-256", sig.as_str()),
            ("X-GitHub-Event", "issues"),
            ("X-GitHub-Delivery", "d-1"),
            ("X-GitHub-Hook-ID", "9"),
        ];
        let e = stored(run(&s, None, &h, body));
        assert_eq!(
            (e.kind.as_str(), e.dedupe_key.as_str()),
            ("issues.opened", "9:d-1")
        );
        assert_eq!(
            e.headers["x-hub-signature-256"],
            crate::ingress::redact::REDACTED
        );
        assert_eq!(e.signature, SignatureStatus::Verified);
        assert_eq!(e.payload["action"], "opened");
    }
    let sig = format!("sha256={}", hex_mac(b"wrong", &[body]));
    let h = [
        ("X-Hub-Signature-256", sig.as_str()),
        ("X-GitHub-Event", "issues"),
        ("X-GitHub-Delivery", "d"),
    ];
    assert_eq!(refused(run(&s, None, &h, body)), (401, "bad_signature"));
    assert_eq!(
        refused(run(&s, None, &[("X-GitHub-Event", "issues")], body)),
        (401, "missing_header")
    );
    let junk = b"{not json";
    let sig = format!("sha256={}", hex_mac(b"new-secret", &[junk]));
    let h = [
        ("X-Hub-Signature-256", sig.as_str()),
        ("X-GitHub-Event", "issues"),
        ("X-GitHub-Delivery", "d"),
    ];
    assert_eq!(refused(run(&s, None, &h, junk)), (400, "invalid_json"));
}

#[test]
fn slack_answers_url_verification_with_the_challenge_and_stores_nothing() {
    let s = spec("provider = \"slack\"\nsecret_env = \"NEW\"");
    let ts = (NOW_MS / 1000).to_string();
    let sign = |body: &[u8], ts: &str| {
        format!(
            "v0={}",
            hex_mac(b"new-secret", &[b"v0:", ts.as_bytes(), b":", body])
        )
    };
    let body = br#"{"type":"url_verification","challenge":"3eZbrw1aB"}"#;
    let sig = sign(body, &ts);
    let h = [
        ("X-Slack-Request-Timestamp", ts.as_str()),
        ("X-Slack-Signature", sig.as_str()),
    ];
    assert_eq!(
        run(&s, None, &h, body).decision,
        IngestDecision::Respond(InboundResponse {
            status: 200,
            headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            body: b"3eZbrw1aB".to_vec(),
        })
    );
    let body = br#"{"type":"event_callback","event_id":"Ev1","event_time":1699999999,"event":{"type":"message"}}"#;
    let sig = sign(body, &ts);
    let h = [
        ("X-Slack-Request-Timestamp", ts.as_str()),
        ("X-Slack-Signature", sig.as_str()),
        ("X-Slack-Retry-Num", "2"),
    ];
    let e = stored(run(&s, None, &h, body));
    assert_eq!(
        (e.kind.as_str(), e.dedupe_key.as_str()),
        ("event_callback.message", "Ev1")
    );
    assert_eq!(e.occurred_at_ms, Some(1_699_999_999_000));
    for (offset, reason) in [(-301, "stale_timestamp"), (301, "future_timestamp")] {
        let ts = (NOW_MS / 1000 + offset).to_string();
        let sig = sign(body, &ts);
        let h = [
            ("X-Slack-Request-Timestamp", ts.as_str()),
            ("X-Slack-Signature", sig.as_str()),
        ];
        assert_eq!(refused(run(&s, None, &h, body)), (401, reason));
    }
}

#[test]
fn linear_checks_the_body_timestamp_within_sixty_seconds_plus_grace() {
    let s = spec("provider = \"linear\"\nsecret_env = \"NEW\"\ntimestamp_grace_secs = 10");
    let at = |ms: i64| format!(r#"{{"type":"Issue","action":"create","webhookTimestamp":{ms}}}"#);
    for (ts, ok) in [
        (NOW_MS - 69_000, true),
        (NOW_MS - 71_000, false),
        (NOW_MS + 69_000, true),
        (NOW_MS + 71_000, false),
    ] {
        let body = at(ts);
        let sig = hex_mac(b"new-secret", &[body.as_bytes()]);
        let h = [
            ("Linear-Signature", sig.as_str()),
            ("Linear-Delivery", "del-1"),
        ];
        let d = run(&s, None, &h, body.as_bytes());
        if ok {
            let e = stored(d);
            assert_eq!(
                (e.kind.as_str(), e.dedupe_key.as_str(), e.occurred_at_ms),
                ("Issue.create", "del-1", Some(ts))
            );
        } else {
            assert_eq!(refused(d).0, 401, "{ts}");
        }
    }
}

#[test]
fn notion_captures_the_first_unsigned_token_once_then_verifies_with_it() {
    let s = spec("provider = \"notion\"");
    let first = br#"{"verification_token":"secret_tok"}"#;
    assert_eq!(
        run(&s, None, &[], first).decision,
        IngestDecision::CaptureNotionToken(crate::secret::Secret::new("secret_tok"))
    );
    assert_eq!(
        refused(run(&s, Some("secret_tok"), &[], first)),
        (409, "verification_token_already_captured")
    );
    let body = br#"{"id":"n-1","type":"page.created","timestamp":"2024-12-05T23:55:34.285Z"}"#;
    let sig = format!("sha256={}", hex_mac(b"secret_tok", &[body]));
    let h = [("X-Notion-Signature", sig.as_str())];
    assert_eq!(
        refused(run(&s, None, &h, body)),
        (401, "no_verification_token")
    );
    let e = stored(run(&s, Some("secret_tok"), &h, body));
    assert_eq!(
        (e.kind.as_str(), e.dedupe_key.as_str()),
        ("page.created", "n-1")
    );
    assert_eq!(e.occurred_at_ms, Some(1_733_442_934_285));
    assert_eq!(
        refused(run(&s, Some("other"), &h, body)),
        (401, "bad_signature")
    );
    assert_eq!(
        refused(run(&s, Some("secret_tok"), &[], body)),
        (401, "missing_header")
    );
}

#[test]
fn generic_sources_key_by_header_or_body_hash_and_sign_method_and_path() {
    let s = spec("provider = \"generic_hmac\"\nsecret_env = \"NEW\"\nheader = \"X-Sig\"\nkind_pointer = \"/event\"");
    let body = br#"{"event":"thing.happened"}"#;
    let sig = hex_mac(b"new-secret", &[body]);
    let a = stored(run(&s, None, &[("X-Sig", sig.as_str())], body));
    let b = stored(run(&s, None, &[("X-Sig", sig.as_str())], body));
    assert_eq!(a.kind, "thing.happened");
    assert_eq!(a.dedupe_key, b.dedupe_key, "identical bodies are one event");
    assert!(a.dedupe_key.starts_with("sha256:"));

    let s = spec("provider = \"generic_hmac\"\nsecret_env = \"NEW\"\nscheme = \"authorization\"\ndedupe_header = \"X-Id\"");
    let ts = (NOW_MS / 1000).to_string();
    let body_hash: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let mac = hex_mac(
        b"new-secret",
        &[format!("POST\n/hooks/s\n{ts}\n{body_hash}").as_bytes()],
    );
    let auth = format!("HMAC-SHA256 timestamp={ts},signature={mac}");
    let e = stored(run(
        &s,
        None,
        &[("Authorization", auth.as_str()), ("X-Id", "r-1")],
        body,
    ));
    assert_eq!((e.kind.as_str(), e.dedupe_key.as_str()), ("webhook", "r-1"));
    assert_eq!(e.headers["authorization"], crate::ingress::redact::REDACTED);
    assert_eq!(
        refused(run(&s, None, &[("Authorization", auth.as_str())], body)),
        (400, "missing_header")
    );
}

#[test]
fn a_nul_in_the_kind_or_key_is_refused_and_a_custom_signature_header_is_blanked() {
    let s = spec("provider = \"generic_hmac\"\nsecret_env = \"NEW\"\nheader = \"X-Mac\"\nkind_pointer = \"/event\"");
    let body = br#"{"event":"a\u0000b"}"#;
    let sig = hex_mac(b"new-secret", &[body]);
    assert_eq!(
        refused(run(&s, None, &[("X-Mac", sig.as_str())], body)),
        (400, "malformed")
    );
    let body = br#"{"event":"fine"}"#;
    let sig = hex_mac(b"new-secret", &[body]);
    let e = stored(run(&s, None, &[("X-Mac", sig.as_str())], body));
    assert_eq!(
        e.headers["x-mac"],
        crate::ingress::redact::REDACTED,
        "named like no secret, still blanked"
    );
}

#[test]
fn extreme_timestamps_are_stale_or_future_not_a_panic() {
    let s = spec("provider = \"slack\"\nsecret_env = \"NEW\"");
    for ts in [i64::MIN, i64::MAX] {
        let ts = ts.to_string();
        let h = [
            ("X-Slack-Request-Timestamp", ts.as_str()),
            ("X-Slack-Signature", "v0=00"),
        ];
        assert_eq!(refused(run(&s, None, &h, b"{}")).0, 401, "{ts}");
    }
    let s = spec("provider = \"linear\"\nsecret_env = \"NEW\"");
    let body = format!(
        r#"{{"type":"Issue","action":"create","webhookTimestamp":{}}}"#,
        i64::MIN
    );
    let sig = hex_mac(b"new-secret", &[body.as_bytes()]);
    let h = [("Linear-Signature", sig.as_str()), ("Linear-Delivery", "d")];
    assert_eq!(
        refused(run(&s, None, &h, body.as_bytes())),
        (401, "stale_timestamp")
    );
}

#[test]
fn the_same_request_and_seed_always_decide_the_same_event() {
    let s = spec("provider = \"github\"\nsecret_env = [\"NEW\", \"OLD\"]");
    let body = br#"{"action":"opened"}"#;
    let sig = format!("sha256={}", hex_mac(b"new-secret", &[body]));
    let h = [
        ("X-Hub-Signature-256", sig.as_str()),
        ("X-GitHub-Event", "issues"),
        ("X-GitHub-Delivery", "d-1"),
    ];
    let a = stored(run(&s, None, &h, body));
    let b = stored(run(&s, None, &h, body));
    assert_eq!(a, b, "decide must not draw randomness of its own");
    assert_eq!(a.id, format!("evt_{:012x}0123456789abcdef", NOW_MS));
    assert_eq!(a.trace_id, "feed000000000000000000000000beef");
    // Without a sender's context, a new root, not sampled (nothing recorded it).
    assert_eq!(
        a.traceparent,
        "00-feed000000000000000000000000beef-5eed000000000001-00"
    );
    assert_eq!(a.tracestate, "");
    // A valid traceparent wins over the seed's trace id, and its tracestate rides along.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let with_tp = [
        h[0],
        h[1],
        h[2],
        ("traceparent", tp),
        ("tracestate", "congo=t61"),
    ];
    let c = stored(run(&s, None, &with_tp, body));
    assert_eq!(c.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(c.traceparent, tp);
    assert_eq!(c.tracestate, "congo=t61");
    // A tracestate beside a broken traceparent is dropped with it.
    let broken = [
        h[0],
        h[1],
        h[2],
        ("traceparent", "00-x"),
        ("tracestate", "congo=t61"),
    ];
    let d = stored(run(&s, None, &broken, body));
    assert_eq!(
        (d.trace_id.as_str(), d.tracestate.as_str()),
        (a.trace_id.as_str(), "")
    );
}

#[test]
fn a_malformed_signature_is_a_bad_request_not_an_authentication_failure() {
    // An odd number of hex digits cannot be a MAC at all: the sender's integration is
    // broken (400), which an operator tells apart from a wrong secret (401).
    let s = spec("provider = \"github\"\nsecret_env = \"NEW\"");
    let h = [
        ("X-Hub-Signature-256", "sha256=abc"),
        ("X-GitHub-Event", "issues"),
        ("X-GitHub-Delivery", "d"),
    ];
    assert_eq!(
        refused(run(&s, None, &h, br#"{"action":"opened"}"#)),
        (400, "malformed")
    );
}

/// A signed Linear delivery whose body timestamp is `ts_ms`, for a source whose
/// tolerance is 60 s plus a 10 s grace.
fn linear_at(ts_ms: i64) -> Ran {
    let s = spec("provider = \"linear\"\nsecret_env = \"NEW\"\ntimestamp_grace_secs = 10");
    let body = format!(r#"{{"type":"Issue","action":"create","webhookTimestamp":{ts_ms}}}"#);
    let sig = hex_mac(b"new-secret", &[body.as_bytes()]);
    let h = [("Linear-Signature", sig.as_str()), ("Linear-Delivery", "d")];
    run(&s, None, &h, body.as_bytes())
}

#[test]
fn linear_accepts_a_timestamp_exactly_at_the_tolerance_either_way_and_not_a_ms_beyond() {
    stored(linear_at(NOW_MS - 70_000));
    stored(linear_at(NOW_MS + 70_000));
    assert_eq!(
        refused(linear_at(NOW_MS - 70_001)),
        (401, "stale_timestamp")
    );
    assert_eq!(
        refused(linear_at(NOW_MS + 70_001)),
        (401, "future_timestamp")
    );
}

#[test]
fn linear_refusals_say_how_far_off_the_timestamp_is_in_whole_seconds() {
    let detail = |d: Ran| match d.decision {
        IngestDecision::Refuse(r) => r.detail,
        other => panic!("expected Refuse, got {other:?}"),
    };
    assert_eq!(
        detail(linear_at(NOW_MS - 71_500)),
        "timestamp is 71 s old; the tolerance is 70 s"
    );
    assert_eq!(
        detail(linear_at(NOW_MS + 71_500)),
        "timestamp is 71 s in the future; the tolerance is 70 s"
    );
}
