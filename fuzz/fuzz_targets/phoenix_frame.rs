//! Untrusted text frames from a peer: decoding must never panic, and whatever decodes
//! must re-encode to a frame that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::phoenix::{ChannelState, Frame, LOBBY_TOPIC};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(frame) = Frame::decode(text) else { return };
    let again = Frame::decode(&frame.encode()).expect("re-encoded frame decodes");
    assert_eq!(again, frame);
    let _ = frame.proto();
    let mut channel = ChannelState::new(LOBBY_TOPIC);
    channel.join();
    let _ = channel.handle(frame);
});
