//! `examples/switchboard.toml` says it shows and explains every option: these tests
//! hold it to that, and check that it loads as shipped and with its commented-out
//! settings uncommented.
//!
//! Where the list of keys comes from: the configuration's serde structs, asked at
//! test time, so there is no list here to keep up to date. Every table of the file
//! but a source's is a struct with `deny_unknown_fields`, and serde refuses an
//! unknown key by naming the struct's fields ("unknown field `__probe__`, expected
//! one of `listen`, …"). A probe key at a path gives that table's keys; a probe one
//! level down tells a table (another list of keys) or an array of tables (a probe in
//! an element) from a plain value (a type error), so the walk finds `retry`,
//! `[outbound] breaker` or `[[triggers]]` by itself. A source table flattens its
//! provider's options into the struct, so serde cannot name its fields; for that
//! table the walk takes `ingress::source::RUNTIME_KEYS`, which the compiler checks
//! against the struct. A key added to any of these structs is in the walk at once,
//! and `the_example_shows_every_key` fails until the example shows it.
//!
//! Why not the alternatives: walking a fully-populated configuration's serialised
//! form needs `Serialize` on every struct and a "full" value that is itself a list
//! someone must remember to extend (a new `Option` left `None` is invisible); a list
//! of keys beside the structs drifts unless something checks it against them, which
//! is what the probe does. A provider's own options (`schedule`, `url`, …) are its
//! connector's, documented with it (README, `src/ingress/builtin/`), and not walked.

use std::collections::BTreeSet;

use super::*;

/// The example as shipped.
const EXAMPLE: &str = include_str!("../../../examples/switchboard.toml");

/// The example with `# key = value` and `# [section]` lines uncommented, prose
/// comments left alone: what it shows, as TOML.
fn uncommented_example() -> String {
    EXAMPLE
        .lines()
        .map(|l| {
            let uncommented = l.strip_prefix("# ").unwrap_or(l);
            let toml_line = uncommented.starts_with('[')
                || uncommented
                    .split_once(" = ")
                    .is_some_and(|(k, _)| !k.contains(' ') && !k.is_empty());
            if toml_line {
                uncommented
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One step of a key's path: a table's key, or an element of an array of tables.
#[derive(Clone)]
enum Step {
    Key(String),
    Element,
}

/// `triggers[].handler.http`: how paths are written here.
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Element => out.push_str("[]"),
        }
    }
    out
}

/// The keys serde names for the table at `path`, or `None` when no struct with
/// `deny_unknown_fields` is there.
fn probe(path: &[Step]) -> Option<Vec<String>> {
    let mut value = toml::Value::Table(toml::Table::from_iter([(
        "__probe__".to_owned(),
        toml::Value::Integer(1),
    )]));
    for step in path.iter().rev() {
        value = match step {
            Step::Key(k) => toml::Value::Table(toml::Table::from_iter([(k.clone(), value)])),
            Step::Element => toml::Value::Array(vec![value]),
        };
    }
    let text = toml::to_string(&value).expect("a table serialises");
    let error = RuntimeConfig::from_toml(&text).err()?.to_string();
    let marker = "unknown field `__probe__`";
    let listed = &error[error.find(marker)? + marker.len()..];
    // "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, …".
    Some(
        listed
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every key path of the configuration, from the structs (see the module docs).
fn config_keys() -> BTreeSet<String> {
    fn walk(path: &[Step], keys: Vec<String>, out: &mut BTreeSet<String>) {
        for key in keys {
            let mut here = path.to_vec();
            here.push(Step::Key(key));
            out.insert(render(&here));
            let mut element = here.clone();
            element.push(Step::Element);
            if let Some(keys) = probe(&here) {
                walk(&here, keys, out);
            } else if let Some(keys) = probe(&element) {
                walk(&element, keys, out);
            } else if render(&element) == "sources[]" {
                let keys = crate::ingress::source::RUNTIME_KEYS;
                walk(&element, keys.iter().map(|k| k.to_string()).collect(), out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(
        &[],
        probe(&[]).expect("the top level lists its keys"),
        &mut out,
    );
    out
}

/// Every key path the example shows, commented out or not.
fn example_keys() -> BTreeSet<String> {
    fn walk(path: &str, value: &toml::Value, out: &mut BTreeSet<String>) {
        match value {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    let here = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    out.insert(here.clone());
                    walk(&here, v, out);
                }
            }
            toml::Value::Array(items) => {
                for item in items.iter().filter(|i| i.is_table()) {
                    walk(&format!("{path}[]"), item, out);
                }
            }
            _ => {}
        }
    }
    let shown: toml::Value = toml::from_str(&uncommented_example())
        .expect("examples/switchboard.toml with its `# key = value` lines uncommented is TOML");
    let mut out = BTreeSet::new();
    walk("", &shown, &mut out);
    out
}

#[test]
fn the_walk_finds_the_keys_of_every_kind_of_table() {
    // If serde's wording changed and the probe found nothing, the next test would
    // pass for no reason; these paths cover each way the walk descends.
    let keys = config_keys();
    for path in [
        "listen",
        "gateway.tenant",
        "dispatcher.shutdown_grace",
        "outbound.allow",
        "outbound.breaker.cool_off",
        "queues[].max_receives",
        "sources[].poll_lease_secs",
        "sources[].rate_limit.burst",
        "triggers[].retry.jitter",
        "triggers[].handler.secret_file",
        "triggers[].throttle.per",
    ] {
        assert!(keys.contains(path), "{path} not found in {keys:?}");
    }
    assert!(
        !keys.iter().any(|k| k.starts_with("sources[].schedule")),
        "a provider's options are its own"
    );
}

#[test]
fn the_example_shows_every_key() {
    let shown = example_keys();
    let missing: Vec<String> = config_keys()
        .into_iter()
        .filter(|k| !shown.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "examples/switchboard.toml does not show {missing:?}; show each one there (as a \
         `# key = value` line if it should not be active), with its default and what it \
         is for"
    );
}

#[test]
fn the_shipped_example_config_resolves() {
    let c = RuntimeConfig::from_toml(EXAMPLE)
        .unwrap()
        .resolve_with(|_| Some("x".into()))
        .unwrap();
    assert_eq!(c.sources.len(), 2);
    assert!(c.store.starts_with("sqlite:"));
    let ids: Vec<_> = c
        .triggers
        .bindings()
        .iter()
        .map(|b| b.id.as_str())
        .collect();
    assert_eq!(ids, ["nightly-to-work", "dead-letters"]);
    let queues: Vec<_> = c.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(queues, ["work", "dead-letters"]);
    assert_eq!(c.dispatcher, DispatcherSettings::default());
}

#[test]
fn the_shipped_example_config_resolves_with_everything_uncommented() {
    // The example's secret files are under /run/secrets/; here they are written to a
    // directory of the test's, holding a Standard Webhooks secret as every variable
    // does (the `http` handlers check theirs at load).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let dir = tempfile::tempdir().unwrap();
    let mut text = uncommented_example();
    for name in EXAMPLE.split("\"/run/secrets/").skip(1) {
        let name = name.split('"').next().unwrap();
        std::fs::write(dir.path().join(name), SECRET).unwrap();
    }
    text = text.replace("\"/run/secrets/", &format!("\"{}/", dir.path().display()));
    let c = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|_| Some(SECRET.into()))
        .unwrap();
    assert_eq!(c.gateway.as_ref().unwrap().tenant, "acme");
    assert!(c.triggers.get("issues-to-linear").is_some());
    assert!(c.triggers.get("audit-pushes").is_some());
    assert!(c.triggers.get("to-partner").is_some());
}
