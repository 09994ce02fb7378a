//! The connector side of the approval flow (PROTOCOL.md §4 "Approval", and the
//! approval contract): what a registration needs to turn an operator's approval into
//! credentials it can present on every later register, and keep them across
//! restarts.
//!
//! - [`keys`]: the registration's P-256 key pair (PKCS#8 PEM private key, SPKI PEM
//!   public key); made once per approval, never leaves the credential directory.
//! - [`store`]: the credential directory, one 0700 directory per dot key holding
//!   `key.pem` and `credentials.json` (0600, written atomically).
//! - [`exchange`]: the HTTP half: register the public key with the one-time token,
//!   then mint the access token (a JWT) with a private-key client assertion.
//!
//! The decisions about which credential a register presents live in the connection
//! core (`mux::core::credentials`, used by `mux::core::registrations`); the task that
//! runs the exchange per registration lives in `mux::approval`. Everything here is
//! plain functions and types, so the core stays free of I/O and these stay free of
//! socket concerns.

pub(crate) mod exchange;
pub(crate) mod keys;
pub(crate) mod store;
