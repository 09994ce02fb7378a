//! `switchboard outbox …`, `switchboard dead-letters …` and `switchboard triggers …`
//! (and `switchboard backfill …`, `super::backfill`): thin clients of a running
//! runtime's admin API. They print a table for people, or
//! the API's JSON with `--json` for scripts; a refused request prints the API's error
//! and exits non-zero.

use clap::{Args, Subcommand};
use serde_json::Value;

/// Where the runtime's admin API is.
#[derive(Args, Debug, Clone)]
pub(crate) struct AdminTarget {
    /// The runtime's listener (its `listen` address).
    #[arg(
        long,
        env = "SWITCHBOARD_ADMIN_URL",
        default_value = "http://127.0.0.1:8787"
    )]
    url: String,
    /// The admin bearer token (the value of the runtime's `admin_token_env`).
    #[arg(long, env = "SWITCHBOARD_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum OutboxCommand {
    /// Rows due, leased and scheduled, per binding and queue.
    Stats(AdminTarget),
}

#[derive(Subcommand, Debug)]
pub(crate) enum DeadLetterCommand {
    /// The newest dead letters.
    List {
        #[command(flatten)]
        target: AdminTarget,
        /// Only this binding's.
        #[arg(long)]
        binding: Option<String>,
        /// At most this many (1–500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Enqueue a dead letter's delivery again, attempts from zero.
    Replay {
        #[command(flatten)]
        target: AdminTarget,
        /// The dead letter's id.
        id: i64,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum TriggerCommand {
    /// Every binding: its active version, state, handler and counts.
    List(AdminTarget),
    /// A binding's lifecycle log: every version's transitions, oldest first.
    History {
        #[command(flatten)]
        target: AdminTarget,
        /// The binding id.
        id: String,
    },
    /// Read the configuration file's [[triggers]] again (as SIGHUP does).
    Reload(AdminTarget),
    /// Keep a binding's events as rows and start none until it is resumed.
    Pause {
        #[command(flatten)]
        target: AdminTarget,
        /// The binding id.
        id: String,
    },
    /// Start a paused binding's rows again.
    Resume {
        #[command(flatten)]
        target: AdminTarget,
        /// The binding id.
        id: String,
    },
    /// Take no new events for a binding, finish its rows, then terminate it.
    Drain {
        #[command(flatten)]
        target: AdminTarget,
        /// The binding id.
        id: String,
    },
}

async fn call(
    target: &AdminTarget,
    method: reqwest::Method,
    path: &str,
) -> switchboard::Result<Value> {
    call_with(target, method, path, None).await
}

/// [`call`] with a JSON body.
pub(crate) async fn call_with(
    target: &AdminTarget,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> switchboard::Result<Value> {
    let url = format!("{}{path}", target.url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| switchboard::Error::Config(format!("HTTP client: {e}")))?;
    let mut req = client.request(method, &url);
    if let Some(t) = &target.token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.map_err(|e| switchboard::Error::Connect {
        url: url.clone(),
        reason: format!("{e}; is `switchboard serve` running there (see --url)?"),
    })?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let msg = body["message"].as_str().unwrap_or("no message");
        let code = body["error"].as_str().unwrap_or("error");
        return Err(switchboard::Error::Remote {
            code: code.to_owned(),
            message: format!("{status} from {url}: {msg}"),
        });
    }
    Ok(body)
}

pub(crate) fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

pub(crate) fn n(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) async fn outbox(cmd: OutboxCommand) -> switchboard::Result<()> {
    let OutboxCommand::Stats(target) = cmd;
    let v = call(&target, reqwest::Method::GET, "/api/v1/outbox/stats").await?;
    if target.json {
        print_json(&v);
        return Ok(());
    }
    println!(
        "due {}  leased {}  scheduled {}  oldest {} ms  dead letters {}  depth-dropped {}",
        n(&v["due"]),
        n(&v["leased"]),
        n(&v["scheduled"]),
        n(&v["oldest_age_ms"]),
        n(&v["dead_letters"]),
        n(&v["depth_dropped"])
    );
    for (section, label) in [("by_binding", "binding"), ("queues", "queue")] {
        let Some(map) = v[section].as_object().filter(|m| !m.is_empty()) else {
            continue;
        };
        println!(
            "\n{label:<28} {:>8} {:>8} {:>10} {:>12} {:>8}",
            "due", "leased", "scheduled", "oldest ms", "dead"
        );
        for (name, s) in map {
            println!(
                "{name:<28} {:>8} {:>8} {:>10} {:>12} {:>8}",
                n(&s["due"]),
                n(&s["leased"]),
                n(&s["scheduled"]),
                n(&s["oldest_age_ms"]),
                n(&s["dead_letters"])
            );
        }
    }
    Ok(())
}

pub(crate) async fn dead_letters(cmd: DeadLetterCommand) -> switchboard::Result<()> {
    match cmd {
        DeadLetterCommand::List {
            target,
            binding,
            limit,
        } => {
            let mut path = format!("/api/v1/dead-letters?limit={limit}");
            if let Some(b) = binding {
                path.push_str(&format!("&binding={}", urlencode(&b)));
            }
            let v = call(&target, reqwest::Method::GET, &path).await?;
            if target.json {
                print_json(&v);
                return Ok(());
            }
            let list = v["dead_letters"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                println!("no dead letters");
                return Ok(());
            }
            println!(
                "{:>6} {:<24} {:<36} {:>8} {:>7}  last error",
                "id", "binding", "event", "attempts", "replays"
            );
            for d in list {
                let last = d["errors"]
                    .as_array()
                    .and_then(|e| e.last())
                    .map(|e| format!("{}: {}", n(&e["kind"]), n(&e["message"])))
                    .unwrap_or_default();
                println!(
                    "{:>6} {:<24} {:<36} {:>8} {:>7}  {last}",
                    n(&d["id"]),
                    n(&d["binding_id"]),
                    n(&d["event_id"]),
                    n(&d["attempts"]),
                    n(&d["replays"])
                );
            }
            Ok(())
        }
        DeadLetterCommand::Replay { target, id } => {
            let path = format!("/api/v1/dead-letters/{id}/replay");
            let v = call(&target, reqwest::Method::POST, &path).await?;
            if target.json {
                print_json(&v);
            } else {
                println!("dead letter {id} replayed as row {}", n(&v["row_id"]));
            }
            Ok(())
        }
    }
}

pub(crate) async fn triggers(cmd: TriggerCommand) -> switchboard::Result<()> {
    let post = reqwest::Method::POST;
    let (target, v, what) = match cmd {
        TriggerCommand::List(target) => {
            let v = call(&target, reqwest::Method::GET, "/api/v1/triggers").await?;
            if !target.json {
                print_triggers(&v);
                return Ok(());
            }
            (target, v, "")
        }
        TriggerCommand::History { target, id } => {
            let path = format!("/api/v1/triggers/{}/history?limit=1000", urlencode(&id));
            let v = call(&target, reqwest::Method::GET, &path).await?;
            if !target.json {
                print_entries(&v["history"]);
                return Ok(());
            }
            (target, v, "")
        }
        TriggerCommand::Reload(target) => {
            let v = call(&target, post, "/api/v1/triggers/reload").await?;
            (target, v, "reloaded")
        }
        TriggerCommand::Pause { target, id } => {
            let path = format!("/api/v1/triggers/{}/pause", urlencode(&id));
            let v = call(&target, post, &path).await?;
            (target, v, "paused")
        }
        TriggerCommand::Resume { target, id } => {
            let path = format!("/api/v1/triggers/{}/resume", urlencode(&id));
            let v = call(&target, post, &path).await?;
            (target, v, "resumed")
        }
        TriggerCommand::Drain { target, id } => {
            let path = format!("/api/v1/triggers/{}/drain", urlencode(&id));
            let v = call(&target, post, &path).await?;
            (target, v, "draining")
        }
    };
    if target.json {
        print_json(&v);
        return Ok(());
    }
    let changes = v["changes"].as_array().map_or(0, Vec::len);
    if changes == 0 {
        println!("{what}: nothing changed");
    } else {
        print_entries(&v["changes"]);
    }
    Ok(())
}

fn print_triggers(v: &Value) {
    println!(
        "{:<24} {:<8} {:<9} {:<8} {:<10} {:>10} {:>7} {:>6} {:>9}",
        "binding",
        "version",
        "state",
        "origin",
        "handler",
        "dispatched",
        "failed",
        "dead",
        "in_flight"
    );
    for t in v["triggers"].as_array().cloned().unwrap_or_default() {
        let version = t["active"].as_u64().map_or("-".into(), |n| format!("v{n}"));
        println!(
            "{:<24} {:<8} {:<9} {:<8} {:<10} {:>10} {:>7} {:>6} {:>9}",
            n(&t["id"]),
            version,
            n(&t["state"]),
            n(&t["origin"]),
            n(&t["definition"]["handler"]["kind"]),
            n(&t["counts"]["dispatched"]),
            n(&t["counts"]["failed"]),
            n(&t["counts"]["dead_lettered"]),
            n(&t["counts"]["in_flight"])
        );
    }
}

fn print_entries(entries: &Value) {
    println!(
        "{:<6} {:<14} {:<12} {:<20} reason",
        "seq", "version", "event", "process"
    );
    for e in entries.as_array().cloned().unwrap_or_default() {
        println!(
            "{:<6} {:<14} {:<12} {:<20} {}",
            n(&e["seq"]),
            format!("{}@v{}", n(&e["binding_id"]), n(&e["version"])),
            n(&e["event"]),
            n(&e["process"]),
            n(&e["reason"])
        );
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
