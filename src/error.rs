//! The one error type of the crate.
//!
//! Every variant has a stable, machine-readable [`Error::code`] (safe to match on in
//! logs and dashboards; codes never change meaning) and [`Error::is_recoverable`], which
//! tells a supervisor whether retrying the same operation later can succeed. The
//! messages name what went wrong and what to do about it.

use std::time::Duration;

/// Result alias used throughout switchboard.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Remote error codes that a later retry can cure: the same transient conditions that
/// [`Error::is_recoverable`] accepts locally, reported by the other end of an invoke.
const REMOTE_RECOVERABLE: [&str; 5] = [
    "timeout",
    "overloaded",
    "connection_closed",
    "connect",
    "store_unavailable",
];

/// Everything that can go wrong in switchboard.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The event store could not be reached, is full, or refused a write. Nothing was
    /// stored by the failed operation; retry later (ingress answers 503 + Retry-After).
    #[error("event store unavailable: {0}")]
    Store(String),

    /// A configuration value is missing or malformed; fix the config and restart.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The gateway address could not be parsed or names an unsupported transport.
    #[error("invalid gateway address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        address: String,
        /// Why it was refused.
        reason: String,
    },

    /// Connecting to the gateway failed (DNS, TCP, TLS or WebSocket handshake).
    #[error("could not connect to {url}: {reason}")]
    Connect {
        /// The URL dialled.
        url: String,
        /// The underlying failure.
        reason: String,
    },

    /// The connection to the gateway was lost or closed.
    #[error("connection closed: {0}")]
    ConnectionClosed(String),

    /// A wait ran past its deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The deadline that passed.
        after: Duration,
    },

    /// The peer sent bytes that do not form a valid frame or message.
    #[error("protocol error: {0}")]
    Protocol(String),

    /// The gateway refused a registration.
    #[error("registration of {key} rejected by the gateway: {reason}")]
    RegistrationRejected {
        /// The registration's dot key.
        key: String,
        /// The gateway's reason.
        reason: String,
    },

    /// The gateway's operator rejected the registration (approval flow): it is not
    /// retried. The message is the operator's reason; ask them, or change the
    /// registration's identity.
    #[error("registration rejected by the gateway's operator: {0}")]
    Rejected(String),

    /// The approval exchange (one-time-token key registration or access-token request)
    /// failed. `code` is the gateway's error code (`invalid_token`, `expired_token`,
    /// `identity_mismatch`, `invalid_client`, `invalid_request`, ...) or `server_error`
    /// for a response the contract does not describe.
    #[error("approval exchange failed ({code}): {message}")]
    Approval {
        /// The gateway's error code.
        code: String,
        /// What went wrong and what to do.
        message: String,
    },

    /// The socket already carries `max_handlers_per_socket` registrations.
    #[error("socket for tenant {tenant:?} already carries {cap} registrations (max_handlers_per_socket); raise the cap or spread the registrations")]
    HandlerCapReached {
        /// The socket's tenant.
        tenant: String,
        /// The cap that was hit.
        cap: usize,
    },

    /// A registration with the same dot key is already admitted on the socket.
    #[error("registration {key} is already admitted on this socket; instance ids must be unique per tenant and type")]
    DuplicateRegistration {
        /// The colliding dot key.
        key: String,
    },

    /// The requested payload encoding is not implemented.
    #[error("payload encoding {0} is not supported; use JSON, RAW_BYTES or JSON_LINES")]
    UnsupportedEncoding(String),

    /// A payload could not be decoded or encoded in its declared encoding.
    #[error("invalid payload: {0}")]
    Payload(String),

    /// The connector's own `execute` failed.
    #[error("connector error: {0}")]
    Connector(String),

    /// The addressed thing (e.g. a registration by ARN) does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// The request conflicts with the current state (a binding id already
    /// registered), or two writers changed the same thing at once (two runtime
    /// processes recording a binding version with the same number); nothing was
    /// written. Read the current state and decide again.
    #[error("conflict: {0}")]
    Conflict(String),

    /// A bounded queue or limit is full (a registration's execute queue, a socket's
    /// in-flight cap); nothing was started. Retry later, or raise the named limit.
    #[error("overloaded: {0}")]
    Overloaded(String),

    /// The addressed registration awaits an operator's approval (manual approval
    /// mode); nothing was sent to it. Retry once it is approved.
    #[error("pending approval: {0}")]
    PendingApproval(String),

    /// The other end of an invoke answered with an error: the target connector failed,
    /// or the gateway could not deliver the request. `code` is the remote error's
    /// stable code (e.g. `not_found`, `timeout`, `connector`) when it sent one.
    #[error("remote error ({code}): {message}")]
    Remote {
        /// The remote error's stable code, or `remote` when it named none.
        code: String,
        /// The remote error's message.
        message: String,
    },

    /// The runner or a handle was shut down while the operation was in flight.
    #[error("shut down")]
    Shutdown,

    /// An I/O error from the operating system.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// A stable code for logs, metrics and error responses.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Store(_) => "store_unavailable",
            Error::Config(_) => "config",
            Error::InvalidAddress { .. } => "invalid_address",
            Error::Connect { .. } => "connect",
            Error::ConnectionClosed(_) => "connection_closed",
            Error::Timeout { .. } => "timeout",
            Error::Protocol(_) => "protocol",
            Error::RegistrationRejected { .. } => "registration_rejected",
            Error::Rejected(_) => "rejected",
            Error::Approval { .. } => "approval",
            Error::HandlerCapReached { .. } => "handler_cap_reached",
            Error::DuplicateRegistration { .. } => "duplicate_registration",
            Error::UnsupportedEncoding(_) => "unsupported_encoding",
            Error::Payload(_) => "payload",
            Error::Connector(_) => "connector",
            Error::NotFound(_) => "not_found",
            Error::Conflict(_) => "conflict",
            Error::Overloaded(_) => "overloaded",
            Error::PendingApproval(_) => "pending_approval",
            Error::Remote { .. } => "remote",
            Error::Shutdown => "shutdown",
            Error::Io(_) => "io",
        }
    }

    /// Whether retrying later (after a reconnect, say) can succeed without a change
    /// of configuration or code.
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::ConnectionClosed(_)
                | Error::Timeout { .. }
                | Error::Protocol(_)
                | Error::Io(_)
                | Error::Store(_)
                | Error::Overloaded(_)
                | Error::PendingApproval(_)
        ) || matches!(self, Error::Remote { code, .. } if REMOTE_RECOVERABLE.contains(&code.as_str()))
            || matches!(self, Error::Approval { code, .. } if code == "server_error")
    }

    /// Shorthand for a [`Error::Timeout`].
    #[cfg_attr(not(feature = "websocket"), allow(dead_code))]
    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> Self {
        Error::Timeout {
            what: what.into(),
            after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_are_recoverable_and_config_errors_are_not() {
        assert!(Error::ConnectionClosed("eof".into()).is_recoverable());
        assert!(Error::timeout("register", Duration::from_secs(1)).is_recoverable());
        assert!(!Error::Config("x".into()).is_recoverable());
        assert!(!Error::HandlerCapReached {
            tenant: "t".into(),
            cap: 1
        }
        .is_recoverable());
        assert!(!Error::DuplicateRegistration {
            key: "a.b.c".into()
        }
        .is_recoverable());
    }

    #[test]
    fn remote_errors_are_recoverable_only_for_transient_codes() {
        let remote = |code: &str| Error::Remote {
            code: code.into(),
            message: "m".into(),
        };
        assert!(remote("timeout").is_recoverable());
        assert!(remote("overloaded").is_recoverable());
        assert!(!remote("not_found").is_recoverable());
        assert!(!remote("connector").is_recoverable());
        assert_eq!(remote("x").code(), "remote");
        assert!(Error::Overloaded("queue full".into()).is_recoverable());
    }

    #[test]
    fn codes_are_stable_strings() {
        assert_eq!(
            Error::UnsupportedEncoding("MSGPACK".into()).code(),
            "unsupported_encoding"
        );
        assert_eq!(Error::Shutdown.code(), "shutdown");
        assert_eq!(Error::Rejected("no".into()).code(), "rejected");
    }

    #[test]
    fn a_rejection_is_final_and_an_approval_server_error_is_not() {
        assert!(!Error::Rejected("unknown host".into()).is_recoverable());
        let approval = |code: &str| Error::Approval {
            code: code.into(),
            message: "m".into(),
        };
        assert!(!approval("invalid_token").is_recoverable());
        assert!(approval("server_error").is_recoverable());
        assert_eq!(approval("x").code(), "approval");
    }
}
