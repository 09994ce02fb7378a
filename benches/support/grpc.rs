//! The gRPC half of the throughput bench: a tonic echo baseline of
//! `ConnectorService.Connect` streams.
//!
//! The server answers every `execute_request` on a stream with an `execute_response`
//! of the same request id and payload on the same stream, straight from the inbound
//! stream into the response stream (tonic's encoder batches what is ready, as it does
//! for the gateway). Nothing is routed, no connector runs: it is what tonic and HTTP/2
//! cost on this machine for messages of this size.
//!
//! The client mirrors the switchboard configuration it is compared with: one HTTP/2
//! connection (the runner's default `max_streams_per_channel` of 80 puts 64
//! registrations on one), one stream per registration, and `in_flight` requests kept
//! outstanding in total. Request `i` goes on stream `i % streams`, and slot `w` sends
//! requests `w, w + in_flight, ...`, exactly how `drive_switchboard` spreads its
//! executes over the registrations round-robin. Each request is built as the gateway
//! builds an execute: the same payload, `context` with `connector_arn` (the real ARN of
//! the registration it stands for) and `timeout_ms`, and a `gw-<hex>` request id.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use switchboard::proto::connector_service_client::ConnectorServiceClient;
use switchboard::proto::connector_service_server::{ConnectorService, ConnectorServiceServer};
use switchboard::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, PayloadEncoding, StreamMessage,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status, Streaming};

use crate::support::Sample;

/// The deadline the bench's executes ask for, as the gateway writes it in `timeout_ms`.
const TIMEOUT_MS: &str = "10000";

/// An `execute_request` as the gateway sends it for `arn`, request number `i`.
pub fn request(arn: &str, payload: &bytes::Bytes, i: usize) -> StreamMessage {
    let mut context = HashMap::with_capacity(2);
    context.insert("connector_arn".to_owned(), arn.to_owned());
    context.insert("timeout_ms".to_owned(), TIMEOUT_MS.to_owned());
    StreamMessage {
        message: Some(Message::ExecuteRequest(ExecuteRequest {
            request_id: format!("gw-{i:x}"),
            payload: payload.clone(),
            payload_encoding: PayloadEncoding::Json as i32,
            context,
            capability_id: String::new(),
        })),
    }
}

struct Echo;

#[tonic::async_trait]
impl ConnectorService for Echo {
    type ConnectStream = BoxStream<'static, Result<StreamMessage, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<StreamMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let out = request.into_inner().filter_map(|m| async move {
            match m {
                Ok(StreamMessage {
                    message: Some(Message::ExecuteRequest(req)),
                }) => Some(Ok(StreamMessage {
                    message: Some(Message::ExecuteResponse(ExecuteResponse {
                        request_id: req.request_id,
                        success: true,
                        payload: req.payload,
                        payload_encoding: req.payload_encoding,
                        error: String::new(),
                        duration_ms: 0,
                    })),
                })),
                Ok(_) => None,
                Err(status) => Some(Err(status)),
            }
        });
        Ok(Response::new(out.boxed()))
    }
}

/// Starts the echo server on a loopback port.
pub async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(tcp, _)| {
            tcp.set_nodelay(true).unwrap();
            tcp
        });
        Some((accepted, listener))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ConnectorServiceServer::new(Echo))
            .serve_with_incoming(incoming),
    );
    addr
}

/// Keeps `in_flight` executes outstanding over one stream per ARN of `arns`, all on
/// one connection to `addr`, for `dur`.
pub async fn drive_echo(
    addr: SocketAddr,
    arns: &[String],
    payload: &bytes::Bytes,
    in_flight: usize,
    dur: Duration,
) -> Sample {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    let streams = arns.len();
    let mut txs = Vec::with_capacity(streams);
    let mut inbound = Vec::with_capacity(streams);
    for _ in 0..streams {
        let (tx, rx) = mpsc::channel::<StreamMessage>(in_flight + 16);
        let requests =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let mut client = ConnectorServiceClient::new(channel.clone());
        let resp = client.connect(Request::new(requests)).await.unwrap();
        txs.push(tx);
        inbound.push(resp.into_inner());
    }
    let mut inbound = futures_util::stream::select_all(inbound);
    let mut sent_at = vec![Instant::now(); in_flight];
    for i in 0..in_flight {
        let s = i % streams;
        txs[s].send(request(&arns[s], payload, i)).await.unwrap();
    }
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut ops = 0;
    while let Some(Ok(msg)) = inbound.next().await {
        let Some(Message::ExecuteResponse(resp)) = msg.message else {
            panic!("not an execute response")
        };
        let i = usize::from_str_radix(&resp.request_id[3..], 16).expect("request number");
        let slot = i % in_flight;
        let now = Instant::now();
        latencies.push(now - sent_at[slot]);
        ops += 1;
        if now - start >= dur {
            break;
        }
        sent_at[slot] = now;
        let i = i + in_flight;
        let s = i % streams;
        txs[s].send(request(&arns[s], payload, i)).await.unwrap();
    }
    Sample {
        ops,
        elapsed: start.elapsed(),
        latencies,
    }
}
