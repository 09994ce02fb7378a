//! The executes table of the connection core: every execute it holds, queued or
//! running, and each registration's lane (its permits and its bounded wait queue).
//!
//! An execute routed to a registration starts at once when the registration holds
//! fewer than `max_concurrent` executes; otherwise it waits in the registration's
//! queue of `max_queued`; when that is full it is refused at once with an
//! `overloaded` error, so the gateway's caller learns in one round trip instead of
//! waiting out a deadline ([`Admission`]). Each execute has a deadline from its
//! arrival: the registration's `execute_timeout`, or the gateway's
//! `context["timeout_ms"]` when that is shorter. At the deadline a running execute is
//! cancelled (its future dropped) and a queued one removed, and either is answered
//! with a `timeout` error. Exactly one answer leaves per execute: an answer for an
//! execute the table no longer holds is ignored. Every freed permit starts the oldest
//! waiting execute ([`Ended::next`]).
//!
//! The table answers with what the connection must do; the connection writes the
//! answers and turns starts and cancellations into events.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::registrations::RegistrationSpec;
use super::timers::{Timer, TimerId, Timers};
use super::Now;
use crate::context_keys::TIMEOUT_MS_CONTEXT_KEY;
use crate::identity::RegistrationKey;
use crate::mux::metrics::HandleMetrics;
use crate::mux::routing::HandleId;
use crate::proto::{
    stream_message::Message, ExecuteRequest, ExecuteResponse, InvokeCapabilityResponse,
};

/// Identifies one execute inside a core.
pub(crate) type ExecId = u64;

/// One execute the table holds, queued or running.
#[derive(Debug)]
struct Exec {
    handle: HandleId,
    request_id: String,
    timer: TimerId,
    running: bool,
    /// Arrived as an `invoke_request` (a gateway that delivers invokes unconverted):
    /// answer with an `invoke_response`.
    as_invoke: bool,
    bytes_in: usize,
}

/// One registration's admission: its limits, its counters, the executes holding a
/// permit and the ones waiting for one.
#[derive(Debug)]
struct Lane {
    key: RegistrationKey,
    max_concurrent: usize,
    max_queued: usize,
    execute_timeout: Duration,
    metrics: Arc<HandleMetrics>,
    /// Executes holding a permit.
    running: usize,
    /// Executes waiting for a permit, oldest first.
    queue: VecDeque<(ExecId, ExecuteRequest)>,
}

/// An execute to hand to the registration's connector.
#[derive(Debug)]
pub(super) struct Start {
    pub(super) exec: ExecId,
    pub(super) handle: HandleId,
    pub(super) request: ExecuteRequest,
}

/// What became of an arriving execute.
#[derive(Debug)]
pub(super) enum Admission {
    /// A permit was free: start it.
    Start(Start),
    /// It waits in the registration's queue.
    Queued,
    /// The queue is full: send this `overloaded` answer (boxed: the rare path should
    /// not size every admission).
    Refused(Box<Message>),
}

/// An execute ended (answered or timed out): what to do about it.
#[derive(Debug)]
pub(super) struct Ended {
    /// A running execute to cancel (drop its future).
    pub(super) cancel: Option<ExecId>,
    /// The answer to send.
    pub(super) answer: Message,
    /// The waiting execute that got the freed permit.
    pub(super) next: Option<Start>,
}

/// Every execute of one connection, and every registration's lane.
#[derive(Debug)]
pub(super) struct Executes {
    execs: HashMap<ExecId, Exec>,
    lanes: HashMap<HandleId, Lane>,
    next_exec: ExecId,
}

impl Default for Executes {
    fn default() -> Self {
        Executes {
            execs: HashMap::new(),
            lanes: HashMap::new(),
            next_exec: 1,
        }
    }
}

impl Executes {
    /// Opens the lane of a new registration.
    pub(super) fn add(&mut self, h: HandleId, spec: &RegistrationSpec) {
        let lane = Lane {
            key: spec.key.clone(),
            max_concurrent: spec.max_concurrent,
            max_queued: spec.max_queued,
            execute_timeout: spec.execute_timeout,
            metrics: spec.metrics.clone(),
            running: 0,
            queue: VecDeque::new(),
        };
        self.lanes.insert(h, lane);
    }

    /// Closes a registration's lane; returns its running executes, to cancel. Its
    /// queued ones go silently.
    pub(super) fn remove(&mut self, timers: &mut Timers, h: HandleId) -> Vec<ExecId> {
        let cancel = self.cancel(timers, |e| e.handle == h);
        self.lanes.remove(&h);
        cancel
    }

    /// Drops every execute (the channel's registrations are void); returns the running
    /// ones, to cancel. The lanes stay, empty.
    pub(super) fn clear(&mut self, timers: &mut Timers) -> Vec<ExecId> {
        self.cancel(timers, |_| true)
    }

    /// An execute (or an invoke delivered as one) for registration `h`; `None` when it
    /// has no lane.
    pub(super) fn arrive(
        &mut self,
        timers: &mut Timers,
        now: Now,
        h: HandleId,
        req: ExecuteRequest,
        as_invoke: bool,
    ) -> Option<Admission> {
        let lane = self.lanes.get_mut(&h)?;
        let m = &lane.metrics;
        m.requests_received.fetch_add(1, Relaxed);
        m.last_request_at_ms
            .store(now.unix_ms.max(0) as u64, Relaxed);
        let gateway_deadline = req
            .context
            .get(TIMEOUT_MS_CONTEXT_KEY)
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        let timeout =
            gateway_deadline.map_or(lane.execute_timeout, |g| g.min(lane.execute_timeout));
        let can_start = lane.running < lane.max_concurrent;
        if !can_start && lane.queue.len() >= lane.max_queued {
            m.requests_rejected_overloaded.fetch_add(1, Relaxed);
            m.requests_failed.fetch_add(1, Relaxed);
            tracing::warn!(key = %lane.key, request_id = %req.request_id, "registration overloaded; refusing execute");
            let error = format!(
                "overloaded: {} already runs {} executes and has {} waiting (max_concurrent_requests, max_queued_requests); retry later",
                lane.key, lane.running, lane.queue.len()
            );
            return Some(Admission::Refused(Box::new(error_answer(
                req.request_id,
                as_invoke,
                error,
            ))));
        }
        let exec = self.next_exec;
        self.next_exec += 1;
        let timer = timers.insert(now.instant + timeout, Timer::Execute(exec));
        self.execs.insert(
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
        if can_start {
            lane.running += 1;
            Some(Admission::Start(Start {
                exec,
                handle: h,
                request: req,
            }))
        } else {
            lane.queue.push_back((exec, req));
            Some(Admission::Queued)
        }
    }

    /// The connector answered execute `exec`: its answer, and the waiting execute
    /// that gets its permit. `None` when the table no longer holds it (it timed out or
    /// was cancelled and has been answered or voided already).
    pub(super) fn done(
        &mut self,
        timers: &mut Timers,
        exec: ExecId,
        resp: ExecuteResponse,
    ) -> Option<Ended> {
        let e = self.execs.remove(&exec)?;
        timers.remove(e.timer);
        if let Some(lane) = self.lanes.get(&e.handle) {
            let ms = resp.duration_ms.max(0) as u64;
            lane.metrics
                .record_execute(resp.success, e.bytes_in, resp.payload.len(), ms);
        }
        let answer = if e.as_invoke {
            Message::InvokeResponse(InvokeCapabilityResponse {
                request_id: resp.request_id,
                success: resp.success,
                payload: resp.payload,
                payload_encoding: resp.payload_encoding,
                error: resp.error,
                duration_ms: resp.duration_ms,
                ..Default::default()
            })
        } else {
            Message::ExecuteResponse(resp)
        };
        Some(Ended {
            cancel: None,
            answer,
            next: self.permit_freed(e.handle),
        })
    }

    /// Execute `exec`'s deadline passed (its timer is gone): a running one is
    /// cancelled, a queued one leaves the queue, and either is answered with a
    /// `timeout` error.
    pub(super) fn timed_out(&mut self, exec: ExecId) -> Option<Ended> {
        let e = self.execs.remove(&exec)?;
        let lane = self.lanes.get_mut(&e.handle)?;
        lane.metrics.requests_failed.fetch_add(1, Relaxed);
        lane.metrics.requests_timed_out.fetch_add(1, Relaxed);
        if !e.running {
            lane.queue.retain(|(id, _)| *id != exec);
        }
        let key = lane.key.to_string();
        tracing::warn!(key = %key, request_id = %e.request_id, running = e.running, "execute timed out");
        let error = format!(
            "timeout: {key} did not answer {} before its deadline (execute_timeout, or the gateway's timeout_ms)",
            e.request_id
        );
        let answer = error_answer(e.request_id, e.as_invoke, error);
        let (cancel, next) = if e.running {
            (Some(exec), self.permit_freed(e.handle))
        } else {
            (None, None)
        };
        Some(Ended {
            cancel,
            answer,
            next,
        })
    }

    /// The connection is stopping: answers every queued execute (`running` false)
    /// or every running one (`running` true, past the stop grace) with a recoverable
    /// `connection_closed` error, so the gateway's caller may retry elsewhere at once.
    /// Returns each answer with the execute to cancel (a running one's future).
    pub(super) fn refuse_all(
        &mut self,
        timers: &mut Timers,
        running: bool,
    ) -> Vec<(Option<ExecId>, Message)> {
        let mut ids: Vec<ExecId> = self
            .execs
            .iter()
            .filter(|(_, e)| e.running == running)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(e) = self.execs.remove(&id) else {
                continue;
            };
            timers.remove(e.timer);
            let Some(lane) = self.lanes.get_mut(&e.handle) else {
                continue;
            };
            lane.metrics.requests_failed.fetch_add(1, Relaxed);
            let error = if running {
                lane.running = lane.running.saturating_sub(1);
                format!(
                    "connection_closed: {} is shutting down and {} did not finish within its stop grace (RunnerOptions::stop_grace); retry it if it is safe to repeat",
                    lane.key, e.request_id
                )
            } else {
                lane.queue.retain(|(q, _)| *q != id);
                not_started(&lane.key, &e.request_id)
            };
            tracing::warn!(key = %lane.key, request_id = %e.request_id, running, "execute refused: stopping");
            let answer = error_answer(e.request_id, e.as_invoke, error);
            out.push((running.then_some(id), answer));
        }
        out
    }

    /// An execute that arrived while the connection stops: counted and answered at
    /// once with a recoverable error, never started. `None` when `h` has no lane.
    pub(super) fn refuse_stopping(
        &self,
        now: Now,
        h: HandleId,
        req: ExecuteRequest,
        as_invoke: bool,
    ) -> Option<Message> {
        let lane = self.lanes.get(&h)?;
        let m = &lane.metrics;
        m.requests_received.fetch_add(1, Relaxed);
        m.requests_failed.fetch_add(1, Relaxed);
        m.last_request_at_ms
            .store(now.unix_ms.max(0) as u64, Relaxed);
        let error = not_started(&lane.key, &req.request_id);
        Some(error_answer(req.request_id, as_invoke, error))
    }

    /// Whether no execute is held, queued or running.
    pub(super) fn is_empty(&self) -> bool {
        self.execs.is_empty()
    }

    /// A permit of `h` is free: its oldest waiting execute takes it.
    fn permit_freed(&mut self, h: HandleId) -> Option<Start> {
        let lane = self.lanes.get_mut(&h)?;
        lane.running = lane.running.saturating_sub(1);
        let (exec, request) = lane.queue.pop_front()?;
        lane.running += 1;
        if let Some(e) = self.execs.get_mut(&exec) {
            e.running = true;
        }
        Some(Start {
            exec,
            handle: h,
            request,
        })
    }

    /// Drops every execute `which` selects with its deadline; returns the running
    /// ones, whose permits are freed without starting waiting ones.
    fn cancel(&mut self, timers: &mut Timers, which: impl Fn(&Exec) -> bool) -> Vec<ExecId> {
        let mut ids: Vec<ExecId> = self
            .execs
            .iter()
            .filter(|(_, e)| which(e))
            .map(|(id, _)| *id)
            .collect();
        ids.retain(|id| {
            let Some(e) = self.execs.remove(id) else {
                return false;
            };
            timers.remove(e.timer);
            if e.running {
                if let Some(lane) = self.lanes.get_mut(&e.handle) {
                    lane.running = lane.running.saturating_sub(1);
                }
            }
            e.running
        });
        for lane in self.lanes.values_mut() {
            lane.queue.retain(|(id, _)| self.execs.contains_key(id));
        }
        ids
    }

    /// Number of executes held, queued or running.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.execs.len()
    }

    /// A lane's executes holding a permit and waiting for one; `None` without a lane.
    #[cfg(test)]
    pub(super) fn lane(&self, h: HandleId) -> Option<(usize, usize)> {
        self.lanes.get(&h).map(|l| (l.running, l.queue.len()))
    }
}

/// The error of an execute refused because the connection stops: `connection_closed`
/// is a code the gateway's callers treat as recoverable (retry elsewhere).
fn not_started(key: &RegistrationKey, request_id: &str) -> String {
    format!("connection_closed: {key} is shutting down and did not start {request_id}; retry it")
}

/// The error answer to an execute, in the form it arrived in.
fn error_answer(request_id: String, as_invoke: bool, error: String) -> Message {
    if as_invoke {
        Message::InvokeResponse(InvokeCapabilityResponse {
            request_id,
            error,
            ..Default::default()
        })
    } else {
        Message::ExecuteResponse(ExecuteResponse {
            request_id,
            error,
            ..Default::default()
        })
    }
}
