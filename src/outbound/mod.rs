//! Outbound HTTP: how the runtime calls endpoints it does not own. The `http` binding
//! handler (`dispatch::http`) delivers events through it, and the `http.request`
//! capability is to use the same client, so every request the runtime sends on a
//! user's behalf obeys one set of rules.
//!
//! - [`egress`]: which addresses may be reached (a decision core);
//! - [`resolve`]: the DNS resolver that applies it to resolved addresses;
//! - [`sign`]: Standard Webhooks signing;
//! - [`retry_after`]: reading `Retry-After`;
//! - [`http`]: the client that puts them together, with redirects, timeouts, the
//!   response cap and a breaker per endpoint.
//!
//! Why a module of its own, below `dispatch`: signing, the policy and the client are
//! not about the outbox; a capability must reach them without going through the
//! dispatcher, and the dispatcher must reach them without importing an inbound
//! connector module (`ingress` sits above it).

pub(crate) mod egress;
pub(crate) mod http;
pub(crate) mod resolve;
pub(crate) mod retry_after;
pub(crate) mod sign;
