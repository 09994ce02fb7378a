//! `switchboard backfill start|status|pause|resume|cancel`: backfills through a running
//! runtime's admin API (`/api/v1/backfills`), with a progress bar while one walks
//! (`start --wait`, `status ID --watch`). The bar is drawn on stderr, so `--json`
//! output on stdout stays clean for scripts.

use std::io::Write as _;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use crate::admin::{call_with, n, print_json, AdminTarget};

/// How often a watched job is read again.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Width of the progress bar, in cells.
const BAR: usize = 30;

#[derive(Subcommand, Debug)]
pub(crate) enum BackfillCommand {
    /// Run stored events through a binding (or, with --dry-run, count what would run).
    Start(StartArgs),
    /// Every backfill (newest first), or one with its progress.
    Status {
        #[command(flatten)]
        target: AdminTarget,
        /// The job's id (none: list them all).
        id: Option<i64>,
        /// Redraw its progress until it ends.
        #[arg(long, requires = "id")]
        watch: bool,
    },
    /// Stop a running backfill where it is; `resume` goes on from there.
    Pause(JobArgs),
    /// Go on with a paused backfill.
    Resume(JobArgs),
    /// Stop a backfill for good (what it enqueued stays enqueued).
    Cancel(JobArgs),
}

#[derive(Args, Debug)]
pub(crate) struct JobArgs {
    #[command(flatten)]
    target: AdminTarget,
    /// The job's id.
    id: i64,
}

#[derive(Args, Debug)]
pub(crate) struct StartArgs {
    #[command(flatten)]
    target: AdminTarget,
    /// The binding the events go to.
    #[arg(long)]
    binding: String,
    /// Run under this version of it (default: the live one).
    #[arg(long)]
    version: Option<u32>,
    /// Only events of this source (repeatable).
    #[arg(long = "source")]
    sources: Vec<String>,
    /// Only events whose kind matches this pattern, e.g. `issues.*` (repeatable).
    #[arg(long = "kind")]
    kinds: Vec<String>,
    /// Only events received at or after this time (RFC 3339 or unix ms).
    #[arg(long)]
    since: Option<String>,
    /// Only events received before this time (RFC 3339 or unix ms).
    #[arg(long)]
    until: Option<String>,
    /// A CEL expression over the event that must also hold.
    #[arg(long)]
    filter: Option<String>,
    /// Events enqueued per second at most.
    #[arg(long)]
    rate: Option<f64>,
    /// Enqueue events the binding version already handled, too.
    #[arg(long)]
    redeliver: bool,
    /// The rows' priority (default -1: below live traffic).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// Count what it would do; enqueue nothing.
    #[arg(long)]
    dry_run: bool,
    /// Draw its progress until it ends.
    #[arg(long)]
    wait: bool,
}

/// A time flag as the API takes it: unix ms as a number, anything else as text.
fn instant(t: &str) -> Value {
    t.parse::<i64>().map_or_else(|_| json!(t), |ms| json!(ms))
}

impl StartArgs {
    fn body(&self) -> Value {
        let mut b = Map::new();
        b.insert("binding".into(), json!(self.binding));
        let optional = [
            ("version", self.version.map(|v| json!(v))),
            ("since", self.since.as_deref().map(instant)),
            ("until", self.until.as_deref().map(instant)),
            ("filter", self.filter.as_ref().map(|f| json!(f))),
            ("rate", self.rate.map(|r| json!(r))),
            ("priority", self.priority.map(|p| json!(p))),
            (
                "sources",
                (!self.sources.is_empty()).then(|| json!(self.sources)),
            ),
            ("kinds", (!self.kinds.is_empty()).then(|| json!(self.kinds))),
            ("skip_delivered", self.redeliver.then_some(json!(false))),
            ("dry_run", self.dry_run.then_some(json!(true))),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                b.insert(key.into(), v);
            }
        }
        Value::Object(b)
    }
}

pub(crate) async fn backfill(cmd: BackfillCommand) -> switchboard::Result<()> {
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    match cmd {
        BackfillCommand::Start(args) => {
            let v = call_with(&args.target, post, "/api/v1/backfills", Some(&args.body())).await?;
            if args.target.json && !args.wait {
                print_json(&v);
            } else if args.dry_run {
                print_dry_run(&v);
            } else if args.wait {
                eprintln!("backfill {} started", n(&v["id"]));
                watch(&args.target, v["id"].as_i64().unwrap_or_default()).await?;
            } else {
                println!(
                    "backfill {} started: {} events in its window; `switchboard backfill status {} --watch` follows it",
                    n(&v["id"]),
                    n(&v["total"]),
                    n(&v["id"])
                );
            }
            Ok(())
        }
        BackfillCommand::Status {
            target, id: None, ..
        } => {
            let v = call_with(&target, get, "/api/v1/backfills", None).await?;
            if target.json {
                print_json(&v);
            } else {
                print_list(&v["backfills"]);
            }
            Ok(())
        }
        BackfillCommand::Status {
            target,
            id: Some(id),
            watch: true,
        } => watch(&target, id).await,
        BackfillCommand::Status {
            target,
            id: Some(id),
            ..
        } => {
            let v = call_with(&target, get, &format!("/api/v1/backfills/{id}"), None).await?;
            if target.json {
                print_json(&v);
            } else {
                println!("{}", line(&v));
            }
            Ok(())
        }
        BackfillCommand::Pause(a) => act(a, "pause").await,
        BackfillCommand::Resume(a) => act(a, "resume").await,
        BackfillCommand::Cancel(a) => act(a, "cancel").await,
    }
}

async fn act(a: JobArgs, action: &str) -> switchboard::Result<()> {
    let path = format!("/api/v1/backfills/{}/{action}", a.id);
    let v = call_with(&a.target, reqwest::Method::POST, &path, None).await?;
    if a.target.json {
        print_json(&v);
    } else {
        println!("{}", line(&v));
    }
    Ok(())
}

/// Redraws job `id`'s progress on stderr until it ends; its last state on stdout
/// (the JSON with `--json`). A job that failed makes the command fail.
async fn watch(target: &AdminTarget, id: i64) -> switchboard::Result<()> {
    let path = format!("/api/v1/backfills/{id}");
    loop {
        let v = call_with(target, reqwest::Method::GET, &path, None).await?;
        let state = v["state"].as_str().unwrap_or_default();
        eprint!("\r\x1b[2K{}", bar(&v));
        let _ = std::io::stderr().flush();
        if state != "running" {
            eprintln!();
            if target.json {
                print_json(&v);
            } else {
                println!("{}", line(&v));
            }
            if state == "failed" {
                return Err(switchboard::Error::Remote {
                    code: "failed".into(),
                    message: format!("backfill {id} failed: {}", n(&v["error"])),
                });
            }
            return Ok(());
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// `[#########.....] 62%  1,240/2,000 walked · 900 enqueued · 40 skipped · 310/s · ETA 3s`
fn bar(v: &Value) -> String {
    let progress = v["progress"].as_f64().unwrap_or(0.0).clamp(0.0, 1.0);
    let filled = (progress * BAR as f64).round() as usize;
    let eta = v["eta_seconds"]
        .as_u64()
        .map_or_else(String::new, |s| format!(" · ETA {s}s"));
    format!(
        "[{}{}] {:>3.0}%  {}/{} walked · {} enqueued · {} skipped · {:.0}/s{eta}",
        "#".repeat(filled),
        ".".repeat(BAR - filled),
        progress * 100.0,
        n(&v["walked"]),
        n(&v["total"]),
        n(&v["enqueued"]),
        n(&v["skipped"]),
        v["walk_rate"].as_f64().unwrap_or(0.0),
    )
}

/// One job in a line: id, state, binding, counts, error.
fn line(v: &Value) -> String {
    let error = v["error"]
        .as_str()
        .map_or_else(String::new, |e| format!("  error: {e}"));
    format!(
        "{:>4} {:<10} {:<24} walked {}/{} · matched {} · filtered {} · skipped {} · enqueued {}{error}",
        n(&v["id"]),
        n(&v["state"]),
        n(&v["spec"]["binding"]).chars().take(24).collect::<String>(),
        n(&v["walked"]),
        n(&v["total"]),
        n(&v["matched"]),
        n(&v["filtered"]),
        n(&v["skipped"]),
        n(&v["enqueued"]),
    )
}

fn print_list(list: &Value) {
    let jobs = list.as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("no backfills");
        return;
    }
    for j in &jobs {
        println!("{}", line(j));
    }
}

fn print_dry_run(v: &Value) {
    println!(
        "dry run: {} events read{}; {} match the selection, {} the binding's filter refuses, {} were handled already; {} would be enqueued",
        n(&v["walked"]),
        if v["complete"] == true { "" } else { " (stopped early)" },
        n(&v["matched"]),
        n(&v["filtered"]),
        n(&v["skipped"]),
        n(&v["would_enqueue"]),
    );
}
