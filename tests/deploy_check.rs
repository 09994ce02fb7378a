//! `switchboard serve --check` and `switchboard gateway --check` as a deploy pipeline
//! runs them: the real binary on a config file, its exit status and what it prints.
//! Each broken part is named on its own line; nothing is created, migrated or bound.
#![cfg(all(feature = "gateway", feature = "runtime"))]

#[path = "ingest/support.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

/// `switchboard <args>` with `env` added and the check's own variables removed.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .env_remove("SWITCHBOARD_CHECK_GH")
        .env_remove("SWITCHBOARD_CHECK_ADMIN")
        .env_remove("SWITCHBOARD_CONFIG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("the switchboard binary runs")
}

/// `switchboard serve --check --config <dir>/switchboard.toml` on `text`.
fn check(dir: &Path, text: &str, env: &[(&str, &str)]) -> (bool, String) {
    let config = dir.join("switchboard.toml");
    std::fs::write(&config, text).unwrap();
    let out = run(
        &["serve", "--check", "--config", config.to_str().unwrap()],
        env,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), stdout)
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("data").join("events.db").display())
}

#[test]
fn a_valid_config_passes_with_a_summary_and_its_sqlite_file_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
listen = "127.0.0.1:18787"
store = "{}"
[gateway]
url = "ws://127.0.0.1:4000"
tenant = "acme"
[dispatcher]
shutdown_grace = "12s"
[[sources]]
id = "gh"
provider = "github"
secret_env = "SWITCHBOARD_CHECK_GH"
[[triggers]]
id = "opened"
sources = ["gh"]
filter = 'payload.action == "opened"'
handler = {{ invoke = "acme.linear.main", capability = "create_issue" }}
[[triggers]]
id = "to-work"
handler = {{ queue = "work" }}
"#,
        sqlite(dir.path())
    );
    let (ok, stdout) = check(dir.path(), &text, &[("SWITCHBOARD_CHECK_GH", "s3cret")]);
    assert!(ok, "{stdout}");
    for line in [
        format!("config: {}", dir.path().join("switchboard.toml").display()),
        "listen: 127.0.0.1:18787 (GET /healthz, GET /readyz)".into(),
        format!(
            "store: {}: no file yet: it will be created",
            sqlite(dir.path())
        ),
        "source gh: provider github".into(),
        "trigger opened: invoke acme.linear.main".into(),
        "trigger to-work: queue work".into(),
        "gateway: ws://127.0.0.1:4000 tenant acme".into(),
        "dispatcher: shutdown_grace 12 s".into(),
        "check passed".into(),
    ] {
        assert!(stdout.contains(&line), "{line:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("s3cret"), "a secret's value never prints");
    assert!(
        !dir.path().join("data").exists(),
        "--check creates neither the SQLite file nor its directory"
    );
}

#[test]
fn every_problem_is_named_on_its_own_line_and_the_exit_status_is_1() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
store = "{}"
admin_token_env = "SWITCHBOARD_CHECK_ADMIN"
[[sources]]
id = "gh"
provider = "github"
secret_env = "SWITCHBOARD_CHECK_GH"
[[sources]]
id = "mystery"
provider = "no_such_provider"
[[triggers]]
id = "broken-filter"
filter = "payload.action =="
handler = {{ queue = "work" }}
"#,
        sqlite(dir.path())
    );
    let (ok, stdout) = check(dir.path(), &text, &[]);
    assert!(!ok, "{stdout}");
    let problems: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("problem: "))
        .collect();
    for needle in [
        "SWITCHBOARD_CHECK_ADMIN",
        "SWITCHBOARD_CHECK_GH",
        "no_such_provider",
        "\"broken-filter\"",
    ] {
        assert_eq!(
            problems.iter().filter(|p| p.contains(needle)).count(),
            1,
            "one problem line names {needle}:\n{stdout}"
        );
    }
    assert!(
        stdout.trim_end().ends_with("check failed: 4 problems"),
        "{stdout}"
    );
}

#[test]
fn a_config_that_does_not_parse_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout) = check(dir.path(), "listen = \"nowhere\"\n", &[]);
    assert!(!ok);
    assert!(
        stdout.contains("problem: ") && stdout.contains("switchboard.toml"),
        "{stdout}"
    );
}

#[test]
fn a_sqlite_store_with_a_newer_schema_fails_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let path = dir.path().join("data").join("events.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
         INSERT INTO schema_migrations VALUES (1, 0), (999, 0);",
    )
    .unwrap();
    drop(conn);
    let before = std::fs::read(&path).unwrap();
    let (ok, stdout) = check(
        dir.path(),
        &format!("store = \"{}\"\n", sqlite(dir.path())),
        &[],
    );
    assert!(!ok, "{stdout}");
    let problem = stdout
        .lines()
        .find(|l| l.starts_with("problem: store "))
        .unwrap_or_else(|| panic!("a store problem in:\n{stdout}"));
    assert!(
        problem.contains("schema version 999") && problem.contains("run a newer switchboard"),
        "{problem}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing migrated");
}

#[tokio::test]
async fn a_migrated_sqlite_store_is_reported_at_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite(dir.path());
    drop(
        switchboard::__private::store::open_backend(&url, &Default::default())
            .await
            .unwrap(),
    );
    let (ok, stdout) = check(dir.path(), &format!("store = \"{url}\"\n"), &[]);
    assert!(ok, "{stdout}");
    let line = stdout.lines().find(|l| l.starts_with("store: ")).unwrap();
    let (at, known) = line
        .split_once("at schema version ")
        .and_then(|(_, v)| v.split_once(" of "))
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(at, known, "{line}");
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_postgres_store_fails_naming_it_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (ok, stdout) = check(
        dir.path(),
        &format!("store = \"postgres://app:hunter2@127.0.0.1:{closed}/test\"\n"),
        &[],
    );
    assert!(!ok, "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("problem: ")
            && l.contains("cannot reach the PostgreSQL store")
            && l.contains(&format!("127.0.0.1:{closed}"))),
        "{stdout}"
    );
    assert!(!stdout.contains("hunter2"), "{stdout}");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_store_is_read_empty_then_migrated_then_newer_and_never_migrated_by_the_check() {
    let Some(base) = support::postgres_url() else {
        return support::skip_postgres("a_postgres_store_is_read_empty_then_migrated_then_newer");
    };
    let url = support::fresh_postgres_schema(&base).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!("store = \"{url}\"\n");
    let (ok, stdout) = check(dir.path(), &text, &[]);
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("empty: migrations will run at start"),
        "{stdout}"
    );
    let (ok, again) = check(dir.path(), &text, &[]);
    assert!(
        ok && again.contains("empty: migrations will run at start"),
        "the first check migrated nothing:\n{again}"
    );

    drop(
        switchboard::__private::store::open_backend(&url, &Default::default())
            .await
            .unwrap(),
    );
    let (ok, stdout) = check(dir.path(), &text, &[]);
    assert!(ok && stdout.contains("at schema version "), "{stdout}");

    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)",
            &[],
        )
        .await
        .unwrap();
    let (ok, stdout) = check(dir.path(), &text, &[]);
    assert!(!ok, "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("problem: store ") && l.contains("schema version 999")),
        "{stdout}"
    );
}

#[test]
fn gateway_check_names_an_unset_admin_token_variable_and_binds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("gateway");
    // The port is held while the check runs: a check that tried to bind would fail.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = held.local_addr().unwrap().to_string();
    let args = [
        "gateway",
        "--check",
        "--listen",
        listen.as_str(),
        "--grpc-listen",
        "off",
        "--data-dir",
        data.to_str().unwrap(),
        "--admin-token-env",
        "SWITCHBOARD_CHECK_ADMIN",
    ];
    let out = run(&args, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("problem: ")
            && l.contains("SWITCHBOARD_CHECK_ADMIN")
            && l.contains("unset or empty")),
        "{stdout}"
    );
    assert!(!data.exists(), "--check creates no data dir");

    let out = run(&args, &[("SWITCHBOARD_CHECK_ADMIN", "token")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("listen: {listen}"))
            && stdout.contains("grpc: off")
            && stdout.contains("operator token: set")
            && stdout.contains("will be created"),
        "{stdout}"
    );
    assert!(!data.exists());
}

#[test]
fn gateway_check_fails_on_a_data_dir_file_that_does_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gateway-key.pem"), "not a key").unwrap();
    let out = run(
        &[
            "gateway",
            "--check",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("problem: ") && l.contains("gateway-key.pem")),
        "{stdout}"
    );
}
