//! The ingest runtime under test: started from a TOML config on a real port with a
//! real store (a SQLite file in a temp dir, or a fresh PostgreSQL schema), driven with
//! a real HTTP client; plus signers that produce each provider's headers.
#![allow(dead_code)]

use std::sync::Arc;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use switchboard::{Runtime, RuntimeConfig};

// Binaries that include both this file and `tests/common` load it twice; one source.
#[allow(clippy::duplicate_mod)]
#[path = "../common/wait.rs"]
mod wait;
#[allow(unused_imports)]
pub use wait::{eventually_some as eventually, DEADLINE};

/// Environment the test configs read secrets from.
pub fn env(name: &str) -> Option<String> {
    Some(
        match name {
            "GH_SECRET" => "It's a Secret to Everybody",
            "OLD_SECRET" => "whsec_dGhlLXByZXZpb3VzLXNlY3JldA==",
            "SLACK_SECRET" => "8f742231b10e8888abcd99yyyzzz85a5",
            "LINEAR_SECRET" => "lin_wh_secret",
            "NOTION_SECRET" => "secret_notion_token",
            "STRIPE_SECRET" => "whsec_test_secret",
            "SW_SECRET" => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "GENERIC_SECRET" => "generic-secret",
            "ADMIN_TOKEN" => "admin-token-123",
            // The keys tests/interop/sign.mjs signs with.
            "INTEROP_GH" => "gh-secret",
            "INTEROP_SW" => "whsec_c3RhbmRhcmQtd2ViaG9va3MtdGVzdC1rZXktMzJieQ==",
            _ => return None,
        }
        .to_owned(),
    )
}

/// Now, unix seconds.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The PostgreSQL URL tests run against, from `SWITCHBOARD_TEST_POSTGRES_URL`.
pub fn postgres_url() -> Option<String> {
    std::env::var("SWITCHBOARD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Says a PostgreSQL test was skipped, and why (visible with `--nocapture` and in
/// the test's captured output).
pub fn skip_postgres(test: &str) {
    use std::io::Write as _;
    // Written to the stderr handle directly: libtest captures `eprintln!` output of
    // passing tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),"SKIPPED {test}: set SWITCHBOARD_TEST_POSTGRES_URL (e.g. postgres://root@127.0.0.1:5432/test) to run the PostgreSQL suite"
    );
}

/// A fresh schema in the test database; the returned URL selects it.
/// Drops what `list` names (schemas or databases called `<prefix>_<unix s>_<hex>`) that
/// earlier runs left over an hour ago, with the statement `drop` makes of a name; a
/// concurrent test's fresh ones are younger and kept.
pub async fn drop_stale(
    client: &tokio_postgres::Client,
    list: &str,
    drop: impl Fn(&str) -> String,
) {
    let stale = client.query(list, &[]).await.unwrap();
    for row in stale {
        let name: String = row.get(0);
        let created: Option<i64> = name.split('_').nth(2).and_then(|t| t.parse().ok());
        if created.is_none_or(|t| t < now_s() - 3600) {
            let _ = client.batch_execute(&drop(&name)).await;
        }
    }
}

/// The stores a bench compares: SQLite (`synchronous = FULL`) in `file` under `dir`,
/// and PostgreSQL in a fresh schema when `SWITCHBOARD_BENCH_POSTGRES_URL` or
/// `SWITCHBOARD_TEST_POSTGRES_URL` names a server (else a note that its rows are
/// skipped). Each with the name its table rows carry.
pub async fn bench_stores(dir: &std::path::Path, file: &str) -> Vec<(&'static str, String)> {
    let mut stores = vec![(
        "sqlite (FULL)",
        format!("sqlite:{}", dir.join(file).display()),
    )];
    match std::env::var("SWITCHBOARD_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SWITCHBOARD_TEST_POSTGRES_URL"))
    {
        Ok(base) => stores.push(("postgres", fresh_postgres_schema(&base).await)),
        Err(_) => eprintln!("postgres rows skipped: set SWITCHBOARD_TEST_POSTGRES_URL"),
    }
    stores
}

pub async fn fresh_postgres_schema(base: &str) -> String {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(conn);
    // Named by creation time, so schemas left by earlier runs (over an hour old) can
    // be dropped without touching a concurrent test's.
    let schema = format!("sb_test_{}_{:08x}", now_s(), rand::random::<u32>());
    drop_stale(
        &client,
        "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'sb\\_test\\_%'",
        |name| format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
    )
    .await;
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// Generates `sqlite::<case>` and `postgres::<case>` tests from `async fn <case>(StoreKind)`
/// in the calling file, which imports `StoreKind`, `postgres_url` and `skip_postgres`
/// from here; the PostgreSQL variants say they were skipped when no server is set.
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::StoreKind::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    match super::postgres_url() {
                        Some(url) => super::$case(super::StoreKind::Postgres(url)).await,
                        None => super::skip_postgres(concat!("postgres::", stringify!($case))),
                    }
                }
            )*
        }
    };
}

/// Where a harness keeps its events.
#[derive(Clone)]
pub enum StoreKind {
    /// A SQLite file in a temp dir.
    Sqlite,
    /// A PostgreSQL base URL (a fresh schema is made per harness).
    Postgres(String),
}

/// A running runtime plus what a test needs to drive and restart it.
pub struct Harness {
    runtime: Option<Runtime>,
    pub base: String,
    pub http: reqwest::Client,
    pub store_url: String,
    config_rest: String,
    pub dir: Arc<tempfile::TempDir>,
}

impl Harness {
    /// Starts a runtime on SQLite with `config` (top-level options and `[[sources]]`).
    pub async fn sqlite(config: &str) -> Harness {
        Self::start(&StoreKind::Sqlite, config).await
    }

    /// Starts a runtime on `kind` with `config`.
    pub async fn start(kind: &StoreKind, config: &str) -> Harness {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let store_url = match kind {
            StoreKind::Sqlite => format!("sqlite:{}", dir.path().join("events.db").display()),
            StoreKind::Postgres(base) => fresh_postgres_schema(base).await,
        };
        Self::start_on(store_url, config, dir).await
    }

    /// Starts a runtime on an explicit store URL.
    pub async fn start_on(store_url: String, config: &str, dir: Arc<tempfile::TempDir>) -> Harness {
        let mut h = Harness {
            runtime: None,
            base: String::new(),
            http: reqwest::Client::new(),
            store_url,
            config_rest: config.to_owned(),
            dir,
        };
        h.boot().await.expect("runtime starts");
        h
    }

    /// The full config text.
    pub fn config_text(&self) -> String {
        format!(
            "listen = \"127.0.0.1:0\"\nstore = \"{}\"\n{}",
            self.store_url, self.config_rest
        )
    }

    async fn boot(&mut self) -> switchboard::Result<()> {
        let config = RuntimeConfig::from_toml(&self.config_text())?.resolve_with(env)?;
        let rt = Runtime::start(config).await?;
        self.base = format!("http://{}", rt.local_addr());
        self.runtime = Some(rt);
        Ok(())
    }

    /// The running runtime.
    pub fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("running")
    }

    /// Stops the runtime (as a process exit would) and starts a new one on the same
    /// store.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.boot().await.expect("runtime restarts");
    }

    /// Stops the runtime.
    pub async fn stop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown().await.expect("clean shutdown");
        }
    }

    /// A URL on the runtime's listener.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs a delivery to `/hooks/{source}`.
    pub async fn post(&self, source: &str, d: &Delivery) -> reqwest::Response {
        let mut req = self.http.post(self.url(&format!("/hooks/{source}")));
        for (k, v) in &d.headers {
            req = req.header(k, v);
        }
        req.body(d.body.clone()).send().await.expect("request sent")
    }

    /// POSTs and returns (status, JSON body or null).
    pub async fn post_json(&self, source: &str, d: &Delivery) -> (u16, Value) {
        let resp = self.post(source, d).await;
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// GETs an admin path as JSON.
    pub async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    /// The stored events of `source`, newest first (one page of up to 500).
    pub async fn events(&self, source: &str) -> Vec<Value> {
        let v = self
            .get(&format!("/api/v1/events?source={source}&limit=500"))
            .await;
        v["events"].as_array().cloned().unwrap_or_default()
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Headers and body of one delivery.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Delivery {
    /// A delivery with these headers and body.
    pub fn new(headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Delivery {
        Delivery {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.into(),
        }
    }

    /// The same headers with a different body (a tampered delivery).
    pub fn with_body(&self, body: impl Into<Vec<u8>>) -> Delivery {
        Delivery {
            headers: self.headers.clone(),
            body: body.into(),
        }
    }

    /// Without the headers whose names contain `needle` (case-insensitive).
    pub fn without(&self, needle: &str) -> Delivery {
        let n = needle.to_ascii_lowercase();
        Delivery {
            headers: self
                .headers
                .iter()
                .filter(|(k, _)| !k.to_ascii_lowercase().contains(&n))
                .cloned()
                .collect(),
            body: self.body.clone(),
        }
    }
}

/// An `issues` delivery of `body` with delivery id `id`, signed with `key` as GitHub does.
pub fn github_delivery(key: &[u8], id: &str, body: String) -> Delivery {
    let sig = format!("sha256={}", hex(&mac(key, &[body.as_bytes()])));
    Delivery::new(
        &[
            ("X-Hub-Signature-256", &sig),
            ("X-GitHub-Event", "issues"),
            ("X-GitHub-Delivery", id),
            ("X-GitHub-Hook-ID", "1"),
            ("Content-Type", "application/json"),
        ],
        body,
    )
}

pub fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The providers the table-driven tests cover, each with its signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Github,
    Slack,
    Linear,
    Notion,
    Stripe,
    StandardWebhooks,
    GenericHeader,
    GenericAuthorization,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Github,
        Kind::Slack,
        Kind::Linear,
        Kind::Notion,
        Kind::Stripe,
        Kind::StandardWebhooks,
        Kind::GenericHeader,
        Kind::GenericAuthorization,
    ];

    /// The source id used for this provider in [`all_sources`].
    pub fn source(self) -> &'static str {
        match self {
            Kind::Github => "gh",
            Kind::Slack => "slack",
            Kind::Linear => "linear",
            Kind::Notion => "notion",
            Kind::Stripe => "stripe",
            Kind::StandardWebhooks => "sw",
            Kind::GenericHeader => "generic",
            Kind::GenericAuthorization => "canonical",
        }
    }

    /// The environment variable of its current secret.
    pub fn secret_env(self) -> &'static str {
        match self {
            Kind::Github => "GH_SECRET",
            Kind::Slack => "SLACK_SECRET",
            Kind::Linear => "LINEAR_SECRET",
            Kind::Notion => "NOTION_SECRET",
            Kind::Stripe => "STRIPE_SECRET",
            Kind::StandardWebhooks => "SW_SECRET",
            Kind::GenericHeader | Kind::GenericAuthorization => "GENERIC_SECRET",
        }
    }

    /// Whether the rule checks a signed timestamp.
    pub fn has_timestamp(self) -> bool {
        !matches!(self, Kind::Github | Kind::Notion | Kind::GenericHeader)
    }

    /// The kind the runtime should give [`Kind::sign`]'s delivery.
    pub fn expected_kind(self) -> &'static str {
        match self {
            Kind::Github => "issues.opened",
            Kind::Slack => "event_callback.message",
            Kind::Linear => "Issue.create",
            Kind::Notion => "page.created",
            Kind::Stripe => "invoice.paid",
            Kind::StandardWebhooks => "user.created",
            Kind::GenericHeader | Kind::GenericAuthorization => "webhook",
        }
    }

    /// A delivery with delivery id `id`, signed with `secret` at `ts` (unix s).
    pub fn sign(self, secret: &str, id: &str, ts: i64) -> Delivery {
        let key = secret.as_bytes();
        let ts_text = ts.to_string();
        match self {
            Kind::Github => github_delivery(
                key,
                id,
                format!(r#"{{"action":"opened","issue":{{"number":1}},"delivery":"{id}"}}"#),
            ),
            Kind::Slack => {
                let body = format!(
                    r#"{{"type":"event_callback","event_id":"{id}","event_time":{ts},"event":{{"type":"message","text":"hi"}}}}"#
                );
                let sig = format!(
                    "v0={}",
                    hex(&mac(
                        key,
                        &[b"v0:", ts_text.as_bytes(), b":", body.as_bytes()]
                    ))
                );
                Delivery::new(
                    &[
                        ("X-Slack-Request-Timestamp", &ts_text),
                        ("X-Slack-Signature", &sig),
                    ],
                    body,
                )
            }
            Kind::Linear => {
                let body = format!(
                    r#"{{"type":"Issue","action":"create","webhookTimestamp":{},"data":{{"id":"{id}"}}}}"#,
                    ts * 1000
                );
                let sig = hex(&mac(key, &[body.as_bytes()]));
                Delivery::new(&[("Linear-Signature", &sig), ("Linear-Delivery", id)], body)
            }
            Kind::Notion => {
                let body = format!(
                    r#"{{"id":"{id}","type":"page.created","timestamp":"2024-12-05T23:55:34.285Z"}}"#
                );
                let sig = format!("sha256={}", hex(&mac(key, &[body.as_bytes()])));
                Delivery::new(&[("X-Notion-Signature", &sig)], body)
            }
            Kind::Stripe => {
                let body = format!(r#"{{"id":"{id}","type":"invoice.paid","created":{ts}}}"#);
                let sig = hex(&mac(key, &[ts_text.as_bytes(), b".", body.as_bytes()]));
                Delivery::new(&[("Stripe-Signature", &format!("t={ts},v1={sig}"))], body)
            }
            Kind::StandardWebhooks => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(secret.trim_start_matches("whsec_"))
                    .unwrap_or_else(|_| secret.as_bytes().to_vec());
                let body = format!(r#"{{"type":"user.created","data":{{"id":"{id}"}}}}"#);
                let sig = b64(&mac(
                    &raw,
                    &[
                        id.as_bytes(),
                        b".",
                        ts_text.as_bytes(),
                        b".",
                        body.as_bytes(),
                    ],
                ));
                Delivery::new(
                    &[
                        ("webhook-id", id),
                        ("webhook-timestamp", &ts_text),
                        ("webhook-signature", &format!("v1,{sig}")),
                    ],
                    body,
                )
            }
            Kind::GenericHeader => {
                let body = format!(r#"{{"thing":"{id}"}}"#);
                let sig = format!("sha256={}", hex(&mac(key, &[body.as_bytes()])));
                Delivery::new(&[("X-Signature", &sig), ("X-Delivery", id)], body)
            }
            Kind::GenericAuthorization => {
                let body = format!(r#"{{"thing":"{id}"}}"#);
                let body_hash = hex(&Sha256::digest(body.as_bytes()));
                let signed = format!("POST\n/hooks/canonical\n{ts}\n{body_hash}");
                let sig = hex(&mac(key, &[signed.as_bytes()]));
                Delivery::new(
                    &[
                        (
                            "Authorization",
                            &format!("HMAC-SHA256 timestamp={ts},signature={sig}"),
                        ),
                        ("X-Delivery", id),
                    ],
                    body,
                )
            }
        }
    }

    /// Signed with its configured secret, now.
    pub fn signed(self, id: &str) -> Delivery {
        self.sign(&env(self.secret_env()).unwrap(), id, now_s())
    }
}

/// One `[[sources]]` per provider kind; each also accepts `OLD_SECRET` (rotation).
pub fn all_sources() -> String {
    let mut out = String::new();
    for k in Kind::ALL {
        let provider = match k {
            Kind::Github => "github",
            Kind::Slack => "slack",
            Kind::Linear => "linear",
            Kind::Notion => "notion",
            Kind::Stripe => "stripe",
            Kind::StandardWebhooks => "standard_webhooks",
            Kind::GenericHeader | Kind::GenericAuthorization => "generic_hmac",
        };
        out.push_str(&format!(
            "[[sources]]\nid = \"{}\"\nprovider = \"{provider}\"\nsecret_env = [\"{}\", \"OLD_SECRET\"]\n",
            k.source(),
            k.secret_env()
        ));
        match k {
            Kind::GenericHeader => out.push_str(
                "header = \"X-Signature\"\nprefix = \"sha256=\"\ndedupe_header = \"X-Delivery\"\n",
            ),
            Kind::GenericAuthorization => {
                out.push_str("scheme = \"authorization\"\ndedupe_header = \"X-Delivery\"\n")
            }
            _ => {}
        }
        out.push('\n');
    }
    out
}

/// A TCP proxy in front of PostgreSQL that a test can take down and bring back, to
/// see what the runtime does when its database goes away.
pub struct Proxy {
    pub addr: std::net::SocketAddr,
    up: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    /// Listens on an ephemeral port and forwards to `target` (host:port).
    pub async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, watch) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !*watch.borrow() {
                    continue; // dropped: the client sees the connection close at once
                }
                let target = target.clone();
                let mut down = watch.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Proxy { addr, up }
    }

    /// Cuts every connection and refuses new ones.
    pub fn down(&self) {
        self.up.send_replace(false);
    }

    /// Forwards again.
    pub fn up(&self) {
        self.up.send_replace(true);
    }
}
