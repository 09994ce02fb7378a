//! Child processes of a test: a signal sent to one, and its exit awaited with the
//! suite's deadline. Shared by the tests that stop the binaries as an orchestrator
//! would (`tests/process_stop.rs`, `tests/sdk_process.rs`).

use std::process::{Child, ExitStatus};

use super::wait::eventually_some;

/// Sends `sig` (`libc::SIGTERM`, `libc::SIGINT`) to `child`.
pub fn signal(child: &Child, sig: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal touches no memory.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// Waits for `child` to exit, at most [`super::DEADLINE`]; its status.
pub async fn exited(child: &mut Child) -> ExitStatus {
    eventually_some("the process to exit", || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await
}
