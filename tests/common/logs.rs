//! [`capture_logs`]: the crate's `tracing` output as text, for tests of what an
//! operator would read (a connect failure, say) when no API returns it.
//!
//! The subscriber is the current thread's default, so it sees the tasks of a
//! current-thread runtime (plain `#[tokio::test]`) and nothing of other tests.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The captured text; clone it to read while the guard keeps capturing.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Whether some line contains every one of `needles`.
    pub fn has_line_with(&self, needles: &[&str]) -> bool {
        self.text()
            .lines()
            .any(|line| needles.iter().all(|n| line.contains(n)))
    }
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures `switchboard`'s logs at `debug` and above on this thread until the guard drops.
pub fn capture_logs() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let sink = logs.0.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("switchboard=debug")
        .with_ansi(false)
        .with_writer(move || LogWriter(sink.clone()))
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}
