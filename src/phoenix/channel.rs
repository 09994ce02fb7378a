//! The client's state for one Phoenix channel plus the socket-level heartbeat, with no
//! I/O and no clock.
//!
//! Call order: [`ChannelState::join`] after the socket opens and send its frame; feed
//! every decoded inbound frame to [`ChannelState::handle`] and act on the returned
//! [`ChannelEvent`]; every heartbeat interval call [`ChannelState::heartbeat`]: it
//! returns `None` when the previous heartbeat is still unanswered, which means the
//! peer is dead and the socket must be closed and reconnected (phoenix.js does the
//! same). Outbound data frames take their refs from [`ChannelState::encode_data`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::json;

use super::frame::{
    encode_proto, Frame, EVENT_CLOSE, EVENT_ERROR, EVENT_HEARTBEAT, EVENT_JOIN, EVENT_LEAVE,
    EVENT_PROTO, EVENT_REPLY, FRAMES_BINARY, JOIN_FRAMES_KEY, PHOENIX_TOPIC,
};
use super::inbound::InboundFrame;
use crate::proto::StreamMessage;

/// Where the channel's join stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinState {
    /// Not joined; data frames would be answered with `unmatched topic`.
    Closed,
    /// Join sent, reply not yet seen.
    Joining,
    /// The server accepted the join.
    Joined,
}

/// What an inbound frame meant for the channel.
#[derive(Debug, Clone, PartialEq)]
pub enum ChannelEvent {
    /// The join was accepted.
    Joined,
    /// The server refused the join; the reason from its reply.
    JoinRefused(String),
    /// The outstanding Phoenix heartbeat was answered.
    HeartbeatAck,
    /// A `"proto"` data frame for the current join; decode its payload with
    /// [`InboundFrame::proto`].
    Data,
    /// The join is gone (`phx_error`, `phx_close`, or `unmatched topic`): rejoin.
    Lost(String),
    /// A frame the channel has no use for (a reply to a data push, a frame for an
    /// earlier join, an unknown event); the string says why, for the drop log.
    Ignored(&'static str),
}

/// Refs, join state and heartbeat bookkeeping for one channel on one socket.
#[derive(Debug, Clone)]
pub struct ChannelState {
    topic: String,
    /// The socket's ref counter; shared (see [`ChannelState::with_shared_refs`]) when
    /// other tasks also write frames on this socket.
    refs: Arc<AtomicU64>,
    join_ref: Option<String>,
    state: JoinState,
    heartbeat_ref: Option<String>,
}

impl ChannelState {
    /// A closed channel on `topic`.
    pub fn new(topic: impl Into<String>) -> Self {
        Self::with_shared_refs(topic, Arc::default())
    }

    /// A closed channel whose refs come from `refs`, a counter that other writers on
    /// the same socket also draw from, so every ref on the socket stays unique.
    pub fn with_shared_refs(topic: impl Into<String>, refs: Arc<AtomicU64>) -> Self {
        ChannelState {
            topic: topic.into(),
            refs,
            join_ref: None,
            state: JoinState::Closed,
            heartbeat_ref: None,
        }
    }

    /// The join state.
    pub fn state(&self) -> JoinState {
        self.state
    }

    /// The ref of the current join, if any.
    pub fn join_ref(&self) -> Option<&str> {
        self.join_ref.as_deref()
    }

    fn take_ref(&mut self) -> String {
        (self.refs.fetch_add(1, Ordering::Relaxed) + 1).to_string()
    }

    /// Starts a (re)join: a new join ref, state `Joining`. Returns the frame to send,
    /// whose payload says that this client reads binary frames ([`JOIN_FRAMES_KEY`]).
    pub fn join(&mut self) -> Frame {
        let r = self.take_ref();
        self.join_ref = Some(r.clone());
        self.state = JoinState::Joining;
        Frame::new(
            Some(r.clone()),
            Some(r),
            self.topic.clone(),
            EVENT_JOIN,
            json!({ JOIN_FRAMES_KEY: FRAMES_BINARY }),
        )
    }

    /// The next Phoenix heartbeat to send, or `None` when the previous one was never
    /// answered (the peer is dead: close and reconnect).
    pub fn heartbeat(&mut self) -> Option<Frame> {
        if self.heartbeat_ref.is_some() {
            return None;
        }
        let r = self.take_ref();
        self.heartbeat_ref = Some(r.clone());
        Some(Frame::new(
            None,
            Some(r),
            PHOENIX_TOPIC,
            EVENT_HEARTBEAT,
            json!({}),
        ))
    }

    /// Encodes an outbound data frame on the current join.
    pub fn encode_data(&mut self, msg: &StreamMessage) -> String {
        let r = self.take_ref();
        encode_proto(self.join_ref.as_deref(), Some(r.as_str()), &self.topic, msg)
    }

    /// Leaves the channel: the `phx_leave` frame to send under the current join, or
    /// `None` when there is no join to leave. The channel is closed from then on. A
    /// client that leaves before closing its socket tells the server it is gone on
    /// purpose, at once, rather than through a heartbeat timeout.
    pub fn leave(&mut self) -> Option<Frame> {
        let join_ref = self.join_ref.take()?;
        let r = self.take_ref();
        self.state = JoinState::Closed;
        Some(Frame::new(
            Some(join_ref),
            Some(r),
            self.topic.clone(),
            EVENT_LEAVE,
            json!({}),
        ))
    }

    /// Forgets the join and any outstanding heartbeat: call when the socket closes.
    pub fn reset(&mut self) {
        self.join_ref = None;
        self.state = JoinState::Closed;
        self.heartbeat_ref = None;
    }

    /// Interprets one inbound frame.
    pub fn handle(&mut self, frame: &InboundFrame<'_>) -> ChannelEvent {
        if frame.topic == PHOENIX_TOPIC {
            if frame.event == EVENT_REPLY
                && frame.msg_ref.is_some()
                && frame.msg_ref.as_deref() == self.heartbeat_ref.as_deref()
            {
                self.heartbeat_ref = None;
                return ChannelEvent::HeartbeatAck;
            }
            return ChannelEvent::Ignored("phoenix frame that answers no heartbeat");
        }
        if frame.topic != self.topic {
            return ChannelEvent::Ignored("frame for another topic");
        }
        // A frame stamped with an earlier join belongs to a channel that no longer
        // exists (e.g. the phx_close the server sends for the join we replaced).
        if frame.join_ref.is_some() && frame.join_ref.as_deref() != self.join_ref.as_deref() {
            return ChannelEvent::Ignored("frame for an earlier join");
        }
        match frame.event.as_ref() {
            EVENT_PROTO if self.state == JoinState::Joined => ChannelEvent::Data,
            EVENT_PROTO => ChannelEvent::Ignored("data frame before the join completed"),
            EVENT_REPLY => self.handle_reply(frame),
            EVENT_ERROR => self.lost("phx_error: the channel crashed on the server"),
            EVENT_CLOSE => self.lost("phx_close: the server closed the channel"),
            _ => ChannelEvent::Ignored("unknown event"),
        }
    }

    fn handle_reply(&mut self, frame: &InboundFrame<'_>) -> ChannelEvent {
        let (status, reason) = frame.reply();
        let is_join_reply = self.state == JoinState::Joining
            && frame.msg_ref.as_deref() == self.join_ref.as_deref();
        if is_join_reply {
            if status == "ok" {
                self.state = JoinState::Joined;
                return ChannelEvent::Joined;
            }
            self.state = JoinState::Closed;
            let reason = reason.as_deref().unwrap_or("join refused").to_owned();
            return ChannelEvent::JoinRefused(reason);
        }
        if status == "error" && reason.as_deref() == Some("unmatched topic") {
            return self.lost("unmatched topic: the server no longer knows our join");
        }
        ChannelEvent::Ignored("reply to a data push")
    }

    fn lost(&mut self, why: &str) -> ChannelEvent {
        self.state = JoinState::Closed;
        self.join_ref = None;
        ChannelEvent::Lost(why.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phoenix::LOBBY_TOPIC;

    /// Feeds an owned frame through its text, as the socket does.
    trait HandleOwned {
        fn feed(&mut self, frame: Frame) -> ChannelEvent;
    }
    impl HandleOwned for ChannelState {
        fn feed(&mut self, frame: Frame) -> ChannelEvent {
            let text = frame.encode();
            self.handle(&InboundFrame::decode(&text).expect("valid frame"))
        }
    }

    fn reply(
        join_ref: Option<&str>,
        r: &str,
        topic: &str,
        status: &str,
        reason: Option<&str>,
    ) -> Frame {
        let response = match reason {
            Some(reason) => json!({ "reason": reason }),
            None => json!({}),
        };
        Frame::new(
            join_ref.map(str::to_owned),
            Some(r.to_owned()),
            topic,
            EVENT_REPLY,
            json!({ "status": status, "response": response }),
        )
    }

    fn joined() -> ChannelState {
        let mut ch = ChannelState::new(LOBBY_TOPIC);
        let j = ch.join();
        let r = j.msg_ref.clone().unwrap();
        assert_eq!(
            ch.feed(reply(Some(&r), &r, LOBBY_TOPIC, "ok", None)),
            ChannelEvent::Joined
        );
        ch
    }

    #[test]
    fn join_reply_ok_joins() {
        let ch = joined();
        assert_eq!(ch.state(), JoinState::Joined);
    }

    #[test]
    fn join_reply_error_is_a_refusal() {
        let mut ch = ChannelState::new(LOBBY_TOPIC);
        let j = ch.join();
        let r = j.msg_ref.unwrap();
        let ev = ch.feed(reply(
            Some(&r),
            &r,
            LOBBY_TOPIC,
            "error",
            Some("unauthorized"),
        ));
        assert_eq!(ev, ChannelEvent::JoinRefused("unauthorized".into()));
        assert_eq!(ch.state(), JoinState::Closed);
    }

    #[test]
    fn every_rejoin_gets_a_new_join_ref() {
        let mut ch = ChannelState::new(LOBBY_TOPIC);
        let a = ch.join().join_ref;
        let b = ch.join().join_ref;
        assert_ne!(a, b);
    }

    #[test]
    fn unanswered_heartbeat_means_dead_peer() {
        let mut ch = joined();
        let hb = ch.heartbeat().expect("first heartbeat");
        assert!(
            ch.heartbeat().is_none(),
            "second heartbeat while the first is outstanding"
        );
        let r = hb.msg_ref.unwrap();
        assert_eq!(
            ch.feed(reply(None, &r, PHOENIX_TOPIC, "ok", None)),
            ChannelEvent::HeartbeatAck
        );
        assert!(ch.heartbeat().is_some());
    }

    #[test]
    fn heartbeat_reply_with_a_wrong_ref_is_not_an_ack() {
        let mut ch = joined();
        ch.heartbeat().unwrap();
        assert!(matches!(
            ch.feed(reply(None, "999", PHOENIX_TOPIC, "ok", None)),
            ChannelEvent::Ignored(_)
        ));
        assert!(ch.heartbeat().is_none());
    }

    #[test]
    fn data_frames_of_the_current_join_are_delivered() {
        let mut ch = joined();
        let jr = ch.join_ref().unwrap().to_owned();
        let text = ch.encode_data(&StreamMessage::default());
        let f = Frame::decode(&text).unwrap();
        assert_eq!(f.join_ref.as_deref(), Some(jr.as_str()));
        assert!(matches!(ch.feed(f), ChannelEvent::Data));
    }

    #[test]
    fn close_for_an_earlier_join_is_ignored_but_current_close_is_lost() {
        let mut ch = joined();
        let old = ch.join_ref().unwrap().to_owned();
        let j = ch.join();
        let new = j.msg_ref.unwrap();
        ch.feed(reply(Some(&new), &new, LOBBY_TOPIC, "ok", None));
        let stale = Frame::new(
            Some(old),
            Some("1".into()),
            LOBBY_TOPIC,
            EVENT_CLOSE,
            json!({}),
        );
        assert!(matches!(ch.feed(stale), ChannelEvent::Ignored(_)));
        let current = Frame::new(
            Some(new),
            Some("1".into()),
            LOBBY_TOPIC,
            EVENT_CLOSE,
            json!({}),
        );
        assert!(matches!(ch.feed(current), ChannelEvent::Lost(_)));
        assert_eq!(ch.state(), JoinState::Closed);
    }

    #[test]
    fn unmatched_topic_reply_means_the_join_is_gone() {
        let mut ch = joined();
        let ev = ch.feed(reply(
            None,
            "5",
            LOBBY_TOPIC,
            "error",
            Some("unmatched topic"),
        ));
        assert!(matches!(ev, ChannelEvent::Lost(_)));
    }

    #[test]
    fn phx_error_is_lost_and_unknown_events_are_ignored() {
        let mut ch = joined();
        let jr = ch.join_ref().map(str::to_owned);
        let unknown = Frame::new(jr.clone(), None, LOBBY_TOPIC, "presence_diff", json!({}));
        assert!(matches!(
            ch.feed(unknown),
            ChannelEvent::Ignored("unknown event")
        ));
        let err = Frame::new(jr, None, LOBBY_TOPIC, EVENT_ERROR, json!({}));
        assert!(matches!(ch.feed(err), ChannelEvent::Lost(_)));
    }

    #[test]
    fn data_before_join_completes_is_ignored() {
        let mut ch = ChannelState::new(LOBBY_TOPIC);
        let j = ch.join();
        let f = Frame::new(
            j.join_ref,
            Some("2".into()),
            LOBBY_TOPIC,
            EVENT_PROTO,
            json!({"data": ""}),
        );
        assert!(matches!(ch.feed(f), ChannelEvent::Ignored(_)));
    }
}
