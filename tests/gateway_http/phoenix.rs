//! Phoenix semantics of the gateway, as real Phoenix has them: `unmatched topic`,
//! duplicate joins closing the old channel, leaves, idle sockets, and malformed frames
//! dropped by reason while the socket keeps working (an oversized message closes its
//! socket instead: `gateway_limits.rs`).

use std::time::Duration;

use base64::Engine as _;
use futures_util::SinkExt;
use prost::Message as _;
use serde_json::json;
use switchboard::gateway::{GatewayConfig, TestGateway};
use switchboard::phoenix::{encode_proto, LOBBY_TOPIC};
use switchboard::proto::{stream_message::Message, ExecuteResponse, StreamMessage};
use switchboard::Error;
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::common::{eventually, DEADLINE};
use crate::raw::{
    next_frame, next_message, raw_client, register, register_response, registered, send_proto,
};

#[tokio::test]
async fn malformed_frames_from_a_client_are_dropped_by_reason_and_the_socket_keeps_working() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let unknown_response = StreamMessage {
        message: Some(Message::ExecuteResponse(ExecuteResponse {
            request_id: "never-sent".into(),
            ..Default::default()
        })),
    };
    for text in [
        "not json at all".to_owned(),
        r#"["1","2","connector:lobby"]"#.to_owned(),
        r#"["1","3","connector:lobby","mystery",{}]"#.to_owned(),
        r#"["1","4","connector:lobby","proto",{"data":"%%%"}]"#.to_owned(),
        format!(
            r#"["1","5","connector:lobby","proto",{{"data":"{}"}}]"#,
            b64(&[0x0a, 0x05])
        ),
        format!(
            r#"["1","6","connector:lobby","proto",{{"data":"{}"}}]"#,
            b64(&unknown_response.encode_to_vec())
        ),
    ] {
        ws.send(Ws::text(text)).await.unwrap();
    }
    // Still alive: a Phoenix heartbeat is answered after all of that.
    ws.send(Ws::text(r#"[null,"8","phoenix","heartbeat",{}]"#))
        .await
        .unwrap();
    let hb = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (hb.topic.as_str(), hb.msg_ref.as_deref(), hb.reply_status()),
        ("phoenix", Some("8"), Some("ok"))
    );
    let dropped = gw.stats().frames_dropped;
    for reason in [
        "not_json",
        "bad_shape",
        "unknown_event",
        "bad_base64",
        "bad_protobuf",
        "unknown_request_id",
    ] {
        assert_eq!(dropped.get(reason), Some(&1), "{reason}: {dropped:?}");
    }
}

#[tokio::test]
async fn pushes_on_unjoined_topics_get_unmatched_topic() {
    let gw = TestGateway::start().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    ws.send(Ws::text(
        r#"[null,"1","connector:lobby","proto",{"data":""}]"#,
    ))
    .await
    .unwrap();
    let reply = next_frame(&mut ws).await.unwrap();
    assert_eq!(reply.reply_status(), Some("error"));
    assert_eq!(reply.reply_reason(), Some("unmatched topic"));
}

#[tokio::test]
async fn a_duplicate_join_closes_the_old_channel_with_its_join_ref() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    ws.send(Ws::text(r#"["9","9","connector:lobby","phx_join",{}]"#))
        .await
        .unwrap();
    let close = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (close.event.as_str(), close.join_ref.as_deref()),
        ("phx_close", Some("1"))
    );
    let reply = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (reply.reply_status(), reply.join_ref.as_deref()),
        (Some("ok"), Some("9"))
    );
}

#[tokio::test]
async fn a_duplicate_join_ends_the_old_channels_registrations_and_pending_executes() {
    let gw = TestGateway::start().await;
    let mut ws = registered(&gw, "acme", &["one"]).await;
    let exec = gw.execute_with("matrix:acme:raw:one", json!({}), None, DEADLINE);
    let rejoin = async {
        assert!(matches!(
            next_message(&mut ws).await,
            Message::ExecuteRequest(_)
        ));
        ws.send(Ws::text(r#"["5","5","connector:lobby","phx_join",{}]"#))
            .await
            .unwrap();
        assert_eq!(next_frame(&mut ws).await.unwrap().event, "phx_close");
        assert_eq!(
            next_frame(&mut ws).await.unwrap().reply_status(),
            Some("ok")
        );
    };
    let (result, ()) = tokio::join!(exec, rejoin);
    assert!(
        matches!(result, Err(Error::ConnectionClosed(_))),
        "{result:?}"
    );
    assert_eq!(gw.stats().registrations, 0);
    // The new channel works, and the socket is still bound to its tenant.
    let text = encode_proto(
        Some("5"),
        Some("6"),
        LOBBY_TOPIC,
        &StreamMessage {
            message: Some(register("acme", "one")),
        },
    );
    ws.send(Ws::text(text)).await.unwrap();
    assert!(register_response(&mut ws).await.success);
    assert_eq!(gw.stats().registrations, 1);
}

#[tokio::test]
async fn a_leave_is_acknowledged_then_the_channel_is_closed_and_unmatched() {
    let gw = TestGateway::start().await;
    let mut ws = raw_client(&gw).await;
    ws.send(Ws::text(r#"["1","2","connector:lobby","phx_leave",{}]"#))
        .await
        .unwrap();
    let reply = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (reply.reply_status(), reply.msg_ref.as_deref()),
        (Some("ok"), Some("2"))
    );
    let close = next_frame(&mut ws).await.unwrap();
    assert_eq!(
        (close.event.as_str(), close.join_ref.as_deref()),
        ("phx_close", Some("1"))
    );
    send_proto(&mut ws, 3, register("acme", "late")).await;
    let unmatched = next_frame(&mut ws).await.unwrap();
    assert_eq!(unmatched.reply_reason(), Some("unmatched topic"));
    assert_eq!(gw.stats().registrations, 0);
}

#[tokio::test]
async fn idle_sockets_are_closed() {
    let gw = TestGateway::start_with(
        GatewayConfig::default().with_idle_timeout(Duration::from_millis(150)),
    )
    .await;
    // Never joined, so nothing has to happen within the 150 ms: the socket says nothing
    // from its upgrade on, and the idle clock runs from there.
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    assert!(
        next_frame(&mut ws).await.is_none(),
        "the gateway closes a silent socket"
    );
    eventually("the socket to be counted closed", || async {
        gw.stats().sockets_open == 0
    })
    .await;
}

/// A client that floods its socket with frames needing replies (more than the
/// socket's writer queue holds) while it reads gets every reply, in order: the reader
/// waits for queue space while the writer drains it, and nothing is dropped or
/// reordered on the way.
#[tokio::test]
async fn a_flood_of_frames_needing_replies_is_answered_in_order() {
    use futures_util::StreamExt;
    const N: usize = 5_000;
    let gw = TestGateway::start().await;
    let (mut sink, mut stream) = raw_client(&gw).await.split();
    let sender = tokio::spawn(async move {
        for n in 0..N {
            let hb = format!(r#"[null,"{n}","phoenix","heartbeat",{{}}]"#);
            sink.feed(Ws::text(hb)).await.unwrap();
        }
        sink.flush().await.unwrap();
        sink
    });
    for n in 0..N {
        let frame = tokio::time::timeout(DEADLINE, stream.next())
            .await
            .unwrap_or_else(|_| panic!("reply {n} before the deadline"))
            .expect("the socket stays open")
            .unwrap();
        let frame = switchboard::phoenix::Frame::decode(frame.to_text().unwrap()).unwrap();
        assert_eq!(frame.msg_ref.as_deref(), Some(n.to_string().as_str()));
        assert_eq!(frame.reply_status(), Some("ok"));
    }
    let _sink = sender.await.unwrap();
}

/// Nothing is lost, duplicated or reordered, and nothing deadlocks, while a socket's
/// writes move between its own task and the helper: large executes fill the loopback
/// buffers while the client does not read (a write would block: the helper takes the
/// writes), a flood of heartbeats then fills the writer queue behind them (handlers
/// wait for queue space), and once the client reads, the writes come back to the
/// socket task as the backlog drains. Every heartbeat reply arrives in order, every
/// execute request once, and every execute is answered.
#[tokio::test]
async fn writes_moving_between_the_socket_task_and_its_helper_keep_every_frame_in_order() {
    use futures_util::StreamExt;
    const EXECUTES: usize = 200;
    const HEARTBEATS: usize = 3_000;
    let gw = TestGateway::start().await;
    let ws = registered(&gw, "acme", &["one"]).await;
    let read_before = gw.stats().frames_in;
    let (mut sink, mut stream) = ws.split();
    // 200 requests of 64 KiB (about 17 MB as base64 text frames): more than the
    // loopback socket buffers hold.
    let pad = "x".repeat(64 * 1024);
    let executes = futures_util::future::join_all((0..EXECUTES).map(|i| {
        gw.execute_with(
            "matrix:acme:raw:one",
            json!({ "i": i, "pad": pad }),
            None,
            DEADLINE,
        )
    }));
    let client = async {
        let flood = tokio::spawn(async move {
            for n in 0..HEARTBEATS {
                let hb = format!(r#"[null,"hb{n}","phoenix","heartbeat",{{}}]"#);
                sink.feed(Ws::text(hb)).await.unwrap();
            }
            sink.flush().await.unwrap();
            sink
        });
        // Not reading until the gateway has taken in a good part of the flood, so its
        // writes are blocked and its queue fills.
        eventually("the gateway reads 500 heartbeats", || async {
            gw.stats().frames_in >= read_before + 500
        })
        .await;
        let mut requests = std::collections::HashSet::new();
        let mut replies = 0;
        while replies < HEARTBEATS || requests.len() < EXECUTES {
            let frame = tokio::time::timeout(DEADLINE, stream.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "a frame before the deadline ({replies} replies, {} requests so far)",
                        requests.len()
                    )
                })
                .expect("the socket stays open")
                .unwrap();
            let frame = switchboard::phoenix::Frame::decode(frame.to_text().unwrap()).unwrap();
            if frame.topic == "phoenix" {
                assert_eq!(frame.msg_ref, Some(format!("hb{replies}")), "in order");
                assert_eq!(frame.reply_status(), Some("ok"));
                replies += 1;
                continue;
            }
            let Some(Message::ExecuteRequest(req)) = frame.proto().unwrap().message else {
                panic!("expected an execute request, got {frame:?}");
            };
            assert!(requests.insert(req.request_id), "each request once");
        }
        let mut sink = flood.await.unwrap();
        for (n, request_id) in requests.into_iter().enumerate() {
            let resp = ExecuteResponse {
                request_id,
                success: true,
                ..Default::default()
            };
            let text = encode_proto(
                Some("1"),
                Some(&n.to_string()),
                LOBBY_TOPIC,
                &StreamMessage {
                    message: Some(Message::ExecuteResponse(resp)),
                },
            );
            sink.feed(Ws::text(text)).await.unwrap();
        }
        sink.flush().await.unwrap();
    };
    let (outcomes, ()) = tokio::join!(executes, client);
    for outcome in outcomes {
        assert!(outcome.expect("answered").success);
    }
}

/// A frame's handler that waits (here a register held by the test hook) does not stop
/// its socket's writes: frames queued meanwhile by others, three times what the
/// writer queue holds, reach the client in order while the handler waits, and the
/// handler's own answer follows once it is released. A socket task that waited in the
/// handler while holding its writes would leave the queue full for good.
#[tokio::test]
async fn a_waiting_handler_does_not_stop_its_sockets_writes() {
    use futures_util::StreamExt;
    const FRAMES: usize = 3_000;
    let gw = TestGateway::start().await;
    gw.set_hold_registers(true);
    let mut ws = raw_client(&gw).await;
    send_proto(&mut ws, 2, register("acme", "held")).await;
    assert!(gw.wait_for_held_registers(1, DEADLINE).await);
    let id = gw.socket_ids()[0];
    let frame = |n: usize| format!(r#"[null,null,"phoenix","raw",{{"n":{n}}}]"#);
    let queue = async {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        for n in 0..FRAMES {
            // A full queue is drained by the socket's writes, or this fails.
            while !gw.send_raw(id, frame(n)) {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "queue space for frame {n} before the deadline"
                );
                tokio::task::yield_now().await;
            }
        }
    };
    let read = async {
        for n in 0..FRAMES {
            let got = tokio::time::timeout(DEADLINE, ws.next())
                .await
                .unwrap_or_else(|_| panic!("frame {n} before the deadline"))
                .expect("the socket stays open")
                .unwrap();
            assert_eq!(got.to_text().unwrap(), frame(n), "in order");
        }
    };
    tokio::join!(queue, read);
    gw.set_hold_registers(false);
    assert!(register_response(&mut ws).await.success);
}
