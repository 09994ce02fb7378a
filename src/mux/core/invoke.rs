//! Invokes inside the connection core: connector to connector through the gateway.
//!
//! An invoke is an `invoke_request` with a request id of the caller's choosing; the
//! gateway answers with an `invoke_response` carrying the same id. The request id,
//! its owner and its waiter live in ONE map, the routing table's pending map, which is
//! pruned on all four exits: the response ([`Route::Response`] takes the entry), the
//! deadline, cancellation ([`Connection::cancel_invoke`], when the caller drops its
//! future), and disconnect or removal of the owner (every waiter fails at once).
//!
//! [`Route::Response`]: crate::mux::routing::Route::Response

use std::collections::HashMap;
use std::time::Duration;

use super::timers::{Timer, TimerId};
use super::{Connection, Event, Link, Now};
use crate::error::{Error, Result};
use crate::mux::routing::HandleId;
use crate::proto::{stream_message::Message, InvokeCapabilityRequest, InvokeCapabilityResponse};

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

/// A pending invoke's entry in the routing table's pending map.
#[derive(Debug)]
pub(crate) struct Pending<W> {
    pub(crate) waiter: W,
    pub(crate) timer: TimerId,
    timeout: Duration,
}

impl<W, U> Connection<W, U> {
    /// Sends an invoke from registration `h`. Fails at once, handing the waiter back,
    /// when the registration is not registered on a joined channel (the error is a
    /// recoverable [`Error::ConnectionClosed`]) or the request id is already pending.
    /// A fire-and-forget invoke completes as soon as it is queued.
    pub(crate) fn invoke(
        &mut self,
        now: Now,
        h: HandleId,
        spec: InvokeSpec,
        waiter: W,
    ) -> Result<(), (W, Error)> {
        let registered = self
            .regs
            .get(&h)
            .is_some_and(|r| r.phase == super::Phase::Registered);
        if !matches!(self.link, Link::Joined(_)) || !registered {
            let who = self
                .key(h)
                .map(|k| k.to_string())
                .unwrap_or_else(|| format!("handle {h}"));
            return Err((
                waiter,
                Error::ConnectionClosed(format!(
                    "{who} is not registered on a live connection; retry once it is (RegistrationHandle::wait_registered)"
                )),
            ));
        }
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
            self.push(Message::InvokeRequest(req));
            self.events.push_back(Event::InvokeDone {
                waiter,
                result: Ok(None),
            });
            return Ok(());
        }
        let timer = self.timers.insert(
            now.instant + spec.timeout,
            Timer::Invoke(spec.request_id.clone()),
        );
        if let Err(p) = self.routes.track_request(
            spec.request_id.clone(),
            h,
            Pending {
                waiter,
                timer,
                timeout: spec.timeout,
            },
        ) {
            self.timers.remove(timer);
            return Err((
                p.waiter,
                Error::Config(format!(
                    "invoke request id {:?} is already pending on this socket",
                    spec.request_id
                )),
            ));
        }
        self.push(Message::InvokeRequest(req));
        Ok(())
    }

    /// The caller gave up on an invoke (dropped its future): forget it. A late answer
    /// is then dropped and counted as `unknown_request_id`.
    pub(crate) fn cancel_invoke(&mut self, request_id: &str) {
        if let Some(p) = self.routes.forget_request(request_id) {
            self.timers.remove(p.timer);
        }
    }

    pub(super) fn invoke_answered(&mut self, pending: Pending<W>, resp: InvokeCapabilityResponse) {
        self.timers.remove(pending.timer);
        self.events.push_back(Event::InvokeDone {
            waiter: pending.waiter,
            result: Ok(Some(resp)),
        });
    }

    pub(super) fn invoke_failed(&mut self, pending: Pending<W>, error: Error) {
        self.timers.remove(pending.timer);
        self.events.push_back(Event::InvokeDone {
            waiter: pending.waiter,
            result: Err(error),
        });
    }

    pub(super) fn invoke_timed_out(&mut self, request_id: &str) {
        if let Some(p) = self.routes.forget_request(request_id) {
            self.metrics
                .invokes_timed_out
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.events.push_back(Event::InvokeDone {
                waiter: p.waiter,
                result: Err(Error::Timeout {
                    what: format!("the answer to invoke {request_id}"),
                    after: p.timeout,
                }),
            });
        }
    }

    /// Fails every pending invoke at once (the socket died): the callers get a
    /// recoverable error instead of waiting out their deadlines.
    pub(super) fn fail_pending_invokes(&mut self) {
        for (_, pending) in self.routes.disconnect() {
            for (request_id, p) in pending {
                self.timers.remove(p.timer);
                self.events.push_back(Event::InvokeDone {
                    waiter: p.waiter,
                    result: Err(Error::ConnectionClosed(format!(
                        "the socket closed before invoke {request_id} was answered; it may or may not have run, retry if it is idempotent"
                    ))),
                });
            }
        }
    }
}
