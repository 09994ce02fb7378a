//! `switchboard demo` as a newcomer runs it: one command, no setup, small sizes here.
//! It must exit 0, print the deliver section's table with the dead-lettered binding
//! and its dead-letter handler, and leave no store behind in the temp dir.
#![cfg(all(feature = "gateway", feature = "runtime"))]

use std::process::{Command, Output};

/// Webhooks the small run posts: issues 1..=8, of which #1 and #5 are closed, so two
/// rows of `flaky-sync` are dead-lettered.
const WEBHOOKS: &str = "8";

fn demo(tmp: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args([
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
        ])
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
