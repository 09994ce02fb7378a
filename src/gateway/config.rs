//! [`GatewayConfig`]: the gateway's settings, and with them every bound it puts on what
//! its clients may make it hold (frame size, deadlines, requests in flight), and how it
//! approves registrations ([`ApprovalMode`], credential lifetimes, where approvals are
//! kept, which external OIDC issuers it trusts: [`TrustedIssuer`]).

use std::path::PathBuf;
use std::time::Duration;

/// How the gateway decides a register request (PROTOCOL.md §4; the README's
/// "Approval (reference gateway)" describes both modes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalMode {
    /// Every well-formed register is approved at once; credentials are ignored. The
    /// default, for tests, laptops and the demo.
    #[default]
    Auto,
    /// A register needs a valid session token or gateway-issued JWT; one without is
    /// PENDING until an operator approves it (`POST /api/v1/connectors/{arn}/approve`),
    /// after which the connector registers a key with a one-time token and obtains a
    /// JWT from the token endpoint.
    Manual,
}

impl std::str::FromStr for ApprovalMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(ApprovalMode::Auto),
            "manual" => Ok(ApprovalMode::Manual),
            other => Err(format!(
                "unknown approval mode {other:?}; use \"auto\" or \"manual\""
            )),
        }
    }
}

/// An external OIDC issuer whose JWTs a manual-mode gateway accepts on a register,
/// besides its own (in this protocol family typically a Keycloak realm,
/// `https://keycloak.example/realms/{realm}`).
///
/// A register's `jwt_token` whose `iss` is exactly [`TrustedIssuer::issuer`] is
/// checked against the keys published at [`TrustedIssuer::jwks_url`] (ES256 or
/// RS256), its `exp`, its `aud` when [`TrustedIssuer::audience`] is set, and the
/// identity it names: claims `tenant_id`, `connector_type` and `instance_id` equal
/// to the register's, or, when the token carries none of them, an `azp` (or
/// `client_id`) claim equal to the register's dot key `tenant.type.instance`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustedIssuer {
    /// The issuer, compared byte for byte with the token's `iss` (no trailing-slash
    /// or case folding: a Keycloak realm's `iss` is exactly its realm URL).
    pub issuer: String,
    /// Where the issuer publishes its keys (a Keycloak realm's
    /// `{issuer}/protocol/openid-connect/certs`); `http` or `https`.
    pub jwks_url: String,
    /// When set, the token's `aud` (a string or an array) must contain it. `None`
    /// (the default) does not check `aud`: Keycloak's client-credentials tokens
    /// often carry none, or `account`.
    pub audience: Option<String>,
}

impl TrustedIssuer {
    /// Trusts the tokens of `issuer`, verified with the keys at `jwks_url`; no
    /// audience check.
    pub fn new(issuer: impl Into<String>, jwks_url: impl Into<String>) -> Self {
        TrustedIssuer {
            issuer: issuer.into(),
            jwks_url: jwks_url.into(),
            audience: None,
        }
    }

    /// Sets [`TrustedIssuer::audience`].
    pub fn with_audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }
}

impl std::str::FromStr for TrustedIssuer {
    type Err = String;

    /// `ISSUER=JWKS_URL`, split at the first `=` (the CLI's `--trust-issuer`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((issuer, jwks)) if !issuer.is_empty() && !jwks.is_empty() => {
                Ok(TrustedIssuer::new(issuer, jwks))
            }
            _ => Err(format!(
                "expected ISSUER=JWKS_URL, got {s:?} (for example \
                 https://kc.example/realms/acme=https://kc.example/realms/acme/protocol/openid-connect/certs)"
            )),
        }
    }
}

/// Settings of a gateway.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Close a socket after this long without inbound data (default 60 s, as the
    /// protocol family's gateways do; clients heartbeat every 25 s).
    pub idle_timeout: Duration,
    /// Deadline of an execute when the caller names none (default 30 s).
    pub default_execute_timeout: Duration,
    /// The longest deadline any execute or invoke may have, whatever its caller asks
    /// for (default 300 s). A deadline is how long the gateway holds the request's
    /// pending entry, its in-flight slot and, for the HTTP API, the caller's
    /// connection; an invoke's `timeout_ms` alone could otherwise pin them for 24 days
    /// (`i32::MAX` ms). Five minutes covers slow tool calls while bounding that.
    pub max_execute_timeout: Duration,
    /// Largest inbound WebSocket message and frame (default 16 MiB). The limit is
    /// enforced by the WebSocket layer from the frame header, before the payload is
    /// buffered, so that unauthenticated clients cannot make the gateway hold more than
    /// this per socket; a socket that sends more is closed and counted as `too_large`.
    pub max_frame_bytes: usize,
    /// Most executes and invokes one socket may have in flight at once, counted on
    /// the socket that answers an execute and on the socket that sent an invoke
    /// (default 4096). Each holds a pending entry, a waiter and, for an invoke, a
    /// task until it is answered or times out; without a cap a client that never
    /// answers, or that floods invokes, grows the gateway without bound. 4096 is
    /// four writer queues' worth, far more than a healthy connector has outstanding.
    /// Beyond it an execute fails at once with `Error::Overloaded` (HTTP 503) and an
    /// invoke is answered with code `overloaded`.
    pub max_in_flight_per_socket: usize,
    /// Where to serve gRPC (`ConnectorService`), beside the Phoenix socket's port;
    /// `None` (the default) serves no gRPC. Port 0 picks a free port
    /// ([`super::Gateway::grpc_addr`] tells which). gRPC streams share the other
    /// limits: `max_frame_bytes` per message, `idle_timeout` and
    /// `max_in_flight_per_socket` per stream.
    pub grpc_listen: Option<std::net::SocketAddr>,
    /// How registers are decided (default [`ApprovalMode::Auto`]).
    pub approval: ApprovalMode,
    /// Whether data goes to a Phoenix socket in binary frames (a raw protobuf
    /// `StreamMessage`, no JSON envelope, no base64) once its connector has shown it
    /// reads them: by joining with `{"frames": "binary"}` (switchboard's connectors
    /// do) or by sending a binary frame itself. Default true: it saves both ends the
    /// envelope and the base64 on every message. Sockets that show neither (the
    /// official Phoenix clients, other SDKs) get `proto` text frames either way;
    /// false keeps every socket on text.
    pub binary_frames: bool,
    /// The operator token: when set, `/api/*` (list, execute, approve, reject,
    /// stats) and `/metrics` need `Authorization: Bearer <token>`. The connectors'
    /// own routes (the Phoenix and gRPC sockets, key registration, the token
    /// endpoint, JWKS) stay open: connectors authenticate there with their own
    /// credentials. Default none; [`super::Gateway::start`] refuses manual approval on
    /// a non-loopback address without one, since whoever reaches the HTTP API could
    /// otherwise approve any connector.
    pub admin_token: Option<crate::Secret>,
    /// Where the approval state lives: the gateway's signing key, approved identities
    /// and their public keys, issued session tokens (hashed) and rejected identities.
    /// `None` (the default) keeps it in memory only, so a restart forgets every
    /// approval and signs with a new key.
    pub data_dir: Option<PathBuf>,
    /// The gateway's public HTTP base URL, without a trailing slash: the
    /// `matrix_api_url` sent in `credentials_issued`, the issuer of its tokens and the
    /// base of its token endpoint. `None` (the default) means `http://{bound address}`,
    /// right for a gateway reached directly; set it behind a proxy or TLS terminator.
    pub public_url: Option<String>,
    /// How long a one-time token from `credentials_issued` may be used to register a
    /// key (default 10 min): long enough for a connector that was offline a moment,
    /// short enough that a leaked token soon stops mattering.
    pub ott_lifetime: Duration,
    /// Lifetime of an access token from the token endpoint (default 15 min); a
    /// connector fetches a new one with a fresh client assertion when it runs out.
    pub token_lifetime: Duration,
    /// External OIDC issuers whose JWTs approve a register in manual mode, besides
    /// the gateway's own (default none). See [`TrustedIssuer`].
    pub trusted_issuers: Vec<TrustedIssuer>,
    /// The longest a trusted issuer's JWKS fetch may take, connect to last byte
    /// (default 5 s). The register waiting on it waits at most this long (and only
    /// that register's link waits); past it the register is refused
    /// `untrusted_issuer:` and the client falls back to its next credential. Five
    /// seconds is far above a healthy identity provider's answer time and well under
    /// a client's register timeout and the socket's idle timeout.
    pub jwks_fetch_timeout: Duration,
    /// How long a fetched JWKS is used before it is fetched again (default 10 min).
    /// A token with a `kid` the cached set lacks refetches it sooner, at most once per
    /// 30 s per issuer. Ten minutes picks up a key rotation soon (Keycloak publishes
    /// a new key before it signs with it) while fetching at most a few times an hour.
    pub jwks_cache_ttl: Duration,
    /// How long a stopping gateway ([`super::Gateway::shutdown`], SIGTERM to
    /// `switchboard gateway`) lets executes in flight be answered before it tells
    /// every connector to reconnect and fails the rest (default 10 s). An execute
    /// that has not been answered by then fails with `connection_closed`; keep the
    /// orchestrator's kill timeout (`terminationGracePeriodSeconds`) above it.
    pub shutdown_grace: Duration,
    /// Every socket's writes go through a second task from the start, as before issue
    /// 36, instead of the socket task writing while its queue is short: the
    /// throughput bench's same-run baseline. Not part of the stable API.
    #[doc(hidden)]
    pub socket_writer_apart: bool,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            idle_timeout: Duration::from_secs(60),
            default_execute_timeout: Duration::from_secs(30),
            max_execute_timeout: Duration::from_secs(300),
            max_frame_bytes: 16 * 1024 * 1024,
            max_in_flight_per_socket: 4096,
            grpc_listen: None,
            approval: ApprovalMode::Auto,
            binary_frames: true,
            admin_token: None,
            data_dir: None,
            public_url: None,
            ott_lifetime: Duration::from_secs(10 * 60),
            token_lifetime: Duration::from_secs(15 * 60),
            trusted_issuers: Vec::new(),
            jwks_fetch_timeout: Duration::from_secs(5),
            jwks_cache_ttl: Duration::from_secs(10 * 60),
            shutdown_grace: Duration::from_secs(10),
            socket_writer_apart: false,
        }
    }
}

impl GatewayConfig {
    /// Sets `socket_writer_apart` (the bench's two-task baseline).
    #[doc(hidden)]
    pub fn with_socket_writer_apart(mut self, on: bool) -> Self {
        self.socket_writer_apart = on;
        self
    }

    /// Sets [`GatewayConfig::shutdown_grace`].
    pub fn with_shutdown_grace(mut self, t: Duration) -> Self {
        self.shutdown_grace = t;
        self
    }

    /// Sets [`GatewayConfig::idle_timeout`].
    pub fn with_idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::default_execute_timeout`].
    pub fn with_default_execute_timeout(mut self, t: Duration) -> Self {
        self.default_execute_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::max_execute_timeout`].
    pub fn with_max_execute_timeout(mut self, t: Duration) -> Self {
        self.max_execute_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::max_frame_bytes`].
    pub fn with_max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
        self
    }

    /// Sets [`GatewayConfig::max_in_flight_per_socket`].
    pub fn with_max_in_flight_per_socket(mut self, n: usize) -> Self {
        self.max_in_flight_per_socket = n;
        self
    }

    /// Sets [`GatewayConfig::binary_frames`].
    pub fn with_binary_frames(mut self, on: bool) -> Self {
        self.binary_frames = on;
        self
    }

    /// Sets [`GatewayConfig::grpc_listen`].
    pub fn with_grpc_listen(mut self, addr: std::net::SocketAddr) -> Self {
        self.grpc_listen = Some(addr);
        self
    }

    /// Sets [`GatewayConfig::approval`].
    pub fn with_approval(mut self, mode: ApprovalMode) -> Self {
        self.approval = mode;
        self
    }

    /// Sets [`GatewayConfig::admin_token`].
    pub fn with_admin_token(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.admin_token = Some(crate::Secret::new(token));
        self
    }

    /// Sets [`GatewayConfig::data_dir`].
    pub fn with_data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Sets [`GatewayConfig::public_url`] (a trailing slash is dropped).
    pub fn with_public_url(mut self, url: impl Into<String>) -> Self {
        self.public_url = Some(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// Sets [`GatewayConfig::ott_lifetime`].
    pub fn with_ott_lifetime(mut self, t: Duration) -> Self {
        self.ott_lifetime = t;
        self
    }

    /// Sets [`GatewayConfig::token_lifetime`].
    pub fn with_token_lifetime(mut self, t: Duration) -> Self {
        self.token_lifetime = t;
        self
    }

    /// Adds one of [`GatewayConfig::trusted_issuers`].
    pub fn with_trusted_issuer(mut self, issuer: TrustedIssuer) -> Self {
        self.trusted_issuers.push(issuer);
        self
    }

    /// Sets [`GatewayConfig::jwks_fetch_timeout`].
    pub fn with_jwks_fetch_timeout(mut self, t: Duration) -> Self {
        self.jwks_fetch_timeout = t;
        self
    }

    /// Sets [`GatewayConfig::jwks_cache_ttl`].
    pub fn with_jwks_cache_ttl(mut self, t: Duration) -> Self {
        self.jwks_cache_ttl = t;
        self
    }

    /// The deadline an execute gets: the requested one unless absent or zero (then
    /// [`GatewayConfig::default_execute_timeout`]), never above
    /// [`GatewayConfig::max_execute_timeout`].
    /// Why this configuration must not serve on `addr`, if it must not: manual
    /// approval on a non-loopback address without an operator token would let anyone
    /// who reaches the HTTP API approve connectors. Checked at start and by
    /// [`GatewayConfig::check`].
    pub(crate) fn open_approval(&self, addr: std::net::SocketAddr) -> Option<String> {
        (self.approval == ApprovalMode::Manual
            && self.admin_token.is_none()
            && !addr.ip().is_loopback())
        .then(|| format!(
            "manual approval on {addr} needs an operator token (--admin-token-env): without one, anyone who reaches the HTTP API can approve connectors"
        ))
    }

    pub(crate) fn effective_timeout(&self, requested: Option<Duration>) -> Duration {
        requested
            .filter(|t| !t.is_zero())
            .unwrap_or(self.default_execute_timeout)
            .min(self.max_execute_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_timeout_defaults_zero_and_caps_at_the_maximum() {
        let c = GatewayConfig::default()
            .with_default_execute_timeout(Duration::from_secs(30))
            .with_max_execute_timeout(Duration::from_secs(300));
        let s = Duration::from_secs;
        assert_eq!(c.effective_timeout(None), s(30));
        assert_eq!(c.effective_timeout(Some(s(0))), s(30));
        assert_eq!(c.effective_timeout(Some(s(5))), s(5));
        assert_eq!(c.effective_timeout(Some(s(3600))), s(300));
        let low_cap = c.with_max_execute_timeout(s(10));
        assert_eq!(
            low_cap.effective_timeout(None),
            s(10),
            "the default is capped too"
        );
    }

    #[test]
    fn a_trusted_issuer_parses_from_issuer_equals_jwks_url() {
        let t: TrustedIssuer = "https://kc/realms/a=https://kc/certs?x=1".parse().unwrap();
        assert_eq!(
            t,
            TrustedIssuer::new("https://kc/realms/a", "https://kc/certs?x=1")
        );
        assert!("no-equals".parse::<TrustedIssuer>().is_err());
        assert!("=https://kc/certs".parse::<TrustedIssuer>().is_err());
        let d = GatewayConfig::default();
        assert_eq!(d.jwks_fetch_timeout, Duration::from_secs(5));
        assert_eq!(d.jwks_cache_ttl, Duration::from_secs(600));
        assert!(d.trusted_issuers.is_empty());
    }
}
