//! The Python packages the interop tests run (`tests/interop/requirements.txt`: the
//! official `standardwebhooks` library), installed on first use into a virtual
//! environment under `target/tmp`, the way `packages.rs` installs the Node ones.
//!
//! `cargo test` on a fresh clone must pass with nothing run before it, so the first
//! test that needs the library creates the venv and runs `pip install` with the pinned
//! requirements (hashes required). Test binaries run in parallel, so the install
//! holds an exclusive `flock` on a lock file beside the venv: one process installs,
//! the others block and then find it there. A marker file written last says the
//! install completed, so a killed install is redone rather than half-used.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The venv's `python`, with the requirements installed. Panics with what is missing
/// when `python3` or pip fails.
pub fn python() -> PathBuf {
    let reqs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/requirements.txt");
    let wanted = std::fs::read_to_string(&reqs).expect("read tests/interop/requirements.txt");
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-python");
    std::fs::create_dir_all(&root).expect("create target/tmp/interop-python");
    let venv = root.join("venv");
    let python = venv.join("bin/python");
    let marker = root.join("installed.txt");
    let present = || std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted);
    if present() {
        return python;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join(".install.lock"))
        .expect("open the python install lock");
    // SAFETY: flock on a descriptor this function owns for the whole call; it blocks
    // until no other process holds the lock and has no memory effects.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());
    if !present() {
        eprintln!(
            "installing the interop tests' Python packages into {}",
            venv.display()
        );
        let _ = std::fs::remove_dir_all(&venv);
        let run = |cmd: &mut std::process::Command, what: &str| {
            let out = cmd.output().unwrap_or_else(|e| {
                panic!("{what}: the interop tests need python3 (3.8+) with venv and pip: {e}")
            });
            assert!(
                out.status.success(),
                "{what} failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(
            std::process::Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv),
            "python3 -m venv",
        );
        run(
            std::process::Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--only-binary",
                    ":all:",
                    "--require-hashes",
                    "-r",
                ])
                .arg(&reqs),
            "pip install -r tests/interop/requirements.txt",
        );
        std::fs::write(&marker, &wanted).expect("write the install marker");
    }
    python
}
