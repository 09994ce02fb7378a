//! Published test vectors where the provider has one (GitHub, Standard Webhooks);
//! elsewhere, vectors computed independently with Python's `hmac` module.

use super::*;

const GITHUB_SECRET: &[u8] = b"It's a Secret to Everybody";
const GITHUB_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

#[test]
fn github_documented_vector_verifies() {
    assert_eq!(
        github(
            &[GITHUB_SECRET],
            &[("x-hub-signature-256", GITHUB_SIG)],
            b"Hello, World!"
        ),
        Ok(())
    );
}

#[test]
fn github_rejects_tampered_body_wrong_secret_and_missing_or_malformed_headers() {
    let h = [("X-Hub-Signature-256", GITHUB_SIG)];
    assert_eq!(
        github(&[GITHUB_SECRET], &h, b"Hello, World?"),
        Err(Rejection::BadSignature)
    );
    assert_eq!(
        github(&[b"wrong"], &h, b"Hello, World!"),
        Err(Rejection::BadSignature)
    );
    assert_eq!(
        github(&[GITHUB_SECRET], &[("X-Other", "x")], b"")
            .unwrap_err()
            .reason(),
        "missing_header"
    );
    let bad = [("X-Hub-Signature-256", "sha1=abcd")];
    assert_eq!(
        github(&[GITHUB_SECRET], &bad, b"").unwrap_err().reason(),
        "malformed"
    );
    let not_hex = [("X-Hub-Signature-256", "sha256=zz")];
    assert_eq!(
        github(&[GITHUB_SECRET], &not_hex, b"")
            .unwrap_err()
            .reason(),
        "malformed"
    );
}

#[test]
fn any_configured_secret_verifies_during_rotation() {
    let h = [("X-Hub-Signature-256", GITHUB_SIG)];
    assert_eq!(
        github(&[b"old", GITHUB_SECRET], &h, b"Hello, World!"),
        Ok(())
    );
}

const SLACK_SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
const SLACK_BODY: &[u8] = b"token=abc&team_id=T1&text=hi";
const SLACK_SIG: &str = "v0=2a96a381797a273f0c77840408996f6346204a3252771928f1e0546361cb6ff3";

#[test]
fn slack_verifies_within_the_window_and_rejects_stale_and_future() {
    let h = [
        ("X-Slack-Request-Timestamp", "1531420618"),
        ("X-Slack-Signature", SLACK_SIG),
    ];
    assert_eq!(
        slack(&[SLACK_SECRET], &h, SLACK_BODY, 1531420618 + 299, 300),
        Ok(())
    );
    assert_eq!(
        slack(&[SLACK_SECRET], &h, SLACK_BODY, 1531420618 + 301, 300)
            .unwrap_err()
            .reason(),
        "stale_timestamp"
    );
    assert_eq!(
        slack(&[SLACK_SECRET], &h, SLACK_BODY, 1531420618 - 301, 300)
            .unwrap_err()
            .reason(),
        "future_timestamp"
    );
    assert_eq!(
        slack(&[SLACK_SECRET], &h, b"token=abc", 1531420618, 300),
        Err(Rejection::BadSignature)
    );
}

const STRIPE_SECRET: &[u8] = b"whsec_test_secret";
const STRIPE_BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;
const STRIPE_V1: &str = "0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";

#[test]
fn stripe_accepts_any_v1_and_checks_the_tolerance() {
    let header = format!("t=1700000000,v1={},v1={STRIPE_V1}", "00".repeat(32));
    let h = [("Stripe-Signature", header.as_str())];
    assert_eq!(
        stripe(&[STRIPE_SECRET], &h, STRIPE_BODY, 1700000100, 300),
        Ok(())
    );
    assert_eq!(
        stripe(&[STRIPE_SECRET], &h, STRIPE_BODY, 1700000400, 300)
            .unwrap_err()
            .reason(),
        "stale_timestamp"
    );
    assert_eq!(
        stripe(&[b"whsec_other"], &h, STRIPE_BODY, 1700000000, 300),
        Err(Rejection::BadSignature)
    );
    let no_v1 = [("Stripe-Signature", "t=1700000000")];
    assert_eq!(
        stripe(&[STRIPE_SECRET], &no_v1, STRIPE_BODY, 1700000000, 300)
            .unwrap_err()
            .reason(),
        "malformed"
    );
}

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn sw_headers<'a>(prefix: &str, sig: &'a str) -> Vec<(String, &'a str)> {
    vec![
        (format!("{prefix}-id"), "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        (format!("{prefix}-timestamp"), "1614265330"),
        (format!("{prefix}-signature"), sig),
    ]
}

#[test]
fn standard_webhooks_spec_vector_verifies_under_both_header_families() {
    let body = br#"{"test": 2432232314}"#;
    let sig = "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    for prefix in ["webhook", "svix"] {
        let owned = sw_headers(prefix, sig);
        let h: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            standard_webhooks(&[SW_SECRET], h.as_slice(), body, 1614265330, 300),
            Ok("msg_p5jXN8AQM9LWM0D4loKWxJek")
        );
        assert_eq!(
            standard_webhooks(&[SW_SECRET], h.as_slice(), b"{}", 1614265330, 300),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            standard_webhooks(&[SW_SECRET], h.as_slice(), body, 1614265330 + 301, 300)
                .unwrap_err()
                .reason(),
            "stale_timestamp"
        );
    }
}

#[test]
fn linear_verifies_the_raw_body() {
    let body = br#"{"action":"create","webhookTimestamp":1700000000000}"#;
    let h = [(
        "Linear-Signature",
        "0e7eb538ce08f2d147d43dcc1a8d5fef4d5dd6effe602c4c11c3d2456d92c6be",
    )];
    assert_eq!(linear(&[b"lin_wh_secret"], &h, body), Ok(()));
    assert_eq!(
        linear(&[b"lin_wh_secret"], &h, b"{}"),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn rejections_never_contain_the_secret() {
    let secret = b"super-secret-value";
    let h = [("X-Hub-Signature-256", GITHUB_SIG)];
    let text = github(&[secret], &h, b"x").unwrap_err().to_string();
    assert!(!text.contains("super-secret-value"));
}

#[test]
fn notion_verifies_with_the_captured_verification_token() {
    let h = [(
        "X-Notion-Signature",
        "sha256=407ca74551d47804ca4aec33c69802741e2d660e578f4ef5018a4a32a660bee7",
    )];
    assert_eq!(notion(&[b"secret_tok"], &h, br#"{"id":"evt"}"#), Ok(()));
    assert_eq!(
        notion(&[b"other_tok"], &h, br#"{"id":"evt"}"#),
        Err(Rejection::BadSignature)
    );
    assert_eq!(
        notion(&[b"secret_tok"], &[("X-Other", "")], b"")
            .unwrap_err()
            .reason(),
        "missing_header"
    );
}

#[test]
fn generic_header_supports_prefix_and_base64() {
    let h = [(
        "X-Signature",
        "hmac=9Vqm0NYkJtzLizjkCfzb0CH6UmXdiXiLk3YUrqQ1CJ4=",
    )];
    let check = |body: &[u8], prefix: &str, enc: MacEncoding| {
        generic_header(&[b"k1"], &h, body, "X-Signature", prefix, enc).map_err(|e| e.reason())
    };
    assert_eq!(check(b"payload", "hmac=", MacEncoding::Base64), Ok(()));
    assert_eq!(
        check(b"payload!", "hmac=", MacEncoding::Base64),
        Err("bad_signature")
    );
    assert_eq!(
        check(b"payload", "sha256=", MacEncoding::Base64),
        Err("malformed")
    );
    assert_eq!(
        check(b"payload", "hmac=", MacEncoding::Hex),
        Err("malformed")
    );
}

#[test]
fn canonical_authorization_binds_method_path_timestamp_and_body() {
    let sig = "HMAC-SHA256 timestamp=1700000000,signature=b918ffed0f3c019b0e262a212cfe3f2f2135edff05c2e0d0413d0ed2c4a79ae8";
    let h = [("Authorization", sig)];
    let body = br#"{"a":1}"#;
    let verify = |m: &str, p: &str, b: &[u8], now: i64| {
        canonical_authorization(&[b"k2"], &h, m, p, b, now, 300)
    };
    assert_eq!(verify("post", "/hooks/x?y=1", body, 1700000000), Ok(()));
    assert_eq!(
        verify("PUT", "/hooks/x?y=1", body, 1700000000),
        Err(Rejection::BadSignature)
    );
    assert_eq!(
        verify("POST", "/hooks/other", body, 1700000000),
        Err(Rejection::BadSignature)
    );
    assert_eq!(
        verify("POST", "/hooks/x?y=1", b"{}", 1700000000),
        Err(Rejection::BadSignature)
    );
    assert_eq!(
        verify("POST", "/hooks/x?y=1", body, 1700000400)
            .unwrap_err()
            .reason(),
        "stale_timestamp"
    );
    let wrong_scheme = [("Authorization", "Bearer abc")];
    let err = canonical_authorization(&[b"k2"], &wrong_scheme, "POST", "/", body, 1700000000, 300)
        .unwrap_err();
    assert_eq!(err.reason(), "malformed");
}
