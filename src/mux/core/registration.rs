//! One registration inside the connection core: its register phase, credentials,
//! retry backoff and execute admission state, and the register exchange.
//!
//! Credentials (contract "Register decisions"): a register presents ONE of them, in
//! this order: the session token of an earlier approved register, else the JWT from
//! the approval exchange, else the configured `auth_token`, else nothing (which a
//! manual-mode gateway answers PENDING). A refusal that names the presented
//! credential invalid (`invalid_session_token:`, `invalid_token:`, `expired_token:`,
//! `untrusted_issuer:`) drops it and re-registers at once with the next one, so the
//! chain ends, at worst, in a bare register and a fresh approval. PENDING waits for
//! the operator without timers; REJECTED is terminal.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::timers::{Timer, TimerId};
use super::{Connection, Event, ExecId, Link, Now};
use crate::backoff::{Backoff, BackoffPolicy};
use crate::error::{Error, Result};
use crate::identity::RegistrationKey;
use crate::mux::metrics::{HandleMetrics, SocketMetrics};
use crate::mux::routing::HandleId;
use crate::proto::{
    stream_message::Message, ExecuteRequest, MetricsReport, RegisterConnectorRequest,
    RegisterConnectorResponse, RegistrationStatus,
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
    /// A session token from an earlier run (the credential store).
    pub(crate) session_token: Option<String>,
    /// An unexpired JWT from an earlier approval (the credential store).
    pub(crate) jwt: Option<String>,
    /// Hold the first register (at most `register_timeout`) for a JWT that is being
    /// minted from stored keys, rather than register bare and show up as pending.
    pub(crate) await_jwt: bool,
}

/// Which credential a register presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    SessionToken,
    Jwt,
    /// The configured `auth_token`.
    Configured,
    None,
}

/// Refusal codes (contract, "Register decisions" 3) that void the presented
/// credential, so the next register tries the next one at once.
const CREDENTIAL_CODES: [&str; 4] = [
    "invalid_session_token:",
    "invalid_token:",
    "expired_token:",
    "untrusted_issuer:",
];

/// The code of a refusal by the operator (contract, "Register decisions" 4).
const REJECTED_CODE: &str = "rejected:";

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
    /// Accepted as PENDING on this join: waiting for the operator. No timer: the
    /// gateway's `approval_notification` and `credentials_issued` move it on.
    AwaitingApproval,
    /// The first register waits for a JWT being minted from stored keys; register
    /// anyway (with what there is) at `at`.
    AwaitingCredentials { at: Instant, timer: Option<TimerId> },
    /// Refused by the operator: terminal, nothing more is sent for it.
    Rejected,
}

pub(crate) struct Reg<U> {
    pub(crate) spec: RegistrationSpec,
    pub(crate) user: U,
    pub(crate) phase: Phase,
    backoff: Backoff,
    session_token: Option<String>,
    jwt: Option<String>,
    /// The configured `auth_token`, until a gateway calls it invalid.
    configured: Option<String>,
    /// What the last register sent presented.
    presented: Credential,
    await_jwt: bool,
    /// Executes holding a permit.
    pub(crate) running: usize,
    /// Executes waiting for a permit, oldest first.
    pub(crate) queue: VecDeque<(ExecId, ExecuteRequest)>,
    pub(crate) metrics_timer: Option<TimerId>,
    added_at: Instant,
}

impl<U> Reg<U> {
    pub(crate) fn new(spec: RegistrationSpec, user: U, now: Instant) -> Self {
        let configured = Some(spec.register.jwt_token.clone()).filter(|t| !t.is_empty());
        Reg {
            backoff: Backoff::new(spec.retry.clone()),
            session_token: spec.session_token.clone(),
            jwt: spec.jwt.clone(),
            configured,
            presented: Credential::None,
            await_jwt: spec.await_jwt,
            spec,
            user,
            phase: Phase::Down,
            running: 0,
            queue: VecDeque::new(),
            metrics_timer: None,
            added_at: now,
        }
    }

    pub(crate) fn phase_timer(&self) -> Option<TimerId> {
        match self.phase {
            Phase::Registering { timer, .. }
            | Phase::RetryAt { timer, .. }
            | Phase::AwaitingCredentials { timer, .. } => timer,
            Phase::Down | Phase::Registered | Phase::AwaitingApproval | Phase::Rejected => None,
        }
    }

    /// The credential the next register presents, in the order of preference.
    fn credential(&self) -> (Credential, String) {
        if let Some(t) = &self.session_token {
            (Credential::SessionToken, t.clone())
        } else if let Some(t) = &self.jwt {
            (Credential::Jwt, t.clone())
        } else if let Some(t) = &self.configured {
            (Credential::Configured, t.clone())
        } else {
            (Credential::None, String::new())
        }
    }

    /// Forgets a credential a gateway called invalid.
    fn drop_credential(&mut self, which: Credential) {
        match which {
            Credential::SessionToken => self.session_token = None,
            Credential::Jwt => self.jwt = None,
            Credential::Configured => self.configured = None,
            Credential::None => {}
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
    /// Sends the registration's register request with its best credential and arms
    /// the register deadline. A rejected registration sends nothing; one that waits
    /// for a JWT minted from stored keys waits (at most its register timeout).
    pub(super) fn send_register(&mut self, now: Now, h: HandleId) {
        if !matches!(self.link, Link::Joined(_)) {
            self.set_phase(h, Phase::Down);
            return;
        }
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        match reg.phase {
            Phase::Rejected => return,
            Phase::AwaitingCredentials { .. } if reg.await_jwt => return,
            _ => {}
        }
        if reg.await_jwt && reg.session_token.is_none() && reg.jwt.is_none() {
            let at = now.instant + reg.spec.register_timeout;
            self.set_phase(h, Phase::AwaitingCredentials { at, timer: None });
            return;
        }
        let (presented, token) = reg.credential();
        reg.presented = presented;
        let mut req = reg.spec.register.clone();
        (req.session_token, req.jwt_token) = match presented {
            Credential::SessionToken => (token, String::new()),
            _ => (String::new(), token),
        };
        let at = now.instant + reg.spec.register_timeout;
        self.push(Message::RegisterRequest(req));
        self.set_phase(h, Phase::Registering { at, timer: None });
    }

    /// The approval exchange produced a JWT (`Some`), or gave up on minting one from
    /// stored keys (`None`). A registration awaiting approval (or awaiting this JWT)
    /// re-registers at once, in-stream, presenting it; a registered one keeps it for
    /// its next register (a refreshed JWT needs no re-register).
    pub(crate) fn set_credentials(&mut self, now: Now, h: HandleId, jwt: Option<String>) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if reg.phase == Phase::Rejected {
            return;
        }
        reg.await_jwt = false;
        let fresh = jwt.is_some();
        if let Some(jwt) = jwt {
            reg.jwt = Some(jwt);
        }
        match reg.phase {
            Phase::AwaitingApproval if fresh => {
                // The approval is done: the JWT, not a stale token, must be presented.
                reg.session_token = None;
                self.send_register(now, h);
            }
            Phase::AwaitingCredentials { .. } => self.send_register(now, h),
            _ => {}
        }
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
        if reg.phase == Phase::Rejected {
            return;
        }
        let status = RegistrationStatus::try_from(resp.status).ok();
        // Terminal only with the contract's `rejected:` code: gateways of the family
        // (and the reference gateway's refuse hook) also answer transient refusals
        // with status REJECTED, and those are retried with backoff.
        if let Some(reason) = resp.error.strip_prefix(REJECTED_CODE) {
            self.rejected(h, reason.trim().to_owned());
            return;
        }
        if !resp.success && reg.phase == Phase::Down {
            // A late refusal of a register whose deadline already passed.
            reg.session_token = None;
            return;
        }
        if !resp.success {
            let presented = reg.presented;
            if presented != Credential::None
                && CREDENTIAL_CODES.iter().any(|c| resp.error.starts_with(c))
            {
                tracing::warn!(key = %reg.spec.key, credential = ?presented, error = %resp.error, "credential refused; registering with the next one");
                reg.drop_credential(presented);
                reg.spec.metrics.register_failures.fetch_add(1, Relaxed);
                self.events.push_back(Event::CredentialRefused {
                    handle: h,
                    credential: presented,
                    error: resp.error,
                });
                reg_phase_down(self, h);
                self.send_register(now, h);
                return;
            }
            // A stale session token is a common cause; fall back to the next
            // credential on the next attempt.
            reg.session_token = None;
            reg_phase_down(self, h);
            self.register_failed(now, h, resp.error);
            return;
        }
        reg.backoff.reset();
        self.routes.set_arn(h, &resp.connector_arn);
        if let Link::Joined(c) | Link::Joining { since: c, .. } = &mut self.link {
            c.registered = true;
        }
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if status == Some(RegistrationStatus::Pending) {
            if reg.jwt.is_some() && reg.presented != Credential::Jwt {
                // A JWT arrived while this bare register was in flight: present it.
                reg_phase_down(self, h);
                self.send_register(now, h);
                return;
            }
            tracing::info!(key = %reg.spec.key, arn = %resp.connector_arn, "registered as pending; waiting for the operator's approval");
            self.set_phase(h, Phase::AwaitingApproval);
            self.events.push_back(Event::Pending {
                handle: h,
                arn: resp.connector_arn,
            });
            return;
        }
        // Only a new token is reported, so the driver persists each token once.
        let session_token = Some(resp.session_token)
            .filter(|t| !t.is_empty() && reg.session_token.as_ref() != Some(t));
        if let Some(t) = &session_token {
            reg.session_token = Some(t.clone());
        }
        reg.spec.metrics.registrations.fetch_add(1, Relaxed);
        tracing::info!(key = %reg.spec.key, arn = %resp.connector_arn, "registered");
        self.set_phase(h, Phase::Registered);
        self.events.push_back(Event::Registered {
            handle: h,
            arn: resp.connector_arn,
            status: resp.status,
            session_token,
        });
    }

    /// The operator refused the registration (a REJECTED register answer or
    /// `approval_notification`): nothing more is sent for it, on this join or any
    /// later one.
    pub(super) fn rejected(&mut self, h: HandleId, reason: String) {
        let Some(reg) = self.regs.get(&h) else {
            return;
        };
        if reg.phase == Phase::Rejected {
            return;
        }
        tracing::warn!(key = %reg.spec.key, reason = %reason, "registration rejected by the operator; not retrying");
        self.set_phase(h, Phase::Rejected);
        self.events.push_back(Event::Rejected { handle: h, reason });
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

/// Puts a registration's phase to `Down` (dropping its timer) before the next step.
fn reg_phase_down<W, U>(conn: &mut Connection<W, U>, h: HandleId) {
    conn.set_phase(h, Phase::Down);
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

    /// Moves a registration to `phase`, swapping its timer. `Rejected` is terminal:
    /// nothing moves a registration out of it.
    pub(super) fn set_phase(&mut self, h: HandleId, phase: Phase) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if reg.phase == Phase::Rejected {
            return;
        }
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
            Phase::AwaitingCredentials { at, .. } => Phase::AwaitingCredentials {
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
            Phase::AwaitingCredentials { .. } => {
                tracing::warn!(key = %reg.spec.key, "no JWT from the stored keys before the register timeout; registering with what there is");
                reg.await_jwt = false;
                reg.phase = Phase::Down;
                self.send_register(now, h);
            }
            Phase::Down | Phase::Registered | Phase::AwaitingApproval | Phase::Rejected => {}
        }
    }
}
