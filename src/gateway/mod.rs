//! Reference gateway. Being written.
