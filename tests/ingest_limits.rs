//! Bounds on hostile clients, each exceeded over real sockets: the header- and
//! body-read timeouts (slowloris clients on raw TCP), the concurrency limit, the group
//! commit's byte bound, and the budget of Notion token re-checks.
#![cfg(feature = "runtime")]

#[path = "ingest/support.rs"]
mod support;

use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt as _};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use support::{eventually, hex, Delivery, Harness, Kind, DEADLINE};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const GITHUB: &str =
    "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\n";

/// A raw client that sent `POST /hooks/gh` headers promising a 1000-byte body.
async fn open_body(h: &Harness, expect_continue: bool) -> TcpStream {
    let addr = h.base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let expect = if expect_continue {
        "Expect: 100-continue\r\n"
    } else {
        ""
    };
    let head = format!(
        "POST /hooks/gh HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n{expect}\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// Waits (up to [`DEADLINE`]) for the server's `100 Continue`: hyper sends it when
/// the handler starts reading the body, so the request is then inside the handler,
/// holding a concurrency slot.
async fn await_continue(tcp: &mut TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    tokio::time::timeout(DEADLINE, async {
        while !String::from_utf8_lossy(&seen).contains("100 Continue\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before 100 Continue");
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("100 Continue within the deadline");
}

/// Sends `byte` every 50 ms until the server stops taking them: a slowloris client.
fn dribble(mut write: tokio::net::tcp::OwnedWriteHalf, byte: u8) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            if write.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    })
}

/// Reads until the server closes the connection, failing after [`DEADLINE`].
async fn read_until_closed(mut read: tokio::net::tcp::OwnedReadHalf) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server closes a slow client's connection");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_body_sent_one_byte_at_a_time_is_cut_at_body_read_timeout_with_408() {
    let h = Harness::sqlite(&format!("body_read_timeout = \"300ms\"\n{GITHUB}")).await;
    let (read, write) = open_body(&h, false).await.into_split();
    let sender = dribble(write, b' ');
    let answer = read_until_closed(read).await;
    sender.abort();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(
        h.metrics()
            .await
            .contains(r#"requests_total{source="gh",outcome="body_timeout"} 1"#),
        "counted"
    );
}

#[tokio::test]
async fn headers_sent_one_byte_at_a_time_are_cut_at_header_read_timeout() {
    let h = Harness::sqlite(&format!("header_read_timeout = \"300ms\"\n{GITHUB}")).await;
    let addr = h.base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /hooks/gh HTTP/1.1\r\nX-Slow: ")
        .await
        .unwrap();
    let (read, write) = tcp.into_split();
    let sender = dribble(write, b'a');
    read_until_closed(read).await;
    sender.abort();
    // The listener itself is fine.
    let (status, _) = h.post_json("gh", &Kind::Github.signed("after")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn two_hundred_slow_clients_do_not_starve_a_signed_delivery() {
    // Default limits: 200 requests inside the handler, each dribbling its body, are
    // well under max_concurrent_requests (1024).
    let h = Harness::sqlite(GITHUB).await;
    let mut senders = Vec::new();
    for _ in 0..200 {
        let mut tcp = open_body(&h, true).await;
        await_continue(&mut tcp).await;
        let (read, write) = tcp.into_split();
        senders.push((read, dribble(write, b' ')));
    }
    let (status, body) = h.post_json("gh", &Kind::Github.signed("normal")).await;
    assert_eq!((status, body["duplicate"].as_bool()), (200, Some(false)));
    for (_, s) in &senders {
        assert!(!s.is_finished(), "the slow clients were still connected");
    }
    for (_, s) in senders {
        s.abort();
    }
}

#[tokio::test]
async fn past_max_concurrent_requests_ingress_is_503_with_retry_after_until_a_slot_frees() {
    let h = Harness::sqlite(&format!("max_concurrent_requests = 4\n{GITHUB}")).await;
    let mut holders = Vec::new();
    for _ in 0..4 {
        let mut tcp = open_body(&h, true).await;
        await_continue(&mut tcp).await;
        holders.push(tcp);
    }
    let resp = h.post("gh", &Kind::Github.signed("fifth")).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "overloaded");
    // The admin API is outside the limit.
    assert!(h.metrics().await.contains(r#"outcome="overloaded"} 1"#));
    // One holder leaves: its slot frees, and the sender's retry is taken.
    drop(holders.pop());
    let stored = eventually("a freed slot", || async {
        let (status, body) = h.post_json("gh", &Kind::Github.signed("fifth")).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(stored["duplicate"], false);
}

#[tokio::test]
async fn slow_clients_in_every_slot_are_cut_by_the_body_timeout_and_normal_senders_get_in() {
    let h = Harness::sqlite(&format!(
        "max_concurrent_requests = 8\nbody_read_timeout = \"300ms\"\n{GITHUB}"
    ))
    .await;
    let mut senders = Vec::new();
    for _ in 0..50 {
        let (read, write) = open_body(&h, false).await.into_split();
        senders.push((read, dribble(write, b' ')));
    }
    // They never stop sending; only the timeout frees their slots.
    let stored = eventually("a signed delivery past the slow clients", || async {
        let (status, body) = h.post_json("gh", &Kind::Github.signed("normal")).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(stored["duplicate"], false);
    for (_, s) in senders {
        s.abort();
    }
}

/// A generic-HMAC delivery of `len` bytes, signed with `GENERIC_SECRET`. The bytes are
/// pseudo-random (seeded by `tag`), so a store that compresses bodies cannot make them
/// smaller than `len` in its write queue.
fn big_delivery(len: usize, tag: u8) -> Delivery {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(tag);
    let body: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    let mut mac = Hmac::<Sha256>::new_from_slice(b"generic-secret").unwrap();
    mac.update(&body);
    let sig = format!("sha256={}", hex(&mac.finalize().into_bytes()));
    Delivery::new(&[("X-Signature", &sig)], body)
}

#[tokio::test]
async fn past_write_queue_max_bytes_ingress_is_503_overloaded_and_recovers() {
    let h = Harness::sqlite(
        "write_queue_max_bytes = 2048\n[[sources]]\nid = \"big\"\nprovider = \"generic_hmac\"\nsecret_env = \"GENERIC_SECRET\"\nheader = \"X-Signature\"\nprefix = \"sha256=\"\nrequire_json = false\n",
    )
    .await;
    // Another connection holds SQLite's write lock, so the writer cannot commit and
    // what is admitted stays queued: with 1500-byte bodies and a 2048-byte bound, one
    // write is admitted and every other is refused at once.
    let db = h.store_url.trim_start_matches("sqlite:").to_owned();
    let lock = rusqlite::Connection::open(&db).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let mut pending: FuturesUnordered<_> = (0..10u8)
        .map(|i| {
            let d = big_delivery(1500, b'a' + i);
            let h = &h;
            async move {
                let resp = h.post("big", &d).await;
                let status = resp.status().as_u16();
                let retry = resp.headers().get("retry-after").cloned();
                let body: serde_json::Value = resp.json().await.unwrap_or_default();
                (status, retry, body)
            }
        })
        .collect();
    for _ in 0..9 {
        let (status, retry, body) = pending.next().await.unwrap();
        assert_eq!((status, body["error"].as_str()), (503, Some("overloaded")));
        assert_eq!(retry.unwrap(), "1");
    }
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    // The admitted one is answered: stored, or, if the lock outlasted SQLite's 5 s busy
    // timeout on a very slow machine, refused as the store being unavailable (never as
    // overloaded: it was admitted).
    let (status, _, body) = pending.next().await.unwrap();
    match status {
        200 => assert_eq!(body["duplicate"], false, "{body}"),
        503 => assert_eq!(body["error"], "store_unavailable", "{body}"),
        other => panic!("the admitted write answered {other}: {body}"),
    }
    // Its bytes were released: the queue takes writes again.
    let (status, body) = h.post_json("big", &big_delivery(1500, b'z')).await;
    assert_eq!((status, body["duplicate"].as_bool()), (200, Some(false)));
}

/// The value of the metric line starting with `prefix`, or 0.
fn metric(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_flood_of_unsigned_notion_requests_re_reads_the_token_at_most_the_budget() {
    let h = Harness::sqlite(
        "[[sources]]\nid = \"notion\"\nprovider = \"notion\"\nnotion_recheck_limit = { per_second = 0.001, burst = 3 }\n",
    )
    .await;
    let capture = |t: &str| Delivery::new(&[], format!(r#"{{"verification_token":"{t}"}}"#));
    assert_eq!(h.post_json("notion", &capture("secret_real")).await.0, 200);
    // 200 unsigned "verification" requests, each refused for a token reason (409),
    // each a candidate for a store re-read; 50 at a time.
    let forged = capture("attacker");
    for _ in 0..4 {
        let answers =
            futures_util::future::join_all((0..50).map(|_| h.post_json("notion", &forged))).await;
        for (status, body) in answers {
            assert_eq!(
                (status, body["error"].as_str()),
                (409, Some("verification_token_already_captured"))
            );
        }
    }
    let text = h.metrics().await;
    let count = |outcome: &str| {
        metric(
            &text,
            &format!(
                r#"switchboard_ingress_notion_rechecks_total{{source="notion",outcome="{outcome}"}}"#
            ),
        )
    };
    let (read, shared, skipped) = (count("read"), count("shared"), count("skipped"));
    assert_eq!(read + shared + skipped, 200, "{text}");
    // The burst, plus what 0.001/s refills over the test (< 1 token).
    assert!((1..=3).contains(&read), "store reads: {read}");
    // The real token still verifies.
    let signed = Kind::Notion.sign("secret_real", "n-1", support::now_s());
    assert_eq!(h.post_json("notion", &signed).await.0, 200);
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_header_read_timeout() {
    let h = Harness::sqlite(&format!("header_read_timeout = \"300ms\"\n{GITHUB}")).await;
    let addr = h.base.trim_start_matches("http://");
    let (read, _write) = TcpStream::connect(addr).await.unwrap().into_split();
    read_until_closed(read).await;
}
