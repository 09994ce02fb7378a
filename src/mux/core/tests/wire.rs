//! Test support for the core: the messages a gateway sends, and filters over the
//! core's events.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;

use crate::mux::core::{Event, ExecId, InvokeSpec};
use crate::mux::routing::HandleId;
use crate::phoenix::{Frame, PHOENIX_TOPIC};
use crate::proto::{
    stream_message::Message, ExecuteRequest, InvokeCapabilityResponse, RegisterConnectorResponse,
    RegistrationStatus, StreamMessage,
};

pub(super) const TENANT: &str = "t";
pub(super) const TYPE: &str = "echo";

/// The ARN the tests' gateway assigns to an instance.
pub(super) fn arn(instance: &str) -> String {
    format!("matrix:{TENANT}:{TYPE}:{instance}")
}

/// A successful `register_response` for an instance, with a session token.
pub(super) fn registered(instance: &str) -> Message {
    Message::RegisterResponse(RegisterConnectorResponse {
        success: true,
        connector_arn: arn(instance),
        session_token: session_token(instance),
        status: RegistrationStatus::Approved as i32,
        ..Default::default()
    })
}

/// The session token the tests' gateway hands an instance.
pub(super) fn session_token(instance: &str) -> String {
    format!("session-{instance}")
}

/// A refused `register_response` for an instance.
pub(super) fn refused(instance: &str) -> Message {
    Message::RegisterResponse(RegisterConnectorResponse {
        success: false,
        connector_arn: arn(instance),
        error: "unauthorized".into(),
        ..Default::default()
    })
}

/// An `execute_request` addressed to `arn`; an empty `arn` addresses nobody.
pub(super) fn execute_request(request_id: &str, arn: &str) -> ExecuteRequest {
    let mut context = HashMap::new();
    if !arn.is_empty() {
        context.insert("connector_arn".to_owned(), arn.to_owned());
    }
    ExecuteRequest {
        request_id: request_id.into(),
        payload: Bytes::from_static(b"in"),
        context,
        ..Default::default()
    }
}

pub(super) fn execute(request_id: &str, arn: &str) -> Message {
    Message::ExecuteRequest(execute_request(request_id, arn))
}

/// The encoding of a message as a binary WebSocket frame carries it.
pub(super) fn binary_of(message: Message) -> Bytes {
    StreamMessage {
        message: Some(message),
    }
    .encode_to_vec()
    .into()
}

/// An invoke of `cap` on another connector, answered within 5 s.
pub(super) fn invoke_spec(request_id: &str) -> InvokeSpec {
    InvokeSpec {
        request_id: request_id.into(),
        target: "t.other.1".into(),
        capability_id: "cap".into(),
        payload: Bytes::from_static(b"ask"),
        payload_encoding: 0,
        context: HashMap::new(),
        timeout: Duration::from_secs(5),
        fire_and_forget: false,
    }
}

/// The gateway's answer to invoke `request_id`.
pub(super) fn invoke_response(request_id: &str) -> Message {
    Message::InvokeResponse(InvokeCapabilityResponse {
        request_id: request_id.into(),
        success: true,
        payload: Bytes::from_static(b"answer"),
        ..Default::default()
    })
}

/// The execute ids and request ids of the `StartExecute` events.
pub(super) fn starts(events: &[Event<u32>]) -> Vec<(ExecId, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::StartExecute { exec, request, .. } => Some((*exec, request.request_id.clone())),
            _ => None,
        })
        .collect()
}

/// The execute ids of the `CancelExecute` events.
pub(super) fn cancels(events: &[Event<u32>]) -> Vec<ExecId> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CancelExecute(exec) => Some(*exec),
            _ => None,
        })
        .collect()
}

/// The request ids of the `StartExecute` events.
pub(super) fn started(events: &[Event<u32>]) -> Vec<String> {
    starts(events).into_iter().map(|(_, id)| id).collect()
}

/// The reason of the first `Reconnect` event, if any.
pub(super) fn reconnect_reason(events: &[Event<u32>]) -> Option<&str> {
    events.iter().find_map(|e| match e {
        Event::Reconnect(why) => Some(why.as_str()),
        _ => None,
    })
}

/// The handles of the `Unregistered` events.
pub(super) fn unregistered(events: &[Event<u32>]) -> Vec<HandleId> {
    let mut out: Vec<HandleId> = events
        .iter()
        .filter_map(|e| match e {
            Event::Unregistered(h) => Some(*h),
            _ => None,
        })
        .collect();
    out.sort_unstable();
    out
}

/// The instance ids of the register requests among `sent`, sorted.
pub(super) fn registers(sent: &[Message]) -> Vec<String> {
    let mut out: Vec<String> = sent
        .iter()
        .filter_map(|m| match m {
            Message::RegisterRequest(r) => Some(r.instance_id.clone()),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// A Phoenix heartbeat reply for the heartbeat frame `hb`.
pub(super) fn heartbeat_reply(hb: &Frame) -> String {
    let r = hb.msg_ref.as_deref().expect("a heartbeat has a ref");
    format!(r#"[null,"{r}","{PHOENIX_TOPIC}","phx_reply",{{"status":"ok","response":{{}}}}]"#)
}
