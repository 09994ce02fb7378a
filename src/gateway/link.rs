//! [`ConnectorLink`]: what the rest of the gateway holds of one connection to a
//! connector, whichever transport carries it.
//!
//! A Phoenix socket carries many registrations of one tenant over its lobby channel;
//! a gRPC `Connect` stream carries one registration. Both are a "link" here: an id the
//! registry binds registrations to, a writer queue, a pending-execute map, in-flight
//! slots and a kill switch. Only the [`Outbound`] side differs, so the HTTP API,
//! executes, invokes and the registration logic (`connector_messages.rs`) are written once for
//! both.
//!
//! A message is queued in two steps when something must become visible exactly when
//! it is queued ([`ConnectorLink::reserve`], then [`QueueSlot::send`], which does not
//! wait): a register response is queued under the registry's lock, so that nothing
//! addressed to the registration can be queued ahead of it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::extract::ws::Message as WsMessage;
use prost::Message as _;
use tokio::sync::mpsc::{self, Permit};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::figures::OutcomeCounts;
use super::pending::PendingRequests;
use crate::error::{Error, Result};
use crate::phoenix::{encode_proto, LOBBY_TOPIC};
use crate::proto::{ExecuteResponse, StreamMessage};

/// Pending executes of one link, keyed by request id. One map per link, so the lock
/// is shared only by that link's reader and the callers executing on it, and it is
/// never held across an `.await`.
pub(crate) type PendingExecutes = Mutex<PendingRequests<oneshot::Sender<ExecuteResponse>>>;

/// How messages reach the connector on a link.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// A Phoenix socket: messages are `proto` pushes on the lobby channel, under its
    /// current join ref, which is `None` while the lobby is not joined (a closed
    /// channel receives nothing). The one place the socket's join state lives, so the
    /// socket task and the test hooks agree.
    Phoenix {
        tx: mpsc::Sender<WsMessage>,
        join_ref: Mutex<Option<String>>,
        /// Whether data goes in binary frames (raw protobuf) rather than `proto` text
        /// frames: set when the connector showed it reads them
        /// ([`super::GatewayConfig::binary_frames`]).
        binary: AtomicBool,
    },
    /// One gRPC `Connect` stream: messages go as they are, from the first one on.
    Grpc { tx: mpsc::Sender<StreamMessage> },
}

/// The transport label of a Phoenix link, in `/api/v1/connectors` and `/metrics`.
pub(crate) const TRANSPORT_WEBSOCKET: &str = "websocket";
/// The transport label of a gRPC link.
pub(crate) const TRANSPORT_GRPC: &str = "grpc";

/// One connection to a connector: its writer queue, its pending executes, its
/// in-flight slots, and a switch to kill it.
#[derive(Debug)]
pub(crate) struct ConnectorLink {
    pub(crate) id: u64,
    pub(crate) outbound: Outbound,
    pub(crate) pending: PendingExecutes,
    /// One permit per execute answered by, or invoke sent from, this link
    /// ([`super::GatewayConfig::max_in_flight_per_socket`]).
    pub(crate) in_flight: Arc<Semaphore>,
    /// How many permits `in_flight` started with, so the console can show how many
    /// are taken.
    in_flight_cap: usize,
    pub(crate) kill: CancellationToken,
    /// The peer's address, recorded at accept (`None` when the server could not tell,
    /// e.g. a router served without connect info); shown on `GET /api/v1/connections`.
    pub(crate) peer: Option<SocketAddr>,
    /// When the link was accepted, in ms since the epoch.
    pub(crate) since_ms: u64,
    /// Invokes this link sent, by outcome. Counted per link because an invoke request
    /// does not say which of the link's registrations sent it.
    pub(crate) invokes_sent: OutcomeCounts,
}

/// A place reserved in a link's writer queue ([`ConnectorLink::reserve`]): sending
/// into it cannot wait, so it may be done under a lock.
pub(crate) struct QueueSlot<'a> {
    link: &'a ConnectorLink,
    permit: SlotPermit<'a>,
}

enum SlotPermit<'a> {
    Phoenix(Permit<'a, WsMessage>),
    Grpc(Permit<'a, StreamMessage>),
}

impl QueueSlot<'_> {
    /// Queues `msg` in the reserved place; false when the link takes no data (a
    /// Phoenix lobby that is not joined), and the place is given back.
    pub(crate) fn send(self, msg: &StreamMessage) -> bool {
        match self.permit {
            SlotPermit::Phoenix(permit) => match self.link.phoenix_push(msg) {
                Some(frame) => {
                    permit.send(frame);
                    true
                }
                None => false,
            },
            SlotPermit::Grpc(permit) => {
                permit.send(msg.clone());
                true
            }
        }
    }
}

impl ConnectorLink {
    /// A link from `peer`, accepted now, with an empty pending map and `in_flight`
    /// slots.
    pub(crate) fn new(
        id: u64,
        outbound: Outbound,
        in_flight: usize,
        kill: CancellationToken,
        peer: Option<SocketAddr>,
    ) -> Self {
        let in_flight_cap = in_flight.min(Semaphore::MAX_PERMITS);
        ConnectorLink {
            id,
            outbound,
            pending: Mutex::default(),
            in_flight: Arc::new(Semaphore::new(in_flight_cap)),
            in_flight_cap,
            kill,
            peer,
            since_ms: u64::try_from(crate::clock::now_ms()).unwrap_or(0),
            invokes_sent: OutcomeCounts::default(),
        }
    }

    /// Executes answered by and invokes sent from this link that hold an in-flight
    /// slot now.
    pub(crate) fn in_flight_now(&self) -> usize {
        self.in_flight_cap
            .saturating_sub(self.in_flight.available_permits())
    }

    /// `websocket` or `grpc`.
    pub(crate) fn transport(&self) -> &'static str {
        match self.outbound {
            Outbound::Phoenix { .. } => TRANSPORT_WEBSOCKET,
            Outbound::Grpc { .. } => TRANSPORT_GRPC,
        }
    }

    /// Whether the link takes data: a Phoenix lobby that is joined, or any open stream.
    pub(crate) fn joined(&self) -> bool {
        match &self.outbound {
            Outbound::Phoenix { join_ref, .. } => join_ref.lock().expect("join ref lock").is_some(),
            Outbound::Grpc { .. } => true,
        }
    }

    /// The Phoenix writer queue, for frames only a Phoenix socket has (replies,
    /// channel events, the test hooks' raw frames); `None` on a gRPC stream.
    pub(crate) fn phoenix_tx(&self) -> Option<&mpsc::Sender<WsMessage>> {
        match &self.outbound {
            Outbound::Phoenix { tx, .. } => Some(tx),
            Outbound::Grpc { .. } => None,
        }
    }

    /// Sets (`Some`) or clears the lobby's join ref; returns the one it had. A no-op
    /// returning `None` on a gRPC stream, which has no channel.
    pub(crate) fn replace_join_ref(&self, new: Option<String>) -> Option<String> {
        match &self.outbound {
            Outbound::Phoenix { join_ref, .. } => {
                std::mem::replace(&mut *join_ref.lock().expect("join ref lock"), new)
            }
            Outbound::Grpc { .. } => None,
        }
    }

    /// Reserves a place in the writer queue, waiting for queue space; `None` when the
    /// link is gone.
    pub(crate) async fn reserve(&self) -> Option<QueueSlot<'_>> {
        let permit = match &self.outbound {
            Outbound::Phoenix { tx, .. } => SlotPermit::Phoenix(tx.reserve().await.ok()?),
            Outbound::Grpc { tx } => SlotPermit::Grpc(tx.reserve().await.ok()?),
        };
        Some(QueueSlot { link: self, permit })
    }

    /// Queues `msg`, waiting for queue space; false when the link takes no data or is
    /// gone.
    pub(crate) async fn push(&self, msg: &StreamMessage) -> bool {
        if !self.joined() {
            return false;
        }
        match self.reserve().await {
            Some(slot) => slot.send(msg),
            None => false,
        }
    }

    /// [`ConnectorLink::push`] without waiting: false also when the queue is full.
    pub(crate) fn try_push(&self, msg: &StreamMessage) -> bool {
        match &self.outbound {
            Outbound::Phoenix { tx, .. } => self
                .phoenix_push(msg)
                .is_some_and(|frame| tx.try_send(frame).is_ok()),
            Outbound::Grpc { tx } => tx.try_send(msg.clone()).is_ok(),
        }
    }

    /// Sends data to this socket in binary frames from now on (a Phoenix socket
    /// whose connector reads them); a no-op on a gRPC stream.
    pub(crate) fn use_binary_frames(&self) {
        if let Outbound::Phoenix { binary, .. } = &self.outbound {
            binary.store(true, Relaxed);
        }
    }

    /// `msg` as a server push on the lobby channel under the current join ref: a
    /// binary frame when the socket takes them, else a `proto` text frame. `None`
    /// while the lobby is not joined.
    fn phoenix_push(&self, msg: &StreamMessage) -> Option<WsMessage> {
        let Outbound::Phoenix {
            join_ref, binary, ..
        } = &self.outbound
        else {
            return None;
        };
        if binary.load(Relaxed) {
            // A binary frame carries no ref: only whether the lobby is joined matters.
            join_ref.lock().expect("join ref lock").as_ref()?;
            return Some(WsMessage::Binary(msg.encode_to_vec().into()));
        }
        // The lock is held for the clone only: concurrent pushers encode in parallel.
        let jr = join_ref.lock().expect("join ref lock").clone()?;
        Some(WsMessage::Text(
            encode_proto(Some(&jr), None, LOBBY_TOPIC, msg).into(),
        ))
    }

    /// Takes one in-flight slot, or explains which limit refused it.
    pub(crate) fn admit(&self, what: &str, cap: usize) -> Result<OwnedSemaphorePermit> {
        self.in_flight.clone().try_acquire_owned().map_err(|_| {
            Error::Overloaded(format!(
                "{} link {} already has {cap} executes and invokes in flight \
                 (max_in_flight_per_socket); {what} refused, retry once some are answered",
                self.transport(),
                self.id
            ))
        })
    }
}
