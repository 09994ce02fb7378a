//! The approval state on disk, under [`super::GatewayConfig::data_dir`]:
//! `gateway-key.pem` (the signing key, PKCS#8) and `approvals.json` (clients, hashed
//! session tokens, rejections).
//!
//! Every write goes to a temporary file in the same directory (mode 0600), is synced,
//! and is renamed over the old file, so a crash leaves the old or the new state, never
//! half of one. The directory is created 0700. A file that does not parse is a startup
//! error naming it: silently starting afresh would forget rejections and sign with a
//! new key, locking every approved connector out without a word.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::credentials::{CredentialBook, Persisted};
use super::tokens::GatewayKey;
use crate::error::{Error, Result};

/// The signing key's file name.
pub(crate) const KEY_FILE: &str = "gateway-key.pem";
/// The approvals file's name.
pub(crate) const STATE_FILE: &str = "approvals.json";

/// Writes snapshots of the state; remembers which generation the file holds, so that
/// an older snapshot written late never overwrites a newer one.
#[derive(Debug)]
pub(crate) struct Persister {
    dir: PathBuf,
    written: Mutex<u64>,
}

/// Opens `dir` (creating it 0700), reads or creates the key, reads the state.
pub(crate) fn open(dir: &Path) -> Result<(GatewayKey, CredentialBook, Persister)> {
    create_dir(dir)?;
    let key_path = dir.join(KEY_FILE);
    let key = match read_key(&key_path)? {
        Some(key) => key,
        None => {
            let key = GatewayKey::generate();
            write_atomic(&key_path, key.to_pkcs8_pem().as_bytes())?;
            key
        }
    };
    let creds = read_state(&dir.join(STATE_FILE))?.unwrap_or_default();
    let persister = Persister {
        dir: dir.to_owned(),
        written: Mutex::new(creds.generation()),
    };
    Ok((key, creds, persister))
}

/// What a gateway starting on `dir` would find, read without creating or writing
/// anything (`switchboard gateway --check`): a line saying so, or the error
/// [`open`] would fail with (a file that does not parse, a directory that cannot be
/// read).
pub(crate) fn inspect(dir: &Path) -> Result<String> {
    let shown = dir.display();
    if !dir.exists() {
        return Ok(format!(
            "{shown} does not exist yet: it will be created (0700) with a new signing key"
        ));
    }
    if !dir.is_dir() {
        return Err(Error::Config(format!(
            "the data dir {shown} is not a directory; point --data-dir at a directory"
        )));
    }
    fs::read_dir(dir).map_err(|e| io(dir, e))?;
    let key = match read_key(&dir.join(KEY_FILE))? {
        Some(_) => "signing key present",
        None => "no signing key yet (one will be generated)",
    };
    let state = match read_state(&dir.join(STATE_FILE))? {
        Some(_) => "approvals read",
        None => "no approvals yet",
    };
    Ok(format!("{shown}: {key}, {state}"))
}

/// The signing key at `path`; `None` when the file does not exist.
fn read_key(path: &Path) -> Result<Option<GatewayKey>> {
    match fs::read_to_string(path) {
        Ok(pem) => GatewayKey::from_pkcs8_pem(&pem)
            .map(Some)
            .map_err(|e| corrupt(path, &e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path, e)),
    }
}

/// The approval state at `path`; `None` when the file does not exist.
fn read_state(path: &Path) -> Result<Option<CredentialBook>> {
    match fs::read(path) {
        Ok(bytes) => {
            let p: Persisted = serde_json::from_slice(&bytes).map_err(|e| corrupt(path, &e))?;
            CredentialBook::from_persisted(p)
                .map(Some)
                .map_err(|e| corrupt(path, &e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path, e)),
    }
}

impl Persister {
    /// Writes `state` (of `generation`) unless the file already holds a newer one.
    pub(crate) fn write(&self, generation: u64, state: &Persisted) -> Result<()> {
        let mut written = self.written.lock().expect("persister lock");
        if generation <= *written {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(state).expect("the state serialises");
        write_atomic(&self.dir.join(STATE_FILE), &bytes)?;
        *written = generation;
        Ok(())
    }
}

fn corrupt(path: &Path, e: &dyn std::fmt::Display) -> Error {
    Error::Config(format!(
        "the gateway's approval data file {} is unreadable ({e}); restore it from a backup \
         or move it away to start with no approvals (and a new signing key, for {KEY_FILE})",
        path.display()
    ))
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

fn create_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        b.mode(0o700);
    }
    b.create(dir).map_err(|e| io(dir, e))
}

/// Writes `bytes` to `path` through a synced 0600 temporary file and a rename. The
/// temporary file has a fresh random name and is created new, so it cannot inherit
/// the permissions of a leftover file, and two writers never share one.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let suffix: u64 = rand::random();
    let tmp = path.with_extension(format!("tmp.{suffix:016x}"));
    let mut o = fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    let write = || -> std::io::Result<()> {
        let mut f = o.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            // The rename is durable once the directory is synced; not every platform
            // lets a directory be opened for that, so a failure here is not fatal.
            let _ = fs::File::open(parent).and_then(|d| d.sync_all());
        }
        Ok(())
    };
    let written = write();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map_err(|e| io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::RegistrationKey;

    #[test]
    fn state_and_key_survive_a_reopen_with_private_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (key, mut creds, p) = open(&dir).unwrap();
        creds.reject(&RegistrationKey::new("a", "b", "c"), "no", 1);
        p.write(creds.generation(), &creds.persisted()).unwrap();
        let (again, creds2, _) = open(&dir).unwrap();
        assert_eq!(again.kid(), key.kid());
        assert!(creds2
            .rejection(&RegistrationKey::new("a", "b", "c"))
            .is_some());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&dir), 0o700);
            assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
            assert_eq!(mode(&dir.join(STATE_FILE)), 0o600);
        }
    }

    #[test]
    fn a_corrupt_file_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        open(tmp.path()).unwrap();
        fs::write(tmp.path().join(STATE_FILE), b"{ not json").unwrap();
        let e = open(tmp.path())
            .err()
            .expect("corrupt state refused")
            .to_string();
        assert!(e.contains(STATE_FILE), "{e}");
        fs::remove_file(tmp.path().join(STATE_FILE)).unwrap();
        fs::write(tmp.path().join(KEY_FILE), b"garbage").unwrap();
        let e = open(tmp.path())
            .err()
            .expect("corrupt key refused")
            .to_string();
        assert!(e.contains(KEY_FILE), "{e}");
    }

    #[test]
    fn an_older_snapshot_never_overwrites_a_newer_one() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, mut creds, p) = open(tmp.path()).unwrap();
        creds.reject(&RegistrationKey::new("a", "b", "c"), "first", 1);
        let old = (creds.generation(), creds.persisted());
        creds.reject(&RegistrationKey::new("a", "b", "d"), "second", 2);
        p.write(creds.generation(), &creds.persisted()).unwrap();
        p.write(old.0, &old.1).unwrap();
        let (_, back, _) = open(tmp.path()).unwrap();
        assert!(back
            .rejection(&RegistrationKey::new("a", "b", "d"))
            .is_some());
    }
}
