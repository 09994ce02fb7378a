//! The `http` handler of a `[[triggers]]` table:
//!
//! ```toml
//! handler = { http = "https://partner.example/hooks", secret_env = "HOOK_SECRET", timeout = "10s", retry_4xx = false }
//! ```
//!
//! `secret_env` names one environment variable or a list (the first signs as the
//! current secret, the others too while a rotation lasts); it is required, as the
//! handler always signs. The URL is checked for form here (scheme, host, no
//! credentials); which addresses it may reach is the runtime-wide egress policy's
//! business, at delivery (`outbound::egress`), since DNS can change after a load.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::{duration_or, DurationSetting};
use crate::triggers::binding::{Handler, DEFAULT_HTTP_TIMEOUT};

/// `secret_env` as written: one name or a list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum SecretEnv {
    /// One variable.
    One(String),
    /// Several, the current secret first.
    Many(Vec<String>),
}

impl SecretEnv {
    /// The names, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        match self {
            SecretEnv::One(n) => vec![n.clone()],
            SecretEnv::Many(ns) => ns.clone(),
        }
    }

    /// As it is written back for a stored definition: one name as a string, so a
    /// binding's definition reads as it was written.
    pub(crate) fn of(names: &[String]) -> SecretEnv {
        match names {
            [one] => SecretEnv::One(one.clone()),
            many => SecretEnv::Many(many.to_vec()),
        }
    }
}

/// Builds the handler from its options; the error names the option.
pub(crate) fn resolve(
    url: &str,
    secret_env: Option<&SecretEnv>,
    timeout: Option<&DurationSetting>,
    retry_4xx: Option<bool>,
) -> Result<Handler, String> {
    check_url(url)?;
    let names = secret_env.map(SecretEnv::names).unwrap_or_default();
    if names.is_empty() {
        return Err("secret_env is required for an http handler: name the environment variable(s) holding its Standard Webhooks secret (whsec_…)".into());
    }
    if let Some(bad) = names
        .iter()
        .find(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(format!(
            "secret_env {bad:?} is not an environment variable name (letters, digits, _)"
        ));
    }
    let timeout: Duration =
        duration_or(timeout, DEFAULT_HTTP_TIMEOUT, true).map_err(|e| format!("timeout: {e}"))?;
    Ok(Handler::Http {
        url: url.to_owned(),
        secret_env: names,
        timeout,
        retry_4xx: retry_4xx.unwrap_or(false),
    })
}

/// The URL's form: absolute `http`/`https` with a host and no credentials (a
/// definition is stored and shown by the admin API; a password does not belong in
/// it).
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("http {url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("http {url:?}: the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("http {url:?} names no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "http {:?} carries credentials; the definition is stored and shown, so sign with secret_env instead",
            parsed.host_str().unwrap_or("")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(n: &str) -> Option<SecretEnv> {
        Some(SecretEnv::One(n.into()))
    }

    #[test]
    fn a_url_and_a_secret_make_a_handler_with_the_defaults() {
        let h = resolve("https://example.com/hook", one("HOOK").as_ref(), None, None).unwrap();
        assert_eq!(
            h,
            Handler::Http {
                url: "https://example.com/hook".into(),
                secret_env: vec!["HOOK".into()],
                timeout: DEFAULT_HTTP_TIMEOUT,
                retry_4xx: false,
            }
        );
    }

    #[test]
    fn bad_urls_and_missing_secrets_are_refused_naming_the_problem() {
        let cases = [
            ("ftp://example.com/", one("S"), "scheme"),
            ("not a url", one("S"), "is not a URL"),
            ("https://user:pw@example.com/", one("S"), "credentials"),
            ("https://example.com/", None, "secret_env is required"),
            (
                "https://example.com/",
                Some(SecretEnv::Many(vec![])),
                "secret_env is required",
            ),
            (
                "https://example.com/",
                one("NOT-A-NAME"),
                "not an environment variable",
            ),
        ];
        for (url, env, needle) in cases {
            let e = resolve(url, env.as_ref(), None, None).unwrap_err();
            assert!(e.contains(needle), "{url}: {e}");
            assert!(!e.contains("pw@"), "{e}");
        }
        let e = resolve(
            "https://example.com/",
            one("S").as_ref(),
            Some(&DurationSetting::Text("0s".into())),
            None,
        )
        .unwrap_err();
        assert!(e.starts_with("timeout:"), "{e}");
    }

    #[test]
    fn secret_env_is_written_back_as_it_was_written() {
        assert_eq!(SecretEnv::of(&["A".into()]), SecretEnv::One("A".into()));
        assert_eq!(
            SecretEnv::of(&["A".into(), "B".into()]),
            SecretEnv::Many(vec!["A".into(), "B".into()])
        );
    }
}
