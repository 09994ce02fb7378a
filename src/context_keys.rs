//! The execute-context keys this crate writes and reads, spelled once.
//!
//! An execute request carries a string map (`ExecuteRequest.context`). The gateway
//! fills some entries (PROTOCOL.md §4), the runtime's dispatcher others, and an
//! [`ExecuteContext::invoke`](crate::ExecuteContext::invoke) carries two of them on to
//! the next hop. Every side names the same key through these constants, so a renamed
//! key cannot leave one side behind.
//!
//! The items are `pub` because the crate root re-exports the dispatcher's keys with the
//! `runtime` feature and `gateway` re-exports the gateway's keys; a build without those
//! features uses some of them only inside the crate.
#![cfg_attr(
    not(all(feature = "runtime", feature = "gateway")),
    allow(unreachable_pub, dead_code)
)]

/// The `execute_request` context key naming the addressee's ARN (PROTOCOL.md §4), by
/// which the connector's demux routes the request to its registration.
pub const CONNECTOR_ARN_CONTEXT_KEY: &str = "connector_arn";

/// The `execute_request` context key carrying the request's deadline in decimal
/// milliseconds, so that a connector can stop work the gateway no longer waits for.
pub const TIMEOUT_MS_CONTEXT_KEY: &str = "timeout_ms";

/// The `invoke_response` context key naming the ARN the invoke was delivered to, so
/// that a caller that addressed a dot key learns which registration answered.
pub const TARGET_ARN_CONTEXT_KEY: &str = "target_arn";

/// Context key: the event's id (set by the runtime's dispatcher).
pub const CONTEXT_EVENT_ID: &str = "switchboard.event_id";
/// Context key: the event's W3C trace id (set by the runtime's dispatcher, carried on
/// by every invoke made inside the execute).
pub const CONTEXT_TRACE_ID: &str = "switchboard.trace_id";
/// Context key: the W3C `traceparent` of the span the execute runs under: a dispatch
/// attempt's (or, through a reference gateway, its round trip's), and inside a
/// switchboard connector the execute's own. The same key as the HTTP header, so an
/// OpenTelemetry propagator reads the context map as it reads headers; every invoke
/// made inside the execute carries it on, and `http` deliveries send it as the header.
/// A peer SDK that knows nothing of it ignores it, as the family does unknown keys.
pub const CONTEXT_TRACEPARENT: &str = "traceparent";
/// Context key: the W3C `tracestate` that goes with [`CONTEXT_TRACEPARENT`] (absent
/// when the sender sent none).
pub const CONTEXT_TRACESTATE: &str = "tracestate";
/// Context key: this attempt's number, 1-based.
pub const CONTEXT_ATTEMPT: &str = "switchboard.attempt";
/// Context key: the binding being delivered.
pub const CONTEXT_BINDING: &str = "switchboard.binding";
/// Context key: the binding version the row runs under, `id@vN`: the version that
/// was active when its event arrived (or the one a replay resolved), whatever has been
/// reloaded since.
pub const CONTEXT_BINDING_VERSION: &str = "switchboard.binding_version";
/// Context key: the id of the backfill job that enqueued this delivery (absent for
/// live and replayed ones), so a handler can tell history from new traffic: skip a
/// notification, say, or write to a slower path.
pub const CONTEXT_BACKFILL: &str = "switchboard.backfill";
/// Context key: handler hops that produced the event. `outbox.enqueue` from inside an
/// execute reads it, so events that handlers produce carry depth + 1; every invoke made
/// inside the execute carries it on.
pub const CONTEXT_DEPTH: &str = "switchboard.depth";
/// Context key: for a dead-letter handler's delivery, the dead letter's id.
pub const CONTEXT_DEAD_LETTER_ID: &str = "switchboard.dead_letter_id";

/// Context key, for a dead-letter handler's delivery: the binding whose attempts ran out.
pub const CONTEXT_DEAD_LETTER_BINDING: &str = "switchboard.dead_letter.binding";
/// Context key, for a dead-letter handler's delivery: the attempts the row made.
pub const CONTEXT_DEAD_LETTER_ATTEMPTS: &str = "switchboard.dead_letter.attempts";
/// Context key, for a dead-letter handler's delivery: the last attempt's error message.
pub const CONTEXT_DEAD_LETTER_LAST_ERROR: &str = "switchboard.dead_letter.last_error";
/// Context key, for a dead-letter handler's delivery: the last error's kind
/// (`handler`, `timeout`, `stranded`, …).
pub const CONTEXT_DEAD_LETTER_LAST_ERROR_KIND: &str = "switchboard.dead_letter.last_error_kind";
/// Context key, for a dead-letter handler's delivery: how many errors its history holds.
pub const CONTEXT_DEAD_LETTER_ERRORS: &str = "switchboard.dead_letter.errors";
/// Context key, for a dead-letter handler's delivery: when the first failed attempt
/// ended (unix ms).
pub const CONTEXT_DEAD_LETTER_FIRST_ATTEMPT_MS: &str = "switchboard.dead_letter.first_attempt_ms";
/// Context key, for a dead-letter handler's delivery: when the last attempt ended
/// (unix ms).
pub const CONTEXT_DEAD_LETTER_LAST_ATTEMPT_MS: &str = "switchboard.dead_letter.last_attempt_ms";

/// Context keys an [`ExecuteContext::invoke`](crate::ExecuteContext::invoke) carries
/// over from the execute it is made in: the delivery's trace (its id, and the W3C
/// context the next hop nests under) and its hop depth.
pub(crate) const PROPAGATED_KEYS: &[&str] = &[
    CONTEXT_TRACE_ID,
    CONTEXT_TRACEPARENT,
    CONTEXT_TRACESTATE,
    CONTEXT_DEPTH,
];
