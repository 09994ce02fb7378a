//! `[outbound]` of `switchboard.toml`: the rules for every request the runtime sends
//! to an endpoint on a binding's behalf (the `http` handler; the `http.request`
//! capability later), and the signing secrets the `http` handlers name (their
//! `secret_env` variables and `secret_file` files, read here at load and at every
//! reload).
//!
//! ```toml
//! [outbound]
//! allow = ["10.0.0.0/8", "127.0.0.1/32"]   # egress allow-list; default: none
//! max_response_bytes = 262144             # default 256 KiB
//! breaker = { errors = 5, cool_off = "30s" }   # per endpoint (scheme, host, port)
//! ```
//!
//! Without `allow`, loopback, private, shared, link-local, unique-local and the other
//! internal address classes are refused (`outbound::egress` lists them), checked on
//! the resolved address: an outbound URL is often supplied by a user, and must not
//! reach what sits beside the runtime unless the operator says so.

use std::collections::HashMap;

use serde::Deserialize;

use crate::duration::{duration_or, DurationSetting};
use crate::error::{Error, Result};
use crate::outbound::egress::{Cidr, EgressPolicy};
use crate::outbound::http::{
    OutboundSettings, DEFAULT_BREAKER_COOL_OFF, DEFAULT_BREAKER_ERRORS, DEFAULT_MAX_RESPONSE_BYTES,
};
use crate::outbound::sign::SigningKey;
use crate::secret::Secret;
use crate::triggers::binding::Handler;
use crate::triggers::registry::TriggerRegistry;

/// `[outbound]` as written; every option has a default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct OutboundConfig {
    /// Networks (CIDR) that outbound requests may reach although their addresses are
    /// internal. Default none.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Response-body cap in bytes. Default 256 KiB.
    pub max_response_bytes: Option<usize>,
    /// The per-endpoint breaker.
    pub breaker: Option<OutboundBreakerConfig>,
}

/// `breaker = { errors = 5, cool_off = "30s" }` of `[outbound]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct OutboundBreakerConfig {
    /// Failures in a row that open it. Default 5.
    pub errors: Option<u32>,
    /// How long it stays open before a probe. Default 30 s.
    pub cool_off: Option<DurationSetting>,
}

impl OutboundConfig {
    /// The settings, with the secrets of every `http` handler in `triggers` read
    /// through `env` and from their files (an unset, unreadable or malformed one
    /// fails the load, naming the trigger and the variable or path, never the value).
    pub(super) fn resolve(
        &self,
        triggers: &TriggerRegistry,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<OutboundSettings> {
        let bad = |what: String| Error::Config(format!("[outbound] {what}"));
        let allow = self
            .allow
            .iter()
            .map(|c| Cidr::parse(c).map_err(|e| bad(format!("allow: {e}"))))
            .collect::<Result<Vec<_>>>()?;
        let max_response_bytes = match self.max_response_bytes {
            Some(0) => return Err(bad("max_response_bytes must be at least 1".into())),
            n => n.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
        };
        let breaker = self.breaker.clone().unwrap_or_default();
        let breaker_errors = match breaker.errors {
            Some(0) => return Err(bad("breaker: errors must be at least 1".into())),
            n => n.unwrap_or(DEFAULT_BREAKER_ERRORS),
        };
        let breaker_cool_off =
            duration_or(breaker.cool_off.as_ref(), DEFAULT_BREAKER_COOL_OFF, true)
                .map_err(|e| bad(format!("breaker: cool_off: {e}")))?;
        let mut secrets = HashMap::new();
        let mut secret_files = HashMap::new();
        for b in triggers.bindings() {
            let Handler::Http {
                secret_env,
                secret_file,
                ..
            } = &b.handler
            else {
                continue;
            };
            let trigger =
                |what: String| Error::Config(format!("trigger {:?}: handler: {what}", b.id));
            for name in secret_env {
                let value = env(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                    trigger(format!("secret_env names {name}, which is unset or empty"))
                })?;
                SigningKey::parse(&value)
                    .map_err(|e| trigger(format!("secret_env {name}: the secret {e}")))?;
                secrets.insert(name.clone(), Secret::new(value));
            }
            for path in secret_file {
                let secret = crate::secret::read_file(path).map_err(trigger)?;
                SigningKey::parse(&String::from_utf8_lossy(secret.expose()))
                    .map_err(|e| trigger(format!("secret_file {path}: the secret {e}")))?;
                secret_files.insert(path.clone(), secret);
            }
        }
        Ok(OutboundSettings {
            egress: EgressPolicy { allow },
            max_response_bytes,
            breaker_errors,
            breaker_cool_off,
            secrets,
            secret_files,
            ..OutboundSettings::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;
    use crate::triggers::config::{Known, TriggerConfig};

    fn registry(secret_env: &str) -> TriggerRegistry {
        registry_signing(&format!("secret_env = {secret_env}"))
    }

    /// One `http` trigger whose handler signs with `secrets` (its secret options).
    fn registry_signing(secrets: &str) -> TriggerRegistry {
        let t: TriggerConfig = toml::from_str(&format!(
            "id = \"out\"\nhandler = {{ http = \"https://example.com/\", {secrets} }}"
        ))
        .unwrap();
        let sources = HashSet::new();
        let known = Known {
            sources: Some(&sources),
            gateway: false,
        };
        crate::triggers::config::resolve(&[t], &[], &known)
            .unwrap()
            .0
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "NEW" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            "PLAIN" => Some("not a whsec secret!".into()),
            _ => None,
        }
    }

    fn config(text: &str) -> OutboundConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_refuse_every_internal_network_and_read_the_named_secrets() {
        let s = config("").resolve(&registry("\"NEW\""), &env).unwrap();
        assert!(s.egress.allow.is_empty());
        assert_eq!(s.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
        assert_eq!(
            (s.breaker_errors, s.breaker_cool_off),
            (DEFAULT_BREAKER_ERRORS, DEFAULT_BREAKER_COOL_OFF)
        );
        assert_eq!(s.secrets.keys().collect::<Vec<_>>(), ["NEW"]);
    }

    #[test]
    fn options_resolve() {
        let s = config(
            r#"
            allow = ["127.0.0.0/8", "fd00::/8"]
            max_response_bytes = 1024
            breaker = { errors = 2, cool_off = "5s" }
            "#,
        )
        .resolve(&registry("[\"NEW\"]"), &env)
        .unwrap();
        assert_eq!(s.egress.allow.len(), 2);
        assert_eq!(s.max_response_bytes, 1024);
        assert_eq!(
            (s.breaker_errors, s.breaker_cool_off),
            (2, Duration::from_secs(5))
        );
    }

    #[test]
    fn mistakes_name_the_option_or_the_trigger_and_never_the_secret() {
        let none = registry("\"NEW\"");
        let cases = [
            (
                config("allow = [\"10.1.0.0/8\"]"),
                &none,
                "[outbound] allow:",
            ),
            (
                config("max_response_bytes = 0"),
                &none,
                "max_response_bytes",
            ),
            (config("breaker = { errors = 0 }"), &none, "breaker: errors"),
        ];
        for (c, r, needle) in cases {
            let e = c.resolve(r, &env).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        let e = config("")
            .resolve(&registry("[\"NEW\", \"GONE\"]"), &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("trigger \"out\": handler: secret_env names GONE, which is unset"),
            "{e}"
        );
        let e = config("")
            .resolve(&registry("\"PLAIN\""), &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("PLAIN: the secret is not a Standard Webhooks secret"),
            "{e}"
        );
        assert!(!e.contains("whsec secret!"), "{e}");
    }

    #[test]
    fn secret_files_are_read_at_load_naming_the_path_and_never_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str, content: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p.display().to_string()
        };
        let good = path("good", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n");
        let plain = path("plain", "not a whsec secret!");
        let empty = path("empty", "\n");
        let missing = dir.path().join("missing").display().to_string();
        let s = config("")
            .resolve(
                &registry_signing(&format!("secret_env = \"NEW\", secret_file = [{good:?}]")),
                &env,
            )
            .unwrap();
        assert_eq!(s.secret_files.keys().collect::<Vec<_>>(), [&good]);
        assert_eq!(
            s.secret_files[&good].expose(),
            b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "less the trailing newline"
        );
        for (file, needle) in [
            (
                &plain,
                format!("secret_file {plain}: the secret is not a Standard Webhooks secret"),
            ),
            (&empty, format!("secret_file {empty} is empty")),
            (&missing, format!("secret_file {missing}: cannot be read")),
        ] {
            let e = config("")
                .resolve(&registry_signing(&format!("secret_file = {file:?}")), &env)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("trigger \"out\": handler: ") && e.contains(&needle),
                "{e}"
            );
            assert!(!e.contains("whsec secret!"), "{e}");
        }
    }
}
