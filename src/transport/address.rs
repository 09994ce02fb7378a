//! Gateway address parsing. Being written.
