//! Phoenix Channels, serializer version 2, with no I/O.
//!
//! [`frame`] turns text frames into [`Frame`]s and back, and carries protobuf
//! `StreamMessage`s inside `"proto"` events; [`channel`] is the client's view of one
//! channel (refs, join state, heartbeat bookkeeping). Both the connector side and the
//! reference gateway use them, so the two ends cannot disagree about the format.

pub mod channel;
pub mod frame;
pub mod inbound;

pub use channel::{ChannelEvent, ChannelState, JoinState};
pub use frame::{decode_proto, encode_proto, Frame, FrameError, LOBBY_TOPIC, PHOENIX_TOPIC};
pub use inbound::{decode_proto_bytes, InboundFrame};
