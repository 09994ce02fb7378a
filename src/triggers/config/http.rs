//! The `http` handler of a `[[triggers]]` table:
//!
//! ```toml
//! handler = { http = "https://partner.example/hooks", secret_env = "HOOK_SECRET", timeout = "10s", retry_4xx = false }
//! handler = { http = "https://partner.example/hooks", secret_file = "/run/secrets/hook" }
//! ```
//!
//! `secret_env` names one environment variable or a list, `secret_file` one file or a
//! list (mounted secrets, as sources take them; read at load and again at every
//! reload). Every secret signs, `secret_env`'s first: the first is the current
//! secret, the others are kept while a rotation lasts. At least one is required, as
//! the handler always signs. The URL is checked for form here (scheme, host, no
//! credentials); which addresses it may reach is the runtime-wide egress policy's
//! business, at delivery (`outbound::egress`), since DNS can change after a load.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::{duration_or, DurationSetting};
use crate::triggers::binding::{Handler, DEFAULT_HTTP_TIMEOUT};

/// `secret_env` or `secret_file` as written: one name (or path) or a list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One variable or file.
    One(String),
    /// Several, the current secret first.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The names, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        match self {
            OneOrMany::One(n) => vec![n.clone()],
            OneOrMany::Many(ns) => ns.clone(),
        }
    }

    /// As it is written back for a stored definition: one name as a string, so a
    /// binding's definition reads as it was written.
    pub(crate) fn of(names: &[String]) -> OneOrMany {
        match names {
            [one] => OneOrMany::One(one.clone()),
            many => OneOrMany::Many(many.to_vec()),
        }
    }
}

/// The `http` handler's options as written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options<'a> {
    /// The URL.
    pub(crate) url: &'a str,
    /// `secret_env`.
    pub(crate) secret_env: Option<&'a OneOrMany>,
    /// `secret_file`.
    pub(crate) secret_file: Option<&'a OneOrMany>,
    /// `timeout`.
    pub(crate) timeout: Option<&'a DurationSetting>,
    /// `retry_4xx`.
    pub(crate) retry_4xx: Option<bool>,
}

/// Builds the handler from its options; the error names the option.
pub(crate) fn resolve(o: Options<'_>) -> Result<Handler, String> {
    let url = o.url;
    check_url(url)?;
    let names = o.secret_env.map(OneOrMany::names).unwrap_or_default();
    let files = o.secret_file.map(OneOrMany::names).unwrap_or_default();
    if names.is_empty() && files.is_empty() {
        return Err("secret_env or secret_file is required for an http handler: name the environment variable(s) or the file(s) holding its Standard Webhooks secret (whsec_…)".into());
    }
    if let Some(bad) = files.iter().find(|f| f.trim().is_empty()) {
        return Err(format!("secret_file {bad:?} is not a path"));
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
        duration_or(o.timeout, DEFAULT_HTTP_TIMEOUT, true).map_err(|e| format!("timeout: {e}"))?;
    Ok(Handler::Http {
        url: url.to_owned(),
        secret_env: names,
        secret_file: files,
        timeout,
        retry_4xx: o.retry_4xx.unwrap_or(false),
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

    fn one(n: &str) -> Option<OneOrMany> {
        Some(OneOrMany::One(n.into()))
    }

    fn options<'a>(
        url: &'a str,
        secret_env: Option<&'a OneOrMany>,
        secret_file: Option<&'a OneOrMany>,
    ) -> Options<'a> {
        Options {
            url,
            secret_env,
            secret_file,
            timeout: None,
            retry_4xx: None,
        }
    }

    #[test]
    fn a_url_and_a_secret_make_a_handler_with_the_defaults() {
        let env = one("HOOK");
        let h = resolve(options("https://example.com/hook", env.as_ref(), None)).unwrap();
        assert_eq!(
            h,
            Handler::Http {
                url: "https://example.com/hook".into(),
                secret_env: vec!["HOOK".into()],
                secret_file: vec![],
                timeout: DEFAULT_HTTP_TIMEOUT,
                retry_4xx: false,
            }
        );
    }

    #[test]
    fn a_secret_file_alone_or_beside_secret_env_signs() {
        let files = OneOrMany::Many(vec!["/run/secrets/a".into(), "b".into()]);
        let h = resolve(options("https://example.com/", None, Some(&files))).unwrap();
        let Handler::Http {
            secret_env,
            secret_file,
            ..
        } = h
        else {
            panic!("{h:?}")
        };
        assert!(secret_env.is_empty());
        assert_eq!(secret_file, ["/run/secrets/a", "b"]);
        let env = one("HOOK");
        let file = one("/run/secrets/a");
        assert!(resolve(options("https://example.com/", env.as_ref(), file.as_ref())).is_ok());
    }

    #[test]
    fn bad_urls_and_missing_secrets_are_refused_naming_the_problem() {
        let cases = [
            ("ftp://example.com/", one("S"), None, "scheme"),
            ("not a url", one("S"), None, "is not a URL"),
            (
                "https://user:pw@example.com/",
                one("S"),
                None,
                "credentials",
            ),
            (
                "https://example.com/",
                None,
                None,
                "secret_env or secret_file is required",
            ),
            (
                "https://example.com/",
                Some(OneOrMany::Many(vec![])),
                Some(OneOrMany::Many(vec![])),
                "secret_env or secret_file is required",
            ),
            (
                "https://example.com/",
                one("NOT-A-NAME"),
                None,
                "not an environment variable",
            ),
            ("https://example.com/", None, one(" "), "is not a path"),
        ];
        for (url, env, file, needle) in cases {
            let e = resolve(options(url, env.as_ref(), file.as_ref())).unwrap_err();
            assert!(e.contains(needle), "{url}: {e}");
            assert!(!e.contains("pw@"), "{e}");
        }
        let env = one("S");
        let timeout = DurationSetting::Text("0s".into());
        let e = resolve(Options {
            timeout: Some(&timeout),
            ..options("https://example.com/", env.as_ref(), None)
        })
        .unwrap_err();
        assert!(e.starts_with("timeout:"), "{e}");
    }

    #[test]
    fn secret_env_is_written_back_as_it_was_written() {
        assert_eq!(OneOrMany::of(&["A".into()]), OneOrMany::One("A".into()));
        assert_eq!(
            OneOrMany::of(&["A".into(), "B".into()]),
            OneOrMany::Many(vec!["A".into(), "B".into()])
        );
    }
}
