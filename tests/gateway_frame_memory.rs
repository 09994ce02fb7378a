//! A message larger than `max_frame_bytes` is refused from its frame header, before the
//! gateway buffers it: a client announcing and streaming 32 MiB gets its socket closed,
//! and the process's peak memory does not grow by anything near 32 MiB.
//!
//! Alone in its own test binary, because it reads the whole process's peak resident
//! size (`VmHWM`), which any test running in parallel would disturb.
#![cfg(all(feature = "gateway", target_os = "linux"))]

mod common;

use common::{eventually, DEADLINE};
use switchboard::gateway::TestGateway;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The size of the message the client announces: twice the default limit.
const MESSAGE_BYTES: usize = 32 * 1024 * 1024;
/// How much the client writes per call, so that the client itself never holds more.
const CHUNK_BYTES: usize = 64 * 1024;
/// The most the process's peak resident size may grow: half the message, far above
/// the gateway's per-socket buffers and far below what buffering the message costs.
const MAX_GROWTH_KB: u64 = 16 * 1024;

/// A field of `/proc/self/status` in kB, such as `VmHWM` (peak resident size).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// The header of one unfragmented, masked (as a client's must be) text frame of `len`
/// bytes; the mask is all zeroes, so the payload goes on the wire as it is.
fn text_frame_header(len: usize) -> Vec<u8> {
    let mut header = vec![0x81, 0x80 | 127];
    header.extend_from_slice(&(len as u64).to_be_bytes());
    header.extend_from_slice(&[0; 4]);
    header
}

#[tokio::test]
async fn a_32_mib_message_closes_its_socket_without_being_buffered() {
    let gw = TestGateway::start().await;
    let tcp = tokio::net::TcpStream::connect(gw.local_addr())
        .await
        .unwrap();
    let url = format!("{}?vsn=2.0.0", gw.ws_url());
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    let tcp = ws.get_mut();
    let (peak_before, rss_before) = (status_kb("VmHWM"), status_kb("VmRSS"));

    let chunk = vec![b'A'; CHUNK_BYTES];
    let stream = async {
        tcp.write_all(&text_frame_header(MESSAGE_BYTES)).await?;
        for _ in 0..MESSAGE_BYTES / CHUNK_BYTES {
            tcp.write_all(&chunk).await?;
        }
        tcp.flush().await
    };
    // The gateway may close mid-stream (the write then fails); either way it must close.
    let _ = tokio::time::timeout(DEADLINE, stream)
        .await
        .expect("the message is streamed or refused before the deadline");
    let mut sink = [0u8; 1024];
    let closed = async {
        loop {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(DEADLINE, closed)
        .await
        .expect("the gateway closes the socket");
    eventually("the refusal to be counted", || async {
        gw.stats().frames_dropped.get("too_large") == Some(&1)
    })
    .await;

    let (peak_after, rss_after) = (status_kb("VmHWM"), status_kb("VmRSS"));
    // Saturating: the kernel folds per-thread RSS counts into VmHWM lazily, so two reads
    // can disagree by a little in either direction.
    let growth = peak_after.saturating_sub(peak_before);
    assert!(
        growth < MAX_GROWTH_KB,
        "peak resident size grew by {growth} kB (RSS {rss_before} -> {rss_after} kB)"
    );
}
