use std::sync::Arc;

use super::*;
use crate::inbound::context::MemoryState;
use crate::ingress::hosted::{self, HostedSource};
use crate::ingress::source::*;

fn env(name: &str) -> Option<String> {
    match name {
        "GH" => Some("gh-secret-value".into()),
        "GH_OLD" => Some("gh-old".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn resolve(text: &str) -> Result<ResolvedConfig> {
    RuntimeConfig::from_toml(text)?.resolve_with(env)
}

/// Resolves `text` and starts its sources with the built-in connectors (state in
/// memory), as the runtime does at start: where a source's own options are checked.
fn start(text: &str) -> Result<(ResolvedConfig, Vec<Arc<HostedSource>>)> {
    let config = resolve(text)?;
    let sources = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(hosted::start(
            &config.sources,
            &crate::ingress::builtin::registry(),
            Arc::new(MemoryState::default()),
            &Arc::default(),
        ))?;
    Ok((config, sources))
}

fn err(text: &str) -> String {
    start(text).unwrap_err().to_string()
}

#[test]
fn defaults_fill_in_listener_store_limits_and_tolerances() {
    let c = resolve(
        r#"
        [[sources]]
        id = "gh"
        provider = "github"
        secret_env = ["GH", "GH_OLD"]

        [[sources]]
        id = "lin"
        provider = "linear"
        secret_env = "GH"
        timestamp_grace_secs = 5
        "#,
    )
    .unwrap();
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(&*c.store, "sqlite:switchboard-data/events.db");
    assert_eq!(c.sources[0].secrets.len(), 2);
    assert_eq!(c.sources[0].max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(
        c.sources[0].retention_ms,
        DEFAULT_DEDUPE_RETENTION_SECS * 1000
    );
    assert_eq!(c.sources[0].tenant, "default");
}

#[test]
fn secrets_never_show_in_debug_output_or_errors() {
    let c =
        resolve("[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH\"").unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("gh-secret-value"), "{shown}");
    assert!(shown.contains("[redacted]"));
    let pg = resolve("store = \"postgres://app:hunter2@db/x\"\n").unwrap();
    let shown = format!(
        "{pg:?} {:?}",
        RuntimeConfig::from_toml("store = \"postgres://app:hunter2@db/x\"").unwrap()
    );
    assert!(!shown.contains("hunter2"), "{shown}");
    assert_eq!(
        &*pg.store, "postgres://app:hunter2@db/x",
        "the URL itself is intact"
    );
}

#[test]
fn mistakes_name_the_source_and_the_option() {
    let missing = err("[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"NOPE\"");
    assert!(
        missing.contains("\"gh\"") && missing.contains("NOPE"),
        "{missing}"
    );
    let empty = err("[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"EMPTY\"");
    assert!(empty.contains("unset or empty"), "{empty}");
    let none = err("[[sources]]\nid = \"gh\"\nprovider = \"github\"");
    assert!(none.contains("secret_env is required"), "{none}");
    let unknown = err("[[sources]]\nid = \"x\"\nprovider = \"gitlab\"\nsecret_env = \"GH\"");
    assert!(unknown.contains("unknown provider \"gitlab\""), "{unknown}");
    let foreign = err("[[sources]]\nid = \"x\"\nprovider = \"github\"\nsecret_env = \"GH\"\nschedule = \"* * * * *\"");
    assert!(
        foreign.contains("schedule does not apply to provider github"),
        "{foreign}"
    );
    let twice = err("[[sources]]\nid = \"x\"\nprovider = \"github\"\nsecret_env = \"GH\"\n[[sources]]\nid = \"x\"\nprovider = \"github\"\nsecret_env = \"GH\"");
    assert!(twice.contains("two sources have the id"), "{twice}");
    let bad_id = err("[[sources]]\nid = \"a/b\"\nprovider = \"github\"\nsecret_env = \"GH\"");
    assert!(bad_id.contains("letters, digits"), "{bad_id}");
    // A misspelt runtime key reaches the connector as an option, which refuses it.
    let typo = err("[[sources]]\nid = \"x\"\nprovider = \"github\"\nsecret_envs = \"GH\"");
    assert!(
        typo.contains("option secret_envs does not apply to provider github"),
        "{typo}"
    );
    let rate = err("[[sources]]\nid = \"x\"\nprovider = \"github\"\nsecret_env = \"GH\"\nrate_limit = { per_second = 0 }");
    assert!(rate.contains("per_second > 0"), "{rate}");
}

#[test]
fn a_source_keeps_its_own_options_for_its_connector() {
    let c = resolve(
        r#"
        [[sources]]
        id = "acme"
        provider = "generic_hmac"
        secret_env = "GH"
        header = "X-Acme-Signature"
        kind_pointer = "/event"
        "#,
    )
    .unwrap();
    let s = &c.sources[0];
    assert_eq!(s.provider, "generic_hmac");
    assert_eq!(s.options["header"].as_str(), Some("X-Acme-Signature"));
    assert_eq!(s.options["kind_pointer"].as_str(), Some("/event"));
    assert!(
        !s.options.contains_key("secret_env"),
        "the runtime's keys are not options"
    );
}

#[test]
fn a_source_takes_the_runtimes_gateway_tenant_unless_a_tenant_is_named() {
    let tenants = |top: &str| {
        let c = resolve(&format!(
            "{top}\n[gateway]\nurl = \"ws://127.0.0.1:4000\"\ntenant = \"acme\"\n\n[[sources]]\nid = \"a\"\nprovider = \"github\"\nsecret_env = \"GH\"\n\n[[sources]]\nid = \"b\"\nprovider = \"github\"\nsecret_env = \"GH\"\ntenant = \"own\"\n"
        ))
        .unwrap();
        (c.sources[0].tenant.clone(), c.sources[1].tenant.clone())
    };
    // One socket for the runtime and its sources, not a second under "default".
    assert_eq!(tenants(""), ("acme".into(), "own".into()));
    assert_eq!(tenants("tenant = \"top\""), ("top".into(), "own".into()));
}

#[test]
fn a_public_listener_needs_an_admin_token_or_an_explicit_opt_out() {
    let open = err("listen = \"0.0.0.0:8787\"\n");
    assert!(open.contains("admin_token_env"), "{open}");
    assert!(resolve("listen = \"0.0.0.0:8787\"\nallow_open_admin = true\n").is_ok());
    let guarded = RuntimeConfig::from_toml("listen = \"0.0.0.0:8787\"\nadmin_token_env = \"GH\"\n")
        .unwrap()
        .resolve_with(env)
        .unwrap();
    assert!(guarded.admin_token.is_some());
    assert!(resolve("listen = \"127.0.0.1:0\"\n").is_ok());
}

#[test]
fn ingress_limits_have_documented_defaults_and_refuse_zero() {
    let c = resolve("").unwrap();
    assert_eq!(c.limits, IngressLimits::default());
    assert_eq!(c.limits.max_concurrent_requests, 1024);
    assert_eq!(
        c.limits.header_read_timeout,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(
        c.limits.body_read_timeout,
        std::time::Duration::from_secs(30)
    );
    assert_eq!(c.store_options.write_queue_max_bytes, 64 * 1024 * 1024);
    let c = resolve(
        "max_concurrent_requests = 8\nheader_read_timeout = \"250ms\"\nbody_read_timeout = 2\nwrite_queue_max_bytes = 4096\n",
    )
    .unwrap();
    assert_eq!(c.limits.max_concurrent_requests, 8);
    assert_eq!(
        c.limits.header_read_timeout,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(
        c.limits.body_read_timeout,
        std::time::Duration::from_secs(2)
    );
    assert_eq!(c.store_options.write_queue_max_bytes, 4096);
    assert!(err("max_concurrent_requests = 0\n").contains("max_concurrent_requests"));
    assert!(err("body_read_timeout = \"0s\"\n").contains("body_read_timeout: must be positive"));
    assert!(err("header_read_timeout = \"soon\"\n").contains("header_read_timeout"));
    assert!(err("write_queue_max_bytes = 0\n").contains("write_queue_max_bytes"));
}

#[test]
fn notion_recheck_limit_applies_to_notion_only() {
    assert!(start("[[sources]]\nid = \"n\"\nprovider = \"notion\"\n").is_ok());
    assert!(err(
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH\"\nnotion_recheck_limit = { per_second = 1 }\n"
    )
    .contains("notion_recheck_limit applies to provider notion only"));
    assert!(err(
        "[[sources]]\nid = \"n\"\nprovider = \"notion\"\nnotion_recheck_limit = { per_second = 0 }\n"
    )
    .contains("notion_recheck_limit needs per_second > 0"));
}

#[test]
fn rejection_audit_limit_defaults_to_twenty_a_second_and_refuses_a_zero_rate() {
    let c =
        resolve("[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH\"\n").unwrap();
    assert_eq!(
        c.sources[0].rejection_audit_limit,
        DEFAULT_REJECTION_AUDIT_LIMIT
    );
    assert!(err(
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH\"\nrejection_audit_limit = { per_second = 0 }\n"
    )
    .contains("rejection_audit_limit needs per_second > 0"));
}

#[test]
fn sqlite_body_compression_is_off_by_default_and_checked() {
    use crate::store::body_codec::BodyCompression;
    let c = resolve("").unwrap();
    assert_eq!(c.store_options.body_compression, BodyCompression::None);
    let c = resolve("sqlite_body_compression = \"zstd\"\n").unwrap();
    assert_eq!(
        c.store_options.body_compression,
        BodyCompression::Zstd {
            min_bytes: 512,
            level: 1
        }
    );
    let c =
        resolve("sqlite_body_compression = \"zstd\"\nsqlite_body_compression_min_bytes = 2048\n")
            .unwrap();
    assert_eq!(
        c.store_options.body_compression,
        BodyCompression::Zstd {
            min_bytes: 2048,
            level: 1
        }
    );
    assert!(err("sqlite_body_compression = \"gzip\"\n").contains("expected \"zstd\" or \"none\""));
    // A threshold without compression is a mistake worth saying, not ignoring.
    assert!(err("sqlite_body_compression_min_bytes = 100\n").contains("remove one"));
}

#[test]
fn durations_that_would_overflow_milliseconds_are_refused_not_wrapped() {
    let source = "[[sources]]\nid = \"l\"\nprovider = \"linear\"\nsecret_env = \"GH\"\n";
    assert!(err("rejection_retention_secs = 9223372036854775807\n")
        .contains("rejection_retention_secs"));
    assert!(err(&format!(
        "{source}dedupe_retention_secs = 9223372036854775807\n"
    ))
    .contains("dedupe_retention_secs"));
    assert!(err(&format!(
        "{source}timestamp_tolerance_secs = 9223372036854775807\ntimestamp_grace_secs = 9\n"
    ))
    .contains("at most"));
    assert!(err(&format!("{source}timestamp_tolerance_secs = 400000000\n")).contains("at most"));
}

#[test]
fn process_id_is_optional_and_a_bad_one_is_refused_naming_the_key() {
    assert_eq!(resolve("").unwrap().process_id, None, "derived at start");
    let set = resolve("process_id = \"runtime-1\"").unwrap();
    assert_eq!(set.process_id.as_deref(), Some("runtime-1"));
    for bad in ["process_id = \"\"", "process_id = \"two words\""] {
        let e = err(bad);
        assert!(e.contains("process_id = "), "{bad}: {e}");
    }
}
