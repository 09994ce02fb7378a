//! `[outbound]` of `switchboard.toml`: the rules for every request the runtime sends
//! to an endpoint on a binding's behalf (the `http` handler; the `http.request`
//! capability later), and the signing secrets the `http` handlers name.
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
    /// through `env` (an unset or malformed one fails the load, naming the trigger
    /// and the variable, never the value).
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
        for b in triggers.bindings() {
            let Handler::Http { secret_env, .. } = &b.handler else {
                continue;
            };
            for name in secret_env {
                let trigger = |what: String| {
                    Error::Config(format!("trigger {:?}: handler: secret_env {what}", b.id))
                };
                let value = env(name)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| trigger(format!("names {name}, which is unset or empty")))?;
                SigningKey::parse(&value)
                    .map_err(|e| trigger(format!("{name}: the secret {e}")))?;
                secrets.insert(name.clone(), Secret::new(value));
            }
        }
        Ok(OutboundSettings {
            egress: EgressPolicy { allow },
            max_response_bytes,
            breaker_errors,
            breaker_cool_off,
            secrets,
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
        let t: TriggerConfig = toml::from_str(&format!(
            "id = \"out\"\nhandler = {{ http = \"https://example.com/\", secret_env = {secret_env} }}"
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
}
