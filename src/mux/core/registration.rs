//! One registration inside the connection core: its register phase, session token,
//! retry backoff and execute admission state, and the register exchange.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::timers::{Timer, TimerId};
use super::{Connection, Event, ExecId, Link, Now};
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::mux::backoff::{Backoff, BackoffPolicy};
use crate::mux::metrics::{HandleMetrics, SocketMetrics};
use crate::mux::routing::HandleId;
use crate::proto::{
    stream_message::Message, ExecuteRequest, MetricsReport, RegisterConnectorRequest,
    RegisterConnectorResponse,
};

/// What the core needs to know about a registration.
#[derive(Debug, Clone)]
pub(crate) struct RegistrationSpec {
    pub(crate) key: RegistrationKey,
    /// The register request to send; the session token is filled in per attempt.
    pub(crate) register: RegisterConnectorRequest,
    pub(crate) register_timeout: Duration,
    /// Delays between refused or timed-out registers on a live link.
    pub(crate) retry: BackoffPolicy,
    /// Executes run at once (the registration's permits).
    pub(crate) max_concurrent: usize,
    /// Executes that wait for a permit; beyond it an execute is refused as overloaded.
    pub(crate) max_queued: usize,
    /// The longest an execute may run when the gateway names a longer (or no) deadline.
    pub(crate) execute_timeout: Duration,
    /// How often a `metrics_report` is sent; zero for never.
    pub(crate) metrics_interval: Duration,
    pub(crate) metrics: Arc<HandleMetrics>,
}

/// Where a registration's register stands on the current join.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Phase {
    /// No joined channel: nothing to do until there is one.
    Down,
    /// Register sent; fail it at `at`.
    Registering { at: Instant, timer: Option<TimerId> },
    /// Refused or timed out; send the next register at `at`.
    RetryAt { at: Instant, timer: Option<TimerId> },
    /// Registered on this join.
    Registered,
}

pub(crate) struct Reg<U> {
    pub(crate) spec: RegistrationSpec,
    pub(crate) user: U,
    pub(crate) phase: Phase,
    backoff: Backoff,
    session_token: Option<String>,
    /// Executes holding a permit.
    pub(crate) running: usize,
    /// Executes waiting for a permit, oldest first.
    pub(crate) queue: VecDeque<(ExecId, ExecuteRequest)>,
    pub(crate) metrics_timer: Option<TimerId>,
    added_at: Instant,
}

impl<U> Reg<U> {
    pub(crate) fn new(spec: RegistrationSpec, user: U, now: Instant) -> Self {
        Reg {
            backoff: Backoff::new(spec.retry.clone()),
            spec,
            user,
            phase: Phase::Down,
            session_token: None,
            running: 0,
            queue: VecDeque::new(),
            metrics_timer: None,
            added_at: now,
        }
    }

    pub(crate) fn phase_timer(&self) -> Option<TimerId> {
        match self.phase {
            Phase::Registering { timer, .. } | Phase::RetryAt { timer, .. } => timer,
            Phase::Down | Phase::Registered => None,
        }
    }

    /// The registration's `metrics_report`: its own counters, the socket's connection
    /// figures, and the connector's custom ones.
    pub(crate) fn metrics_report(
        &self,
        now: Now,
        arn: String,
        socket: &SocketMetrics,
        custom: HashMap<String, f64>,
    ) -> MetricsReport {
        let m = &self.spec.metrics;
        let processed = m.requests_processed.load(Relaxed);
        let failed = m.requests_failed.load(Relaxed);
        let total_ms = m.total_duration_ms.load(Relaxed) as f64;
        let done = processed + failed;
        MetricsReport {
            connector_arn: arn,
            timestamp_ms: now.unix_ms,
            requests_received: m.requests_received.load(Relaxed) as i64,
            requests_processed: processed as i64,
            requests_failed: failed as i64,
            avg_latency_ms: if done == 0 {
                0.0
            } else {
                total_ms / done as f64
            },
            total_duration_ms: total_ms,
            bytes_received: m.bytes_received.load(Relaxed) as i64,
            bytes_sent: m.bytes_sent.load(Relaxed) as i64,
            reconnection_attempts: socket.reconnect_attempts.load(Relaxed) as i64,
            total_disconnects: socket.disconnects.load(Relaxed) as i64,
            successful_reconnects: socket.connects.load(Relaxed).saturating_sub(1) as i64,
            uptime_seconds: now
                .instant
                .saturating_duration_since(self.added_at)
                .as_secs_f64(),
            last_request_at_ms: m.last_request_at_ms.load(Relaxed) as i64,
            custom_metrics: custom,
        }
    }
}

/// The register exchange.
impl<W, U> Connection<W, U> {
    /// Sends the registration's register request (with its session token, when it has
    /// one) and arms the register deadline.
    pub(super) fn send_register(&mut self, now: Now, h: HandleId) {
        if !matches!(self.link, Link::Joined(_)) {
            self.set_phase(h, Phase::Down);
            return;
        }
        let Some(reg) = self.regs.get(&h) else {
            return;
        };
        let mut req = reg.spec.register.clone();
        req.session_token = reg.session_token.clone().unwrap_or_default();
        let at = now.instant + reg.spec.register_timeout;
        self.push(Message::RegisterRequest(req));
        self.set_phase(h, Phase::Registering { at, timer: None });
    }

    pub(super) fn register_answered(
        &mut self,
        now: Now,
        h: HandleId,
        resp: RegisterConnectorResponse,
    ) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if !resp.success {
            // A stale session token is a common cause; fall back to the configured
            // credentials on the next attempt.
            reg.session_token = None;
            if reg.phase != Phase::Down {
                reg.phase = Phase::Down;
                self.register_failed(now, h, resp.error);
            }
            return;
        }
        if !resp.session_token.is_empty() {
            reg.session_token = Some(resp.session_token.clone());
        }
        reg.backoff.reset();
        reg.spec.metrics.registrations.fetch_add(1, Relaxed);
        self.routes.set_arn(h, &resp.connector_arn);
        if let Link::Joined(c) | Link::Joining { since: c, .. } = &mut self.link {
            c.registered = true;
        }
        tracing::info!(key = %reg.spec.key, arn = %resp.connector_arn, "registered");
        self.set_phase(h, Phase::Registered);
        self.events.push_back(Event::Registered {
            handle: h,
            arn: resp.connector_arn,
            status: resp.status,
        });
    }

    /// Records a failed register and schedules the retry after the registration's
    /// backoff.
    pub(super) fn register_failed(&mut self, now: Now, h: HandleId, error: String) {
        let sample = self.next_random();
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        tracing::warn!(key = %reg.spec.key, error = %error, "register failed");
        reg.spec.metrics.register_failures.fetch_add(1, Relaxed);
        let at = now.instant + reg.backoff.next_delay(sample);
        self.set_phase(h, Phase::RetryAt { at, timer: None });
        self.events
            .push_back(Event::RegisterFailed { handle: h, error });
    }
}

/// Registration commands and timers.
impl<W, U> Connection<W, U> {
    /// Admits a registration under its dot key; registers it at once when the channel
    /// is joined. Fails with a typed error at the handler cap or for a duplicate key.
    pub(crate) fn add(&mut self, now: Now, spec: RegistrationSpec, user: U) -> Result<HandleId> {
        let id = self.next_handle;
        self.routes.admit(id, spec.key.clone())?;
        self.next_handle += 1;
        let reg = Reg::new(spec, user, now.instant);
        let interval = reg.spec.metrics_interval;
        self.regs.insert(id, reg);
        if !interval.is_zero() {
            self.schedule_metrics(now, id);
        }
        if matches!(self.link, Link::Joined(_)) {
            self.send_register(now, id);
        }
        Ok(id)
    }

    /// Removes a registration: it stops routing at once (a late execute for its ARN is
    /// dropped, never handed to another registration), its executes are cancelled
    /// (dropped, not answered), its pending invokes fail with [`Error::Shutdown`], and
    /// when it was the last one, [`Event::Close`] asks the driver to close the socket.
    /// The protocol has no deregister message: the gateway forgets the registration
    /// when the socket closes. Returns the driver's data of the registration.
    pub(crate) fn remove(&mut self, _now: Now, handle: HandleId) -> Option<U> {
        let reg = self.regs.remove(&handle)?;
        for t in [reg.phase_timer(), reg.metrics_timer].into_iter().flatten() {
            self.timers.remove(t);
        }
        for (_, pending) in self.routes.remove(handle) {
            self.timers.remove(pending.timer);
            self.events.push_back(Event::InvokeDone {
                waiter: pending.waiter,
                result: Err(Error::Shutdown),
            });
        }
        self.cancel_executes(|e| e.handle == handle);
        if self.regs.is_empty() {
            self.events.push_back(Event::Close);
        }
        Some(reg.user)
    }

    /// The key a registration was admitted under.
    pub(crate) fn key(&self, handle: HandleId) -> Option<&RegistrationKey> {
        self.regs.get(&handle).map(|r| &r.spec.key)
    }

    /// Schedules the registration's next metrics report, replacing a pending one; none
    /// when its interval is zero.
    pub(super) fn schedule_metrics(&mut self, now: Now, h: HandleId) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if let Some(t) = reg.metrics_timer.take() {
            self.timers.remove(t);
        }
        if reg.spec.metrics_interval.is_zero() {
            return;
        }
        let at = now.instant + reg.spec.metrics_interval;
        reg.metrics_timer = Some(self.timers.insert(at, Timer::Metrics(h)));
    }

    /// Sends the registration's `metrics_report` (its counters, the socket's, and the
    /// connector's `custom` figures) if it is registered, and schedules the next one.
    pub(crate) fn send_metrics_report(
        &mut self,
        now: Now,
        handle: HandleId,
        custom: HashMap<String, f64>,
    ) {
        let Some(reg) = self.regs.get(&handle) else {
            return;
        };
        let report = (reg.phase == Phase::Registered)
            .then(|| self.routes.arn_of(handle).map(str::to_owned))
            .flatten()
            .map(|arn| reg.metrics_report(now, arn, &self.metrics, custom));
        if let Some(report) = report {
            self.push(Message::MetricsReport(report));
        }
        self.schedule_metrics(now, handle);
    }

    pub(super) fn set_phase(&mut self, h: HandleId, phase: Phase) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if let Some(t) = reg.phase_timer() {
            self.timers.remove(t);
        }
        reg.phase = match phase {
            Phase::Registering { at, .. } => Phase::Registering {
                at,
                timer: Some(self.timers.insert(at, Timer::Register(h))),
            },
            Phase::RetryAt { at, .. } => Phase::RetryAt {
                at,
                timer: Some(self.timers.insert(at, Timer::Register(h))),
            },
            other => other,
        };
    }

    /// Registrations' timer: a register deadline passed, or a retry is due.
    pub(super) fn register_timer(&mut self, now: Now, h: HandleId) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        match reg.phase {
            Phase::Registering { .. } => {
                reg.phase = Phase::Down;
                self.register_failed(
                    now,
                    h,
                    "no register_response before the register timeout".into(),
                );
            }
            Phase::RetryAt { .. } => {
                reg.phase = Phase::Down;
                self.send_register(now, h);
            }
            Phase::Down | Phase::Registered => {}
        }
    }
}
