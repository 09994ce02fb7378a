//! The soak's child processes (`switchboard gateway`, `switchboard serve`): started,
//! waited for until they serve, SIGKILLed and restarted; and the RSS, open file
//! descriptors and bytes written of any process, read from `/proc`.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a child may take to serve after it is spawned.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// The three processes the soak watches.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Bench,
    Gateway,
    Runtime,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Bench, Role::Gateway, Role::Runtime];

    pub fn name(self) -> &'static str {
        match self {
            Role::Bench => "bench (SDK)",
            Role::Gateway => "gateway",
            Role::Runtime => "runtime",
        }
    }
}

/// When a child serves.
pub enum Ready {
    /// It accepts TCP connections on this port.
    Listening(u16),
    /// `GET` of this URL answers 2xx.
    Healthy(String),
}

/// A `switchboard` child process of one role, restartable with the same arguments.
pub struct Child {
    pub role: Role,
    args: Vec<OsString>,
    envs: Vec<(String, String)>,
    log: PathBuf,
    ready: Ready,
    process: Option<tokio::process::Child>,
    /// When it last became ready.
    pub ready_at: Option<Instant>,
    /// Bytes its earlier (killed) starts wrote to storage ([`write_bytes`] read just
    /// before each kill).
    written_before: u64,
    http: reqwest::Client,
}

impl Child {
    /// `switchboard <args>` with `envs` added (and `RUST_LOG` removed), its stderr
    /// appended to `log`.
    pub fn new(
        role: Role,
        args: Vec<OsString>,
        envs: Vec<(String, String)>,
        log: PathBuf,
        ready: Ready,
    ) -> Child {
        Child {
            role,
            args,
            envs,
            log,
            ready,
            process: None,
            ready_at: None,
            written_before: 0,
            // No idle connection kept: a pooled readiness probe would add an fd to the
            // bench's count for 90 s after every start.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("an HTTP client"),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(|p| p.id())
    }

    /// Spawns it and waits until it serves; how long that took.
    pub async fn start(&mut self, at: Duration) -> Result<Duration, String> {
        let began = Instant::now();
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let _ = writeln!(
            log,
            "=== soak: {} started at t={at:.1?} ===",
            self.role.name()
        );
        let process = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.role.name()))?;
        self.process = Some(process);
        self.ready_at = None;
        let deadline = began + READY_DEADLINE;
        loop {
            if let Some(status) = self
                .process
                .as_mut()
                .and_then(|p| p.try_wait().ok().flatten())
            {
                return Err(format!(
                    "{} exited at start ({status}):\n{}",
                    self.role.name(),
                    self.log_tail(30)
                ));
            }
            if self.serves().await {
                self.ready_at = Some(Instant::now());
                return Ok(began.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not serve within {READY_DEADLINE:?}:\n{}",
                    self.role.name(),
                    self.log_tail(30)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn serves(&self) -> bool {
        match &self.ready {
            Ready::Listening(port) => tokio::net::TcpStream::connect(("127.0.0.1", *port))
                .await
                .is_ok(),
            Ready::Healthy(url) => self
                .http
                .get(url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
        }
    }

    /// Bytes all its starts so far caused to be written to storage: the killed ones'
    /// plus the running one's.
    pub fn written(&self) -> u64 {
        self.written_before + self.pid().and_then(write_bytes).unwrap_or(0)
    }

    /// SIGKILL (no shutdown, nothing flushed), and reaps it. Its bytes written are read
    /// first, as a reaped process's counters are gone (a kill-time read misses at most
    /// the writes of the last instant).
    pub async fn kill(&mut self) {
        self.written_before = self.written();
        if let Some(mut p) = self.process.take() {
            let _ = p.kill().await;
        }
        self.ready_at = None;
    }

    /// The last `n` lines of its stderr (every start appended).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Its WARN and ERROR lines over all starts, grouped by what follows the level
    /// (ANSI colours and the timestamp dropped, cut at 200 characters), most frequent
    /// first: `(count, line)`.
    pub fn log_summary(&self) -> Vec<(usize, String)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut groups: std::collections::BTreeMap<String, usize> = Default::default();
        for line in text.lines() {
            let plain = strip_ansi(line);
            let at = ["ERROR", "WARN"]
                .iter()
                .find_map(|l| plain.find(&format!(" {l} ")));
            if let Some(at) = at {
                let rest: String = plain[at + 1..].chars().take(200).collect();
                *groups.entry(rest).or_default() += 1;
            }
        }
        let mut out: Vec<(usize, String)> = groups.into_iter().map(|(l, n)| (n, l)).collect();
        out.sort_by_key(|g| std::cmp::Reverse(g.0));
        out
    }
}

/// `line` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A process's resident set and open file descriptors.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    pub rss_kib: u64,
    pub fds: u64,
}

/// `VmRSS` from `/proc/<pid>/status` and the entries of `/proc/<pid>/fd`; `None` if
/// the process is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Usage { rss_kib, fds })
}

/// `write_bytes` of `/proc/<pid>/io`: the bytes the process caused to be sent to the
/// storage layer (page cache pages it dirtied, counted once per dirtying, so a WAL
/// frame rewritten after its fsync counts again, as the disk writes it again); `None`
/// if the process is gone.
pub fn write_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// A port nobody listens on now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
