//! `examples/deploy/` cannot run here (no cluster, no systemd), so this checks what
//! would make it wrong: the manifest parses as YAML, its probes ask the paths the
//! binary answers on the port its config listens on, the pod's grace outlasts the
//! runtime's graceful stop, its config loads with the crate's own loader (and passes
//! `switchboard serve --check`), and every command line uses flags the binary accepts.
#![cfg(all(feature = "gateway", feature = "runtime"))]

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize as _;
use serde_yaml_ng::Value;
use switchboard::RuntimeConfig;

const MANIFEST: &str = include_str!("../examples/deploy/kubernetes.yaml");
const UNIT: &str = include_str!("../examples/deploy/switchboard.service");
const UNIT_CONFIG: &str = include_str!("../examples/switchboard.toml");

/// What a graceful stop may take beyond `shutdown_grace`: the sources' ~5 s and a
/// margin, so SIGKILL never cuts a stop that is on time.
const STOP_MARGIN: Duration = Duration::from_secs(10);

fn documents() -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(MANIFEST)
        .map(|d| Value::deserialize(d).expect("kubernetes.yaml parses"))
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("kubernetes.yaml has a {kind}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("a list: {v:?}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// Asserts `args` (a subcommand and its flags) is a command line the binary accepts:
/// each `--flag` is in the subcommand's `--help`, and the whole line parses (clap
/// refuses an unknown flag or a missing value before it reaches `--help`).
fn assert_accepted(args: &[String]) {
    let bin = env!("CARGO_BIN_EXE_switchboard");
    let help = Command::new(bin)
        .args([args[0].as_str(), "--help"])
        .output()
        .unwrap();
    assert!(help.status.success(), "{} --help", args[0]);
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let listed = help.lines().any(|l| {
            let l = l.trim_start();
            l.strip_prefix(flag.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '=']))
        });
        assert!(
            listed,
            "{flag} is in `switchboard {} --help`:\n{help}",
            args[0]
        );
    }
    let parsed = Command::new(bin).args(args).arg("--help").output().unwrap();
    assert!(
        parsed.status.success(),
        "switchboard {args:?} parses: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
}

/// The port a probe names: a number, or the name of one of the container's ports.
fn probe_port(probe: &Value, ports: &HashMap<String, u16>) -> u16 {
    let port = &probe["httpGet"]["port"];
    match port.as_u64() {
        Some(n) => u16::try_from(n).unwrap(),
        None => ports[port.as_str().expect("a port number or name")],
    }
}

#[test]
fn the_kubernetes_manifest_probes_the_configured_port_and_outlasts_the_graceful_stop() {
    let docs = documents();
    let config_map = of_kind(&docs, "ConfigMap");
    let deployment = of_kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let init = &pod["initContainers"][0];

    // The config the pod mounts, loaded and resolved by the crate's loader with the
    // variables the container sets (so every secret it names is provided).
    let args = strings(&container["args"]);
    let config_path = &args[args.iter().position(|a| a == "--config").unwrap() + 1];
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| config_path.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the config path is on a mounted volume");
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(
        volume["configMap"]["name"], config_map["metadata"]["name"],
        "the config volume is the ConfigMap"
    );
    let key = config_path
        .strip_prefix(mount["mountPath"].as_str().unwrap())
        .unwrap()
        .trim_start_matches('/');
    let text = config_map["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("the ConfigMap has {key}"));
    let env: HashMap<String, String> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_owned(), "set".to_owned()))
        .collect();
    let resolved = RuntimeConfig::from_toml(text)
        .unwrap()
        .resolve_with(|name| env.get(name).cloned())
        .expect("the mounted config resolves with the container's environment");

    let ports: HashMap<String, u16> = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                u16::try_from(p["containerPort"].as_u64().unwrap()).unwrap(),
            )
        })
        .collect();
    assert!(ports.values().any(|p| *p == resolved.listen.port()));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let probe = &container[probe];
        assert_eq!(probe["httpGet"]["path"].as_str(), Some(path));
        assert_eq!(
            probe_port(probe, &ports),
            resolved.listen.port(),
            "{path} is asked on the port the config listens on"
        );
    }

    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    assert!(
        grace > resolved.dispatcher.shutdown_grace + STOP_MARGIN,
        "terminationGracePeriodSeconds {grace:?} > shutdown_grace {:?} + {STOP_MARGIN:?}",
        resolved.dispatcher.shutdown_grace
    );

    assert_accepted(&args);
    let init_args = strings(&init["args"]);
    assert!(init_args.iter().any(|a| a == "--check"), "{init_args:?}");
    assert!(
        init_args.contains(config_path),
        "the init check reads the same config"
    );
    assert_eq!(
        init["env"], container["env"],
        "the check sees the same secrets"
    );
    assert_eq!(init["volumeMounts"], container["volumeMounts"]);
    assert_accepted(&init_args);
}

#[test]
fn the_manifest_config_passes_serve_check() {
    let docs = documents();
    let text = of_kind(&docs, "ConfigMap")["data"]["switchboard.toml"]
        .as_str()
        .unwrap()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    // The store's directory does not exist here: the check says it will be created,
    // and creates nothing.
    let store = std::path::Path::new("/var/lib/switchboard/events.db");
    assert!(!store.exists());
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--check", "--config"])
        .arg(&config)
        .env("SWITCHBOARD_ADMIN_TOKEN", "t")
        .env("GITHUB_WEBHOOK_SECRET", "s")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!store.exists());
}

/// The unit's `[Service]` settings, each key's values in order.
fn service() -> HashMap<String, Vec<String>> {
    let mut section = "";
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for line in UNIT.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let (key, value) = line.split_once('=').expect("key=value");
        if section == "[Service]" {
            out.entry(key.to_owned())
                .or_default()
                .push(value.to_owned());
        }
    }
    out
}

/// A systemd time span as the unit writes them: seconds, bare or with `s`.
fn seconds(v: &str) -> Duration {
    Duration::from_secs(v.trim_end_matches('s').parse().expect("seconds"))
}

#[test]
fn the_systemd_unit_checks_before_it_starts_and_outlasts_the_graceful_stop() {
    let service = service();
    let one = |key: &str| -> &str {
        let v = &service[key];
        assert_eq!(v.len(), 1, "{key} once");
        &v[0]
    };
    let command = |key: &str| -> Vec<String> {
        let mut words = one(key).split_whitespace().map(str::to_owned);
        assert_eq!(words.next().unwrap(), "/usr/local/bin/switchboard");
        words.collect()
    };
    let start = command("ExecStart");
    let pre = command("ExecStartPre");
    assert_eq!(start[0], "serve");
    assert!(pre.iter().any(|a| a == "--check"), "{pre:?}");
    assert_eq!(
        pre.iter().filter(|a| *a != "--check").collect::<Vec<_>>(),
        start.iter().collect::<Vec<_>>(),
        "the check reads what the service will"
    );
    assert_accepted(&start);
    assert_accepted(&pre);
    assert_eq!(one("KillSignal"), "SIGTERM");
    assert_eq!(one("Restart"), "on-failure");

    // The config the unit's comment names as the one to install.
    let config = RuntimeConfig::from_toml(UNIT_CONFIG).unwrap();
    let grace = config
        .resolve_with(|_| Some("set".into()))
        .unwrap()
        .dispatcher
        .shutdown_grace;
    assert!(
        seconds(one("TimeoutStopSec")) > grace + STOP_MARGIN,
        "TimeoutStopSec > shutdown_grace {grace:?} + {STOP_MARGIN:?}"
    );
}
