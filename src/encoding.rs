//! Payload encodings. Being written.
