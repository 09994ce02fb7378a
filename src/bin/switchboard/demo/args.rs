//! The demo's command-line arguments.

/// Demo sizing. The defaults run in a few seconds in a release build.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Execute section: tenants (one socket each).
    #[arg(long, default_value_t = 2)]
    pub(super) tenants: usize,
    /// Execute section: echo registrations per tenant.
    #[arg(long, default_value_t = 4)]
    pub(super) per_tenant: usize,
    /// Execute section: execute requests to send in total.
    #[arg(long, default_value_t = 2000)]
    pub(super) requests: usize,
    /// Execute section: concurrent HTTP clients.
    #[arg(long, default_value_t = 16)]
    pub(super) concurrency: usize,
    /// Deliver section: distinct signed webhooks to post (every fourth is an
    /// `issues.closed`, the rest `issues.opened`; one more is a redelivery). At least 2,
    /// so that both kinds occur.
    #[cfg(feature = "runtime")]
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(2..))]
    pub(super) webhooks: u32,
    /// Deliver section: concurrent webhook senders.
    #[cfg(feature = "runtime")]
    #[arg(long, default_value_t = 8)]
    pub(super) webhook_concurrency: usize,
    /// Deliver section: how long to wait for the outbox to drain and the dead-letter
    /// handler to run before giving up, in seconds.
    #[cfg(feature = "runtime")]
    #[arg(long, default_value_t = 30)]
    pub(super) deadline_secs: u64,
    /// After the deliver section, keep the gateway, the runtime and the connectors
    /// running until Ctrl-C, so their consoles (URLs printed) can be looked at.
    #[cfg(feature = "runtime")]
    #[arg(long)]
    pub(super) keep_running: bool,
}
