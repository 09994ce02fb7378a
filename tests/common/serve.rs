//! `switchboard serve` as child processes of a test: started from a config file on a
//! free port, waited for on `/healthz`, read through the admin API, and killed with
//! SIGKILL (no shutdown, nothing flushed). Shared by the tests that kill and restart
//! real processes (`tests/dispatch_processes.rs`, `tests/inbound_poll.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::wait::eventually_some_or;

/// A port nobody listens on now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `switchboard serve` child process; killed (SIGKILL) when dropped.
pub struct Serve {
    /// The process, until killed.
    pub child: Option<Child>,
    log: PathBuf,
    /// `http://127.0.0.1:{port}`.
    pub base: String,
}

impl Serve {
    /// Writes `text` to `<dir>/<name>.toml` and starts `switchboard serve` on it,
    /// its stderr appended to `<dir>/<name>.log`, with `env` added to the test's
    /// environment (`RUST_LOG` removed unless `env` sets it). Does not wait for it to
    /// listen.
    pub fn start(dir: &Path, name: &str, port: u16, text: &str, env: &[(&str, String)]) -> Serve {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["serve", "--config"])
            .arg(&path)
            .env_remove("RUST_LOG")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("switchboard serve starts");
        Serve {
            child: Some(child),
            log,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Starts it and waits until it answers `/healthz`.
    pub async fn started(
        dir: &Path,
        name: &str,
        port: u16,
        text: &str,
        env: &[(&str, String)],
    ) -> Serve {
        let s = Serve::start(dir, name, port, text, env);
        s.wait_healthy().await;
        s
    }

    pub async fn wait_healthy(&self) {
        let http = reqwest::Client::new();
        let url = format!("{}/healthz", self.base);
        // A start that hangs or fails says why: the child's log ends the message.
        eventually_some_or(
            &format!("{} to answer /healthz", self.base),
            || async {
                http.get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                    .then_some(())
            },
            || format!("; its log:\n{}", self.log()),
        )
        .await;
    }

    /// SIGKILL: no shutdown, no lease release, nothing flushed.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The child's stderr so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn get(&self, path: &str) -> Value {
        let resp = reqwest::get(format!("{}{path}", self.base)).await.unwrap();
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    /// `dispatched` of every binding, from `/api/v1/triggers` (this process's counts).
    pub async fn dispatched(&self) -> BTreeMap<String, u64> {
        let v = self.get("/api/v1/triggers").await;
        v["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["id"].as_str().unwrap().to_owned(),
                    t["counts"]["dispatched"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Whether the outbox holds no row at all (none due, leased or scheduled).
    pub async fn drained(&self) -> bool {
        let s = self.get("/api/v1/outbox/stats").await;
        ["due", "leased", "scheduled"]
            .iter()
            .all(|k| s[k].as_u64() == Some(0))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}
