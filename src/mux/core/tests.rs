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
mod stop;
mod stream;

/// Each table on its own, without a connection.
mod tables {
    mod credentials;
    mod executes;
    mod pending_invokes;
    mod registrations;
}
