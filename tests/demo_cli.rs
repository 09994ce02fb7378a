//! `switchboard demo` as a newcomer runs it: one command, no setup, small sizes here.
//! It must exit 0, print the deliver section's table with the dead-lettered binding
//! and its dead-letter handler, and leave no store behind in the temp dir.
#![cfg(all(feature = "gateway", feature = "runtime"))]

use std::process::{Command, Output};

/// Webhooks the small run posts: issues 1..=8, of which #1 and #5 are closed, so two
/// rows of `flaky-sync` are dead-lettered.
const WEBHOOKS: &str = "8";

/// The small run's arguments.
const SMALL: [&str; 15] = [
    "demo",
    "--tenants",
    "1",
    "--per-tenant",
    "2",
    "--requests",
    "20",
    "--concurrency",
    "2",
    "--webhooks",
    WEBHOOKS,
    "--webhook-concurrency",
    "2",
    "--deadline-secs",
    "20",
];

fn demo(tmp: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(SMALL)
        .env("TMPDIR", tmp)
        .env_remove("RUST_LOG")
        .output()
        .expect("switchboard demo runs")
}

#[test]
fn the_demo_exits_zero_and_its_table_shows_the_dead_letter_and_its_handler() {
    let tmp = tempfile::tempdir().unwrap();
    let out = demo(tmp.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let flaky = stdout
        .lines()
        .find(|l| l.starts_with("| flaky-sync |"))
        .unwrap_or_else(|| panic!("no flaky-sync row in:\n{stdout}"));
    let cells: Vec<&str> = flaky.split('|').map(str::trim).collect();
    // | binding | takes | rows | delivered | failed attempts | retried | dead-lettered | …
    assert_eq!(&cells[3..8], ["2", "0", "6", "4", "2"], "{flaky}");
    assert!(stdout.contains("| dead-lettered |"), "{stdout}");
    assert!(stdout.contains("| dl-audit |"), "{stdout}");
    assert!(
        stdout.contains("dead-letter handler runs: 2 (dl-audit"),
        "{stdout}"
    );
}

#[test]
fn the_demo_removes_its_sqlite_store_from_the_temp_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let out = demo(tmp.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `--keep-running`: both consoles' URLs are printed and answer until Ctrl-C, after
/// which the demo still exits 0.
#[test]
fn with_keep_running_both_consoles_stay_up_until_interrupted() {
    use std::io::{BufRead as _, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(SMALL)
        .arg("--keep-running")
        .env("TMPDIR", tmp.path())
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("switchboard demo runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut urls = Vec::new();
    // Reading blocks until the demo prints; the process ending ends the loop.
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("consoles: ") {
            urls = rest
                .split_whitespace()
                .filter(|w| w.starts_with("http://"))
                .map(|w| w.trim_end_matches(',').to_owned())
                .collect();
        }
        if line.contains("both consoles stay up") {
            break;
        }
    }
    assert_eq!(urls.len(), 2, "two console URLs printed");
    for url in &urls {
        assert_eq!(
            status_of(url),
            200,
            "{url} answers while the demo keeps running"
        );
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "the interrupted demo exits 0: {exit:?}");
}

/// A GET's status, on a small runtime of its own (reqwest's blocking client is not
/// built here).
fn status_of(url: &str) -> u16 {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { reqwest::get(url).await.unwrap().status().as_u16() })
}
