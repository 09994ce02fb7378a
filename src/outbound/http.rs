//! [`HttpDelivery`]: the runtime's one outbound HTTP client, shared by the `http`
//! binding handler and (later) the `http.request` capability, so both obey the same
//! rules:
//!
//! - the **egress policy** (`outbound::egress`) on every address connected to: names
//!   through the filtering resolver (`outbound::resolve`), literal IPs here, before the
//!   request and at each redirect;
//! - at most [`MAX_REDIRECTS`] redirects, a loop stopped at its first repeat, each hop
//!   re-checked;
//! - a **timeout** over the whole exchange (connect, send, answer, body);
//! - a **response-size cap**: at most `max_response_bytes` of a body are read;
//! - a **circuit breaker per endpoint** (scheme, host and port): after
//!   `breaker_errors` failures in a row (connection errors, timeouts, 5xx, 429) requests
//!   to it fail at once, without touching the network, for `breaker_cool_off`; then
//!   one probe goes through, and its result closes or re-opens the breaker
//!   ([`crate::breaker`], half-open mode);
//! - **Standard Webhooks signing** of the body when asked (`outbound::sign`).
//!
//! One `reqwest::Client` per runtime keeps connections alive across deliveries (the
//! bench in `benches/http_deliver.rs` measures what that buys). It ignores the
//! `HTTP(S)_PROXY` variables: through a proxy the resolver would see the proxy's name,
//! not the destination's, and the policy could not be enforced.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::redirect::{Action, Attempt, Policy};
use reqwest::Url;

use super::egress::{allowed, Cidr, EgressPolicy};
use super::resolve::{EgressResolver, HostRefused};
use super::sign::{self, SigningKey};
use crate::breaker::{Admit, AfterCoolOff, Breaker, Change};
use crate::secret::Secret;

/// Redirects followed at most: 10, as browsers and the issue ask; more is a
/// misconfigured endpoint, not a slow one.
pub(crate) const MAX_REDIRECTS: usize = 10;
/// Default response-body cap: 256 KiB. A webhook receiver answers a few bytes; a
/// capability caller wants an API's JSON answer; neither needs an endpoint to be able
/// to fill the runtime's memory.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 * 1024;
/// Default breaker threshold: 5 failures in a row, enough to ride out a blip, few
/// enough that a dead endpoint costs little.
pub(crate) const DEFAULT_BREAKER_ERRORS: u32 = 5;
/// Default breaker cool-off: 30 s, about a restarting service's downtime.
pub(crate) const DEFAULT_BREAKER_COOL_OFF: Duration = Duration::from_secs(30);
/// TCP + TLS connect timeout: 10 s; the request's own timeout still bounds the total.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle keep-alive connections kept per host: 64, enough for a binding's default 16
/// concurrent attempts several times over, bounded so a fan-out to many URLs of one
/// host cannot pile up sockets.
const MAX_IDLE_PER_HOST: usize = 64;

/// The runtime-wide outbound settings (`[outbound]` of `switchboard.toml`), resolved.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OutboundSettings {
    /// Networks allowed beside the public internet.
    pub(crate) egress: EgressPolicy,
    /// Response-body cap in bytes.
    pub(crate) max_response_bytes: usize,
    /// Failures in a row that open an endpoint's breaker.
    pub(crate) breaker_errors: u32,
    /// How long it stays open before a probe.
    pub(crate) breaker_cool_off: Duration,
    /// Signing secrets by environment variable name, read when the configuration was
    /// resolved (names not here are read from the process environment at delivery).
    pub(crate) secrets: HashMap<String, Secret>,
    /// Signing secrets by file path, read when the configuration was resolved (paths
    /// not here, a binding's registered at run time, are read at delivery).
    pub(crate) secret_files: HashMap<String, Secret>,
    /// Names resolved to fixed addresses instead of through DNS (still filtered by
    /// the policy): for tests that need a name pointing at an address.
    pub(crate) hosts: HashMap<String, Vec<IpAddr>>,
}

impl OutboundSettings {
    /// These settings with `cidr` (`127.0.0.0/8`) added to the egress allow-list.
    pub fn allow(mut self, cidr: &str) -> Result<OutboundSettings, String> {
        self.egress.allow.push(Cidr::parse(cidr)?);
        Ok(self)
    }

    /// These settings with the per-endpoint breaker opening after `errors` failures
    /// in a row, for `cool_off`.
    pub fn breaker(mut self, errors: u32, cool_off: Duration) -> OutboundSettings {
        self.breaker_errors = errors;
        self.breaker_cool_off = cool_off;
        self
    }
}

impl Default for OutboundSettings {
    fn default() -> Self {
        OutboundSettings {
            egress: EgressPolicy::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            breaker_errors: DEFAULT_BREAKER_ERRORS,
            breaker_cool_off: DEFAULT_BREAKER_COOL_OFF,
            secrets: HashMap::new(),
            secret_files: HashMap::new(),
            hosts: HashMap::new(),
        }
    }
}

/// One request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// The method.
    pub method: reqwest::Method,
    /// `http://` or `https://` URL.
    pub url: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
    /// Sign the body per Standard Webhooks with this id and these keys.
    pub sign: Option<Signing>,
    /// Bound on the whole exchange.
    pub timeout: Duration,
}

/// What to sign a request with.
#[derive(Debug, Clone)]
pub struct Signing {
    /// The `webhook-id` (see [`sign::message_id`]).
    pub id: String,
    /// The keys; one signature each.
    pub keys: Vec<SigningKey>,
}

/// An answer (any status: what a status means is the caller's decision).
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body: all of it for [`HttpDelivery::request`]; for a delivery, at most the
    /// cap (the rest is not read).
    pub body: Bytes,
    /// The URL that answered (after redirects).
    pub url: String,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The request itself is wrong (a bad URL, a bad header).
    #[error("{0}")]
    Invalid(String),
    /// The egress policy refused the destination (the first URL's or a redirect's);
    /// nothing was sent to it.
    #[error("{0}")]
    Refused(String),
    /// The endpoint's breaker is open; nothing was sent.
    #[error("the circuit breaker for {endpoint} is open after repeated failures; it lets a probe through in {retry_in_ms} ms")]
    BreakerOpen {
        /// The endpoint.
        endpoint: String,
        /// When a probe may go (ms from now).
        retry_in_ms: i64,
    },
    /// A redirect was not followed: too many, a loop, or not to an `http(s)` URL. (A
    /// redirect to a destination the egress policy refuses is [`HttpError::Refused`].)
    #[error("{0}")]
    Redirect(String),
    /// The body is larger than the cap.
    #[error(
        "the response body of {url} exceeds the {limit}-byte cap ([outbound] max_response_bytes)"
    )]
    TooLarge {
        /// The answering URL.
        url: String,
        /// The cap.
        limit: usize,
    },
    /// No complete answer within the timeout.
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    /// Connecting or exchanging failed.
    #[error("{0}")]
    Transport(String),
}

impl HttpError {
    /// Whether this failure says something about the endpoint's health (and so
    /// counts toward its breaker).
    fn counts_against_endpoint(&self) -> bool {
        matches!(
            self,
            HttpError::Timeout(_) | HttpError::Transport(_) | HttpError::Redirect(_)
        )
    }
}

/// Whether an answer counts as a failure for the endpoint's breaker: it is failing
/// (5xx) or shedding load (429).
fn failing_status(status: u16) -> bool {
    status >= 500 || status == 429
}

/// The runtime's outbound HTTP client. See the module docs.
pub struct HttpDelivery {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
    max_response_bytes: usize,
    breaker_errors: u32,
    breaker_cool_off_ms: i64,
    breakers: Mutex<HashMap<String, Breaker>>,
    /// The breakers' clock: tokio's, so paused-time tests drive cool-offs.
    base: tokio::time::Instant,
    /// Replaced whole by a reload ([`HttpDelivery::refresh_secrets`]), so a rotated
    /// secret file signs from then on without a restart.
    secrets: std::sync::RwLock<Arc<Secrets>>,
}

/// The signing secrets read with the configuration.
#[derive(Debug, Default)]
struct Secrets {
    /// By environment variable name.
    env: HashMap<String, Secret>,
    /// By file path.
    files: HashMap<String, Secret>,
}

impl Secrets {
    fn of(settings: &OutboundSettings) -> Arc<Secrets> {
        Arc::new(Secrets {
            env: settings.secrets.clone(),
            files: settings.secret_files.clone(),
        })
    }
}

impl std::fmt::Debug for HttpDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDelivery")
            .field("policy", &self.policy)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish_non_exhaustive()
    }
}

impl HttpDelivery {
    /// A client enforcing `settings`.
    pub fn new(settings: &OutboundSettings) -> crate::Result<HttpDelivery> {
        let policy = Arc::new(settings.egress.clone());
        let resolver = EgressResolver::new(policy.clone(), settings.hosts.clone());
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(resolver))
            .redirect(redirect_policy(policy.clone()))
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .tcp_nodelay(true)
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| crate::Error::Config(format!("the outbound HTTP client: {e}")))?;
        Ok(HttpDelivery {
            client,
            policy,
            max_response_bytes: settings.max_response_bytes,
            breaker_errors: settings.breaker_errors,
            breaker_cool_off_ms: i64::try_from(settings.breaker_cool_off.as_millis())
                .unwrap_or(i64::MAX),
            breakers: Mutex::default(),
            base: tokio::time::Instant::now(),
            secrets: std::sync::RwLock::new(Secrets::of(settings)),
        })
    }

    /// Takes the signing secrets of `settings` (a reloaded configuration's, read
    /// again from the environment and the files) in place of the current ones.
    pub(crate) fn refresh_secrets(&self, settings: &OutboundSettings) {
        *self.secrets.write().unwrap_or_else(|p| p.into_inner()) = Secrets::of(settings);
    }

    /// The signing keys of `env_names`, then of `files`, in order: from the secrets
    /// read with the configuration, else from the process environment or the file
    /// now. The error names the variable or the path, never the value.
    pub(crate) fn keys(
        &self,
        env_names: &[String],
        files: &[String],
    ) -> Result<Vec<SigningKey>, String> {
        let read = self
            .secrets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let parse = |what: &str, secret: &Secret| {
            SigningKey::parse(&String::from_utf8_lossy(secret.expose()))
                .map_err(|e| format!("the secret in {what} {e}"))
        };
        let from_env = env_names.iter().map(|name| match read.env.get(name) {
            Some(s) => parse(name, s),
            None => std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("secret_env names {name}, which is unset or empty"))
                .and_then(|v| parse(name, &Secret::new(v))),
        });
        let from_files = files.iter().map(|path| match read.files.get(path) {
            Some(s) => parse(path, s),
            None => parse(path, &crate::secret::read_file(path)?),
        });
        from_env.chain(from_files).collect()
    }

    /// Sends `req` and reads the whole answer (up to the cap: past it,
    /// [`HttpError::TooLarge`]). The hook for the `http.request` capability.
    pub async fn request(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.send(req, false).await
    }

    /// Sends `req` for a delivery: as [`HttpDelivery::request`], but a body past the
    /// cap is not an error (the status is the answer; the rest is left unread and the
    /// connection dropped).
    pub async fn deliver(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.send(req, true).await
    }

    fn now_ms(&self) -> i64 {
        i64::try_from(self.base.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    fn breakers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Breaker>> {
        self.breakers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `endpoint`'s breaker is open now (for reports and tests).
    pub fn breaker_open(&self, endpoint: &str) -> bool {
        let now = self.now_ms();
        self.breakers()
            .get(endpoint)
            .is_some_and(|b| b.is_open(now))
    }

    async fn send(&self, req: HttpRequest, cut_at_cap: bool) -> Result<HttpResponse, HttpError> {
        let url = Url::parse(&req.url)
            .map_err(|e| HttpError::Invalid(format!("{:?} is not a URL: {e}", req.url)))?;
        check_destination(&url, &self.policy)?;
        let endpoint = endpoint(&url);
        let admit = {
            let now = self.now_ms();
            let mut map = self.breakers();
            let b = map.entry(endpoint.clone()).or_insert_with(|| {
                Breaker::new(
                    self.breaker_errors,
                    self.breaker_cool_off_ms,
                    AfterCoolOff::Probe,
                )
            });
            b.admit(now)
        };
        if let Admit::Refuse { until_ms } = admit {
            return Err(HttpError::BreakerOpen {
                endpoint,
                retry_in_ms: until_ms - self.now_ms(),
            });
        }
        if admit == Admit::Probe {
            tracing::info!(%endpoint, "outbound: probing an endpoint whose breaker was open");
        }
        let timeout = req.timeout;
        let result = tokio::time::timeout(timeout, self.exchange(url, req, cut_at_cap))
            .await
            .unwrap_or(Err(HttpError::Timeout(timeout)));
        let failed = match &result {
            Ok(r) => Some(failing_status(r.status)),
            Err(e) if e.counts_against_endpoint() => Some(true),
            // Nothing reached the endpoint, or it answered and only the body was too
            // large: its health is not in question.
            Err(HttpError::TooLarge { .. }) => Some(false),
            Err(_) => None,
        };
        if let Some(failed) = failed {
            let now = self.now_ms();
            let change = self
                .breakers()
                .get_mut(&endpoint)
                .map_or(Change::None, |b| b.record(failed, now));
            match change {
                Change::Opened(until) => {
                    tracing::warn!(%endpoint, cool_off_ms = until - now, "outbound: the endpoint keeps failing; its breaker opened")
                }
                Change::Closed => {
                    tracing::info!(%endpoint, "outbound: the probe succeeded; the endpoint's breaker closed")
                }
                Change::None => {}
            }
        }
        result
    }

    async fn exchange(
        &self,
        url: Url,
        req: HttpRequest,
        cut_at_cap: bool,
    ) -> Result<HttpResponse, HttpError> {
        let mut builder = self.client.request(req.method, url);
        for (name, value) in &req.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some(s) = &req.sign {
            let ts = crate::clock::now_ms() / 1000;
            for (name, value) in sign::headers(&s.keys, &s.id, ts, &req.body) {
                builder = builder.header(name, value);
            }
        }
        let mut resp = builder.body(req.body).send().await.map_err(classify)?;
        let status = resp.status().as_u16();
        let url = resp.url().to_string();
        let headers = std::mem::take(resp.headers_mut());
        let cap = self.max_response_bytes;
        let mut body = BytesMut::new();
        let too_large = || HttpError::TooLarge {
            url: url.clone(),
            limit: cap,
        };
        if resp.content_length().is_some_and(|n| n > cap as u64) && !cut_at_cap {
            return Err(too_large());
        }
        while let Some(chunk) = resp.chunk().await.map_err(classify)? {
            if body.len() + chunk.len() > cap {
                if !cut_at_cap {
                    return Err(too_large());
                }
                let room = cap - body.len();
                body.extend_from_slice(&chunk[..room]);
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok(HttpResponse {
            status,
            headers,
            body: body.freeze(),
            url,
        })
    }
}

/// `scheme://host:port`, the breaker's key: one breaker per server, not per path.
fn endpoint(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

/// The checks on a URL that need no network: the scheme, and the address when the
/// host is a literal IP (the resolver never sees those).
fn check_destination(url: &Url, policy: &EgressPolicy) -> Result<(), HttpError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HttpError::Invalid(format!(
            "{url}: only http and https URLs are delivered to"
        )));
    }
    // The URL parser normalises every IPv4 spelling (`2130706433`, `0x7f.1`) to the
    // dotted form, and writes IPv6 in brackets.
    let Some(host) = url.host_str() else {
        return Err(HttpError::Invalid(format!("{url} names no host")));
    };
    let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    else {
        return Ok(());
    };
    allowed(ip, policy).map_err(|r| HttpError::Refused(format!("{url}: {r}")))
}

/// At most [`MAX_REDIRECTS`] hops, no URL visited twice, each hop's literal address
/// checked (names are checked by the resolver when the hop connects).
fn redirect_policy(policy: Arc<EgressPolicy>) -> Policy {
    Policy::custom(move |attempt: Attempt<'_>| -> Action {
        // `previous` holds the first URL and every hop so far.
        if attempt.previous().len() > MAX_REDIRECTS {
            let msg = format!(
                "stopped after {MAX_REDIRECTS} redirects (the next would go to {})",
                attempt.url()
            );
            return attempt.error(msg);
        }
        if attempt.previous().contains(attempt.url()) {
            let msg = format!(
                "redirect loop: {} was already visited ({} hops)",
                attempt.url(),
                attempt.previous().len()
            );
            return attempt.error(msg);
        }
        match check_destination(attempt.url(), &policy) {
            Ok(()) => attempt.follow(),
            // Typed, so `classify` reports it as the refusal it is: the same outcome
            // as a first URL, or a redirect to a name, refused by the policy.
            Err(HttpError::Refused(why)) => attempt.error(RedirectRefused(why)),
            Err(e) => {
                let msg = format!("redirect refused: {e}");
                attempt.error(msg)
            }
        }
    })
}

/// A redirect to a literal address the egress policy refuses. The resolver's
/// [`HostRefused`] covers redirects to names; this covers the addresses the resolver
/// never sees, so both spellings of one destination end alike.
#[derive(Debug)]
struct RedirectRefused(String);

impl std::fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redirected to {}", self.0)
    }
}

impl std::error::Error for RedirectRefused {}

/// A client error as an [`HttpError`], with the whole cause chain in its message
/// (reqwest's own text alone says "error sending request").
fn classify(e: reqwest::Error) -> HttpError {
    let mut text = e.to_string();
    let mut refused = None;
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if s.is::<HostRefused>() || s.is::<RedirectRefused>() {
            refused = Some(s.to_string());
        }
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    if let Some(r) = refused {
        HttpError::Refused(r)
    } else if e.is_redirect() {
        HttpError::Redirect(text)
    } else if e.is_builder() {
        HttpError::Invalid(text)
    } else if e.is_timeout() {
        HttpError::Transport(format!("timed out: {text}"))
    } else {
        HttpError::Transport(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local server answering `/to/<rest>` with a 307 to `http://<rest>`, on
    /// 127.0.0.1 (the only address the tests' policy allows).
    async fn redirector() -> std::net::SocketAddr {
        let app = axum::Router::new().fallback(|uri: axum::http::Uri| async move {
            let to = uri.path().strip_prefix("/to/").unwrap_or("").to_owned();
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, to)],
            )
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    fn client() -> HttpDelivery {
        let mut settings = OutboundSettings::default().allow("127.0.0.1/32").unwrap();
        settings
            .hosts
            .insert("inside.test".into(), vec!["10.0.0.7".parse().unwrap()]);
        HttpDelivery::new(&settings).unwrap()
    }

    async fn post(client: &HttpDelivery, url: String) -> Result<HttpResponse, HttpError> {
        client
            .deliver(HttpRequest {
                method: reqwest::Method::POST,
                url,
                headers: vec![],
                body: Bytes::new(),
                sign: None,
                timeout: Duration::from_secs(5),
            })
            .await
    }

    /// The case: the same refused destination, spelled as an address or as a
    /// name, is the same refusal after a redirect as it is as the first URL.
    #[tokio::test]
    async fn a_redirect_to_a_refused_destination_is_a_refusal_by_address_and_by_name() {
        let at = redirector().await;
        let client = client();
        let by_address = post(&client, format!("http://{at}/to/http://127.0.0.2:9/hook")).await;
        match by_address {
            Err(HttpError::Refused(m)) => assert!(
                m.starts_with("redirected to http://127.0.0.2:9/hook: the egress policy refuses 127.0.0.2 (a loopback address)"),
                "{m}"
            ),
            other => panic!("not a refusal: {other:?}"),
        }
        let by_name = post(&client, format!("http://{at}/to/http://inside.test:9/hook")).await;
        match by_name {
            Err(HttpError::Refused(m)) => assert!(
                m.contains("inside.test resolves to 10.0.0.7") && m.contains("(a private address)"),
                "{m}"
            ),
            other => panic!("not a refusal: {other:?}"),
        }
        // A redirect refused for another reason stays a redirect failure.
        let elsewhere = post(&client, format!("http://{at}/to/ftp://example.com/")).await;
        assert!(
            matches!(&elsewhere, Err(HttpError::Redirect(m)) if m.contains("only http and https")),
            "{elsewhere:?}"
        );
    }
}
