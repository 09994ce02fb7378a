//! The credential directory (approval contract, "Client credential store"): what a
//! registration keeps across restarts so that it never needs a second approval.
//!
//! Layout: `<credentials_dir>/<dot key>/` (mode 0700) holding `key.pem` (PKCS#8
//! private key) and `credentials.json` (`client_id`, `token_endpoint`, `issuer`,
//! `session_token`, `jwt`, `jwt_expires_at_ms`), both 0600. Every write goes to a
//! temporary file in the same directory, is synced, then renamed over the old file, so
//! a crash leaves the old or the new file, never half of one. Writers of one
//! registration are serialised by a lock in the store, so a session token and a JWT
//! written at the same time both survive.
//!
//! The directory's default location is the config's rule
//! (`ConnectorConfig::effective_credentials_dir`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::keys::KeyPair;
use crate::error::{Error, Result};

const KEY_FILE: &str = "key.pem";
const CREDENTIALS_FILE: &str = "credentials.json";

/// What `credentials.json` holds; every field may be absent (a registration that was
/// approved but never got a token, or that only ever held a session token).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredCredentials {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jwt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jwt_expires_at_ms: Option<i64>,
}

impl StoredCredentials {
    /// The JWT, if it is still valid `margin_ms` from `now_ms`.
    pub(crate) fn live_jwt(&self, now_ms: i64, margin_ms: i64) -> Option<&str> {
        match (&self.jwt, self.jwt_expires_at_ms) {
            (Some(jwt), Some(exp)) if exp > now_ms + margin_ms => Some(jwt),
            _ => None,
        }
    }
}

/// One credential directory. Cheap to clone; clones share the write lock.
#[derive(Debug, Clone)]
pub(crate) struct CredentialStore {
    root: PathBuf,
    lock: Arc<Mutex<()>>,
}

impl CredentialStore {
    pub(crate) fn new(root: PathBuf) -> Self {
        CredentialStore {
            root,
            lock: Arc::default(),
        }
    }

    /// The directory of one registration.
    pub(crate) fn dir(&self, dot_key: &str) -> PathBuf {
        self.root.join(dot_key)
    }

    /// The registration's stored credentials; `None` when it has none yet.
    pub(crate) fn load(&self, dot_key: &str) -> Result<Option<StoredCredentials>> {
        let path = self.dir(dot_key).join(CREDENTIALS_FILE);
        let Some(bytes) = read_if_exists(&path)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::Config(format!(
                "{} is not valid credentials JSON ({e}); delete it to request a fresh approval",
                path.display()
            ))
        })
    }

    /// The registration's stored private key; `None` when it has none yet.
    pub(crate) fn load_key(&self, dot_key: &str) -> Result<Option<KeyPair>> {
        let path = self.dir(dot_key).join(KEY_FILE);
        match read_if_exists(&path)? {
            None => Ok(None),
            Some(bytes) => {
                let pem = String::from_utf8(bytes).map_err(|_| {
                    Error::Config(format!("{} is not PEM text; delete it", path.display()))
                })?;
                KeyPair::from_pkcs8_pem(&pem).map(Some)
            }
        }
    }

    /// Writes the private key (0600, atomically).
    pub(crate) fn save_key(&self, dot_key: &str, key: &KeyPair) -> Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let dir = self.ensure_dir(dot_key)?;
        let pem = key.private_key_pem()?;
        write_atomically(&dir.join(KEY_FILE), pem.as_bytes())
    }

    /// Changes `credentials.json` under the store's lock: read, apply `f`, write back
    /// atomically.
    pub(crate) fn update(
        &self,
        dot_key: &str,
        f: impl FnOnce(&mut StoredCredentials),
    ) -> Result<StoredCredentials> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut creds = self.load(dot_key)?.unwrap_or_default();
        f(&mut creds);
        let dir = self.ensure_dir(dot_key)?;
        let json = serde_json::to_vec_pretty(&creds)
            .map_err(|e| Error::Config(format!("cannot encode credentials: {e}")))?;
        write_atomically(&dir.join(CREDENTIALS_FILE), &json)?;
        Ok(creds)
    }

    /// Creates the registration's directory (and the root) with mode 0700.
    fn ensure_dir(&self, dot_key: &str) -> Result<PathBuf> {
        let dir = self.dir(dot_key);
        create_private_dir(&self.root)?;
        create_private_dir(&dir)?;
        Ok(dir)
    }
}

fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, "read", e)),
    }
}

fn io_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Config(format!(
        "cannot {what} {} ({e}); check that the credential directory (credentials_dir or \
         SWITCHBOARD_CREDENTIALS_DIR) is writable by this user",
        path.display()
    ))
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.is_dir() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io_error(dir, "create", e))?;
    }
    let mode = fs::metadata(dir)
        .map_err(|e| io_error(dir, "inspect", e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io_error(dir, "restrict", e))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| io_error(dir, "create", e))
}

/// Writes `bytes` to a temporary sibling (0600), syncs it, and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("credential files live in a directory");
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        rand::random::<u64>()
    ));
    let result = (|| {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        // The rename is durable once the directory is synced.
        fs::File::open(dir).and_then(|d| d.sync_all()).or(Ok(()))
    })();
    result.map_err(|e: std::io::Error| {
        let _ = fs::remove_file(&tmp);
        io_error(path, "write", e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const KEY: &str = "acme.echo.pod-1";

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn credentials_round_trip_and_files_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CredentialStore::new(tmp.path().join("creds"));
        assert_eq!(store.load(KEY).unwrap(), None);
        let written = store
            .update(KEY, |c| {
                c.client_id = Some(KEY.into());
                c.jwt = Some("j.w.t".into());
                c.jwt_expires_at_ms = Some(42);
            })
            .unwrap();
        assert_eq!(store.load(KEY).unwrap(), Some(written));
        let dir = store.dir(KEY);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("creds")), 0o700);
        assert_eq!(mode(&dir.join(CREDENTIALS_FILE)), 0o600);
    }

    #[test]
    fn update_keeps_the_fields_it_does_not_touch() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CredentialStore::new(tmp.path().to_owned());
        store
            .update(KEY, |c| c.session_token = Some("s".into()))
            .unwrap();
        store.update(KEY, |c| c.jwt = Some("j".into())).unwrap();
        let c = store.load(KEY).unwrap().unwrap();
        assert_eq!(
            (c.session_token.as_deref(), c.jwt.as_deref()),
            (Some("s"), Some("j"))
        );
    }

    #[test]
    fn the_key_round_trips_with_mode_0600_and_no_temporary_files_remain() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CredentialStore::new(tmp.path().to_owned());
        assert!(store.load_key(KEY).unwrap().is_none());
        let key = KeyPair::generate();
        store.save_key(KEY, &key).unwrap();
        let back = store.load_key(KEY).unwrap().unwrap();
        assert_eq!(
            back.public_key_pem().unwrap(),
            key.public_key_pem().unwrap()
        );
        assert_eq!(mode(&store.dir(KEY).join(KEY_FILE)), 0o600);
        let names: Vec<_> = fs::read_dir(store.dir(KEY))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [KEY_FILE]);
    }

    #[test]
    fn a_loose_directory_mode_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CredentialStore::new(tmp.path().to_owned());
        fs::create_dir_all(store.dir(KEY)).unwrap();
        fs::set_permissions(store.dir(KEY), fs::Permissions::from_mode(0o755)).unwrap();
        store.update(KEY, |_| {}).unwrap();
        assert_eq!(mode(&store.dir(KEY)), 0o700);
    }

    #[test]
    fn corrupt_credentials_are_an_error_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CredentialStore::new(tmp.path().to_owned());
        fs::create_dir_all(store.dir(KEY)).unwrap();
        fs::write(store.dir(KEY).join(CREDENTIALS_FILE), "{nope").unwrap();
        let e = store.load(KEY).unwrap_err().to_string();
        assert!(e.contains(CREDENTIALS_FILE) && e.contains("delete"), "{e}");
    }

    #[test]
    fn a_live_jwt_must_outlast_the_margin() {
        let c = StoredCredentials {
            jwt: Some("j".into()),
            jwt_expires_at_ms: Some(10_000),
            ..Default::default()
        };
        assert_eq!(c.live_jwt(1_000, 1_000), Some("j"));
        assert_eq!(c.live_jwt(9_500, 1_000), None);
        assert_eq!(StoredCredentials::default().live_jwt(0, 0), None);
    }
}
