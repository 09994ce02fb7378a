//! The `switchboard` command: `gateway` runs the reference gateway, `demo` runs the
//! whole loop in one process (webhook to connector with feature `runtime`), `echo`
//! runs echo connectors against a gateway, and `serve` (feature `runtime`) runs the
//! webhook and cron ingest runtime.

use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

#[cfg(feature = "runtime")]
mod admin;
#[cfg(feature = "runtime")]
mod backfill;
mod check;
mod demo;

/// switchboard: connector SDK and runtime.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `--grpc-listen`: an address, or `off`.
#[derive(Clone, Debug)]
struct GrpcListen(Option<SocketAddr>);

fn parse_grpc_listen(s: &str) -> Result<GrpcListen, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(GrpcListen(None));
    }
    s.parse()
        .map(|a| GrpcListen(Some(a)))
        .map_err(|e| format!("{s:?} is neither an address (host:port) nor `off`: {e}"))
}

#[derive(Subcommand)]
enum Command {
    /// Run the reference gateway (Phoenix socket + HTTP API on one port, gRPC on
    /// another).
    Gateway {
        /// Address to listen on for the Phoenix socket and the HTTP API.
        #[arg(long, default_value = "127.0.0.1:4000")]
        listen: SocketAddr,
        /// Address to serve gRPC (`ConnectorService`) on; `off` serves none. 50061 is
        /// the protocol's default gRPC port.
        #[arg(long, default_value = "127.0.0.1:50061", value_parser = parse_grpc_listen)]
        grpc_listen: GrpcListen,
        /// How registers are approved: `auto` (at once) or `manual` (pending until
        /// approved at POST /api/v1/connectors/{arn}/approve).
        #[arg(long, default_value = "auto", value_parser = parse_approval)]
        approval: switchboard::gateway::ApprovalMode,
        /// Keep the signing key, approved keys, session tokens and rejections in
        /// this directory (created 0700), so they survive restarts.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<std::path::PathBuf>,
        /// The gateway's public HTTP base URL (token issuer, `matrix_api_url`);
        /// default http://{listen address}.
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
        /// In manual mode, also accept register JWTs of this external OIDC issuer
        /// (e.g. a Keycloak realm URL), verified with the keys at JWKS_URL (fetched
        /// within 5 s, cached 10 min). Repeatable.
        #[arg(long = "trust-issuer", value_name = "ISSUER=JWKS_URL")]
        trust_issuer: Vec<switchboard::gateway::TrustedIssuer>,
        /// The environment variable holding the operator token: when set, /api/* and
        /// /metrics need `Authorization: Bearer <token>`. Required for manual approval
        /// on a non-loopback address.
        #[arg(long, value_name = "VAR")]
        admin_token_env: Option<String>,
        /// On SIGTERM or SIGINT, how long executes in flight may still be answered
        /// before every connector is told to reconnect and the rest fail (seconds).
        #[arg(long, value_name = "SECS", default_value_t = 10)]
        shutdown_grace: u64,
        /// Check the flags (the operator token's variable set, the data dir's files
        /// readable), print a summary and exit 0 or 1 without serving.
        #[arg(long)]
        check: bool,
    },
    /// The whole loop in one process, no setup: an in-process gateway, echo connectors
    /// driven through its HTTP API, and (feature `runtime`) signed webhooks through the
    /// ingress, a SQLite outbox and the dispatcher to connectors by invoke, with a
    /// retried, dead-lettered binding and its dead-letter handler; prints tables and
    /// exits non-zero if anything went missing.
    Demo(demo::DemoArgs),
    /// Run the ingest runtime (webhook ingress, cron sources, admin API) until SIGTERM
    /// or SIGINT, then stop gracefully.
    #[cfg(feature = "runtime")]
    Serve {
        /// The configuration file.
        #[arg(long, env = "SWITCHBOARD_CONFIG", default_value = "switchboard.toml")]
        config: std::path::PathBuf,
        /// Load and validate the configuration (secrets present, CEL compiles, store
        /// reachable and at a known schema version; nothing created or migrated),
        /// print a summary and exit 0 or 1 without serving.
        #[arg(long)]
        check: bool,
    },
    /// Inspect a running runtime's outbox (through its admin API).
    #[cfg(feature = "runtime")]
    #[command(subcommand)]
    Outbox(admin::OutboxCommand),
    /// List or replay a running runtime's dead letters (through its admin API).
    #[cfg(feature = "runtime")]
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(admin::DeadLetterCommand),
    /// List a running runtime's trigger bindings (through its admin API).
    #[cfg(feature = "runtime")]
    #[command(subcommand)]
    Triggers(admin::TriggerCommand),
    /// Run stored events through a binding, and follow, pause, resume or cancel
    /// such backfills (through a running runtime's admin API).
    #[cfg(feature = "runtime")]
    #[command(subcommand)]
    Backfill(backfill::BackfillCommand),
    /// Run echo connectors against a gateway until SIGTERM or SIGINT.
    Echo {
        /// Gateway URL (ws://, wss://, http://, https://).
        #[arg(
            long,
            env = "SWITCHBOARD_GATEWAY_URL",
            default_value = "ws://127.0.0.1:4000"
        )]
        gateway: String,
        /// Tenant to register under.
        #[arg(long, env = "SWITCHBOARD_TENANT_ID", default_value = "local")]
        tenant: String,
        /// How many echo registrations to run (they share one socket).
        #[arg(long, default_value_t = 1)]
        count: usize,
        /// Answer each execute after this many milliseconds: a slow connector, to try
        /// execute timeouts and the stop grace (SWITCHBOARD_STOP_GRACE_SECS).
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The demo dead-letters on purpose, and the dispatcher warns once per dead letter;
    // its table counts them instead. RUST_LOG still overrides.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn,switchboard::dispatch::dispatcher=error",
        // The one line each graceful stop logs (what it finished and released), and
        // the one a start logs of what this process identity held before.
        _ => "warn,switchboard::stop=info,switchboard::runtime::process_id=info",
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours for a person at a terminal only: journald, `kubectl logs` and files
        // get plain text, not escape codes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        );
    let subscriber = tracing_subscriber::registry().with(logs);
    // Span export when the OTEL_* variables ask for it (feature `otel`); its layer
    // filters for itself, so RUST_LOG shapes the logs, not the traces.
    #[cfg(feature = "otel")]
    let telemetry = match switchboard::Telemetry::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    #[cfg(feature = "otel")]
    let subscriber = subscriber.with(telemetry.as_ref().map(|t| t.layer()));
    subscriber.init();
    let result = match cli.command {
        Command::Gateway {
            listen,
            grpc_listen,
            approval,
            data_dir,
            public_url,
            trust_issuer,
            admin_token_env,
            shutdown_grace,
            check,
        } => {
            let mut config = switchboard::gateway::GatewayConfig::default()
                .with_approval(approval)
                .with_shutdown_grace(std::time::Duration::from_secs(shutdown_grace));
            let mut found = Vec::new();
            if let Some(var) = admin_token_env {
                match std::env::var(&var) {
                    Ok(token) if !token.is_empty() => config = config.with_admin_token(token),
                    _ => {
                        let problem =
                            format!("--admin-token-env names {var}, which is unset or empty");
                        if !check {
                            eprintln!("{problem}");
                            std::process::exit(2);
                        }
                        found.push(problem);
                    }
                }
            }
            if let GrpcListen(Some(at)) = grpc_listen {
                config = config.with_grpc_listen(at);
            }
            if let Some(dir) = data_dir {
                config = config.with_data_dir(dir);
            }
            if let Some(url) = public_url {
                config = config.with_public_url(url);
            }
            for issuer in trust_issuer {
                config = config.with_trusted_issuer(issuer);
            }
            if check {
                check::gateway(&config, listen, found)
            } else {
                switchboard::gateway::serve(config, listen).await
            }
        }
        Command::Demo(args) => demo::run(args).await,
        #[cfg(feature = "runtime")]
        Command::Serve { config, check } if check => check::serve(&config).await,
        #[cfg(feature = "runtime")]
        Command::Serve { config, .. } => serve(&config).await,
        #[cfg(feature = "runtime")]
        Command::Outbox(cmd) => admin::outbox(cmd).await,
        #[cfg(feature = "runtime")]
        Command::DeadLetters(cmd) => admin::dead_letters(cmd).await,
        #[cfg(feature = "runtime")]
        Command::Triggers(cmd) => admin::triggers(cmd).await,
        #[cfg(feature = "runtime")]
        Command::Backfill(cmd) => backfill::backfill(cmd).await,
        Command::Echo {
            gateway,
            tenant,
            count,
            delay_ms,
        } => echo(gateway, tenant, count, delay_ms).await,
    };
    #[cfg(feature = "otel")]
    if let Some(t) = telemetry {
        t.shutdown().await;
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error [{}]: {e}", e.code());
            std::process::ExitCode::FAILURE
        }
    }
}

fn parse_approval(s: &str) -> Result<switchboard::gateway::ApprovalMode, String> {
    s.parse()
}

/// `switchboard echo`: echo registrations on one runner, with the health listener and
/// stop grace from the environment (`SWITCHBOARD_HEALTH_LISTEN`,
/// `SWITCHBOARD_STOP_GRACE_SECS`).
async fn echo(
    gateway: String,
    tenant: String,
    count: usize,
    delay_ms: u64,
) -> switchboard::Result<()> {
    use switchboard::{ConnectorConfig, MultiConnectorRunner, Registration, RunnerOptions};
    let connector: std::sync::Arc<dyn switchboard::BaseConnector> =
        std::sync::Arc::new(SlowEcho(std::time::Duration::from_millis(delay_ms)));
    let regs = (0..count)
        .map(|i| {
            let cfg = ConnectorConfig::builder(gateway.clone(), tenant.clone())
                .instance_id(format!("echo-{i}"))
                .build()?;
            Ok(Registration::shared(cfg, connector.clone()))
        })
        .collect::<switchboard::Result<Vec<_>>>()?;
    let runner = MultiConnectorRunner::new(RunnerOptions::from_env()?, regs)?;
    let health = runner
        .health_addr()
        .map(|a| format!("; /healthz, /readyz and /metrics on http://{a}"))
        .unwrap_or_default();
    eprintln!("running {count} echo registration(s) for tenant {tenant:?} against {gateway}{health}; SIGTERM or Ctrl-C to stop");
    runner.run_until_signal().await
}

/// The echo connector, answering after a delay (none by default).
struct SlowEcho(std::time::Duration);

#[async_trait::async_trait]
impl switchboard::BaseConnector for SlowEcho {
    fn connector_type(&self) -> &str {
        "echo"
    }

    async fn execute(
        &self,
        payload: switchboard::Payload,
        _capability_id: Option<&str>,
    ) -> switchboard::Result<switchboard::Payload> {
        if !self.0.is_zero() {
            tokio::time::sleep(self.0).await;
        }
        Ok(payload)
    }
}

#[cfg(feature = "runtime")]
async fn serve(path: &std::path::Path) -> switchboard::Result<()> {
    let config = switchboard::RuntimeConfig::from_file(path)?.resolve()?;
    let sources = config.sources.len();
    // Before the listener opens: a SIGHUP sent as soon as the port answers must find
    // its handler in place, not the default action, which ends the process.
    let hup = sighup();
    let signal = switchboard::shutdown_signal();
    let runtime = switchboard::Runtime::builder(config)
        .config_path(path)
        .start()
        .await?;
    let stop = runtime.shutdown_handle();
    tokio::spawn(async move {
        signal.await;
        stop.shutdown();
    });
    reload_on_sighup(hup, runtime.reload_handle());
    eprintln!(
        "switchboard ingest: {sources} source(s), listening on http://{} (POST /hooks/{{source}}, GET /api/v1/sources); SIGTERM or Ctrl-C to stop",
        runtime.local_addr()
    );
    runtime.wait().await
}

/// Takes over SIGHUP from its default action (ending the process); signals that
/// arrive before [`reload_on_sighup`] runs are kept for it.
#[cfg(all(feature = "runtime", unix))]
fn sighup() -> Option<tokio::signal::unix::Signal> {
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    if hup.is_none() {
        eprintln!("cannot listen for SIGHUP; reload with POST /api/v1/triggers/reload instead");
    }
    hup
}

#[cfg(all(feature = "runtime", not(unix)))]
fn sighup() -> Option<()> {
    None
}

/// SIGHUP reloads the configuration file's `[[triggers]]`, as
/// `POST /api/v1/triggers/reload` does; the outcome is logged.
#[cfg(all(feature = "runtime", unix))]
fn reload_on_sighup(hup: Option<tokio::signal::unix::Signal>, reload: switchboard::ReloadHandle) {
    let Some(mut hup) = hup else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match reload.reload().await {
                Ok(0) => eprintln!("SIGHUP: configuration reloaded; no binding changed"),
                Ok(n) => eprintln!("SIGHUP: configuration reloaded; {n} lifecycle transition(s)"),
                Err(e) => eprintln!("SIGHUP: reload refused, nothing changed: {e}"),
            }
        }
    });
}

#[cfg(all(feature = "runtime", not(unix)))]
fn reload_on_sighup(_: Option<()>, _: switchboard::ReloadHandle) {}
