//! How an attempt's result becomes a [`Finish`]: the dispatcher's decision, without
//! I/O. The clock and the jitter draw are inputs, so every branch is a plain `#[test]`.
//!
//! - success: [`Finish::Done`];
//! - failure with attempts left: [`Finish::Retry`] at the policy's next time, or at
//!   the time the handler was told to come back ([`AttemptFailure::retry_after_ms`],
//!   an HTTP endpoint's `Retry-After`), capped at [`MAX_RETRY_AFTER`];
//! - failure of the last attempt, or a failure the handler says retrying cannot cure
//!   ([`AttemptFailure::permanent`], an HTTP endpoint's 4xx): [`Finish::DeadLetter`]
//!   with one fan-out row per dead-letter handler, or, for a row that *was* a
//!   dead-letter handler's delivery, [`Finish::Annotate`] (a dead-letter handler's
//!   failure is never dead-lettered).

use serde::Serialize;

use super::model::{AttemptError, ClaimedRow, Destination, Enqueue, Finish};
use super::retry::{Next, RetryPolicy};
use crate::error::Error;

/// Why an attempt failed, in the labels the API, the metrics and the sync path use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The input could not be turned into the handler's payload (or the handler said
    /// the input was invalid).
    Validation,
    /// The handler ran and failed (a remote error, a local connector's error).
    Handler,
    /// The handler, its connector or the gateway refused for load.
    Overloaded,
    /// The attempt ran past the binding's timeout.
    Timeout,
    /// Switchboard's own side failed: no gateway connection, a store error, shutdown.
    Platform,
    /// The destination's circuit breaker was open: no request was sent.
    BreakerOpen,
    /// The egress policy refused the destination: no request was sent.
    Egress,
}

impl FailureKind {
    /// The stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Validation => "validation",
            FailureKind::Handler => "handler",
            FailureKind::Overloaded => "overloaded",
            FailureKind::Timeout => "timeout",
            FailureKind::Platform => "platform",
            FailureKind::BreakerOpen => "breaker_open",
            FailureKind::Egress => "egress_refused",
        }
    }

    /// The HTTP status the synchronous path answers with: 422, 502, 503, 504 or 500
    /// (an open breaker is 503, a refused destination 502).
    pub fn http_status(self) -> u16 {
        match self {
            FailureKind::Validation => 422,
            FailureKind::Handler | FailureKind::Egress => 502,
            FailureKind::Overloaded | FailureKind::BreakerOpen => 503,
            FailureKind::Timeout => 504,
            FailureKind::Platform => 500,
        }
    }
}

/// The longest `retry_after_ms` honoured: an hour. A handler's "come back later" is
/// a hint from the far side; past an hour the row would sit invisible for longer than
/// an operator expects a retry schedule to run, so the next attempt is due after an
/// hour, and it still counts against `max_attempts`.
pub(crate) const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// A failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFailure {
    /// Why.
    pub kind: FailureKind,
    /// What happened, for a person.
    pub message: String,
    /// When the handler was told when to come back (an HTTP `Retry-After`), the delay
    /// in ms: the next attempt is due then instead of at the retry policy's time
    /// (capped at an hour, `MAX_RETRY_AFTER`).
    pub retry_after_ms: Option<i64>,
    /// Retrying cannot help (an HTTP endpoint refused the request with a 4xx): the
    /// row is dead-lettered at once, whatever attempts are left.
    pub permanent: bool,
}

impl AttemptFailure {
    /// A failure of `kind`, retried per the binding's policy.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> AttemptFailure {
        AttemptFailure {
            kind,
            message: message.into(),
            retry_after_ms: None,
            permanent: false,
        }
    }

    /// This failure, not retried: dead-lettered at once.
    pub fn permanent(mut self) -> AttemptFailure {
        self.permanent = true;
        self
    }

    /// This failure, retried after `delay` (the attempt still counts).
    pub fn retry_after(mut self, delay: std::time::Duration) -> AttemptFailure {
        self.retry_after_ms = Some(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        self
    }

    /// Whether this failure ends the row's attempts when it is attempt `attempt` of a
    /// policy allowing `max_attempts`: the last attempt, or a permanent failure.
    pub fn exhausts(&self, attempt: u32, max_attempts: u32) -> bool {
        self.permanent || attempt >= max_attempts
    }

    /// Classifies an error from a handler call. Remote codes that mean "refused for
    /// load" or "timed out" keep that meaning; a remote `invalid`/`payload` code is the
    /// input's fault; every other remote code is the handler's.
    pub fn from_error(e: &Error) -> AttemptFailure {
        let kind = match e {
            Error::Timeout { .. } => FailureKind::Timeout,
            Error::Overloaded(_) => FailureKind::Overloaded,
            Error::Payload(_) | Error::UnsupportedEncoding(_) => FailureKind::Validation,
            Error::Connector(_) => FailureKind::Handler,
            Error::Remote { code, .. } => match code.as_str() {
                "overloaded" | "rate_limited" => FailureKind::Overloaded,
                "timeout" => FailureKind::Timeout,
                "invalid_payload" | "payload" | "validation" | "unsupported_encoding" => {
                    FailureKind::Validation
                }
                _ => FailureKind::Handler,
            },
            _ => FailureKind::Platform,
        };
        AttemptFailure::new(kind, e.to_string())
    }

    fn record(&self, attempt: u32, at_ms: i64) -> AttemptError {
        AttemptError {
            attempt,
            at_ms,
            kind: self.kind.as_str().to_owned(),
            message: self.message.clone(),
            took_ms: None,
        }
    }
}

/// A dead-letter handler binding, as the fan-out needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadLetterTarget {
    /// Its id.
    pub binding_id: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// Where its rows go (a queue handler takes dead letters into its queue).
    pub destination: Destination,
}

/// The finish for `row` after its attempt ended with `result` at `now_ms`. `unit` is a
/// uniform draw from `[0, 1)` for the jitter; `dead_letter_handlers` are the handlers
/// that report on this row's binding (used only when the row is dead-lettered).
pub(crate) fn decide(
    row: &ClaimedRow,
    retry: &RetryPolicy,
    result: Result<(), &AttemptFailure>,
    now_ms: i64,
    unit: f64,
    dead_letter_handlers: &[DeadLetterTarget],
) -> Finish {
    let (id, token) = (row.id, row.token);
    let failure = match result {
        Ok(()) => return Finish::Done { id, token },
        Err(f) => f,
    };
    let error = failure.record(row.attempt, now_ms);
    let next = if failure.permanent {
        Next::Exhausted
    } else {
        match (
            retry.after_failure(row.attempt, now_ms, unit),
            failure.retry_after_ms,
        ) {
            (Next::RetryAt(_), Some(after_ms)) => {
                let cap = MAX_RETRY_AFTER.as_millis() as i64;
                Next::RetryAt(now_ms.saturating_add(after_ms.clamp(0, cap)))
            }
            (next, _) => next,
        }
    };
    match next {
        Next::RetryAt(at_ms) => Finish::Retry {
            id,
            token,
            at_ms,
            error,
        },
        Next::Exhausted => match row.dead_letter_id {
            Some(dead_letter_id) => Finish::Annotate {
                id,
                token,
                dead_letter_id,
                binding_id: row.binding_id.clone(),
                error,
            },
            None => Finish::DeadLetter {
                id,
                token,
                error,
                fanout: dead_letter_handlers
                    .iter()
                    .map(|h| Enqueue {
                        depth: row.depth,
                        destination: h.destination.clone(),
                        ..Enqueue::dispatch(h.binding_id.clone(), h.fingerprint.clone())
                    })
                    .collect(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outbox::retry::RetryCurve;

    fn row(attempt: u32, dead_letter_id: Option<i64>) -> ClaimedRow {
        ClaimedRow {
            id: 7,
            token: 99,
            binding_id: "b".into(),
            fingerprint: "f".into(),
            event_id: "evt_1".into(),
            source: "s".into(),
            kind: "k".into(),
            provider: "p".into(),
            trace_id: "t".into(),
            traceparent: String::new(),
            tracestate: String::new(),
            tenant: "default".into(),
            attempt,
            depth: 2,
            ordering_key: None,
            enqueued_at_ms: 0,
            due_at_ms: 0,
            payload: b"{}".to_vec(),
            dead_letter_id,
            errors: vec![],
            backfill: None,
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            backoff: RetryCurve::Constant,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(10),
            jitter: 0.0,
        }
    }

    fn handler_failure() -> AttemptFailure {
        AttemptFailure::new(FailureKind::Handler, "boom")
    }

    fn dl(id: &str) -> DeadLetterTarget {
        DeadLetterTarget {
            binding_id: id.into(),
            fingerprint: format!("fp-{id}"),
            destination: Destination::Dispatch,
        }
    }

    #[test]
    fn success_deletes_the_row_under_its_token() {
        let f = decide(&row(1, None), &policy(), Ok(()), 1_000, 0.5, &[]);
        assert_eq!(f, Finish::Done { id: 7, token: 99 });
    }

    #[test]
    fn a_failure_with_attempts_left_is_retried_at_the_policy_time_keeping_the_error() {
        let f = decide(
            &row(2, None),
            &policy(),
            Err(&handler_failure()),
            1_000,
            0.5,
            &[dl("x")],
        );
        let Finish::Retry { at_ms, error, .. } = f else {
            panic!("expected a retry, got {f:?}")
        };
        assert_eq!(at_ms, 1_500);
        assert_eq!(error.attempt, 2);
        assert_eq!(error.kind, "handler");
        assert_eq!(error.message, "boom");
    }

    #[test]
    fn the_last_failure_dead_letters_and_fans_out_to_every_handler_at_the_same_depth() {
        let f = decide(
            &row(3, None),
            &policy(),
            Err(&handler_failure()),
            9,
            0.5,
            &[dl("x"), dl("y")],
        );
        let Finish::DeadLetter { fanout, error, .. } = f else {
            panic!("expected a dead letter, got {f:?}")
        };
        assert_eq!(error.attempt, 3);
        let ids: Vec<_> = fanout.iter().map(|e| e.binding_id.as_str()).collect();
        assert_eq!(ids, ["x", "y"]);
        assert!(fanout
            .iter()
            .all(|e| e.depth == 2 && e.fingerprint.starts_with("fp-")));
    }

    #[test]
    fn a_dead_letter_handlers_last_failure_annotates_and_is_never_dead_lettered() {
        let f = decide(
            &row(3, Some(41)),
            &policy(),
            Err(&handler_failure()),
            9,
            0.5,
            &[dl("x")],
        );
        assert!(
            matches!(f, Finish::Annotate { dead_letter_id: 41, ref binding_id, .. } if binding_id == "b"),
            "{f:?}"
        );
    }

    #[test]
    fn a_retry_after_replaces_the_policys_delay_but_still_counts_the_attempt() {
        let told = handler_failure().retry_after(Duration::from_secs(30));
        let f = decide(&row(1, None), &policy(), Err(&told), 1_000, 0.5, &[]);
        assert!(
            matches!(f, Finish::Retry { at_ms: 31_000, .. }),
            "30 s, not the policy's 500 ms: {f:?}"
        );
        let f = decide(&row(3, None), &policy(), Err(&told), 1_000, 0.5, &[dl("x")]);
        assert!(
            matches!(f, Finish::DeadLetter { .. }),
            "the last attempt: {f:?}"
        );
    }

    #[test]
    fn a_retry_after_is_capped_at_an_hour() {
        let told = handler_failure().retry_after(Duration::from_secs(7 * 86_400));
        let f = decide(&row(1, None), &policy(), Err(&told), 1_000, 0.5, &[]);
        let Finish::Retry { at_ms, .. } = f else {
            panic!("expected a retry, got {f:?}")
        };
        assert_eq!(at_ms, 1_000 + MAX_RETRY_AFTER.as_millis() as i64);
    }

    #[test]
    fn a_permanent_failure_dead_letters_on_the_first_attempt() {
        let refused = handler_failure().permanent();
        assert!(refused.exhausts(1, 3) && !handler_failure().exhausts(1, 3));
        let f = decide(&row(1, None), &policy(), Err(&refused), 5, 0.5, &[dl("x")]);
        let Finish::DeadLetter { error, fanout, .. } = f else {
            panic!("expected a dead letter, got {f:?}")
        };
        assert_eq!((error.attempt, fanout.len()), (1, 1));
        let f = decide(&row(1, Some(8)), &policy(), Err(&refused), 5, 0.5, &[]);
        assert!(matches!(f, Finish::Annotate { .. }), "{f:?}");
    }

    #[test]
    fn errors_are_classified_into_the_sync_paths_statuses() {
        let cases = [
            (Error::timeout("handler", Duration::from_secs(1)), 504),
            (Error::Overloaded("full".into()), 503),
            (Error::Payload("not json".into()), 422),
            (Error::Connector("no".into()), 502),
            (
                Error::Remote {
                    code: "not_found".into(),
                    message: "gone".into(),
                },
                502,
            ),
            (
                Error::Remote {
                    code: "overloaded".into(),
                    message: "busy".into(),
                },
                503,
            ),
            (Error::ConnectionClosed("down".into()), 500),
            (Error::Shutdown, 500),
        ];
        for (e, status) in cases {
            assert_eq!(
                AttemptFailure::from_error(&e).kind.http_status(),
                status,
                "{e}"
            );
        }
    }

    #[test]
    fn remote_codes_for_load_timeout_and_bad_input_keep_their_meaning() {
        // A remote error's code decides the status the sync path answers and the label
        // the attempt is recorded under: a handler's timeout is a 504, not a 502, and a
        // payload the handler refused is the input's fault (422).
        let remote = |code: &str| Error::Remote {
            code: code.into(),
            message: "m".into(),
        };
        for (code, kind) in [
            ("overloaded", FailureKind::Overloaded),
            ("rate_limited", FailureKind::Overloaded),
            ("timeout", FailureKind::Timeout),
            ("invalid_payload", FailureKind::Validation),
            ("payload", FailureKind::Validation),
            ("validation", FailureKind::Validation),
            ("unsupported_encoding", FailureKind::Validation),
            ("internal", FailureKind::Handler),
        ] {
            assert_eq!(
                AttemptFailure::from_error(&remote(code)).kind,
                kind,
                "{code}"
            );
        }
        let local = AttemptFailure::from_error(&Error::UnsupportedEncoding("MSGPACK".into()));
        assert_eq!(local.kind, FailureKind::Validation);
    }
}
