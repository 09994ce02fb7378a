//! The registrations table of the connection core: every registration's register
//! phase (with its deadline or retry time), credentials, retry backoff and metrics
//! report timer, and the driver's data for it.
//!
//! The table decides the register exchange and answers with what the connection must
//! do: a register request to send, an [`Answer`] to a `register_response`, a due
//! [`RegisterTimer`]. The connection writes the frames and events, records the ARN in
//! the routing table and knows whether the link is joined. Credentials are decided
//! by each registration's [`Credentials`]; PENDING waits for the operator without
//! timers; REJECTED is terminal: nothing moves a registration out of it.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::credentials::{Credential, Credentials};
use super::timers::{Timer, TimerId, Timers};
use super::Now;
use crate::backoff::{Backoff, BackoffPolicy};
use crate::error::Result;
use crate::identity::RegistrationKey;
use crate::mux::metrics::{HandleMetrics, SocketMetrics};
use crate::mux::routing::HandleId;
use crate::proto::{
    MetricsReport, RegisterConnectorRequest, RegisterConnectorResponse, RegistrationStatus,
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

/// The code of a refusal by the operator (contract, "Register decisions" 4).
const REJECTED_CODE: &str = "rejected:";

/// Where a registration's register stands on the current join.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Phase {
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

impl Phase {
    /// The deadline this phase armed, if any.
    fn timer(&self) -> Option<TimerId> {
        match *self {
            Phase::Registering { timer, .. }
            | Phase::RetryAt { timer, .. }
            | Phase::AwaitingCredentials { timer, .. } => timer,
            Phase::Down | Phase::Registered | Phase::AwaitingApproval | Phase::Rejected => None,
        }
    }
}

/// One registration.
struct Reg<U> {
    spec: RegistrationSpec,
    user: U,
    phase: Phase,
    backoff: Backoff,
    credentials: Credentials,
    metrics_timer: Option<TimerId>,
    added_at: Instant,
}

/// How a `register_response` came out, for the connection to act on.
#[derive(Debug, PartialEq)]
pub(super) enum Answer {
    /// Nothing to do: an unknown or rejected registration, or a late refusal of a
    /// register whose deadline already passed.
    Ignored,
    /// The operator rejected the registration (`rejected:`): it is now terminal.
    Rejected(String),
    /// The presented credential was refused and dropped: register again at once,
    /// presenting the next one.
    CredentialRefused {
        credential: Credential,
        error: String,
    },
    /// Refused for another reason: the retry after the backoff is scheduled.
    Failed(String),
    /// Accepted under `arn`: record it; the link has registered.
    Accepted { arn: String, outcome: Accepted },
}

/// What an accepted register led to.
#[derive(Debug, PartialEq)]
pub(super) enum Accepted {
    /// Registered; `session_token` is a new one to persist.
    Registered {
        status: i32,
        session_token: Option<String>,
    },
    /// PENDING: waiting for the operator's approval.
    Pending,
    /// PENDING, but a JWT arrived while this register was in flight: register again
    /// at once, presenting it.
    Reregister,
}

/// A registration's register timer fired.
#[derive(Debug, PartialEq)]
pub(super) enum RegisterTimer {
    /// The register went unanswered: the retry after the backoff is scheduled.
    Failed(String),
    /// Send the next register now (a retry is due, or the wait for a JWT ended).
    Register,
}

/// Every registration of one connection, by handle.
pub(super) struct Registrations<U> {
    regs: HashMap<HandleId, Reg<U>>,
    next_handle: HandleId,
    /// The jitter source of register retries.
    rng: u64,
}

impl<U> Registrations<U> {
    /// An empty table whose retry jitter is seeded with `seed`.
    pub(super) fn new(seed: u64) -> Self {
        Registrations {
            regs: HashMap::new(),
            next_handle: 1,
            rng: seed | 1,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.regs.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.regs.is_empty()
    }

    /// Every registration's handle and driver data.
    pub(super) fn iter(&self) -> impl Iterator<Item = (HandleId, &U)> {
        self.regs.iter().map(|(h, r)| (*h, &r.user))
    }

    /// Every handle, for a step that touches each registration.
    pub(super) fn ids(&self) -> Vec<HandleId> {
        self.regs.keys().copied().collect()
    }

    pub(super) fn user(&self, h: HandleId) -> Option<&U> {
        self.regs.get(&h).map(|r| &r.user)
    }

    pub(super) fn key(&self, h: HandleId) -> Option<&RegistrationKey> {
        self.regs.get(&h).map(|r| &r.spec.key)
    }

    /// Whether the registration is registered on the current join.
    pub(super) fn is_registered(&self, h: HandleId) -> bool {
        self.regs
            .get(&h)
            .is_some_and(|r| r.phase == Phase::Registered)
    }

    /// Adds a registration under the next handle, once `admit` (the connection's
    /// other tables) accepted that handle and its spec; arms its first metrics report.
    /// The handle is used up only when the registration is added.
    pub(super) fn add(
        &mut self,
        timers: &mut Timers,
        now: Now,
        spec: RegistrationSpec,
        user: U,
        admit: impl FnOnce(HandleId, &RegistrationSpec) -> Result<()>,
    ) -> Result<HandleId> {
        let h = self.next_handle;
        admit(h, &spec)?;
        self.next_handle += 1;
        let reg = Reg {
            backoff: Backoff::new(spec.retry.clone()),
            credentials: Credentials::new(
                spec.session_token.clone(),
                spec.jwt.clone(),
                &spec.register.jwt_token,
                spec.await_jwt,
            ),
            spec,
            user,
            phase: Phase::Down,
            metrics_timer: None,
            added_at: now.instant,
        };
        self.regs.insert(h, reg);
        self.schedule_metrics(timers, now, h);
        Ok(h)
    }

    /// Removes a registration and its deadlines; returns the driver's data.
    pub(super) fn remove(&mut self, timers: &mut Timers, h: HandleId) -> Option<U> {
        let reg = self.regs.remove(&h)?;
        for t in [reg.phase.timer(), reg.metrics_timer].into_iter().flatten() {
            timers.remove(t);
        }
        Some(reg.user)
    }

    /// Moves a registration to `phase`, swapping its deadline. `Rejected` is terminal:
    /// nothing moves a registration out of it.
    fn set_phase(&mut self, timers: &mut Timers, h: HandleId, phase: Phase) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if reg.phase == Phase::Rejected {
            return;
        }
        if let Some(t) = reg.phase.timer() {
            timers.remove(t);
        }
        let mut arm = |at| Some(timers.insert(at, Timer::Register(h)));
        reg.phase = match phase {
            Phase::Registering { at, .. } => Phase::Registering { at, timer: arm(at) },
            Phase::RetryAt { at, .. } => Phase::RetryAt { at, timer: arm(at) },
            Phase::AwaitingCredentials { at, .. } => {
                Phase::AwaitingCredentials { at, timer: arm(at) }
            }
            other => other,
        };
    }

    /// The registration has no joined channel to register on (or lost it).
    pub(super) fn down(&mut self, timers: &mut Timers, h: HandleId) {
        self.set_phase(timers, h, Phase::Down);
    }

    /// The register request to send now on a joined channel, with the best credential,
    /// its deadline armed. `None` for a rejected registration, and for one that waits
    /// (at most its register timeout) for a JWT minted from stored keys.
    pub(super) fn register_request(
        &mut self,
        timers: &mut Timers,
        now: Now,
        h: HandleId,
    ) -> Option<RegisterConnectorRequest> {
        let reg = self.regs.get_mut(&h)?;
        match reg.phase {
            Phase::Rejected => return None,
            Phase::AwaitingCredentials { .. } if reg.credentials.awaiting_jwt() => return None,
            _ => {}
        }
        let at = now.instant + reg.spec.register_timeout;
        if reg.credentials.must_wait() {
            self.set_phase(timers, h, Phase::AwaitingCredentials { at, timer: None });
            return None;
        }
        let mut req = reg.spec.register.clone();
        reg.credentials.present(&mut req);
        self.set_phase(timers, h, Phase::Registering { at, timer: None });
        Some(req)
    }

    /// The approval exchange produced a JWT (`Some`), or gave up on minting one from
    /// stored keys (`None`). Returns whether to register again at once: a registration
    /// awaiting approval presents the fresh JWT in-stream, one awaiting this JWT
    /// registers with what there is; a registered one keeps the JWT for its next
    /// register (a refreshed JWT needs no re-register).
    pub(super) fn set_credentials(&mut self, h: HandleId, jwt: Option<String>) -> bool {
        let Some(reg) = self.regs.get_mut(&h) else {
            return false;
        };
        if reg.phase == Phase::Rejected {
            return false;
        }
        reg.credentials.stop_waiting();
        let fresh = jwt.is_some();
        if let Some(jwt) = jwt {
            reg.credentials.set_jwt(jwt);
        }
        match reg.phase {
            Phase::AwaitingApproval if fresh => {
                // The approval is done: the JWT, not a stale token, must be presented.
                reg.credentials.forget_session_token();
                true
            }
            Phase::AwaitingCredentials { .. } => true,
            _ => false,
        }
    }

    /// The gateway answered a register of `h`.
    pub(super) fn answered(
        &mut self,
        timers: &mut Timers,
        now: Now,
        h: HandleId,
        resp: RegisterConnectorResponse,
    ) -> Answer {
        let Some(reg) = self.regs.get_mut(&h) else {
            return Answer::Ignored;
        };
        if reg.phase == Phase::Rejected {
            return Answer::Ignored;
        }
        // Terminal only with the contract's `rejected:` code: gateways of the family
        // (and the reference gateway's refuse hook) also answer transient refusals
        // with status REJECTED, and those are retried with backoff.
        if let Some(reason) = resp.error.strip_prefix(REJECTED_CODE) {
            let reason = reason.trim().to_owned();
            self.reject(timers, h, &reason);
            return Answer::Rejected(reason);
        }
        if !resp.success && reg.phase == Phase::Down {
            // A late refusal of a register whose deadline already passed.
            reg.credentials.forget_session_token();
            return Answer::Ignored;
        }
        if !resp.success {
            if let Some(credential) = reg.credentials.refused(&resp.error) {
                tracing::warn!(key = %reg.spec.key, credential = ?credential, error = %resp.error, "credential refused; registering with the next one");
                reg.spec.metrics.register_failures.fetch_add(1, Relaxed);
                self.set_phase(timers, h, Phase::Down);
                return Answer::CredentialRefused {
                    credential,
                    error: resp.error,
                };
            }
            // A stale session token is a common cause; fall back to the next
            // credential on the next attempt.
            reg.credentials.forget_session_token();
            self.set_phase(timers, h, Phase::Down);
            self.failed(timers, now, h, &resp.error);
            return Answer::Failed(resp.error);
        }
        reg.backoff.reset();
        let arn = resp.connector_arn;
        let status = RegistrationStatus::try_from(resp.status).ok();
        if status == Some(RegistrationStatus::Pending) {
            if reg.credentials.unpresented_jwt() {
                // A JWT arrived while this bare register was in flight: present it.
                self.set_phase(timers, h, Phase::Down);
                return Answer::Accepted {
                    arn,
                    outcome: Accepted::Reregister,
                };
            }
            tracing::info!(key = %reg.spec.key, arn = %arn, "registered as pending; waiting for the operator's approval");
            self.set_phase(timers, h, Phase::AwaitingApproval);
            return Answer::Accepted {
                arn,
                outcome: Accepted::Pending,
            };
        }
        let session_token = reg.credentials.issued(resp.session_token);
        reg.spec.metrics.registrations.fetch_add(1, Relaxed);
        tracing::info!(key = %reg.spec.key, arn = %arn, "registered");
        self.set_phase(timers, h, Phase::Registered);
        Answer::Accepted {
            arn,
            outcome: Accepted::Registered {
                status: resp.status,
                session_token,
            },
        }
    }

    /// The operator refused the registration (a REJECTED register answer or
    /// `approval_notification`): nothing more is sent for it, on this join or any
    /// later one. Returns whether it was not rejected already.
    pub(super) fn reject(&mut self, timers: &mut Timers, h: HandleId, reason: &str) -> bool {
        let Some(reg) = self.regs.get(&h) else {
            return false;
        };
        if reg.phase == Phase::Rejected {
            return false;
        }
        tracing::warn!(key = %reg.spec.key, reason = %reason, "registration rejected by the operator; not retrying");
        self.set_phase(timers, h, Phase::Rejected);
        true
    }

    /// Records a failed register and schedules the retry after the registration's
    /// backoff.
    fn failed(&mut self, timers: &mut Timers, now: Now, h: HandleId, error: &str) {
        let sample = self.next_random();
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        tracing::warn!(key = %reg.spec.key, error = %error, "register failed");
        reg.spec.metrics.register_failures.fetch_add(1, Relaxed);
        let at = now.instant + reg.backoff.next_delay(sample);
        self.set_phase(timers, h, Phase::RetryAt { at, timer: None });
    }

    /// A registration's register timer fired: a register deadline passed, a retry is
    /// due, or the wait for a JWT ended.
    pub(super) fn timer_fired(
        &mut self,
        timers: &mut Timers,
        now: Now,
        h: HandleId,
    ) -> Option<RegisterTimer> {
        let reg = self.regs.get_mut(&h)?;
        // The timer fired, so the phase's deadline is gone already.
        match reg.phase {
            Phase::Registering { .. } => {
                reg.phase = Phase::Down;
                let error = "no register_response before the register timeout";
                self.failed(timers, now, h, error);
                Some(RegisterTimer::Failed(error.into()))
            }
            Phase::RetryAt { .. } => {
                reg.phase = Phase::Down;
                Some(RegisterTimer::Register)
            }
            Phase::AwaitingCredentials { .. } => {
                tracing::warn!(key = %reg.spec.key, "no JWT from the stored keys before the register timeout; registering with what there is");
                reg.credentials.stop_waiting();
                reg.phase = Phase::Down;
                Some(RegisterTimer::Register)
            }
            Phase::Down | Phase::Registered | Phase::AwaitingApproval | Phase::Rejected => None,
        }
    }

    /// Schedules the registration's next metrics report, replacing a pending one; none
    /// when its interval is zero.
    pub(super) fn schedule_metrics(&mut self, timers: &mut Timers, now: Now, h: HandleId) {
        let Some(reg) = self.regs.get_mut(&h) else {
            return;
        };
        if let Some(t) = reg.metrics_timer.take() {
            timers.remove(t);
        }
        if reg.spec.metrics_interval.is_zero() {
            return;
        }
        let at = now.instant + reg.spec.metrics_interval;
        reg.metrics_timer = Some(timers.insert(at, Timer::Metrics(h)));
    }

    /// The registration's metrics timer fired; returns whether it still exists (its
    /// report is then due).
    pub(super) fn metrics_due(&mut self, h: HandleId) -> bool {
        let Some(reg) = self.regs.get_mut(&h) else {
            return false;
        };
        reg.metrics_timer = None;
        true
    }

    /// The registration's `metrics_report` (its own counters, the socket's connection
    /// figures, and the connector's custom ones) when it is registered under `arn`;
    /// schedules the next one.
    pub(super) fn metrics_report(
        &mut self,
        timers: &mut Timers,
        now: Now,
        h: HandleId,
        arn: Option<&str>,
        socket: &SocketMetrics,
        custom: HashMap<String, f64>,
    ) -> Option<MetricsReport> {
        let reg = self.regs.get(&h)?;
        let report = arn
            .filter(|_| reg.phase == Phase::Registered)
            .map(|arn| reg.metrics_report(now, arn.to_owned(), socket, custom));
        self.schedule_metrics(timers, now, h);
        report
    }

    fn next_random(&mut self) -> f64 {
        // splitmix64: tiny, fast, and good enough for jitter.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The registration's phase, for the table's own tests.
    #[cfg(test)]
    pub(super) fn phase(&self, h: HandleId) -> Option<Phase> {
        self.regs.get(&h).map(|r| r.phase)
    }
}

impl<U> Reg<U> {
    fn metrics_report(
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
