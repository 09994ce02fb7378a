//! Execute admission inside the connection core: permits, the bounded wait queue,
//! deadlines, and the answer.
//!
//! An execute routed to a registration starts at once when the registration holds
//! fewer than `max_concurrent` executes; otherwise it waits in the registration's
//! queue of `max_queued`; when that is full it is answered at once with an
//! `overloaded` error, so the gateway's caller learns in one round trip instead of
//! waiting out a deadline. Each execute has a deadline from its arrival: the
//! registration's `execute_timeout`, or the gateway's `context["timeout_ms"]` when that
//! is shorter. At the deadline a running execute is cancelled (its future dropped) and
//! a queued one removed, and either is answered with a `timeout` error. Exactly one
//! answer leaves per execute: an answer for an execute the core no longer holds is
//! ignored.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::timers::{Timer, TimerId};
use super::{Connection, Event, Now};
use crate::context_keys::TIMEOUT_MS_CONTEXT_KEY;
use crate::mux::routing::HandleId;
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, InvokeCapabilityResponse,
};

/// Identifies one execute inside a core.
pub(crate) type ExecId = u64;

/// One execute the core holds, queued or running.
#[derive(Debug)]
pub(crate) struct Exec {
    pub(crate) handle: HandleId,
    request_id: String,
    pub(crate) timer: TimerId,
    pub(crate) running: bool,
    /// Arrived as an `invoke_request` (a gateway that delivers invokes unconverted):
    /// answer with an `invoke_response`.
    as_invoke: bool,
    bytes_in: usize,
}

impl<W, U> Connection<W, U> {
    /// An execute (or an invoke delivered as one) for registration `h`.
    pub(super) fn execute_arrived(
        &mut self,
        now: Now,
        h: HandleId,
        req: ExecuteRequest,
        as_invoke: bool,
    ) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        let m = &reg.spec.metrics;
        m.requests_received.fetch_add(1, Relaxed);
        m.last_request_at_ms
            .store(now.unix_ms.max(0) as u64, Relaxed);
        let gateway_deadline = req
            .context
            .get(TIMEOUT_MS_CONTEXT_KEY)
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        let timeout = gateway_deadline.map_or(reg.spec.execute_timeout, |g| {
            g.min(reg.spec.execute_timeout)
        });
        let can_start = reg.running < reg.spec.max_concurrent;
        if !can_start && reg.queue.len() >= reg.spec.max_queued {
            m.requests_rejected_overloaded.fetch_add(1, Relaxed);
            m.requests_failed.fetch_add(1, Relaxed);
            tracing::warn!(key = %reg.spec.key, request_id = %req.request_id, "registration overloaded; refusing execute");
            let error = format!(
                "overloaded: {} already runs {} executes and has {} waiting (max_concurrent_requests, max_queued_requests); retry later",
                reg.spec.key, reg.running, reg.queue.len()
            );
            self.answer_error(req.request_id, as_invoke, error);
            return;
        }
        let exec = self.next_exec;
        self.next_exec += 1;
        let timer = self
            .timers
            .insert(now.instant + timeout, Timer::Execute(exec));
        self.executes.insert(
            exec,
            Exec {
                handle: h,
                request_id: req.request_id.clone(),
                timer,
                running: can_start,
                as_invoke,
                bytes_in: req.payload.len(),
            },
        );
        let reg = self.regs.get_mut(&h).expect("looked up above");
        if can_start {
            reg.running += 1;
            self.events.push_back(Event::StartExecute {
                exec,
                handle: h,
                request: req,
            });
        } else {
            reg.queue.push_back((exec, req));
        }
    }

    /// The connector answered execute `exec`. Ignored when the core no longer holds it
    /// (it timed out or was cancelled and has been answered or voided already).
    pub(crate) fn handle_execute_done(&mut self, _now: Now, exec: ExecId, resp: ExecuteResponse) {
        let Some(e) = self.executes.remove(&exec) else {
            return;
        };
        self.timers.remove(e.timer);
        if let Some(reg) = self.regs.get(&e.handle) {
            let ms = resp.duration_ms.max(0) as u64;
            reg.spec
                .metrics
                .record_execute(resp.success, e.bytes_in, resp.payload.len(), ms);
        }
        if e.as_invoke {
            self.push(Message::InvokeResponse(InvokeCapabilityResponse {
                request_id: resp.request_id,
                success: resp.success,
                payload: resp.payload,
                payload_encoding: resp.payload_encoding,
                error: resp.error,
                duration_ms: resp.duration_ms,
                ..Default::default()
            }));
        } else {
            self.push(Message::ExecuteResponse(resp));
        }
        self.permit_freed(e.handle);
    }

    /// An execute's deadline passed.
    pub(super) fn execute_timed_out(&mut self, _now: Now, exec: ExecId) {
        let Some(e) = self.executes.remove(&exec) else {
            return;
        };
        let Some(reg) = self.regs.get_mut(&e.handle) else {
            return;
        };
        reg.spec.metrics.requests_failed.fetch_add(1, Relaxed);
        reg.spec.metrics.requests_timed_out.fetch_add(1, Relaxed);
        let key = reg.spec.key.to_string();
        if e.running {
            self.events.push_back(Event::CancelExecute(exec));
        } else {
            reg.queue.retain(|(id, _)| *id != exec);
        }
        tracing::warn!(key = %key, request_id = %e.request_id, running = e.running, "execute timed out");
        let error = format!(
            "timeout: {key} did not answer {} before its deadline (execute_timeout, or the gateway's timeout_ms)",
            e.request_id
        );
        self.answer_error(e.request_id, e.as_invoke, error);
        if e.running {
            self.permit_freed(e.handle);
        }
    }

    /// A permit of `h` is free: start its oldest waiting execute.
    fn permit_freed(&mut self, h: HandleId) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        reg.running = reg.running.saturating_sub(1);
        if let Some((exec, request)) = reg.queue.pop_front() {
            reg.running += 1;
            if let Some(e) = self.executes.get_mut(&exec) {
                e.running = true;
            }
            self.events.push_back(Event::StartExecute {
                exec,
                handle: h,
                request,
            });
        }
    }

    /// Cancels every execute `which` selects: running ones through
    /// [`Event::CancelExecute`], queued ones silently.
    pub(super) fn cancel_executes(&mut self, which: impl Fn(&Exec) -> bool) {
        let ids: Vec<ExecId> = self
            .executes
            .iter()
            .filter(|(_, e)| which(e))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let Some(e) = self.executes.remove(&id) else {
                continue;
            };
            self.timers.remove(e.timer);
            if e.running {
                self.events.push_back(Event::CancelExecute(id));
                if let Some(reg) = self.regs.get_mut(&e.handle) {
                    reg.running = reg.running.saturating_sub(1);
                }
            }
        }
        for reg in self.regs.values_mut() {
            reg.queue.retain(|(id, _)| self.executes.contains_key(id));
        }
    }

    fn answer_error(&mut self, request_id: String, as_invoke: bool, error: String) {
        if as_invoke {
            self.push(Message::InvokeResponse(InvokeCapabilityResponse {
                request_id,
                error,
                ..Default::default()
            }));
        } else {
            self.push(Message::ExecuteResponse(ExecuteResponse {
                request_id,
                error,
                ..Default::default()
            }));
        }
    }
}
