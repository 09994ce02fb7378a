//! Connector configuration. Being written.
