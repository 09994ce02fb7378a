//! The registrations table on its own: register phases and the deadline each arms,
//! the answers to a register, the terminal rejection, and removal.

use std::time::Duration;

use super::super::support::*;
use crate::error::Error;
use crate::mux::core::registrations::{Accepted, Answer, Phase, RegisterTimer, Registrations};
use crate::mux::core::timers::{Timer, Timers};
use crate::mux::core::Credential;
use crate::mux::metrics::SocketMetrics;
use crate::mux::routing::HandleId;
use crate::proto::{RegisterConnectorRequest, RegisterConnectorResponse, RegistrationStatus};

/// An empty table, its deadlines and a clock.
fn table() -> (Registrations<&'static str>, Timers, Clock) {
    (Registrations::new(7), Timers::default(), Clock::new())
}

/// Adds `s` (admitted by everyone) with driver data `user`.
fn add(
    t: &mut (Registrations<&'static str>, Timers, Clock),
    s: Spec,
    user: &'static str,
) -> HandleId {
    let (regs, timers, clock) = t;
    regs.add(timers, clock.now(), s.build(), user, |_, _| Ok(()))
        .expect("added")
}

fn request(
    t: &mut (Registrations<&'static str>, Timers, Clock),
    h: HandleId,
) -> Option<RegisterConnectorRequest> {
    let (regs, timers, clock) = t;
    regs.register_request(timers, clock.now(), h)
}

fn answer(
    t: &mut (Registrations<&'static str>, Timers, Clock),
    h: HandleId,
    success: bool,
    status: RegistrationStatus,
    error: &str,
) -> Answer {
    let (regs, timers, clock) = t;
    let resp = RegisterConnectorResponse {
        success,
        connector_arn: arn("a"),
        status: status as i32,
        error: error.into(),
        session_token: if success { "s1".into() } else { String::new() },
        ..Default::default()
    };
    regs.answered(timers, clock.now(), h, resp)
}

#[test]
fn a_handle_is_used_up_only_when_everyone_admits_the_registration() {
    let mut t = table();
    let (regs, timers, clock) = &mut t;
    let refused = regs.add(timers, clock.now(), spec("a").build(), "a", |_, _| {
        Err(Error::Config("no".into()))
    });
    assert!(refused.is_err());
    assert!(regs.is_empty());
    let a = add(&mut t, spec("a"), "a");
    let b = add(&mut t, spec("b"), "b");
    assert_eq!((a, b), (1, 2));
    assert_eq!(t.0.user(b), Some(&"b"));
}

#[test]
fn a_register_arms_its_deadline_and_its_success_disarms_it() {
    let mut t = table();
    let a = add(&mut t, spec("a"), "a");
    assert_eq!(t.1.len(), 0, "no metrics interval, no link: no deadline");
    assert!(request(&mut t, a).is_some());
    let at = t.2.now().instant + REGISTER_TIMEOUT;
    assert!(matches!(t.0.phase(a), Some(Phase::Registering { at: due, .. }) if due == at));
    assert_eq!((t.1.len(), t.1.next()), (1, Some(at)));
    let got = answer(&mut t, a, true, RegistrationStatus::Approved, "");
    assert_eq!(
        got,
        Answer::Accepted {
            arn: arn("a"),
            outcome: Accepted::Registered {
                status: RegistrationStatus::Approved as i32,
                session_token: Some("s1".into()),
            },
        }
    );
    assert!(t.0.is_registered(a));
    assert_eq!(t.1.len(), 0);
}

#[test]
fn a_refused_register_is_retried_after_the_backoff() {
    let mut t = table();
    let a = add(&mut t, spec("a"), "a");
    request(&mut t, a);
    let got = answer(
        &mut t,
        a,
        false,
        RegistrationStatus::Unspecified,
        "unauthorized",
    );
    assert_eq!(got, Answer::Failed("unauthorized".into()));
    let at = t.2.now().instant + RETRY_INITIAL;
    assert!(matches!(t.0.phase(a), Some(Phase::RetryAt { at: due, .. }) if due == at));
    assert_eq!((t.1.len(), t.1.next()), (1, Some(at)));
    assert_eq!(t.1.pop_due(at), Some(Timer::Register(a)));
    let (regs, timers, clock) = &mut t;
    assert_eq!(
        regs.timer_fired(timers, clock.now(), a),
        Some(RegisterTimer::Register)
    );
    assert_eq!(t.0.phase(a), Some(Phase::Down));
}

#[test]
fn an_unanswered_register_fails_at_its_deadline_and_schedules_the_retry() {
    let mut t = table();
    let a = add(&mut t, spec("a"), "a");
    request(&mut t, a);
    let at = t.2.advance(REGISTER_TIMEOUT).instant;
    assert_eq!(t.1.pop_due(at), Some(Timer::Register(a)));
    let (regs, timers, clock) = &mut t;
    let fired = regs.timer_fired(timers, clock.now(), a);
    assert!(matches!(fired, Some(RegisterTimer::Failed(_))), "{fired:?}");
    assert!(matches!(t.0.phase(a), Some(Phase::RetryAt { .. })));
    assert_eq!((t.1.len(), t.1.next()), (1, Some(at + RETRY_INITIAL)));
    let late = answer(&mut t, a, false, RegistrationStatus::Unspecified, "late");
    assert_eq!(
        late,
        Answer::Failed("late".into()),
        "a refusal while retrying still counts"
    );
}

#[test]
fn a_refused_credential_is_dropped_and_the_next_register_presents_the_next_one() {
    let mut t = table();
    let a = add(&mut t, spec("a").stored(Some("s"), Some("j")), "a");
    assert_eq!(request(&mut t, a).expect("sent").session_token, "s");
    let got = answer(
        &mut t,
        a,
        false,
        RegistrationStatus::Unspecified,
        "invalid_session_token: x",
    );
    assert_eq!(
        got,
        Answer::CredentialRefused {
            credential: Credential::SessionToken,
            error: "invalid_session_token: x".into(),
        }
    );
    assert_eq!((t.0.phase(a), t.1.len()), (Some(Phase::Down), 0));
    let next = request(&mut t, a).expect("sent");
    assert_eq!(
        (next.session_token.as_str(), next.jwt_token.as_str()),
        ("", "j")
    );
}

#[test]
fn pending_arms_nothing_and_a_jwt_that_arrived_meanwhile_is_presented_at_once() {
    let mut t = table();
    let a = add(&mut t, spec("a"), "a");
    request(&mut t, a);
    let got = answer(&mut t, a, true, RegistrationStatus::Pending, "");
    assert!(
        matches!(
            got,
            Answer::Accepted {
                outcome: Accepted::Pending,
                ..
            }
        ),
        "{got:?}"
    );
    assert_eq!(
        (t.0.phase(a), t.1.len()),
        (Some(Phase::AwaitingApproval), 0)
    );

    let b = add(&mut t, spec("b"), "b");
    request(&mut t, b);
    assert!(
        !t.0.set_credentials(b, Some("j".into())),
        "registering: keep it for later"
    );
    let got = answer(&mut t, b, true, RegistrationStatus::Pending, "");
    assert!(
        matches!(
            got,
            Answer::Accepted {
                outcome: Accepted::Reregister,
                ..
            }
        ),
        "{got:?}"
    );
    assert_eq!(request(&mut t, b).expect("sent").jwt_token, "j");
}

#[test]
fn a_fresh_jwt_re_registers_a_registration_awaiting_approval_without_its_token() {
    let mut t = table();
    let a = add(&mut t, spec("a").stored(Some("s"), None), "a");
    request(&mut t, a);
    answer(&mut t, a, true, RegistrationStatus::Pending, "");
    assert!(!t.0.set_credentials(a, None), "no JWT, nothing to present");
    assert!(t.0.set_credentials(a, Some("j".into())));
    let next = request(&mut t, a).expect("sent");
    assert_eq!(
        (next.session_token.as_str(), next.jwt_token.as_str()),
        ("", "j")
    );
}

#[test]
fn a_register_waiting_for_a_jwt_arms_one_deadline_and_then_goes_with_what_there_is() {
    let mut t = table();
    let a = add(&mut t, spec("a").auth_token("cfg").await_jwt(), "a");
    assert!(request(&mut t, a).is_none());
    assert!(request(&mut t, a).is_none(), "still waiting");
    assert!(matches!(
        t.0.phase(a),
        Some(Phase::AwaitingCredentials { .. })
    ));
    assert_eq!(t.1.len(), 1);
    let at = t.2.advance(REGISTER_TIMEOUT).instant;
    assert_eq!(t.1.pop_due(at), Some(Timer::Register(a)));
    let (regs, timers, clock) = &mut t;
    assert_eq!(
        regs.timer_fired(timers, clock.now(), a),
        Some(RegisterTimer::Register)
    );
    assert_eq!(request(&mut t, a).expect("sent").jwt_token, "cfg");
}

#[test]
fn rejected_is_terminal() {
    let mut t = table();
    let a = add(&mut t, spec("a"), "a");
    request(&mut t, a);
    let got = answer(
        &mut t,
        a,
        false,
        RegistrationStatus::Rejected,
        "rejected: not you",
    );
    assert_eq!(got, Answer::Rejected("not you".into()));
    assert_eq!((t.0.phase(a), t.1.len()), (Some(Phase::Rejected), 0));
    let (regs, timers, _) = &mut t;
    assert!(!regs.reject(timers, a, "again"));
    regs.down(timers, a);
    assert!(!regs.set_credentials(a, Some("j".into())));
    assert!(request(&mut t, a).is_none());
    let got = answer(&mut t, a, true, RegistrationStatus::Approved, "");
    assert_eq!(got, Answer::Ignored);
    assert_eq!((t.0.phase(a), t.1.len()), (Some(Phase::Rejected), 0));
}

#[test]
fn metrics_reports_are_rescheduled_and_sent_only_when_registered() {
    let mut t = table();
    let a = add(
        &mut t,
        spec("a").metrics_interval(Duration::from_secs(10)),
        "a",
    );
    assert_eq!(t.1.len(), 1);
    let socket = SocketMetrics::default();
    let (regs, timers, clock) = &mut t;
    let arn_a = arn("a");
    let report = regs.metrics_report(
        timers,
        clock.now(),
        a,
        Some(&arn_a),
        &socket,
        Default::default(),
    );
    assert!(report.is_none(), "not registered");
    assert_eq!(timers.len(), 1, "the next report replaced the last");
    request(&mut t, a);
    answer(&mut t, a, true, RegistrationStatus::Approved, "");
    let (regs, timers, clock) = &mut t;
    let report = regs.metrics_report(
        timers,
        clock.now(),
        a,
        Some(&arn_a),
        &socket,
        Default::default(),
    );
    assert_eq!(report.map(|r| r.connector_arn), Some(arn_a));
    let report = regs.metrics_report(timers, clock.now(), a, None, &socket, Default::default());
    assert!(report.is_none(), "no ARN, no report");
}

#[test]
fn removal_takes_every_deadline_of_the_registration() {
    let mut t = table();
    let a = add(
        &mut t,
        spec("a").metrics_interval(Duration::from_secs(10)),
        "a",
    );
    request(&mut t, a);
    assert_eq!(t.1.len(), 2);
    let (regs, timers, _) = &mut t;
    assert_eq!(regs.remove(timers, a), Some("a"));
    assert_eq!((timers.len(), regs.len()), (0, 0));
    assert_eq!(regs.remove(timers, a), None);
}
