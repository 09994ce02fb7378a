//! A dispatch attempt's span: named, parented and annotated as the OpenTelemetry
//! messaging conventions say (guide: Tracing), and what the attempt came to recorded
//! on it. Apart from the dispatcher so that its loop reads as the loop it is.

use crate::outbox::model::{ClaimedRow, Finish};
use crate::outbox::outcome::AttemptFailure;
use crate::telemetry::{Attribute, Parent, Relationship, Span, SpanKind};
use crate::trace_context::TraceParent;
use crate::triggers::binding::Binding;

/// The attempt's span: `process {binding}`, kind CONSUMER, under (or linked to) the
/// row's creation context as `[telemetry] span_relationship` says, with the messaging
/// conventions' attributes. Deviation, documented in the guide: there is no broker, so
/// `messaging.system` is `switchboard` and the destination is the binding.
pub(super) fn attempt_span(
    binding: &Binding,
    row: &ClaimedRow,
    relationship: Relationship,
) -> Span {
    // A row of an event stored before schema 10 has a trace id but no context: its
    // attempts root in that trace.
    let creation = TraceParent::parse(&row.traceparent).or_else(|| {
        u128::from_str_radix(&row.trace_id, 16)
            .ok()
            .filter(|t| *t != 0 && row.trace_id.len() == 32)
            .map(|t| crate::triggers::root_context(t, rand::random()))
    });
    let parent = creation.map_or(Parent::None, |c| Parent::Message(c, relationship));
    Span::start(
        "process",
        &binding.id,
        SpanKind::Consumer,
        parent,
        &row.tracestate,
        || {
            let mut a: Vec<Attribute> = vec![
                ("messaging.system", "switchboard".into()),
                ("messaging.operation.type", "process".into()),
                ("messaging.operation.name", "process".into()),
                ("messaging.destination.name", binding.id.clone().into()),
                ("messaging.message.id", row.event_id.clone().into()),
                ("messaging.consumer.group.name", binding.id.clone().into()),
                ("switchboard.attempt", i64::from(row.attempt).into()),
                ("switchboard.event.kind", row.kind.clone().into()),
                ("switchboard.source", row.source.clone().into()),
                ("switchboard.provider", row.provider.clone().into()),
                ("switchboard.tenant", row.tenant.clone().into()),
                ("switchboard.row.id", row.id.into()),
            ];
            if binding.version > 0 {
                a.push((
                    "switchboard.binding.version",
                    i64::from(binding.version).into(),
                ));
            }
            a
        },
    )
}

/// What the attempt came to, on its span: `error.type` and an error status for a
/// failure, when the next attempt is due for a retry, and a `dead_lettered` event.
pub(super) fn record_outcome(
    span: &mut Span,
    result: &Result<(), AttemptFailure>,
    finish: &Finish,
    now_ms: i64,
) {
    if let Err(f) = result {
        span.set(|| vec![("error.type", f.kind.as_str().into())]);
        span.fail(|| f.message.clone());
    }
    match finish {
        Finish::Retry { at_ms, .. } => {
            let delay = at_ms - now_ms;
            span.set(|| vec![("switchboard.retry.delay_ms", delay.into())]);
        }
        Finish::DeadLetter { error, .. } => {
            span.event("dead_lettered", || {
                vec![("switchboard.attempts", i64::from(error.attempt).into())]
            });
        }
        Finish::Annotate { .. } | Finish::Done { .. } => {}
    }
}
