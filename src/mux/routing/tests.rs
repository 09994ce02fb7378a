//! Case-by-case tests of PROTOCOL.md §5.

use super::*;
use crate::proto::{
    ApprovalNotification, CredentialsIssued, ExecuteRequest, ExecuteResponse, HeartbeatRequest,
    HeartbeatResponse, InvokeCapabilityResponse, RegisterConnectorResponse, WebSocketFrame,
};

fn msg(m: Message) -> StreamMessage {
    StreamMessage { message: Some(m) }
}

fn key(instance: &str) -> RegistrationKey {
    RegistrationKey::new("acme", "echo", instance)
}

fn table(instances: &[&str]) -> RoutingTable {
    let mut t = RoutingTable::new("acme", 16);
    for (i, inst) in instances.iter().enumerate() {
        t.admit(i as HandleId + 1, key(inst)).unwrap();
    }
    t
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
        request_id: "r1".into(),
        ..Default::default()
    };
    if let Some(arn) = arn {
        req.context.insert("connector_arn".into(), arn.into());
    }
    msg(Message::ExecuteRequest(req))
}

fn execute_response(id: &str) -> StreamMessage {
    msg(Message::ExecuteResponse(ExecuteResponse {
        request_id: id.into(),
        ..Default::default()
    }))
}

fn approval(gateway_id: &str) -> StreamMessage {
    msg(Message::ApprovalNotification(ApprovalNotification {
        gateway_id: gateway_id.into(),
        ..Default::default()
    }))
}

#[test]
fn register_response_routes_by_the_dot_key_rebuilt_from_the_arn() {
    let mut t = table(&["a", "b"]);
    assert_eq!(
        t.route(&register_response("matrix:acme:echo:b")),
        Route::Handle(2)
    );
}

#[test]
fn register_response_with_canonicalised_type_routes_by_unique_instance() {
    let mut t = table(&["a", "b"]);
    assert_eq!(
        t.route(&register_response("matrix:acme:vendor-echo:a")),
        Route::Handle(1)
    );
}

#[test]
fn ambiguous_instance_ids_are_not_guessed() {
    let mut t = RoutingTable::new("acme", 16);
    t.admit(1, RegistrationKey::new("acme", "echo", "x"))
        .unwrap();
    t.admit(2, RegistrationKey::new("acme", "other", "x"))
        .unwrap();
    assert_eq!(
        t.route(&register_response("matrix:acme:third:x")),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn register_response_falls_back_to_the_only_handle() {
    let mut t = table(&["a"]);
    assert_eq!(
        t.route(&register_response("matrix:acme:echo:zzz")),
        Route::Handle(1)
    );
    assert_eq!(t.route(&register_response("")), Route::Handle(1));
}

#[test]
fn unroutable_register_responses_distinguish_malformed_from_unknown() {
    let mut t = table(&["a", "b"]);
    assert_eq!(
        t.route(&register_response("not-an-arn")),
        Route::Drop(DropReason::MalformedArn)
    );
    assert_eq!(
        t.route(&register_response("matrix:acme:echo:zzz")),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn execute_routes_by_exact_context_arn() {
    let mut t = table(&["a", "b"]);
    t.set_arn(1, "matrix:acme:echo:a");
    t.set_arn(2, "matrix:acme:echo:b");
    assert_eq!(
        t.route(&execute(Some("matrix:acme:echo:b"))),
        Route::Handle(2)
    );
    assert_eq!(
        t.route(&execute(Some("matrix:acme:echo:a"))),
        Route::Handle(1)
    );
}

#[test]
fn execute_for_unknown_arn_is_dropped_even_with_one_handle() {
    let mut t = table(&["a"]);
    t.set_arn(1, "matrix:acme:echo:a");
    assert_eq!(
        t.route(&execute(Some("matrix:acme:echo:gone"))),
        Route::Drop(DropReason::UnknownArn)
    );
    assert_eq!(
        t.route(&execute(Some("garbage"))),
        Route::Drop(DropReason::MalformedArn)
    );
}

#[test]
fn execute_for_a_removed_handle_is_not_given_to_the_survivor() {
    let mut t = table(&["leaver", "stayer"]);
    t.set_arn(1, "matrix:acme:echo:leaver");
    t.set_arn(2, "matrix:acme:echo:stayer");
    t.remove(1);
    assert_eq!(t.len(), 1);
    assert_eq!(
        t.route(&execute(Some("matrix:acme:echo:leaver"))),
        Route::Drop(DropReason::UnknownArn)
    );
}

#[test]
fn execute_without_arn_goes_to_the_only_handle_else_is_dropped() {
    assert_eq!(table(&["a"]).route(&execute(None)), Route::Handle(1));
    assert_eq!(table(&["a"]).route(&execute(Some(""))), Route::Handle(1));
    assert_eq!(
        table(&["a", "b"]).route(&execute(None)),
        Route::Drop(DropReason::Unaddressed)
    );
}

#[test]
fn responses_route_by_pending_request_id_once() {
    let mut t = table(&["a", "b"]);
    t.track_request("q7".into(), 2);
    assert_eq!(t.route(&execute_response("q7")), Route::Handle(2));
    assert_eq!(t.pending_len(), 0);
    assert_eq!(
        t.route(&execute_response("q7")),
        Route::Drop(DropReason::UnknownRequestId)
    );
    t.track_request("q8".into(), 1);
    let invoke = msg(Message::InvokeResponse(InvokeCapabilityResponse {
        request_id: "q8".into(),
        ..Default::default()
    }));
    assert_eq!(t.route(&invoke), Route::Handle(1));
}

#[test]
fn responses_with_empty_id_go_to_the_only_handle_else_are_dropped() {
    assert_eq!(table(&["a"]).route(&execute_response("")), Route::Handle(1));
    assert_eq!(
        table(&["a", "b"]).route(&execute_response("")),
        Route::Drop(DropReason::Unaddressed)
    );
    assert_eq!(
        table(&["a"]).route(&execute_response("nope")),
        Route::Drop(DropReason::UnknownRequestId)
    );
}

#[test]
fn approvals_and_credentials_route_by_gateway_id() {
    let mut t = table(&["a", "b"]);
    assert_eq!(t.route(&approval("acme.echo.b")), Route::Handle(2));
    assert_eq!(
        t.route(&approval("acme.echo.zz")),
        Route::Drop(DropReason::UnknownGatewayId)
    );
    assert_eq!(t.route(&approval("")), Route::Drop(DropReason::Unaddressed));
    let creds = msg(Message::CredentialsIssued(CredentialsIssued {
        gateway_id: "acme.echo.a".into(),
        ..Default::default()
    }));
    assert_eq!(t.route(&creds), Route::Handle(1));
    assert_eq!(table(&["a"]).route(&approval("")), Route::Handle(1));
}

#[test]
fn heartbeats_belong_to_the_socket() {
    let mut t = table(&["a"]);
    assert_eq!(
        t.route(&msg(Message::HeartbeatRequest(HeartbeatRequest::default()))),
        Route::AnswerHeartbeat
    );
    assert_eq!(
        t.route(&msg(Message::HeartbeatResponse(
            HeartbeatResponse::default()
        ))),
        Route::HeartbeatResponse
    );
}

#[test]
fn other_messages_go_to_the_only_handle_else_are_dropped() {
    let frame = msg(Message::WsFrame(WebSocketFrame::default()));
    assert_eq!(table(&["a"]).route(&frame), Route::Handle(1));
    assert_eq!(
        table(&["a", "b"]).route(&frame),
        Route::Drop(DropReason::Unaddressed)
    );
    assert_eq!(
        table(&["a"]).route(&StreamMessage::default()),
        Route::Drop(DropReason::Empty)
    );
}

#[test]
fn admission_refuses_duplicates_and_the_cap_with_typed_errors() {
    let mut t = RoutingTable::new("acme", 2);
    t.admit(1, key("a")).unwrap();
    assert!(
        matches!(t.admit(2, key("a")), Err(Error::DuplicateRegistration { key }) if key == "acme.echo.a")
    );
    t.admit(2, key("b")).unwrap();
    assert!(matches!(
        t.admit(3, key("c")),
        Err(Error::HandlerCapReached { cap: 2, .. })
    ));
    t.remove(1);
    t.admit(3, key("c")).unwrap();
}

#[test]
fn remove_returns_pending_ids_and_disconnect_voids_all() {
    let mut t = table(&["a", "b"]);
    t.track_request("x".into(), 1);
    t.track_request("y".into(), 2);
    t.track_request("z".into(), 2);
    assert_eq!(t.remove(1), vec!["x".to_owned()]);
    let mut voided = t.disconnect();
    voided.iter_mut().for_each(|(_, ids)| ids.sort());
    assert_eq!(voided, vec![(2, vec!["y".to_owned(), "z".to_owned()])]);
    assert_eq!(t.pending_len(), 0);
    assert!(t.forget_request("y").eq(&false));
}

#[test]
fn set_arn_twice_replaces_the_old_arn() {
    let mut t = table(&["a", "b"]);
    t.set_arn(1, "matrix:acme:echo:a");
    t.set_arn(1, "matrix:acme:echo2:a");
    assert_eq!(t.handle_for_arn("matrix:acme:echo:a"), None);
    assert_eq!(
        t.route(&execute(Some("matrix:acme:echo:a"))),
        Route::Drop(DropReason::UnknownArn)
    );
    assert_eq!(
        t.route(&execute(Some("matrix:acme:echo2:a"))),
        Route::Handle(1)
    );
}

#[test]
fn forget_request_prunes_the_pending_map() {
    let mut t = table(&["a", "b"]);
    t.track_request("x".into(), 1);
    assert!(t.forget_request("x"));
    assert_eq!(
        t.route(&execute_response("x")),
        Route::Drop(DropReason::UnknownRequestId)
    );
}
