//! Untrusted Phoenix text frames from a peer (the public `switchboard::phoenix` codec):
//! decoding must never panic, whatever decodes must re-encode to a frame that decodes
//! to the same value, and the borrowed decoder (the connector's hot path) must agree
//! with the owned one on the protobuf payload and feed a channel without panicking.
//!
//! Why: every frame a WebSocket gateway sends goes through this decoder first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::phoenix::{ChannelState, Frame, InboundFrame, LOBBY_TOPIC};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The borrowed decoder (the connector's hot path) must never panic either, and
    // where both decode a proto payload they agree on the message.
    let borrowed = InboundFrame::decode(text);
    if let Ok(b) = &borrowed {
        let _ = b.reply();
        let _ = b.proto();
    }
    let Ok(frame) = Frame::decode(text) else {
        return;
    };
    let Ok(borrowed) = borrowed else { return };
    let again = Frame::decode(&frame.encode()).expect("re-encoded frame decodes");
    assert_eq!(again, frame);
    assert_eq!(frame.proto().ok(), borrowed.proto().ok());
    let mut channel = ChannelState::new(LOBBY_TOPIC);
    channel.join();
    let _ = channel.handle(&borrowed);
});
