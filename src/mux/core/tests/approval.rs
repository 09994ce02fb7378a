//! The approval flow as the core runs it (approval contract, "Register decisions"):
//! which credential a register presents, PENDING, the credential fallbacks, REJECTED,
//! and the in-stream re-register with the exchange's JWT.

use super::support::*;
use super::wire::*;
use crate::mux::core::{Credential, Event};
use crate::proto::stream_message::Message;
use crate::proto::{
    ApprovalNotification, CredentialsIssued, RegisterConnectorRequest, RegisterConnectorResponse,
    RegistrationStatus,
};

fn answer(instance: &str, success: bool, status: RegistrationStatus, error: &str) -> Message {
    Message::RegisterResponse(RegisterConnectorResponse {
        success,
        connector_arn: arn(instance),
        status: status as i32,
        error: error.into(),
        session_token: if status == RegistrationStatus::Approved {
            session_token(instance)
        } else {
            String::new()
        },
        ..Default::default()
    })
}

fn pending(instance: &str) -> Message {
    answer(instance, true, RegistrationStatus::Pending, "")
}

fn refused_with(instance: &str, error: &str) -> Message {
    answer(instance, false, RegistrationStatus::Unspecified, error)
}

fn notification(instance: &str, status: RegistrationStatus, message: &str) -> Message {
    Message::ApprovalNotification(ApprovalNotification {
        gateway_id: format!("{TENANT}.{TYPE}.{instance}"),
        status: status as i32,
        message: message.into(),
    })
}

/// The register requests among what was sent.
fn register_requests(sent: Vec<Message>) -> Vec<RegisterConnectorRequest> {
    sent.into_iter()
        .filter_map(|m| match m {
            Message::RegisterRequest(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The one register request sent since the last drain, as (session token, jwt).
fn one_register(h: &mut Harness) -> (String, String) {
    match register_requests(h.sent()).as_slice() {
        [r] => (r.session_token.clone(), r.jwt_token.clone()),
        other => panic!("expected one register request, got {other:?}"),
    }
}

fn joined_channel(specs: impl IntoIterator<Item = Spec>) -> Harness {
    let mut h = Harness::new(specs);
    h.connect();
    h.reply_join("ok");
    h
}

/// A registration the gateway accepted as PENDING, with everything drained.
fn awaiting_approval() -> Harness {
    let mut h = joined_channel([spec("a")]);
    h.sent();
    h.deliver(pending("a"));
    h.events();
    h
}

#[test]
fn a_register_presents_the_session_token_before_the_jwt_before_the_configured_token() {
    let mut h = joined_channel([spec("a").stored(Some("s"), Some("j")).auth_token("cfg")]);
    assert_eq!(one_register(&mut h), ("s".into(), "".into()));
    let mut h = joined_channel([spec("a").stored(None, Some("j")).auth_token("cfg")]);
    assert_eq!(one_register(&mut h), ("".into(), "j".into()));
    let mut h = joined_channel([spec("a").auth_token("cfg")]);
    assert_eq!(one_register(&mut h), ("".into(), "cfg".into()));
    let mut h = joined_channel([spec("a")]);
    assert_eq!(one_register(&mut h), ("".into(), "".into()));
}

#[test]
fn pending_is_reported_and_arms_no_timer() {
    let mut h = joined_channel([spec("a")]);
    h.sent();
    h.deliver(pending("a"));
    let a = h.handles[0];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::Pending { handle, arn: got }] if *handle == a && *got == arn("a")),
        "{events:?}"
    );
    // Only the socket's own heartbeats remain: no register deadline, no retry.
    for _ in 0..10 {
        h.tick(REGISTER_TIMEOUT * 10);
        assert!(register_requests(h.sent()).is_empty());
        assert!(h
            .events()
            .iter()
            .all(|e| !matches!(e, Event::RegisterFailed { .. })));
        h.deliver(Message::HeartbeatResponse(Default::default()));
    }
}

#[test]
fn a_pending_registration_re_registers_once_per_join() {
    let mut h = awaiting_approval();
    h.conn.handle_disconnected(h.now(), "test");
    h.events();
    h.connect();
    h.reply_join("ok");
    assert_eq!(registers(&h.sent()), ["a"]);
}

#[test]
fn the_exchange_jwt_re_registers_a_pending_registration_in_stream() {
    let mut h = awaiting_approval();
    let a = h.handles[0];
    h.conn.set_credentials(h.now(), a, Some("jwt-1".into()));
    assert_eq!(one_register(&mut h), ("".into(), "jwt-1".into()));
    h.deliver(registered("a"));
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::Registered { session_token: Some(t), .. }] if *t == session_token("a")),
        "{events:?}"
    );
    // Later registers use the session token the approved register returned.
    h.conn.handle_disconnected(h.now(), "test");
    h.events();
    h.connect();
    h.reply_join("ok");
    assert_eq!(one_register(&mut h), (session_token("a"), "".into()));
}

#[test]
fn a_refreshed_jwt_on_a_registered_registration_sends_nothing() {
    let mut h = joined([spec("a")]);
    let a = h.handles[0];
    h.conn.set_credentials(h.now(), a, Some("jwt-2".into()));
    assert!(h.sent().is_empty() && h.events().is_empty());
}

#[test]
fn a_jwt_minted_while_a_bare_register_is_in_flight_is_presented_after_the_pending_answer() {
    let mut h = joined_channel([spec("a")]);
    h.sent();
    let a = h.handles[0];
    h.conn.set_credentials(h.now(), a, Some("jwt-1".into()));
    assert!(h.sent().is_empty(), "the register in flight decides first");
    h.deliver(pending("a"));
    assert_eq!(one_register(&mut h), ("".into(), "jwt-1".into()));
}

#[test]
fn an_invalid_session_token_falls_back_to_the_jwt_at_once() {
    let mut h = joined_channel([spec("a").stored(Some("s"), Some("j"))]);
    h.sent();
    h.deliver(refused_with("a", "invalid_session_token: unknown"));
    let events = h.events();
    assert!(
        matches!(
            events.as_slice(),
            [Event::CredentialRefused {
                credential: Credential::SessionToken,
                ..
            }]
        ),
        "{events:?}"
    );
    assert_eq!(one_register(&mut h), ("".into(), "j".into()));
}

#[test]
fn an_invalid_expired_or_untrusted_jwt_falls_back_to_a_bare_register_and_pending() {
    for code in [
        "invalid_token: bad signature",
        "expired_token: exp passed",
        "untrusted_issuer: who",
    ] {
        let mut h = joined_channel([spec("a").stored(None, Some("j"))]);
        h.sent();
        h.deliver(refused_with("a", code));
        let events = h.events();
        assert!(
            matches!(
                events.as_slice(),
                [Event::CredentialRefused {
                    credential: Credential::Jwt,
                    ..
                }]
            ),
            "{code}: {events:?}"
        );
        assert_eq!(one_register(&mut h), ("".into(), "".into()), "{code}");
        h.deliver(pending("a"));
        assert!(matches!(h.events().as_slice(), [Event::Pending { .. }]));
    }
}

#[test]
fn the_fallback_chain_ends_in_a_bare_register() {
    let mut h = joined_channel([spec("a").stored(Some("s"), Some("j")).auth_token("cfg")]);
    h.sent();
    h.deliver(refused_with("a", "invalid_session_token: x"));
    assert_eq!(one_register(&mut h), ("".into(), "j".into()));
    h.deliver(refused_with("a", "invalid_token: x"));
    assert_eq!(one_register(&mut h), ("".into(), "cfg".into()));
    h.deliver(refused_with("a", "invalid_token: x"));
    assert_eq!(one_register(&mut h), ("".into(), "".into()));
    // A bare register refused with a credential code is an ordinary failure: backoff.
    h.deliver(refused_with("a", "invalid_token: x"));
    assert!(h.sent().is_empty());
    h.tick(RETRY_INITIAL);
    assert_eq!(one_register(&mut h), ("".into(), "".into()));
}

#[test]
fn a_rejected_register_is_terminal() {
    let mut h = joined_channel([spec("a")]);
    h.sent();
    h.deliver(answer(
        "a",
        false,
        RegistrationStatus::Rejected,
        "rejected: unknown host",
    ));
    let a = h.handles[0];
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::Rejected { handle, reason }] if *handle == a && reason == "unknown host"),
        "{events:?}"
    );
    h.tick(REGISTER_TIMEOUT * 100);
    assert!(register_requests(h.sent()).is_empty());
    // Not on a new join either, and a late JWT changes nothing.
    h.conn.handle_disconnected(h.now(), "test");
    h.connect();
    h.reply_join("ok");
    h.conn.set_credentials(h.now(), a, Some("jwt".into()));
    assert!(register_requests(h.sent()).is_empty());
}

#[test]
fn a_rejection_code_without_the_rejected_status_is_terminal_too() {
    let mut h = joined_channel([spec("a")]);
    h.sent();
    h.deliver(refused_with("a", "rejected: no"));
    assert!(matches!(h.events().as_slice(), [Event::Rejected { reason, .. }] if reason == "no"));
}

#[test]
fn a_rejected_status_without_the_rejected_code_is_an_ordinary_refusal_and_retried() {
    let mut h = joined_channel([spec("a")]);
    h.sent();
    h.deliver(answer(
        "a",
        false,
        RegistrationStatus::Rejected,
        "refused right now",
    ));
    assert!(matches!(
        h.events().as_slice(),
        [Event::RegisterFailed { .. }]
    ));
    h.tick(RETRY_INITIAL);
    assert_eq!(one_register(&mut h), ("".into(), "".into()));
}

#[test]
fn a_rejected_notification_ends_a_pending_registration() {
    let mut h = awaiting_approval();
    h.deliver(notification("a", RegistrationStatus::Rejected, "not ours"));
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [Event::Rejected { reason, .. }, Event::Approval { .. }] if reason == "not ours"),
        "{events:?}"
    );
    h.conn.handle_disconnected(h.now(), "test");
    h.connect();
    h.reply_join("ok");
    assert!(register_requests(h.sent()).is_empty());
}

#[test]
fn a_registration_with_stored_keys_waits_for_its_jwt_before_registering() {
    let mut h = joined_channel([spec("a").await_jwt()]);
    assert!(register_requests(h.sent()).is_empty());
    let a = h.handles[0];
    h.conn.set_credentials(h.now(), a, Some("fresh".into()));
    assert_eq!(one_register(&mut h), ("".into(), "fresh".into()));
}

#[test]
fn a_registration_waiting_for_its_jwt_registers_bare_at_the_register_timeout() {
    let mut h = joined_channel([spec("a").await_jwt()]);
    h.sent();
    h.tick(REGISTER_TIMEOUT - ms(1));
    assert!(register_requests(h.sent()).is_empty());
    h.tick(ms(1));
    assert_eq!(one_register(&mut h), ("".into(), "".into()));
}

#[test]
fn a_registration_whose_stored_keys_fail_registers_bare_at_once() {
    let mut h = joined_channel([spec("a").await_jwt()]);
    h.sent();
    let a = h.handles[0];
    h.conn.set_credentials(h.now(), a, None);
    assert_eq!(one_register(&mut h), ("".into(), "".into()));
}

#[test]
fn approval_traffic_for_twenty_pending_registrations_reaches_each_by_dot_key() {
    let names: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
    let mut o = opts();
    o.max_handlers = 32;
    let mut h = Harness::with_opts(o, names.iter().map(|n| spec(n)));
    h.connect();
    h.reply_join("ok");
    h.sent();
    for n in &names {
        h.deliver(pending(n));
    }
    assert_eq!(h.events().len(), 20);
    // Approve in a scrambled order; each notification and credentials_issued must
    // reach its own handle.
    let order: Vec<usize> = (0..20).map(|i| (i * 7 + 3) % 20).collect();
    for &i in &order {
        h.deliver(notification(&names[i], RegistrationStatus::Approved, "ok"));
        h.deliver(Message::CredentialsIssued(CredentialsIssued {
            gateway_id: format!("{TENANT}.{TYPE}.{}", names[i]),
            ott: format!("ott-{i}"),
            ..Default::default()
        }));
        let events = h.events();
        let want = h.handles[i];
        assert!(
            matches!(events.as_slice(), [
                Event::Approval { handle: a, .. },
                Event::Deliver { handle: b, message },
            ] if *a == want && *b == want
                && matches!(&**message, Message::CredentialsIssued(c) if c.ott == format!("ott-{i}"))),
            "{i}: {events:?}"
        );
        h.conn
            .set_credentials(h.now(), want, Some(format!("jwt-{i}")));
        let reqs = register_requests(h.sent());
        assert_eq!(reqs.len(), 1);
        assert_eq!(
            (reqs[0].instance_id.as_str(), reqs[0].jwt_token.clone()),
            (names[i].as_str(), format!("jwt-{i}"))
        );
        h.deliver(registered(&names[i]));
        assert!(
            matches!(h.events().as_slice(), [Event::Registered { handle, .. }] if *handle == want)
        );
    }
    assert_eq!(h.dropped("unknown_gateway_id"), 0);
}
