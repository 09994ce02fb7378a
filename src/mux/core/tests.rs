//! Unit tests of the connection core: plain `#[test]`s with an explicit clock.

mod support;
mod wire;

mod approval;
mod channel;
mod execute;
mod invoke;
mod link;
mod metrics;
mod registration;
mod remove;
mod stream;
