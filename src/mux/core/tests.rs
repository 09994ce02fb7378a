//! Unit tests of the connection core: plain `#[test]`s with an explicit clock.

mod support;
