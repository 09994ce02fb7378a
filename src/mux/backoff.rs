//! Reconnect backoff. Being written.
