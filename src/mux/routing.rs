//! Routing table (PROTOCOL.md §5). Being written.
