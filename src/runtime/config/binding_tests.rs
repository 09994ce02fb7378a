//! `[[triggers]]`, `[[queues]]`, `[gateway]`, `[dispatcher]` and `event_retention`,
//! through the whole file: `RuntimeConfig::from_toml(..).resolve_with(..)`. Here, not
//! beside `triggers::config`, because they resolve the assembled file, which only the
//! runtime (the layer above the bindings) reads.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::outbox::model::Destination;
use crate::outbox::retry::{RetryCurve, RetryPolicy};
use crate::proto::PayloadEncoding;
use crate::triggers::binding::{Handler, DEFAULT_MAX_CONCURRENT, DEFAULT_TIMEOUT};
use crate::triggers::config::*;
use crate::triggers::testing::event;

/// `rest`, then two sources (`rest` first, so its top-level keys stay top-level).
fn resolve(rest: &str) -> Result<ResolvedConfig> {
    let text = format!(
        r#"
        {rest}
        [[sources]]
        id = "github-main"
        provider = "github"
        secret_env = "GH"

        [[sources]]
        id = "nightly"
        provider = "cron"
        schedule = "0 3 * * *"
        "#
    );
    RuntimeConfig::from_toml(&text)?.resolve_with(|name| match name {
        "GH" => Some("secret".into()),
        "GW_TOKEN" => Some("gateway-token".into()),
        _ => None,
    })
}

fn err(rest: &str) -> String {
    resolve(rest).unwrap_err().to_string()
}

const GATEWAY: &str = r#"
[gateway]
url = "ws://127.0.0.1:4000"
tenant = "acme"
"#;

fn trigger(body: &str) -> String {
    format!("[[triggers]]\nid = \"t\"\n{body}\n")
}

#[test]
fn defaults_fill_in_without_any_deliver_section() {
    let c = resolve("").unwrap();
    assert!(c.triggers.bindings().is_empty());
    assert!(c.queues.is_empty() && c.gateway.is_none());
    assert_eq!(c.dispatcher, DispatcherSettings::default());
    assert_eq!(c.event_retention_ms, 7 * 24 * 3600 * 1000);
}

#[test]
fn every_option_of_the_shape_resolves() {
    let c = resolve(&format!(
        r#"
        event_retention = "3d"
        {GATEWAY}
        connector_type = "router"
        instance_id = "runtime-1"
        token_env = "GW_TOKEN"

        [dispatcher]
        max_in_flight = 64
        batch = 10
        lease = "45s"
        poll_interval = "250ms"
        max_depth = 3
        shutdown_grace = 5

        [[queues]]
        name = "work"
        visibility_timeout = "1m"
        max_receives = 2

        [[triggers]]
        id = "issues-to-linear"
        sources = ["github-main"]
        events = ["issues.*"]
        filter = 'payload.action == "opened"'
        handler = {{ invoke = "acme.linear.main", capability = "create_issue", encoding = "bytes" }}
        retry = {{ max_attempts = 3, backoff = "linear", base = "2s", cap = "1m", jitter = 0.1 }}
        ordering_key = 'payload.repository.full_name'
        max_concurrent = 4
        timeout = "10s"

        [[triggers]]
        id = "audit"
        handler = {{ local = "audit", capability = "record" }}

        [[triggers]]
        id = "to-work"
        handler = {{ queue = "work" }}

        [[triggers]]
        id = "failures"
        handler = {{ queue = "dead" }}
        dead_letter_for = ["issues-to-linear", "audit"]
        "#
    ))
    .unwrap();
    assert_eq!(c.event_retention_ms, 3 * 24 * 3600 * 1000);
    let gw = c.gateway.as_ref().unwrap();
    assert_eq!(
        (
            gw.tenant.as_str(),
            gw.connector_type.as_str(),
            gw.instance_id.as_str()
        ),
        ("acme", "router", "runtime-1")
    );
    assert_eq!(gw.token.as_ref().unwrap().expose(), b"gateway-token");
    assert!(
        !format!("{c:?}").contains("gateway-token"),
        "the token is redacted"
    );
    assert_eq!(c.dispatcher.max_in_flight, 64);
    assert_eq!(c.dispatcher.lease, Duration::from_secs(45));
    assert_eq!(c.dispatcher.poll_interval, Duration::from_millis(250));
    assert_eq!(c.dispatcher.shutdown_grace, Duration::from_secs(5));
    assert_eq!((c.dispatcher.batch, c.dispatcher.max_depth), (10, 3));

    let b = c.triggers.get("issues-to-linear").unwrap();
    assert_eq!(
        b.handler,
        Handler::Invoke {
            target: "acme.linear.main".into(),
            capability: "create_issue".into(),
            encoding: PayloadEncoding::RawBytes,
        }
    );
    assert_eq!(
        b.retry,
        RetryPolicy {
            max_attempts: 3,
            backoff: RetryCurve::Linear,
            base: Duration::from_secs(2),
            cap: Duration::from_secs(60),
            jitter: 0.1
        }
    );
    assert_eq!((b.max_concurrent, b.timeout), (4, Duration::from_secs(10)));
    let audit = c.triggers.get("audit").unwrap();
    assert_eq!(audit.retry, RetryPolicy::default());
    assert_eq!(
        (audit.max_concurrent, audit.timeout),
        (DEFAULT_MAX_CONCURRENT, DEFAULT_TIMEOUT)
    );
    assert!(c.triggers.get("failures").unwrap().is_dead_letter_handler());

    let names: Vec<_> = c
        .queues
        .iter()
        .map(|q| (q.name.as_str(), q.implicit))
        .collect();
    assert_eq!(names, [("work", false), ("dead", true)]);
    assert_eq!(c.queues[0].visibility_timeout, Duration::from_secs(60));
    assert_eq!(c.queues[0].max_receives, 2);
    assert_eq!(c.queues[1].visibility_timeout, DEFAULT_VISIBILITY_TIMEOUT);
    assert_eq!(c.queues[1].max_receives, DEFAULT_MAX_RECEIVES);

    let ev = event(
        "github-main",
        "issues.opened",
        json!({"action": "opened", "repository": {"full_name": "acme/api"}}),
    );
    let routed = c.triggers.route(&ev, 0);
    let rows: Vec<_> = routed
        .enqueue
        .iter()
        .map(|e| {
            (
                e.binding_id.as_str(),
                e.ordering_key.as_deref(),
                &e.destination,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("issues-to-linear", Some("acme/api"), &Destination::Dispatch),
            ("audit", None, &Destination::Dispatch),
            ("to-work", None, &Destination::Queue("work".into())),
        ],
        "the dead-letter handler takes no ingest event"
    );
}

#[test]
fn a_filter_that_fails_to_compile_refuses_the_config_with_binding_and_position() {
    let msg = err(&trigger(
        "handler = { queue = \"q\" }\nfilter = 'payload.action == \"opened\" &&'",
    ));
    assert!(
        msg.contains("trigger \"t\": filter: syntax error at 1:"),
        "{msg}"
    );
    let key = err(&trigger(
        "handler = { queue = \"q\" }\nordering_key = 'payload.('",
    ));
    assert!(
        key.contains("trigger \"t\": ordering_key: syntax error at 1:"),
        "{key}"
    );
}

#[test]
fn an_unknown_variable_in_a_filter_is_refused_at_load() {
    let msg = err(&trigger(
        "handler = { queue = \"q\" }\nfilter = 'body.action == \"opened\"'",
    ));
    assert!(
        msg.contains("trigger \"t\": filter: unknown variable \"body\" at 1:1"),
        "{msg}"
    );
}

#[test]
fn an_invoke_handler_without_a_gateway_section_is_refused() {
    let handler = "handler = { invoke = \"acme.linear.main\", capability = \"create_issue\" }";
    let msg = err(&trigger(handler));
    assert!(
        msg.contains(
            "trigger \"t\": handler: invoke \"acme.linear.main\" needs a [gateway] section"
        ),
        "{msg}"
    );
    let with = resolve(&format!("{GATEWAY}\n{}", trigger(handler))).unwrap();
    assert!(matches!(
        &with.triggers.get("t").unwrap().handler,
        Handler::Invoke {
            encoding: PayloadEncoding::Json,
            ..
        }
    ));
}

#[test]
fn the_fingerprint_is_stable_across_loads_and_changes_with_any_option() {
    let base =
        "handler = { local = \"audit\", capability = \"record\" }\nfilter = 'kind == \"push\"'";
    let fp = |body: &str| {
        resolve(&trigger(body))
            .unwrap()
            .triggers
            .get("t")
            .unwrap()
            .fingerprint
            .clone()
    };
    let first = fp(base);
    assert_eq!(first, fp(base), "two loads of the same text");
    assert_eq!(first.len(), 64);
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
    let variants = [
        "handler = { local = \"audit\", capability = \"record\" }\nfilter = 'kind == \"pull\"'",
        "handler = { local = \"audit\", capability = \"other\" }\nfilter = 'kind == \"push\"'",
        "handler = { queue = \"audit\" }\nfilter = 'kind == \"push\"'",
        &format!("{base}\nsources = [\"github-main\"]"),
        &format!("{base}\nevents = [\"push\"]"),
        &format!("{base}\nretry = {{ max_attempts = 2 }}"),
        &format!("{base}\nretry = {{ jitter = 0.3 }}"),
        &format!("{base}\nordering_key = 'source'"),
        &format!("{base}\nmax_concurrent = 2"),
        &format!("{base}\ntimeout = \"31s\""),
    ];
    let mut seen = std::collections::HashSet::from([first]);
    for v in variants {
        assert!(
            seen.insert(fp(v)),
            "a change of definition changes the fingerprint: {v}"
        );
    }
    let explicit_defaults = format!("{base}\nmax_concurrent = 64\ntimeout = \"30s\"\nretry = {{}}");
    assert!(
        seen.contains(&fp(&explicit_defaults)),
        "writing a default out is no change"
    );
}

#[test]
fn a_filter_that_errors_on_one_event_skips_only_that_binding() {
    let c = resolve(
        r#"
        [[triggers]]
        id = "needs-pr"
        filter = 'payload.pull_request.merged'
        handler = { queue = "merged" }

        [[triggers]]
        id = "everything"
        handler = { queue = "all" }
        "#,
    )
    .unwrap();
    let routed = c
        .triggers
        .route(&event("github-main", "push", json!({"ref": "main"})), 0);
    assert_eq!(routed.enqueue.len(), 1);
    assert_eq!(routed.enqueue[0].binding_id, "everything");
    assert_eq!(routed.errors.len(), 1);
    assert_eq!(routed.errors[0].0, "needs-pr");
    assert!(
        routed.errors[0].1.contains("pull_request"),
        "{:?}",
        routed.errors
    );
}

#[test]
fn trigger_mistakes_name_the_trigger_and_the_option() {
    let q = "handler = { queue = \"q\" }";
    for (body, expected) in [
        (
            "id = \"a b\"\nhandler = { queue = \"q\" }",
            "trigger id \"a b\" must be",
        ),
        (
            &format!("{q}\nsources = [\"gitlab\"]"),
            "trigger \"t\": sources: \"gitlab\" is not a configured source",
        ),
        (
            &format!("{q}\nevents = [\"*.opened\"]"),
            "trigger \"t\": events: \"*.opened\" is not a kind pattern",
        ),
        (
            &format!("{q}\nevents = [\"\"]"),
            "events: \"\" is not a kind pattern",
        ),
        (
            "handler = { queue = \"q\", local = \"x\" }",
            "handler: name exactly one of",
        ),
        (
            "handler = { capability = \"x\" }",
            "handler: name exactly one of",
        ),
        (
            "handler = { local = \"x\" }",
            "handler: capability is required",
        ),
        (
            "handler = { queue = \"q\", capability = \"x\" }",
            "a queue handler takes no capability",
        ),
        (
            "handler = { local = \"x\", capability = \"c\", encoding = \"json\" }",
            "encoding applies to invoke handlers only",
        ),
        (
            "handler = { queue = \"a/b\" }",
            "handler: queue \"a/b\" must be",
        ),
        (
            &format!("{q}\nretry = {{ max_attempts = 0 }}"),
            "retry: max_attempts must be at least 1",
        ),
        (
            &format!("{q}\nretry = {{ base = \"10s\", cap = \"5s\" }}"),
            "retry: base (10s) exceeds cap (5s)",
        ),
        (
            &format!("{q}\nretry = {{ jitter = 1.5 }}"),
            "retry: jitter 1.5 is outside [0, 1]",
        ),
        (
            &format!("{q}\nretry = {{ backoff = \"fibonacci\" }}"),
            "retry: backoff \"fibonacci\"",
        ),
        (
            &format!("{q}\nretry = {{ base = \"0s\" }}"),
            "retry: base: must be positive",
        ),
        (
            &format!("{q}\nmax_concurrent = 0"),
            "trigger \"t\": max_concurrent: must be at least 1",
        ),
        (
            &format!("{q}\ntimeout = \"0s\""),
            "trigger \"t\": timeout: must be positive",
        ),
        (
            &format!("{q}\ntimeout = \"soon\""),
            "trigger \"t\": timeout: \"soon\" is not a duration",
        ),
        (
            &format!("{q}\ndead_letter_for = \"all\""),
            "dead_letter_for: \"all\": write \"*\"",
        ),
        (
            &format!("{q}\ndead_letter_for = []"),
            "dead_letter_for: the list is empty",
        ),
        (
            &format!("{q}\ndead_letter_for = [\"ghost\"]"),
            "trigger \"t\": dead_letter_for names \"ghost\", which is not a configured trigger",
        ),
        (
            &format!("{q}\ndead_letter_for = \"*\"\nevents = [\"push\"]"),
            "trigger \"t\": events: does not apply to a dead-letter handler",
        ),
    ] {
        let text = if body.starts_with("id =") {
            format!("[[triggers]]\n{body}\n")
        } else {
            trigger(body)
        };
        let msg = err(&text);
        assert!(
            msg.contains(expected),
            "{body:?}\n  gave: {msg}\n  wanted: {expected}"
        );
    }
    for target in ["acme.linear", "matrix:acme:linear", "acme..main", ""] {
        let handler = format!("handler = {{ invoke = {target:?}, capability = \"c\" }}");
        let msg = err(&format!("{GATEWAY}\n{}", trigger(&handler)));
        assert!(msg.contains("is neither an ARN"), "{target}: {msg}");
    }
    for target in [
        "acme.linear.main",
        "matrix:acme:linear:main",
        "acme.linear.eu.1",
    ] {
        let handler = format!("handler = {{ invoke = {target:?}, capability = \"c\" }}");
        assert!(
            resolve(&format!("{GATEWAY}\n{}", trigger(&handler))).is_ok(),
            "{target}"
        );
    }
    let twice = err(&format!("{}{}", trigger(q), trigger(q)));
    assert!(twice.contains("two triggers have the id \"t\""), "{twice}");
}

#[test]
fn queue_and_deliver_section_mistakes_are_named() {
    for (text, expected) in [
        (
            "[[queues]]\nname = \"w\"\n[[queues]]\nname = \"w\"",
            "two queues have the name \"w\"",
        ),
        ("[[queues]]\nname = \"\"", "queue name \"\" must be"),
        (
            "[[queues]]\nname = \"w\"\nmax_receives = 0",
            "queue \"w\": max_receives: must be at least 1",
        ),
        (
            "[[queues]]\nname = \"w\"\nvisibility_timeout = \"0ms\"",
            "queue \"w\": visibility_timeout: must be positive",
        ),
        (
            "[gateway]\nurl = \"ftp://x\"\ntenant = \"acme\"",
            "[gateway] url:",
        ),
        (
            "[gateway]\nurl = \"ws://x\"\ntenant = \" \"",
            "[gateway] tenant is empty",
        ),
        (
            "[gateway]\nurl = \"ws://x\"\ntenant = \"a\"\ntoken_env = \"NOPE\"",
            "[gateway] token_env names NOPE, which is unset or empty",
        ),
        (
            "[dispatcher]\nbatch = 0",
            "[dispatcher] batch: must be at least 1",
        ),
        (
            "[dispatcher]\nlease = \"0s\"",
            "[dispatcher] lease: must be positive",
        ),
        (
            "[dispatcher]\npoll_interval = -1",
            "[dispatcher] poll_interval: -1 is negative",
        ),
        (
            "event_retention = \"0d\"",
            "event_retention: must be positive",
        ),
    ] {
        let msg = err(text);
        assert!(msg.contains(expected), "{text:?}\n  gave: {msg}");
    }
    for typo in [
        "[gateway]\nurl = \"ws://x\"\ntenant = \"a\"\ntoken = \"x\"",
        "[dispatcher]\nmax_inflight = 3",
        "[[queues]]\nname = \"w\"\nvisibility = \"1s\"",
        "[[triggers]]\nid = \"t\"\nhandler = { queue = \"q\" }\nfilters = \"true\"",
        "[[triggers]]\nid = \"t\"\nhandler = { queue = \"q\", encodng = \"json\" }",
    ] {
        assert!(err(typo).contains("unknown field"), "{typo}");
    }
}
