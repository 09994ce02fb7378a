//! [`RuntimeConfig::check`]: what `switchboard serve --check` runs before a deploy.
//! It loads and validates the configuration as `switchboard serve` would start it,
//! without binding the listener or opening the store for use: secrets present,
//! sources' options accepted by their connectors, filters and other CEL compiled,
//! the store reachable and at a schema version this build can run (read only: a
//! missing SQLite file stays missing, nothing is migrated).
//!
//! Each part is checked on its own first (every source, every trigger, the gateway
//! registration, the admin token), so that one run reports every problem it can; then
//! the whole configuration is resolved once more for what only the whole shows
//! (duplicate ids, the dispatcher's options, the outbound rules).

use std::collections::HashSet;
use std::sync::Arc;

use super::{RuntimeConfig, StoreUrl};
use crate::check::ConfigCheck;
use crate::error::Error;
use crate::inbound::context::MemoryState;
use crate::ingress::hosted;
use crate::store::{probe_schema, redact_url};
use crate::triggers::config::{HandlerConfig, TriggerConfig};

impl RuntimeConfig {
    /// Checks this configuration the way `switchboard serve` would start it (the
    /// built-in inbound connectors, no local connectors), reading secrets from the
    /// process environment, without serving: what a deploy pipeline runs before it
    /// rolls a new configuration out, so a missing secret, a filter that does not
    /// compile or a store this build cannot run on fails the pipeline instead of the
    /// rollout. Nothing is bound, created or migrated.
    pub async fn check(&self) -> ConfigCheck {
        check_with(self, |name| std::env::var(name).ok()).await
    }
}

/// [`RuntimeConfig::check`], reading environment variables through `env`.
pub(crate) async fn check_with(
    config: &RuntimeConfig,
    env: impl Fn(&str) -> Option<String>,
) -> ConfigCheck {
    let mut report = ConfigCheck::default();
    report.note(format!(
        "listen: {} (GET /healthz, GET /readyz)",
        config.listen
    ));
    check_admin_token(config, &env, &mut report);
    check_sources(config, &env, &mut report).await;
    check_gateway(config, &env, &mut report);
    check_triggers(config, &mut report);
    if let Err(e) = config.resolve_with(&env) {
        report.problem(message(&e));
    }
    let grace = match config.dispatcher.resolve() {
        Ok(d) => format!("{} s", d.shutdown_grace.as_secs_f64()),
        Err(_) => "invalid".into(),
    };
    report.note(format!("dispatcher: shutdown_grace {grace}"));
    check_store(&config.store_url(), &mut report).await;
    report
}

/// The message of a configuration or store error, without the variant's prefix: a
/// problem line already says it is one.
fn message(e: &Error) -> String {
    match e {
        Error::Config(m) | Error::Store(m) => m.clone(),
        other => other.to_string(),
    }
}

fn check_admin_token(
    config: &RuntimeConfig,
    env: &impl Fn(&str) -> Option<String>,
    report: &mut ConfigCheck,
) {
    let Some(var) = &config.admin_token_env else {
        report.note("admin API: open (no admin_token_env)");
        return;
    };
    if env(var).is_some_and(|v| !v.is_empty()) {
        report.note(format!("admin API: bearer token from {var}"));
    } else {
        report.problem(format!(
            "admin_token_env names {var}, which is unset or empty"
        ));
    }
}

/// Each source resolved (its secrets read) and started with its connector, as the
/// runtime's start does (state in memory), which is where a provider checks its own
/// options and compiles its CEL.
async fn check_sources(
    config: &RuntimeConfig,
    env: &impl Fn(&str) -> Option<String>,
    report: &mut ConfigCheck,
) {
    let tenant = config.tenant.as_deref().unwrap_or("default");
    let max_body = config
        .max_body_bytes
        .unwrap_or(crate::ingress::source::DEFAULT_MAX_BODY_BYTES);
    let connectors = crate::ingress::builtin::registry();
    for source in &config.sources {
        report.note(format!(
            "source {}: provider {}",
            source.id, source.provider
        ));
        let spec = match source.resolve(tenant, max_body, env) {
            Ok(spec) => spec,
            Err(e) => {
                report.problem(message(&e));
                continue;
            }
        };
        let started = hosted::start(
            std::slice::from_ref(&spec),
            &connectors,
            Arc::new(MemoryState::default()),
            &Arc::default(),
        )
        .await;
        if let Err(e) = started {
            report.problem(message(&e));
        }
    }
}

fn check_gateway(
    config: &RuntimeConfig,
    env: &impl Fn(&str) -> Option<String>,
    report: &mut ConfigCheck,
) {
    let Some(gateway) = &config.gateway else {
        return;
    };
    report.note(format!(
        "gateway: {} tenant {}",
        gateway.url, gateway.tenant
    ));
    if let Err(e) = gateway.resolve(env) {
        report.problem(message(&e));
    }
}

/// Each binding resolved on its own (filters and keys compiled), and refused when
/// `switchboard serve` could not deliver it: it registers no local connector.
fn check_triggers(config: &RuntimeConfig, report: &mut ConfigCheck) {
    let sources: HashSet<&str> = config.sources.iter().map(|s| s.id.as_str()).collect();
    for trigger in &config.triggers {
        report.note(format!(
            "trigger {}: {}",
            trigger.id,
            handler_kind(&trigger.handler)
        ));
        if let Err(e) = trigger.resolve_one(&sources, config.gateway.is_some()) {
            report.problem(message(&e));
        }
        local_handler(trigger, report);
    }
}

fn local_handler(trigger: &TriggerConfig, report: &mut ConfigCheck) {
    if let Some(name) = &trigger.handler.local {
        report.problem(format!(
            "trigger {:?}: handler local = {name:?}: `switchboard serve` registers no local connector; use an invoke, queue or http handler, or run the runtime from a program that registers it (RuntimeBuilder::local_connector)",
            trigger.id
        ));
    }
}

/// The handler's kind and target, as written (`invoke acme.linear.main`).
fn handler_kind(handler: &HandlerConfig) -> String {
    let kinds = [
        ("invoke", &handler.invoke),
        ("local", &handler.local),
        ("queue", &handler.queue),
        ("http", &handler.http),
    ];
    let named: Vec<String> = kinds
        .iter()
        .filter_map(|(kind, target)| target.as_ref().map(|t| format!("{kind} {t}")))
        .collect();
    if named.is_empty() {
        "no handler".into()
    } else {
        named.join(", ")
    }
}

async fn check_store(url: &StoreUrl, report: &mut ConfigCheck) {
    let shown = redact_url(url);
    match probe_schema(url).await {
        Ok(probe) if probe.usable() => report.note(format!("store: {shown}: {probe}")),
        Ok(probe) => {
            report.note(format!("store: {shown}"));
            report.problem(format!("store {shown}: {probe}"));
        }
        Err(e) => {
            report.note(format!("store: {shown}"));
            report.problem(message(&e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, env: &[(&str, &str)]) -> ConfigCheck {
        let config = RuntimeConfig::from_toml(text).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(check_with(&config, |name| {
                env.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }))
    }

    fn store(dir: &tempfile::TempDir) -> String {
        format!("store = \"sqlite:{}\"\n", dir.path().join("e.db").display())
    }

    #[test]
    fn every_broken_part_is_reported_not_just_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"{}
            admin_token_env = "ADMIN"
            [[sources]]
            id = "a"
            provider = "github"
            secret_env = "A_SECRET"
            [[sources]]
            id = "b"
            provider = "no_such_provider"
            [[triggers]]
            id = "bad-filter"
            filter = "payload.action =="
            handler = {{ queue = "q" }}
            [[triggers]]
            id = "local-one"
            handler = {{ local = "audit", capability = "record" }}
            "#,
            store(&dir)
        );
        let report = check(&text, &[]);
        let problems = report.problems.join("\n");
        for needle in [
            "ADMIN",
            "A_SECRET",
            "no_such_provider",
            "bad-filter",
            "local-one",
        ] {
            assert!(problems.contains(needle), "{needle} in:\n{problems}");
        }
        assert!(!dir.path().join("e.db").exists());
    }

    #[test]
    fn a_valid_config_passes_with_its_summary() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"{}
            [[sources]]
            id = "gh"
            provider = "github"
            secret_env = "GH"
            [[triggers]]
            id = "to-q"
            filter = 'payload.action == "opened"'
            handler = {{ queue = "work" }}
            "#,
            store(&dir)
        );
        let report = check(&text, &[("GH", "s")]);
        assert!(report.is_ok(), "{report}");
        let summary = report.summary.join("\n");
        for line in [
            "listen: 127.0.0.1:8787",
            "source gh: provider github",
            "trigger to-q: queue work",
            "dispatcher: shutdown_grace 10 s",
        ] {
            assert!(summary.contains(line), "{line} in:\n{summary}");
        }
        assert!(summary.contains("no file yet"), "{summary}");
    }
}
