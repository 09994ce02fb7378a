//! Who writes a Phoenix socket's frames: its own task while the socket is quiet, a
//! helper task while a backlog lasts.
//!
//! Why: one task that reads and writes its socket wakes once per round trip instead of
//! twice (a reader and a writer), which measured twice the rate and half the latency
//! with one request in flight; but under load its reads and writes then share one
//! core, which lost 15–30% at 64 and 256 in flight (docs/guide/performance.md). So a socket
//! keeps both, and moves between them as its queue says:
//!
//! * **Inline** (the socket task holds the [`Lane`]: the sink and the receiving end of
//!   the writer queue). A queued frame wakes the socket task, which writes it and
//!   whatever else is queued without waiting: the sink is polled once, and a write
//!   that would block is not awaited.
//! * **Apart** (the helper holds the lane). The socket task gives the lane to a helper
//!   task, spawned with the socket and parked until then, when the socket is busy:
//!   [`BUSY_IN_FLIGHT`] executes and invokes in flight on the link, a batch of
//!   [`BUSY_BATCH`] frames or more (written in one go, or queued behind it), or a
//!   write that would block (a frame it could not start stays in the lane and is
//!   written first). The helper writes as the two-task socket always did (feed every
//!   queued frame, flush when the queue is empty) and gives the lane back, with
//!   everything it fed flushed, after [`QUIET_WAKES`] wake-ups in a row that found
//!   one frame each, once fewer than half of `BUSY_IN_FLIGHT` are in flight.
//!
//! The in-flight count decides under steady load, the queue only for bursts: measured
//! (docs/guide/performance.md), a socket that went by its queue alone wrote inline for most
//! batches at 64 and 256 in flight, since one task drains a queue as fast as it fills,
//! and handed over thousands of times a second; it kept up when the machine was
//! otherwise idle and lost 3–30% at 64 in flight when it was not. With the count, such a socket writes apart
//! throughout, as the two-task one did.
//!
//! Order: there is one lane, and the queue travels in it, so frames are written in
//! queue order whoever holds it, and a hand-over happens only between whole writes
//! (the helper flushes before giving the lane back; a lane handed over unflushed is
//! flushed by the helper first).
//!
//! No deadlock: a frame's handler may wait for space in its own socket's queue (a
//! reply, a pushed response), which only the lane's holder drains. So a handler that
//! does not finish at its first poll runs with the lane at the helper, and a lane the
//! helper gives back meanwhile is handed over again at once (`while_handling`). The
//! socket task otherwise never awaits the sink, so a client that stops reading stalls
//! only the helper, as it stalled the writer task before.
//!
//! [`GatewayConfig::socket_writer_apart`](super::GatewayConfig::socket_writer_apart)
//! hands the lane over at the start for good: the two-task socket, kept as the
//! throughput bench's same-run baseline.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::ws::Message as WsMessage;
use futures_util::{Sink, SinkExt};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::link::ConnectorLink;
use super::state::GatewayState;

/// Frames in one inline write (or queued right behind it) that make the socket busy:
/// its writes go to the helper, so that reads and writes run on both cores.
const BUSY_BATCH: usize = 4;

/// Executes and invokes in flight on the link from which its writes go to the helper
/// whatever the queue says: requests keep coming and answers keep being read, so
/// reads and writes both have work, and two tasks spread it over both cores. Below
/// half of it (and once the helper is quiet) the socket task writes again.
const BUSY_IN_FLIGHT: usize = 16;

/// Wake-ups in a row that found one frame each, after which the helper gives the lane
/// back: the backlog is gone, and one task per round trip is cheaper again.
const QUIET_WAKES: u32 = 4;

/// The sink and the queue that feeds it: whoever holds this writes the socket.
pub(crate) struct Lane<S> {
    sink: S,
    rx: mpsc::Receiver<WsMessage>,
    /// A frame taken from `rx` that the sink was not ready for: written first.
    carry: Option<WsMessage>,
    /// A close frame was started and not flushed: the holder flushes and stops.
    closing: bool,
}

/// The socket task's side: the lane while it writes inline, and the channels to the
/// helper.
pub(crate) struct Writes<S> {
    state: Arc<GatewayState>,
    link: Arc<ConnectorLink>,
    lane: Option<Lane<S>>,
    to_helper: mpsc::Sender<Lane<S>>,
    back: mpsc::Receiver<Lane<S>>,
}

/// What the socket task's write side woke for.
pub(crate) enum WriteEvent<S> {
    /// A queued frame, while inline.
    Frame(WsMessage),
    /// The helper gave the lane back.
    Back(Lane<S>),
}

impl<S> Writes<S>
where
    S: Sink<WsMessage> + Unpin + Send + 'static,
{
    /// The socket task's side, holding the lane (given to the helper at once if
    /// `apart`), and the helper task to spawn beside it.
    pub(crate) fn new(
        state: Arc<GatewayState>,
        link: Arc<ConnectorLink>,
        sink: S,
        rx: mpsc::Receiver<WsMessage>,
        apart: bool,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (to_helper, from_socket) = mpsc::channel(1);
        let (to_socket, back) = mpsc::channel(1);
        let mut writes = Writes {
            state: state.clone(),
            link: link.clone(),
            lane: Some(Lane {
                sink,
                rx,
                carry: None,
                closing: false,
            }),
            to_helper,
            back,
        };
        if apart {
            writes.hand_off();
        }
        (writes, helper(state, link, from_socket, to_socket, !apart))
    }

    /// Waits for a queued frame (inline) or for the lane to come back (apart).
    /// Cancel-safe: both are channel receives.
    pub(crate) async fn next(&mut self) -> WriteEvent<S> {
        match &mut self.lane {
            Some(lane) => match lane.rx.recv().await {
                Some(frame) => WriteEvent::Frame(frame),
                // The socket holds a sender for as long as it runs.
                None => std::future::pending().await,
            },
            None => match self.back.recv().await {
                Some(lane) => WriteEvent::Back(lane),
                // The helper ended: the socket's writes failed or it sent its close.
                None => std::future::pending().await,
            },
        }
    }

    /// Acts on what [`Writes::next`] returned: writes the frame and what is queued
    /// behind it, or takes the lane back.
    pub(crate) async fn on_event(&mut self, event: WriteEvent<S>) {
        match event {
            WriteEvent::Back(lane) => self.lane = Some(lane),
            WriteEvent::Frame(frame) => self.write(frame).await,
        }
    }

    async fn write(&mut self, frame: WsMessage) {
        let Some(lane) = self.lane.as_mut() else {
            return;
        };
        let state = &self.state;
        let mut first = Some(frame);
        let written = poll_fn(|cx| {
            let frame = first.take().expect("polled once");
            Poll::Ready(lane.write_now(cx, frame, state))
        })
        .await;
        match written {
            Inline::Flushed(n)
                if n < BUSY_BATCH
                    && lane.rx.len() < BUSY_BATCH
                    && self.link.in_flight_now() < BUSY_IN_FLIGHT => {}
            Inline::Flushed(_) | Inline::Blocked => self.hand_off(),
            // Writes failed or the close frame went out: nothing more is written, and
            // dropping the queue makes further pushes fail rather than wait.
            Inline::Over => self.lane = None,
        }
    }

    /// Runs one frame's handler. One that waits (for space in this socket's queue,
    /// say) runs with the lane at the helper, so the queue drains meanwhile.
    pub(crate) async fn while_handling(&mut self, handler: impl Future<Output = ()>) {
        let mut handler = pin!(handler);
        if poll_fn(|cx| Poll::Ready(handler.as_mut().poll(cx)))
            .await
            .is_ready()
        {
            return;
        }
        self.hand_off();
        loop {
            tokio::select! {
                biased;
                () = &mut handler => return,
                back = self.back.recv() => match back {
                    Some(lane) => {
                        self.lane = Some(lane);
                        self.hand_off();
                    }
                    None => return handler.await,
                },
            }
        }
    }

    /// Gives the lane to the helper for good (a stopping gateway's goodbye frames): a
    /// lane on its way back is taken and handed over again, and the helper keeps any
    /// lane it holds, since it cannot give it back.
    pub(crate) fn leave_to_helper(&mut self) {
        self.back.close();
        if let Ok(lane) = self.back.try_recv() {
            self.lane = Some(lane);
        }
        self.hand_off();
    }

    fn hand_off(&mut self) {
        if let Some(lane) = self.lane.take() {
            // The helper is parked whenever the socket holds the lane (it lives until
            // the socket ends), and there is one lane: this cannot be refused.
            let _ = self.to_helper.try_send(lane);
        }
    }
}

/// How an inline write went.
enum Inline {
    /// This many frames were written and flushed.
    Flushed(usize),
    /// The sink would block: the helper finishes (carry, flush).
    Blocked,
    /// Writes failed, or a close frame was written: the lane is done.
    Over,
}

impl<S> Lane<S>
where
    S: Sink<WsMessage> + Unpin,
{
    /// Writes `first` and the frames queued behind it, up to [`BUSY_BATCH`] (the rest
    /// is the helper's, so the socket task gets back to reading), and flushes, without
    /// waiting: the sink is polled once at each step.
    fn write_now(
        &mut self,
        cx: &mut Context<'_>,
        first: WsMessage,
        state: &GatewayState,
    ) -> Inline {
        let mut next = Some(first);
        let mut n = 0;
        let outcome = loop {
            let Some(frame) = next.take() else {
                break None;
            };
            match self.sink.poll_ready_unpin(cx) {
                Poll::Pending => {
                    self.carry = Some(frame);
                    break Some(Inline::Blocked);
                }
                Poll::Ready(Err(_)) => break Some(Inline::Over),
                Poll::Ready(Ok(())) => {}
            }
            let closing = matches!(frame, WsMessage::Close(_));
            if self.sink.start_send_unpin(frame).is_err() {
                break Some(Inline::Over);
            }
            n += 1;
            if closing {
                // After a close frame nothing more may be sent (RFC 6455 §5.5.1).
                self.closing = true;
                break None;
            }
            if n < BUSY_BATCH {
                next = self.rx.try_recv().ok();
            }
        };
        state.counters.frames_out.fetch_add(n as u64, Relaxed);
        if let Some(outcome) = outcome {
            return outcome;
        }
        match self.sink.poll_flush_unpin(cx) {
            Poll::Pending => Inline::Blocked,
            Poll::Ready(Ok(())) if !self.closing => Inline::Flushed(n),
            Poll::Ready(_) => Inline::Over,
        }
    }

    /// Writes `first` (if any) and every frame queued behind it, then flushes; the
    /// number written, or `None` once the lane is done (writes failed, close sent).
    async fn write_batch(
        &mut self,
        state: &GatewayState,
        first: Option<WsMessage>,
    ) -> Option<usize> {
        let mut next = first;
        let mut n = 0;
        while !self.closing {
            let frame = match next.take() {
                Some(frame) => frame,
                None => match self.rx.try_recv() {
                    Ok(frame) => frame,
                    Err(_) => break,
                },
            };
            self.closing = matches!(frame, WsMessage::Close(_));
            if self.sink.feed(frame).await.is_err() {
                return None;
            }
            n += 1;
        }
        state.counters.frames_out.fetch_add(n as u64, Relaxed);
        if self.sink.flush().await.is_err() || self.closing {
            return None;
        }
        Some(n)
    }
}

/// The helper task: parked until the socket task hands it the lane, then writes until
/// the backlog is gone and gives it back (never, if `give_back` is false). Ends when
/// the socket's writes fail or its close frame is flushed.
async fn helper<S>(
    state: Arc<GatewayState>,
    link: Arc<ConnectorLink>,
    mut from_socket: mpsc::Receiver<Lane<S>>,
    to_socket: mpsc::Sender<Lane<S>>,
    give_back: bool,
) where
    S: Sink<WsMessage> + Unpin,
{
    while let Some(mut lane) = from_socket.recv().await {
        let first = lane.carry.take();
        if lane.write_batch(&state, first).await.is_none() {
            return;
        }
        let mut give_back = give_back;
        let mut quiet = 0;
        loop {
            if give_back && quiet >= QUIET_WAKES && link.in_flight_now() < BUSY_IN_FLIGHT / 2 {
                match to_socket.try_send(lane) {
                    Ok(()) => break,
                    // The socket is saying goodbye: this helper writes to the end.
                    Err(TrySendError::Closed(l) | TrySendError::Full(l)) => {
                        lane = l;
                        give_back = false;
                    }
                }
            }
            let Some(frame) = lane.rx.recv().await else {
                return;
            };
            let n = lane.write_batch(&state, Some(frame)).await;
            match n {
                None => return,
                Some(1) => quiet += 1,
                Some(_) => quiet = 0,
            }
        }
    }
}
