//! Connector API. Being written.
