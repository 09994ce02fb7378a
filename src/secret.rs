//! [`Secret`]: bytes that must never reach a log line or a `Debug` dump (signing
//! secrets, admin tokens). On the ground floor because every layer that reads one
//! from the environment or a file (the webhook sources, the `http` handler, the
//! runtime's admin token) needs the same guarantee.

/// A secret's bytes. Debug and Display never show them.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// The bytes, for MAC computation only.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Whether an `Authorization` header value is `Bearer <this secret>`, compared in
    /// constant time: what the runtime's admin API and the gateway's operator routes
    /// both check.
    pub(crate) fn is_bearer(&self, authorization: Option<&str>) -> bool {
        let given = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        self.matches(given.as_bytes())
    }

    /// Whether `given` is this secret, compared in constant time (the consoles'
    /// sign-in form, the bearer check above).
    pub(crate) fn matches(&self, given: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        bool::from(given.ct_eq(&self.0))
    }
}

/// Reads a secret file (`secret_file` of a source or of an `http` handler): its whole
/// content less one trailing newline (what `echo` and most secret stores leave). A
/// missing, unreadable or empty file is an error that names the path, never the
/// content. Here, below both readers, so a mounted secret means the same bytes to
/// each.
#[cfg_attr(
    not(feature = "runtime"),
    allow(dead_code, reason = "the runtime's readers only")
)]
pub(crate) fn read_file(path: &str) -> Result<Secret, String> {
    let mut bytes =
        std::fs::read(path).map_err(|e| format!("secret_file {path}: cannot be read: {e}"))?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err(format!("secret_file {path} is empty"));
    }
    Ok(Secret(bytes))
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}
