//! The pending-invoke table of the connection core: invokes sent from a registration
//! (connector to connector through the gateway) that wait for their answer.
//!
//! An invoke is an `invoke_request` with a request id of the caller's choosing; the
//! gateway answers with an `invoke_response` carrying the same id. The request id,
//! its owner and its [`PendingInvoke`] live in ONE map, the routing table's pending
//! map (so routing a response hands the entry back with no second lookup); this
//! module owns what goes in it and how each entry leaves, always with its deadline:
//! the response ([`Route::Response`] takes the entry, [`PendingInvoke::answered`]),
//! the deadline ([`timed_out`]), cancellation ([`cancel`], when the caller drops its
//! future), and disconnect or removal of the owner ([`fail_all`], [`fail_orphans`]:
//! every waiter fails at once). Each exit yields the [`Event::InvokeDone`] to hand
//! the waiter.
//!
//! [`Route::Response`]: crate::mux::routing::Route::Response

use std::collections::HashMap;
use std::time::Duration;

use super::timers::{Timer, TimerId, Timers};
use super::{Event, Now};
use crate::error::{Error, Result};
use crate::mux::routing::{HandleId, RoutingTable};
use crate::proto::{InvokeCapabilityRequest, InvokeCapabilityResponse};

/// One invoke to send.
#[derive(Debug, Clone)]
pub(crate) struct InvokeSpec {
    /// Unique per socket; chosen by the caller so it can cancel.
    pub(crate) request_id: String,
    /// An ARN or a dot key `tenant.type.instance`.
    pub(crate) target: String,
    pub(crate) capability_id: String,
    pub(crate) payload: bytes::Bytes,
    pub(crate) payload_encoding: i32,
    pub(crate) context: HashMap<String, String>,
    pub(crate) timeout: Duration,
    /// Send and do not wait: the gateway sends no answer.
    pub(crate) fire_and_forget: bool,
}

/// A pending invoke's entry in the routing table's pending map: its waiter (`W`, a
/// oneshot sender in the driver) and its deadline.
#[derive(Debug)]
pub(crate) struct PendingInvoke<W> {
    waiter: W,
    timer: TimerId,
    timeout: Duration,
}

/// The routing table whose pending map holds the pending invokes.
pub(super) type Routes<W> = RoutingTable<PendingInvoke<W>>;

/// An invoke accepted by [`open`].
#[derive(Debug)]
pub(super) enum Opened<W> {
    /// Send the request; its answer is awaited.
    Awaiting(InvokeCapabilityRequest),
    /// Send the fire-and-forget request; it is done once queued, so hand the waiter
    /// this [`Event::InvokeDone`].
    Sent(InvokeCapabilityRequest, Event<W>),
}

/// Opens an invoke from registration `h` (which must be registered on a joined
/// channel): its request to send and, unless it is fire-and-forget, its pending
/// entry and deadline. Hands the waiter back with an error when the request id is
/// already pending.
pub(super) fn open<W>(
    routes: &mut Routes<W>,
    timers: &mut Timers,
    now: Now,
    h: HandleId,
    spec: InvokeSpec,
    waiter: W,
) -> Result<Opened<W>, (W, Error)> {
    let timeout_ms = i32::try_from(spec.timeout.as_millis()).unwrap_or(i32::MAX);
    let req = InvokeCapabilityRequest {
        request_id: spec.request_id.clone(),
        target_address: spec.target,
        capability_id: spec.capability_id,
        payload: spec.payload,
        payload_encoding: spec.payload_encoding,
        context: spec.context,
        timeout_ms,
        fire_and_forget: spec.fire_and_forget,
    };
    if spec.fire_and_forget {
        let done = Event::InvokeDone {
            waiter,
            result: Ok(None),
        };
        return Ok(Opened::Sent(req, done));
    }
    let timer = timers.insert(
        now.instant + spec.timeout,
        Timer::Invoke(spec.request_id.clone()),
    );
    let pending = PendingInvoke {
        waiter,
        timer,
        timeout: spec.timeout,
    };
    if let Err(p) = routes.track_request(spec.request_id.clone(), h, pending) {
        timers.remove(timer);
        return Err((
            p.waiter,
            Error::Config(format!(
                "invoke request id {:?} is already pending on this socket",
                spec.request_id
            )),
        ));
    }
    Ok(Opened::Awaiting(req))
}

/// The caller gave up on an invoke (dropped its future): forget it. A late answer
/// is then dropped and counted as `unknown_request_id`.
pub(super) fn cancel<W>(routes: &mut Routes<W>, timers: &mut Timers, request_id: &str) {
    if let Some(p) = routes.forget_request(request_id) {
        timers.remove(p.timer);
    }
}

/// An invoke's deadline passed (its timer is gone): it fails with a timeout.
pub(super) fn timed_out<W>(routes: &mut Routes<W>, request_id: &str) -> Option<Event<W>> {
    let p = routes.forget_request(request_id)?;
    Some(Event::InvokeDone {
        waiter: p.waiter,
        result: Err(Error::Timeout {
            what: format!("the answer to invoke {request_id}"),
            after: p.timeout,
        }),
    })
}

/// Fails every pending invoke at once (the socket died): the callers get a
/// recoverable error instead of waiting out their deadlines.
pub(super) fn fail_all<'a, W: 'a>(
    routes: &mut Routes<W>,
    timers: &'a mut Timers,
) -> impl Iterator<Item = Event<W>> + 'a {
    routes
        .disconnect()
        .into_iter()
        .flat_map(|(_, pending)| pending)
        .map(|(request_id, p)| {
            p.failed(timers, Error::ConnectionClosed(format!(
                "the socket closed before invoke {request_id} was answered; it may or may not have run, retry if it is idempotent"
            )))
        })
}

/// Fails the pending invokes of a removed registration (what the routing table's
/// removal of it handed back) with [`Error::Shutdown`].
pub(super) fn fail_orphans<'a, W: 'a>(
    orphans: Vec<(String, PendingInvoke<W>)>,
    timers: &'a mut Timers,
) -> impl Iterator<Item = Event<W>> + 'a {
    orphans
        .into_iter()
        .map(|(_, p)| p.failed(timers, Error::Shutdown))
}

impl<W> PendingInvoke<W> {
    /// The gateway answered the invoke.
    pub(super) fn answered(self, timers: &mut Timers, resp: InvokeCapabilityResponse) -> Event<W> {
        self.settle(timers, Ok(Some(resp)))
    }

    /// The invoke failed before its answer.
    pub(super) fn failed(self, timers: &mut Timers, error: Error) -> Event<W> {
        self.settle(timers, Err(error))
    }

    fn settle(
        self,
        timers: &mut Timers,
        result: Result<Option<InvokeCapabilityResponse>>,
    ) -> Event<W> {
        timers.remove(self.timer);
        Event::InvokeDone {
            waiter: self.waiter,
            result,
        }
    }
}
