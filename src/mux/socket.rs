//! What a socket is made of, in the words every other part of the mux uses: the
//! commands its task takes ([`Command`]), what the handles hold of it
//! ([`SocketHandle`]), what its task keeps per registration ([`RegUser`]), its
//! connection core as the task holds it ([`Core`]), and the task's clock ([`now`]).
//!
//! A "socket" is one Phoenix WebSocket or one gRPC stream, and the one task that
//! drives its core (`driver`). This module sits at the bottom of the mux's shell,
//! under the driver, the handles, the invoker and the approval task, so that they
//! all speak of a socket without importing the task that runs it.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::auth_context::AuthCtx;
use super::core::{Connection, InvokeSpec, Now, RegistrationSpec};
use super::handle_state::HandleState;
use super::metrics::SocketMetrics;
use super::routing::HandleId;
use crate::connector::{BaseConnector, Invoker};
use crate::error::Result;
use crate::proto::{stream_message::Message, InvokeCapabilityResponse};

/// The waiter of an invoke.
pub(crate) type Waiter = oneshot::Sender<Result<Option<InvokeCapabilityResponse>>>;

/// What the driver keeps per registration: its connector and its published state.
pub(crate) struct RegUser {
    pub(crate) connector: Arc<dyn BaseConnector>,
    pub(crate) state: Arc<HandleState>,
    /// The approval flow's credential store and stored keys (`auth_context`), which
    /// the approval task works on.
    pub(crate) auth: Option<Arc<AuthCtx>>,
    /// The invoker every execute of the registration gets in its context; made at
    /// its first execute (the handle id is known only once the core admitted it),
    /// then shared, so an execute costs a reference count, not an allocation.
    pub(crate) invoker: OnceLock<Arc<dyn Invoker>>,
}

/// The core as the driver holds it.
pub(crate) type Core = Connection<Waiter, RegUser>;

/// What handles and the runner ask of a socket's driver. The queue is bounded
/// (`RunnerOptions::command_queue_capacity`); senders await when it is full.
pub(crate) enum Command {
    /// Admit a registration; the reply carries its handle id or the admission error.
    Add {
        spec: Box<RegistrationSpec>,
        user: RegUser,
        reply: oneshot::Sender<Result<HandleId>>,
    },
    /// Remove a registration; the reply comes once it is gone.
    Remove {
        handle: HandleId,
        reply: oneshot::Sender<()>,
    },
    /// Send an invoke.
    Invoke {
        handle: HandleId,
        spec: InvokeSpec,
        reply: Waiter,
    },
    /// The caller of an invoke stopped waiting.
    CancelInvoke(String),
    /// A message a connector sends outside an execute (WebSocket proxy traffic).
    Send(Box<Message>),
    /// The approval task's JWT for a registration (`None`: it could not mint one
    /// from stored keys); the core re-registers in-stream with it.
    Credentials {
        handle: HandleId,
        jwt: Option<String>,
    },
}

/// What a socket's handles share: the command queue of its driver, its counters, and
/// the invoke request-id counter.
#[derive(Debug)]
pub(crate) struct SocketHandle {
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) metrics: Arc<SocketMetrics>,
    pub(crate) next_invoke: AtomicU64,
}

impl SocketHandle {
    pub(crate) fn new(commands: mpsc::Sender<Command>, metrics: Arc<SocketMetrics>) -> Self {
        SocketHandle {
            commands,
            metrics,
            next_invoke: AtomicU64::new(1),
        }
    }
}

/// The present, from the runtime's clock (paused in tests) and the wall clock.
pub(crate) fn now() -> Now {
    Now {
        instant: Instant::now().into_std(),
        unix_ms: crate::clock::now_ms(),
    }
}
