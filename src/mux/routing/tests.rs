//! Case-by-case tests of PROTOCOL.md §5.

use super::*;
use crate::proto::{
    ApprovalNotification, CredentialsIssued, ExecuteRequest, ExecuteResponse, HeartbeatRequest,
    HeartbeatResponse, InvokeCapabilityRequest, InvokeCapabilityResponse, MetricsReport,
    RegisterConnectorRequest, RegisterConnectorResponse, WebSocketFrame, WebSocketOpenRequest,
};

const A: HandleId = 1;
const B: HandleId = 2;

fn key(instance: &str) -> RegistrationKey {
    RegistrationKey::new("t", "echo", instance)
}

fn msg(m: Message) -> StreamMessage {
    StreamMessage { message: Some(m) }
}

fn register_response(arn: &str) -> StreamMessage {
    msg(Message::RegisterResponse(RegisterConnectorResponse {
        success: true,
        connector_arn: arn.into(),
        ..Default::default()
    }))
}

fn execute(arn: Option<&str>) -> StreamMessage {
    let mut req = ExecuteRequest {
        request_id: "r".into(),
        ..Default::default()
    };
    if let Some(arn) = arn {
        req.context
            .insert(CONNECTOR_ARN_CONTEXT_KEY.into(), arn.into());
    }
    msg(Message::ExecuteRequest(req))
}

fn invoke_request(arn: Option<&str>) -> StreamMessage {
    let mut req = InvokeCapabilityRequest {
        request_id: "r".into(),
        ..Default::default()
    };
    if let Some(arn) = arn {
        req.context
            .insert(CONNECTOR_ARN_CONTEXT_KEY.into(), arn.into());
    }
    msg(Message::InvokeRequest(req))
}

fn invoke_response(request_id: &str) -> StreamMessage {
    msg(Message::InvokeResponse(InvokeCapabilityResponse {
        request_id: request_id.into(),
        ..Default::default()
    }))
}

fn execute_response(request_id: &str) -> StreamMessage {
    msg(Message::ExecuteResponse(ExecuteResponse {
        request_id: request_id.into(),
        ..Default::default()
    }))
}

fn credentials(gateway_id: &str) -> StreamMessage {
    msg(Message::CredentialsIssued(CredentialsIssued {
        gateway_id: gateway_id.into(),
        ..Default::default()
    }))
}

fn approval(gateway_id: &str) -> StreamMessage {
    msg(Message::ApprovalNotification(ApprovalNotification {
        gateway_id: gateway_id.into(),
        ..Default::default()
    }))
}

/// A table with one handle `A` (instance `a`).
fn one() -> RoutingTable {
    let mut t = RoutingTable::<()>::new("t", 8);
    t.admit(A, key("a")).unwrap();
    t
}

/// A table with handles `A` (instance `a`) and `B` (instance `b`).
fn two() -> RoutingTable {
    let mut t = one();
    t.admit(B, key("b")).unwrap();
    t
}

// ---- admission -------------------------------------------------------------

#[test]
fn admission_beyond_the_cap_is_refused_with_the_tenant_and_cap() {
    let mut t = RoutingTable::<()>::new("t", 1);
    t.admit(A, key("a")).unwrap();
    match t.admit(B, key("b")) {
        Err(Error::HandlerCapReached { tenant, cap }) => {
            assert_eq!((tenant.as_str(), cap), ("t", 1));
        }
        other => panic!("expected HandlerCapReached, got {other:?}"),
    }
    assert_eq!(t.len(), 1);
}

#[test]
fn admitting_an_admitted_dot_key_is_a_duplicate() {
    let mut t = one();
    match t.admit(B, key("a")) {
        Err(Error::DuplicateRegistration { key }) => assert_eq!(key, "t.echo.a"),
        other => panic!("expected DuplicateRegistration, got {other:?}"),
    }
    assert_eq!(t.len(), 1);
}

#[test]
fn admitting_an_admitted_handle_id_is_a_duplicate() {
    let mut t = one();
    assert!(matches!(
        t.admit(A, key("other")),
        Err(Error::DuplicateRegistration { .. })
    ));
    assert_eq!(t.handle_for_dot_key("t.echo.other"), None);
}

#[test]
fn a_removed_key_can_be_admitted_again_and_frees_a_slot() {
    let mut t = RoutingTable::<()>::new("t", 1);
    t.admit(A, key("a")).unwrap();
    t.remove(A);
    assert!(t.is_empty());
    t.admit(B, key("a")).unwrap();
    assert_eq!(t.handle_for_dot_key("t.echo.a"), Some(B));
}

// ---- register_response -----------------------------------------------------

#[test]
fn register_response_is_routed_by_the_dot_key_rebuilt_from_its_arn() {
    let mut t = two();
    assert_eq!(
        t.route(&register_response("matrix:t:echo:b")),
        Route::Handle(B)
    );
    assert_eq!(
        t.route(&register_response("matrix:t:echo:a")),
        Route::Handle(A)
    );
}

#[test]
fn register_response_with_a_canonicalised_type_is_routed_by_instance_id() {
    let mut t = RoutingTable::<()>::new("t", 8);
    t.admit(A, RegistrationKey::new("t", "vendor-echo", "a"))
        .unwrap();
    t.admit(B, RegistrationKey::new("t", "vendor-echo", "b"))
        .unwrap();
    assert_eq!(
        t.route(&register_response("matrix:t:echo:b")),
        Route::Handle(B)
    );
}

#[test]
fn register_response_with_an_ambiguous_instance_id_is_not_guessed() {
    let mut t = RoutingTable::<()>::new("t", 8);
    t.admit(A, RegistrationKey::new("t", "x", "same")).unwrap();
    t.admit(B, RegistrationKey::new("t", "y", "same")).unwrap();
    assert_eq!(
        t.route(&register_response("matrix:t:canonical:same")),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn register_response_with_an_unknown_arn_goes_to_the_only_handle() {
    let mut t = one();
    assert_eq!(
        t.route(&register_response("matrix:t:other:zzz")),
        Route::Handle(A)
    );
}

#[test]
fn register_response_with_an_unknown_arn_is_dropped_among_several_handles() {
    let mut t = two();
    assert_eq!(
        t.route(&register_response("matrix:t:other:zzz")),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn register_response_with_a_malformed_arn_is_dropped_apart_from_unknown() {
    let mut t = two();
    assert_eq!(
        t.route(&register_response("arn:t:echo:a")),
        Route::Drop(DropReason::MalformedArn)
    );
    assert_eq!(
        t.route(&register_response("")),
        Route::Drop(DropReason::MalformedArn)
    );
}

#[test]
fn register_response_with_an_empty_arn_goes_to_the_only_handle() {
    // A rejection usually carries no ARN; the only handle must still learn of it.
    let mut t = one();
    assert_eq!(t.route(&register_response("")), Route::Handle(A));
}

#[test]
fn register_response_on_an_empty_socket_is_dropped() {
    let mut t = RoutingTable::<()>::new("t", 8);
    assert_eq!(
        t.route(&register_response("matrix:t:echo:a")),
        Route::Drop(DropReason::UnknownArn)
    );
}

// ---- execute_request / invoke_request --------------------------------------

#[test]
fn execute_is_routed_by_the_exact_connector_arn() {
    let mut t = two();
    t.set_arn(A, "matrix:t:echo:a");
    t.set_arn(B, "matrix:t:echo:b");
    assert_eq!(t.route(&execute(Some("matrix:t:echo:b"))), Route::Handle(B));
    assert_eq!(t.route(&execute(Some("matrix:t:echo:a"))), Route::Handle(A));
}

#[test]
fn execute_matches_the_assigned_arn_even_when_the_type_was_canonicalised() {
    let mut t = RoutingTable::<()>::new("t", 8);
    t.admit(A, RegistrationKey::new("t", "vendor-echo", "a"))
        .unwrap();
    t.admit(B, key("b")).unwrap();
    t.set_arn(A, "matrix:t:echo:a");
    assert_eq!(t.route(&execute(Some("matrix:t:echo:a"))), Route::Handle(A));
    assert_eq!(
        t.route(&execute(Some("matrix:t:vendor-echo:a"))),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn execute_for_an_unknown_arn_is_dropped_even_with_one_handle() {
    let mut t = one();
    t.set_arn(A, "matrix:t:echo:a");
    assert_eq!(
        t.route(&execute(Some("matrix:t:echo:nobody"))),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn execute_for_departed_arn_is_dropped_not_rerouted_to_the_survivor() {
    let mut t = two();
    t.set_arn(A, "matrix:t:echo:a");
    t.set_arn(B, "matrix:t:echo:b");
    t.remove(A);
    assert_eq!(t.len(), 1, "B is now the only handle");
    assert_eq!(
        t.route(&execute(Some("matrix:t:echo:a"))),
        Route::Drop(DropReason::UnknownArn)
    );
    assert_eq!(t.handle_for_arn("matrix:t:echo:a"), None);
}

#[test]
fn execute_without_an_arn_goes_to_the_only_handle() {
    let mut t = one();
    assert_eq!(t.route(&execute(None)), Route::Handle(A));
    assert_eq!(t.route(&execute(Some(""))), Route::Handle(A));
}

#[test]
fn execute_without_an_arn_is_dropped_among_several_handles() {
    let mut t = two();
    assert_eq!(
        t.route(&execute(None)),
        Route::Drop(DropReason::Unaddressed)
    );
    assert_eq!(
        t.route(&execute(Some(""))),
        Route::Drop(DropReason::Unaddressed)
    );
}

#[test]
fn invoke_request_follows_the_execute_rules() {
    let mut t = two();
    t.set_arn(B, "matrix:t:echo:b");
    assert_eq!(
        t.route(&invoke_request(Some("matrix:t:echo:b"))),
        Route::Handle(B)
    );
    assert_eq!(
        t.route(&invoke_request(Some("matrix:t:echo:gone"))),
        Route::Drop(DropReason::UnknownArn)
    );
    assert_eq!(
        t.route(&invoke_request(None)),
        Route::Drop(DropReason::Unaddressed)
    );
    t.remove(A);
    assert_eq!(t.route(&invoke_request(None)), Route::Handle(B));
}

// ---- set_arn -------------------------------------------------------------

#[test]
fn set_arn_twice_replaces_the_old_arn() {
    let mut t = two();
    t.set_arn(A, "matrix:t:echo:old");
    t.set_arn(A, "matrix:t:echo:new");
    assert_eq!(t.arn_of(A), Some("matrix:t:echo:new"));
    assert_eq!(t.handle_for_arn("matrix:t:echo:old"), None);
    assert_eq!(
        t.route(&execute(Some("matrix:t:echo:old"))),
        Route::Drop(DropReason::UnknownArn)
    );
    assert_eq!(
        t.route(&execute(Some("matrix:t:echo:new"))),
        Route::Handle(A)
    );
}

#[test]
fn set_arn_moves_an_arn_reassigned_to_another_handle() {
    let mut t = two();
    t.set_arn(A, "matrix:t:echo:x");
    t.set_arn(B, "matrix:t:echo:x");
    assert_eq!(t.handle_for_arn("matrix:t:echo:x"), Some(B));
    assert_eq!(t.arn_of(A), None);
    // Removing A must not take B's ARN with it.
    t.remove(A);
    assert_eq!(t.handle_for_arn("matrix:t:echo:x"), Some(B));
}

#[test]
fn set_arn_for_an_unknown_handle_is_ignored() {
    let mut t = one();
    t.set_arn(99, "matrix:t:echo:z");
    assert_eq!(t.handle_for_arn("matrix:t:echo:z"), None);
}

#[test]
fn set_arn_with_an_empty_arn_clears_it() {
    let mut t = one();
    t.set_arn(A, "matrix:t:echo:a");
    t.set_arn(A, "");
    assert_eq!(t.arn_of(A), None);
    assert_eq!(t.handle_for_arn("matrix:t:echo:a"), None);
}

// ---- execute_response / invoke_response ------------------------------------

#[test]
fn response_is_routed_by_its_pending_request_id_and_removed() {
    let mut t = two();
    assert!(t.track_request("r1".into(), B, ()).is_ok());
    assert_eq!(t.route(&invoke_response("r1")), Route::Response(B, ()));
    assert_eq!(t.pending_len(), 0);
    assert_eq!(
        t.route(&invoke_response("r1")),
        Route::Drop(DropReason::UnknownRequestId)
    );
}

#[test]
fn execute_response_is_routed_by_its_pending_request_id() {
    let mut t = two();
    t.track_request("e1".into(), A, ()).unwrap();
    assert_eq!(t.route(&execute_response("e1")), Route::Response(A, ()));
    assert_eq!(t.pending_len(), 0);
}

#[test]
fn response_with_an_unknown_request_id_is_dropped_even_with_one_handle() {
    let mut t = one();
    assert_eq!(
        t.route(&invoke_response("nope")),
        Route::Drop(DropReason::UnknownRequestId)
    );
    assert_eq!(
        t.route(&execute_response("nope")),
        Route::Drop(DropReason::UnknownRequestId)
    );
}

#[test]
fn response_with_an_empty_request_id_goes_to_the_only_handle_else_is_dropped() {
    let mut t = one();
    assert_eq!(t.route(&execute_response("")), Route::Handle(A));
    let mut t = two();
    assert_eq!(
        t.route(&execute_response("")),
        Route::Drop(DropReason::Unaddressed)
    );
    assert_eq!(
        t.route(&invoke_response("")),
        Route::Drop(DropReason::Unaddressed)
    );
}

#[test]
fn forgotten_request_is_no_longer_routed() {
    let mut t = two();
    t.track_request("r1".into(), A, ()).unwrap();
    assert!(t.forget_request("r1").is_some());
    assert!(t.forget_request("r1").is_none());
    assert_eq!(
        t.route(&invoke_response("r1")),
        Route::Drop(DropReason::UnknownRequestId)
    );
}

#[test]
fn track_request_refuses_empty_ids_unknown_handles_and_duplicates() {
    let mut t = two();
    assert!(t.track_request(String::new(), A, ()).is_err());
    assert!(t.track_request("r".into(), 99, ()).is_err());
    assert!(t.track_request("r".into(), A, ()).is_ok());
    assert!(t.track_request("r".into(), B, ()).is_err());
    assert_eq!(t.route(&invoke_response("r")), Route::Response(A, ()));
}

#[test]
fn remove_returns_the_handles_pending_ids_and_keeps_the_others() {
    let mut t = two();
    t.track_request("a2".into(), A, ()).unwrap();
    t.track_request("a1".into(), A, ()).unwrap();
    t.track_request("b1".into(), B, ()).unwrap();
    assert_eq!(
        t.remove(A),
        vec![("a1".to_owned(), ()), ("a2".to_owned(), ())]
    );
    assert_eq!(t.pending_len(), 1);
    assert_eq!(
        t.route(&invoke_response("a1")),
        Route::Drop(DropReason::UnknownRequestId)
    );
    assert_eq!(t.route(&invoke_response("b1")), Route::Response(B, ()));
}

#[test]
fn remove_of_an_unknown_handle_returns_nothing() {
    let mut t = one();
    t.track_request("a1".into(), A, ()).unwrap();
    assert!(t.remove(99).is_empty());
    assert_eq!((t.len(), t.pending_len()), (1, 1));
}

#[test]
fn disconnect_empties_pending_grouped_by_handle_and_keeps_admissions_and_arns() {
    let mut t = two();
    t.set_arn(A, "matrix:t:echo:a");
    t.track_request("b1".into(), B, ()).unwrap();
    t.track_request("a1".into(), A, ()).unwrap();
    t.track_request("a2".into(), A, ()).unwrap();
    assert_eq!(
        t.disconnect(),
        vec![
            (A, vec![("a1".to_owned(), ()), ("a2".to_owned(), ())]),
            (B, vec![("b1".to_owned(), ())]),
        ]
    );
    assert_eq!(t.pending_len(), 0);
    assert_eq!(t.len(), 2);
    assert_eq!(t.route(&execute(Some("matrix:t:echo:a"))), Route::Handle(A));
    assert_eq!(
        t.route(&invoke_response("a1")),
        Route::Drop(DropReason::UnknownRequestId)
    );
    assert!(t.disconnect().is_empty());
}

// ---- credentials_issued / approval_notification ----------------------------

#[test]
fn credentials_and_approvals_are_routed_by_gateway_id() {
    let mut t = two();
    assert_eq!(t.route(&credentials("t.echo.b")), Route::Handle(B));
    assert_eq!(t.route(&approval("t.echo.a")), Route::Handle(A));
}

#[test]
fn unknown_gateway_id_is_dropped_even_with_one_handle() {
    let mut t = one();
    assert_eq!(
        t.route(&credentials("t.echo.zzz")),
        Route::Drop(DropReason::UnknownGatewayId)
    );
    assert_eq!(
        t.route(&approval("t.echo.zzz")),
        Route::Drop(DropReason::UnknownGatewayId)
    );
}

#[test]
fn empty_gateway_id_goes_to_the_only_handle_else_is_dropped() {
    let mut t = one();
    assert_eq!(t.route(&credentials("")), Route::Handle(A));
    assert_eq!(t.route(&approval("")), Route::Handle(A));
    let mut t = two();
    assert_eq!(
        t.route(&credentials("")),
        Route::Drop(DropReason::Unaddressed)
    );
    assert_eq!(t.route(&approval("")), Route::Drop(DropReason::Unaddressed));
}

#[test]
fn gateway_id_of_a_removed_handle_is_dropped() {
    let mut t = two();
    t.remove(A);
    assert_eq!(
        t.route(&approval("t.echo.a")),
        Route::Drop(DropReason::UnknownGatewayId)
    );
}

// ---- heartbeats, the rest, empty -------------------------------------------

#[test]
fn heartbeats_are_handled_by_the_socket_regardless_of_handles() {
    let mut t = RoutingTable::<()>::new("t", 8);
    let req = msg(Message::HeartbeatRequest(HeartbeatRequest::default()));
    let resp = msg(Message::HeartbeatResponse(HeartbeatResponse::default()));
    assert_eq!(t.route(&req), Route::AnswerHeartbeat);
    assert_eq!(t.route(&resp), Route::HeartbeatResponse);
    let mut t = two();
    assert_eq!(t.route(&req), Route::AnswerHeartbeat);
    assert_eq!(t.route(&resp), Route::HeartbeatResponse);
}

#[test]
fn other_messages_go_to_the_only_handle() {
    let mut t = one();
    for m in [
        Message::RegisterRequest(RegisterConnectorRequest::default()),
        Message::WsOpenRequest(WebSocketOpenRequest::default()),
        Message::WsFrame(WebSocketFrame::default()),
        Message::MetricsReport(MetricsReport::default()),
    ] {
        assert_eq!(t.route(&msg(m)), Route::Handle(A));
    }
}

#[test]
fn other_messages_are_dropped_among_several_handles_or_none() {
    let frame = msg(Message::WsFrame(WebSocketFrame::default()));
    assert_eq!(two().route(&frame), Route::Drop(DropReason::Unaddressed));
    assert_eq!(
        RoutingTable::<()>::new("t", 8).route(&frame),
        Route::Drop(DropReason::Unaddressed)
    );
}

#[test]
fn a_message_without_a_variant_is_dropped_as_empty() {
    let mut t = one();
    assert_eq!(
        t.route(&StreamMessage { message: None }),
        Route::Drop(DropReason::Empty)
    );
}

#[test]
fn drop_reason_labels_are_stable_and_distinct() {
    let labels: Vec<&str> = DropReason::ALL.iter().map(DropReason::as_str).collect();
    assert_eq!(
        labels,
        [
            "empty",
            "malformed_arn",
            "unknown_arn",
            "unknown_request_id",
            "unknown_gateway_id",
            "unaddressed"
        ]
    );
    assert_eq!(DropReason::UnknownArn.to_string(), "unknown_arn");
}
