//! The configuration loaders on arbitrary text: `switchboard.toml` through
//! `RuntimeConfig::from_toml` and `resolve_with`, and a connector's environment
//! through `ConnectorConfig::from_lookup`. Each must return `Ok` or an error that
//! says something, never panic; and neither the resolved configuration's `Debug` nor
//! an error may show a secret (a `secret_env`, `admin_token_env` or `token_env`
//! value, a store URL's password, an `auth_token`, a proxy password), since both end
//! up in logs.
//!
//! Why: configuration is read once at startup from files and environments that an
//! operator edits by hand; a panic there is a crash loop with a backtrace instead of
//! a line saying which option is wrong. A resolved runtime configuration is also
//! used once as the listener would: each source decides on one delivery signed with
//! its secret, so numbers that only a configuration sets (tolerances, retentions)
//! meet the arithmetic that uses them.
//!
//! Input: TOML text. Lines `#!NAME=VALUE` (TOML comments) are the environment: the
//! runtime reads unknown names as a fixed secret, the connector as unset.
#![no_main]

mod common;

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use switchboard::__private::ingress::ingest::decide_status;
use switchboard::{ConnectorConfig, RuntimeConfig};

/// Values shorter than this are too likely to occur in a message by chance.
const MIN_SECRET: usize = 6;

/// Whether `secret` shows in `out` although the input holds it only once (so `out`
/// can have taken it from nowhere else).
fn leaks(out: &str, secret: &str, text: &str) -> bool {
    secret.len() >= MIN_SECRET && text.matches(secret).count() <= 1 && out.contains(secret)
}

/// The password of a URL as a person reads it: after the first `:` of everything
/// between the scheme (optional, as a proxy may omit it) and the last `@`.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (userinfo, _) = rest.rsplit_once('@')?;
    userinfo.split_once(':').map(|(_, p)| p)
}

/// The passwords a PostgreSQL store URL carries: in its user info, or as the
/// `password` query parameter (tokio-postgres takes every connection parameter
/// there). Only `postgres://` and `postgresql://` URLs open a PostgreSQL store.
fn store_passwords(url: &str) -> Vec<&str> {
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Vec::new();
    }
    let mut out: Vec<&str> = url_password(url).into_iter().collect();
    if let Some((_, query)) = url.split_once('?') {
        out.extend(
            query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .filter(|(k, _)| *k == "password")
                .map(|(_, v)| v),
        );
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("#!"))
        .filter_map(|l| l.split_once('='))
        .collect();
    let get = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    runtime(text, &get);
    connector(text, &get);
});

fn runtime(text: &str, get: &impl Fn(&str) -> Option<String>) {
    let config = match RuntimeConfig::from_toml(text) {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    // Every value the runtime reads from its environment is a secret.
    let read = RefCell::new(Vec::new());
    let resolved = config.resolve_with(|name| {
        let v = get(name).unwrap_or_else(|| common::SECRET.to_owned());
        read.borrow_mut().push(v.clone());
        Some(v)
    });
    let mut secrets = read.into_inner();
    if let Some(store) = config.store.as_deref() {
        secrets.extend(store_passwords(store).into_iter().map(str::to_owned));
    }
    let shown = match &resolved {
        Ok(r) => format!("{r:?}"),
        Err(e) => e.to_string(),
    };
    assert!(!shown.is_empty());
    for s in &secrets {
        assert!(!leaks(&shown, s, text), "secret {s:?} shown: {shown}");
    }
    let Ok(resolved) = resolved else {
        return;
    };
    let body = br#"{"type":"t","webhookTimestamp":1700000000000,"event_time":1700000000}"#;
    for spec in &resolved.sources {
        let provider = spec.provider.as_str();
        // Which generic scheme a source has is not visible from here: sign for both.
        let mut sig = common::sign(provider, None, "POST", "/hooks/s", body);
        sig.extend(common::sign(
            provider,
            Some("X-Sig"),
            "POST",
            "/hooks/s",
            body,
        ));
        let headers: Vec<(&str, &str)> = sig.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, reason) = decide_status(
            spec,
            Some(common::NOTION_TOKEN),
            "POST",
            "/hooks/s",
            &headers,
            body,
            common::NOW_MS,
        );
        assert!(
            (200..500).contains(&status),
            "source {}: {status} ({reason})",
            spec.id
        );
    }
}

fn connector(text: &str, get: &impl Fn(&str) -> Option<String>) {
    let shown = match ConnectorConfig::from_lookup(get) {
        Ok(c) => {
            let _ = c.address();
            let _ = c.key("echo");
            format!("{c:?}")
        }
        Err(e) => e.to_string(),
    };
    assert!(!shown.is_empty());
    let mut secrets = Vec::new();
    for name in ["SWITCHBOARD_AUTH_TOKEN", "AUTH_TOKEN"] {
        secrets.extend(get(name).map(|v| v.trim().to_owned()));
    }
    if let Some(proxy) = get("SWITCHBOARD_PROXY") {
        secrets.extend(url_password(proxy.trim()).map(str::to_owned));
    }
    for s in &secrets {
        assert!(!leaks(&shown, s, text), "secret {s:?} shown: {shown}");
    }
}
