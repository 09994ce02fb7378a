//! Phoenix Channels, serializer version 2, with no I/O.
//!
//! The frame codec turns text frames into [`Frame`]s and back, and carries protobuf
//! `StreamMessage`s inside `"proto"` events; [`ChannelState`] is the client's view of one
//! channel (refs, join state, heartbeat bookkeeping). Both the connector side and the
//! reference gateway use them, so the two ends cannot disagree about the format.

pub(crate) mod channel;
pub(crate) mod frame;
pub(crate) mod inbound;

pub use channel::{ChannelEvent, ChannelState, JoinState};
pub use frame::{
    decode_proto, encode_proto, Frame, FrameError, EVENT_CLOSE, EVENT_ERROR, EVENT_HEARTBEAT,
    EVENT_JOIN, EVENT_LEAVE, EVENT_PROTO, EVENT_REPLY, FRAMES_BINARY, JOIN_FRAMES_KEY, LOBBY_TOPIC,
    PHOENIX_TOPIC,
};
pub use inbound::{decode_proto_bytes, InboundFrame};
