//! Parsing, checking and storing `[[triggers]]` tables one at a time; the whole
//! file's resolution is tested in `runtime::config`.

use super::*;

fn table(text: &str) -> TriggerConfig {
    toml::from_str(text).unwrap()
}

fn resolved(text: &str) -> Result<Binding> {
    table(text).resolve(&Known {
        sources: None,
        gateway: true,
    })
}

const FLOW: &str = r#"
    id = "t"
    handler = { local = "audit", capability = "record" }
    priority = -7
    debounce = { key = 'payload.issue.id', window = "5s" }
    dedupe_key = 'payload.delivery'
    dedupe_retention = "2h"
    throttle = { starts = 10, per = "1s" }
    breaker = { errors = 5, cool_off = "1m" }
"#;

#[test]
fn flow_control_options_resolve() {
    let b = resolved(FLOW).unwrap();
    assert_eq!(b.priority, -7);
    let d = b.debounce.as_ref().unwrap();
    assert_eq!(
        (d.key.source(), d.window),
        ("payload.issue.id", Duration::from_secs(5))
    );
    let d = b.dedupe.as_ref().unwrap();
    assert_eq!(
        (d.key.source(), d.retention),
        ("payload.delivery", Duration::from_secs(7200))
    );
    let t = b.throttle.unwrap();
    assert_eq!((t.starts, t.per), (10, Duration::from_secs(1)));
    let br = b.breaker.unwrap();
    assert_eq!((br.errors, br.cool_off), (5, Duration::from_secs(60)));
    let default_retention =
        resolved("id = \"t\"\nhandler = { queue = \"q\" }\ndedupe_key = 'id'").unwrap();
    assert_eq!(
        default_retention.dedupe.unwrap().retention,
        flow::DEFAULT_DEDUPE_RETENTION
    );
}

/// What versions store and [`rebuild`] reads back: the same binding, the same
/// fingerprint, every flow-control option included.
#[test]
fn definitions_round_trip_through_rebuild() {
    let plain = "id = \"t\"\nhandler = { local = \"audit\", capability = \"record\" }";
    for text in [plain, FLOW] {
        let b = resolved(text).unwrap();
        let json = definition_json(&b);
        let again = rebuild(&json).unwrap();
        assert_eq!(again.fingerprint, b.fingerprint, "{json}");
        assert_eq!(definition_json(&again), json);
        assert_eq!(again.priority, b.priority);
        assert_eq!(
            again
                .debounce
                .map(|d| (d.key.source().to_owned(), d.window)),
            b.debounce.map(|d| (d.key.source().to_owned(), d.window))
        );
        assert_eq!(
            again
                .dedupe
                .map(|d| (d.key.source().to_owned(), d.retention)),
            b.dedupe.map(|d| (d.key.source().to_owned(), d.retention))
        );
        assert_eq!(again.throttle, b.throttle);
        assert_eq!(again.breaker, b.breaker);
    }
    let json = definition_json(&resolved(plain).unwrap());
    for option in ["priority", "debounce", "dedupe", "throttle", "breaker"] {
        assert!(
            !json.contains(option),
            "an unset option is not written: {json}"
        );
    }
}

#[test]
fn flow_control_mistakes_name_the_trigger_and_the_option() {
    let local = "id = \"t\"\nhandler = { local = \"a\", capability = \"c\" }";
    let queue = "id = \"t\"\nhandler = { queue = \"q\" }";
    for (base, option, expected) in [
        (
            local,
            "priority = 1001",
            "trigger \"t\": priority: 1001 is outside -1000..=1000",
        ),
        (
            local,
            "priority = -1001",
            "trigger \"t\": priority: -1001 is outside",
        ),
        (
            local,
            "debounce = { window = \"5s\" }",
            "trigger \"t\": debounce: key is required",
        ),
        (
            local,
            "debounce = { key = 'id' }",
            "trigger \"t\": debounce: window is required",
        ),
        (
            local,
            "debounce = { key = 'id', window = \"0s\" }",
            "trigger \"t\": debounce: window: must be positive",
        ),
        (
            local,
            "debounce = { key = 'nope', window = \"1s\" }",
            "trigger \"t\": debounce: unknown variable \"nope\"",
        ),
        (
            local,
            "dedupe_key = 'nope'",
            "trigger \"t\": dedupe_key: unknown variable \"nope\"",
        ),
        (
            local,
            "dedupe_retention = \"1h\"",
            "trigger \"t\": dedupe_retention: needs dedupe_key",
        ),
        (
            local,
            "dedupe_key = 'id'\ndedupe_retention = \"0s\"",
            "trigger \"t\": dedupe_retention: must be positive",
        ),
        (
            local,
            "throttle = { starts = 0, per = \"1s\" }",
            "trigger \"t\": throttle: starts must be at least 1",
        ),
        (
            local,
            "throttle = { starts = 1 }",
            "trigger \"t\": throttle: per is required",
        ),
        (
            local,
            "throttle = { starts = 1, per = \"0s\" }",
            "trigger \"t\": throttle: per: must be positive",
        ),
        (
            local,
            "breaker = { errors = -1, cool_off = \"1m\" }",
            "trigger \"t\": breaker: errors must be at least 1",
        ),
        (
            local,
            "breaker = { errors = 3, cool_off = \"soon\" }",
            "trigger \"t\": breaker: cool_off: \"soon\" is not a duration",
        ),
        (
            local,
            "dead_letter_for = \"*\"\ndebounce = { key = 'id', window = \"1s\" }",
            "trigger \"t\": debounce: does not apply to a dead-letter handler",
        ),
        (
            local,
            "dead_letter_for = \"*\"\ndedupe_key = 'id'",
            "trigger \"t\": dedupe_key: does not apply to a dead-letter handler",
        ),
        (
            queue,
            "priority = 3",
            "trigger \"t\": priority: applies to invoke, local and http",
        ),
        (
            queue,
            "debounce = { key = 'id', window = \"1s\" }",
            "trigger \"t\": debounce: applies to invoke, local and http",
        ),
    ] {
        let msg = resolved(&format!("{base}\n{option}"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(expected),
            "{option}\n  gave: {msg}\n  wanted: {expected}"
        );
    }
    assert!(
        toml::from_str::<TriggerConfig>(&format!(
            "{local}\ndebounce = {{ key = 'id', wait = \"1s\" }}"
        ))
        .is_err(),
        "unknown keys in an option table are refused"
    );
    assert!(resolved(&format!("{queue}\ndedupe_key = 'id'")).is_ok());
}

#[test]
fn encodings_are_the_lower_case_names_switchboard_can_encode() {
    for (name, expected) in [
        ("json", Ok(PayloadEncoding::Json)),
        ("bytes", Ok(PayloadEncoding::RawBytes)),
        ("raw_bytes", Ok(PayloadEncoding::RawBytes)),
        ("json_lines", Ok(PayloadEncoding::JsonLines)),
    ] {
        assert_eq!(parse_encoding(name), expected);
    }
    for (name, reason) in [
        ("JSON", "lower case"),
        ("msgpack", "not one switchboard can encode"),
        ("parquet", "not one switchboard can encode"),
        ("yaml", "unknown"),
        ("payload_encoding_unspecified", "unknown"),
    ] {
        let e = parse_encoding(name).unwrap_err();
        assert!(e.contains(reason), "{name}: {e}");
    }
}

/// An `http` handler's definition survives the store's round trip with its
/// fingerprint, in both `secret_env` forms, and the handler's own options reach the
/// binding.
#[test]
fn http_handlers_resolve_and_round_trip_through_rebuild() {
    let one = r#"
        id = "out"
        handler = { http = "https://example.com/hook", secret_env = "HOOK", timeout = "3s", retry_4xx = true }
    "#;
    let many = r#"
        id = "out"
        handler = { http = "http://example.com:8080/h?x=1", secret_env = ["NEW", "OLD"] }
    "#;
    let files = r#"
        id = "out"
        handler = { http = "https://example.com/hook", secret_file = "/run/secrets/hook" }
    "#;
    let both = r#"
        id = "out"
        handler = { http = "https://example.com/hook", secret_env = "HOOK", secret_file = ["/a", "/b"] }
    "#;
    for text in [one, many, files, both] {
        let b = resolved(text).unwrap();
        let json = definition_json(&b);
        let again = rebuild(&json).unwrap();
        assert_eq!(again.fingerprint, b.fingerprint, "{json}");
        assert_eq!(again.handler, b.handler);
        assert_eq!(definition_json(&again), json);
    }
    let Handler::Http {
        secret_env,
        timeout,
        retry_4xx,
        ..
    } = resolved(one).unwrap().handler
    else {
        panic!("an http handler")
    };
    assert_eq!(
        (secret_env, timeout, retry_4xx),
        (vec!["HOOK".to_owned()], Duration::from_secs(3), true)
    );
    let Handler::Http {
        timeout, retry_4xx, ..
    } = resolved(many).unwrap().handler
    else {
        panic!("an http handler")
    };
    assert_eq!(
        (timeout, retry_4xx),
        (super::super::binding::DEFAULT_HTTP_TIMEOUT, false)
    );
    assert_ne!(
        resolved(one).unwrap().fingerprint,
        resolved(&one.replace("3s", "4s")).unwrap().fingerprint,
        "the handler's options are part of the definition"
    );
    let Handler::Http { secret_file, .. } = resolved(both).unwrap().handler else {
        panic!("an http handler")
    };
    assert_eq!(secret_file, ["/a", "/b"]);
    assert!(
        !definition_json(&resolved(one).unwrap()).contains("secret_file"),
        "unset, it is not written, so older definitions keep their fingerprints"
    );
    let e = resolved("id = \"q\"\nhandler = { queue = \"w\", secret_file = \"/a\" }")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("secret_file applies to http handlers only"),
        "{e}"
    );
}

#[test]
fn http_handler_mistakes_name_the_trigger_and_the_option() {
    let cases = [
        (
            r#"handler = { http = "https://e.com/", secret_env = "S", invoke = "a.b.c" }"#,
            "name exactly one of",
        ),
        (
            r#"handler = { http = "https://e.com/", secret_env = "S", capability = "x" }"#,
            "takes no capability",
        ),
        (
            r#"handler = { http = "https://e.com/" }"#,
            "secret_env or secret_file is required",
        ),
        (
            r#"handler = { local = "a", capability = "x", retry_4xx = true }"#,
            "retry_4xx applies to http handlers only",
        ),
        (
            r#"handler = { http = "file:///etc/passwd", secret_env = "S" }"#,
            "the scheme must be http or https",
        ),
    ];
    for (handler, needle) in cases {
        let e = resolved(&format!("id = \"t\"\n{handler}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("trigger \"t\": handler: ") && e.contains(needle),
            "{handler}\n  gave: {e}"
        );
    }
}
