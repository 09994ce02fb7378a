//! The Node packages the interop tests run (`tests/interop/package.json`: the official
//! `phoenix` client, `ws`, the providers' signing libraries), installed on first use.
//!
//! `cargo test` on a fresh clone must pass with nothing run before it, so the first test
//! that needs the packages runs `npm ci` itself. Test binaries run in parallel and
//! `npm ci` starts by deleting `node_modules`, so the install holds an exclusive
//! `flock` on `tests/interop/.install.lock`: one process installs, the others block
//! on the lock and then find the packages there. The kernel drops the lock when its
//! holder exits, however it exits, so a killed run leaves nothing stale behind.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The interop folder, once `packages` (names as in `node_modules/`) are installed.
/// Panics with what to install when Node or npm is missing, or npm fails.
pub fn installed(packages: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let present = || {
        packages.iter().all(|p| {
            dir.join("node_modules")
                .join(p)
                .join("package.json")
                .exists()
        })
    };
    if present() {
        return dir;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".install.lock"))
        .expect("open tests/interop/.install.lock");
    // SAFETY: flock on a descriptor this function owns for the whole call; it blocks
    // until no other process holds the lock and has no memory effects.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        locked,
        0,
        "flock tests/interop/.install.lock: {}",
        std::io::Error::last_os_error()
    );
    if !present() {
        eprintln!(
            "installing the interop tests' Node packages (npm ci in {})",
            dir.display()
        );
        let out = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("the interop tests need Node 20+ and npm on PATH: {e}"));
        assert!(
            out.status.success(),
            "npm ci in {} failed:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            present(),
            "npm ci succeeded but {packages:?} are not all in node_modules"
        );
    }
    dir
}
