//! The soak's tables and verdict for one store: counts, errors by kind, restarts,
//! p99 latencies per window, RSS and file descriptors over time, and their growth over
//! the run's last half.

use std::collections::BTreeMap;
use std::time::Duration;

use super::disk::{self, Disk};
use super::ledger::{Ledger, Outcome};
use super::procs::{Role, Usage};

/// Growth over the last half above this fails (or warns, see the verdict rules).
const GROWTH_LIMIT: f64 = 0.05;
/// Lost webhooks described one by one.
const LOST_SHOWN: usize = 20;

/// A child SIGKILLed and started again.
pub struct Restart {
    pub at: Duration,
    pub role: Role,
    pub old_pid: Option<u32>,
    pub new_pid: Option<u32>,
    /// Spawn to serving again.
    pub back_after: Duration,
}

/// One sampling of the three processes (in [`Role::ALL`] order).
pub struct Sample {
    pub at: Duration,
    /// Whether every child had been serving for a while when it was taken (else the
    /// settle wait gave up).
    pub settled: bool,
    pub of: [Option<(u32, Usage)>; 3],
}

/// Everything one store's run measured.
pub struct Run {
    pub store: String,
    pub secs: f64,
    pub window: Duration,
    pub ran_for: Duration,
    pub delivery_tag: String,
    pub ledger: Ledger,
    pub webhooks: BTreeMap<String, u64>,
    pub executes: (u64, u64, BTreeMap<String, u64>),
    pub restarts: Vec<Restart>,
    pub samples: Vec<Sample>,
    /// How long the final wait for deliveries took; `None` when its deadline passed.
    pub drained_in: Option<Duration>,
    /// Lines about the runtime at the end: outbox stats, dead letters, log tails.
    pub diagnostics: Vec<String>,
    /// Bytes written, database and WAL sizes.
    pub disk: Disk,
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".to_owned(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

fn pct(first: u64, last: u64) -> f64 {
    (last as f64 - first as f64) / (first.max(1) as f64)
}

/// Prints the run's tables; whether it passed.
pub fn print(run: &Run) -> bool {
    let mut failures = Vec::new();
    println!();
    println!(
        "## soak on {}: {:.0} s of load ({:.0} s asked)",
        run.store,
        run.ran_for.as_secs_f64(),
        run.secs
    );
    println!();
    counts(run, &mut failures);
    disk::print(&run.disk, delivered(run), run.ran_for.as_secs_f64());
    errors(run);
    restarts(run);
    windows(run);
    resources(run);
    growth(run, &mut failures);
    for line in &run.diagnostics {
        println!("{line}");
    }
    println!();
    if failures.is_empty() {
        println!("PASS ({})", run.store);
    } else {
        for f in &failures {
            println!("FAIL ({}): {f}", run.store);
        }
    }
    failures.is_empty()
}

/// Accepted webhooks delivered at least once.
fn delivered(run: &Run) -> usize {
    let inner = run.ledger.lock();
    inner
        .slots
        .iter()
        .filter(|s| s.outcome == Outcome::Accepted && s.deliveries > 0)
        .count()
}

fn counts(run: &Run, failures: &mut Vec<String>) {
    let inner = run.ledger.lock();
    let sent: Vec<_> = inner
        .slots
        .iter()
        .filter(|s| s.outcome != Outcome::Unsent)
        .collect();
    let accepted: Vec<_> = sent
        .iter()
        .filter(|s| s.outcome == Outcome::Accepted)
        .collect();
    let delivered = accepted.iter().filter(|s| s.deliveries > 0).count();
    let lost: Vec<usize> = (0..inner.slots.len())
        .filter(|&i| inner.slots[i].outcome == Outcome::Accepted && inner.slots[i].deliveries == 0)
        .collect();
    let duplicates: u64 = sent
        .iter()
        .map(|s| u64::from(s.deliveries.saturating_sub(1)))
        .sum();
    let unacked = sent
        .iter()
        .filter(|s| s.outcome != Outcome::Accepted && s.deliveries > 0)
        .count();
    let (ex_sent, ex_ok, _) = &run.executes;
    println!("| count | value |");
    println!("|---|---:|");
    println!("| webhooks posted | {} |", sent.len());
    println!("| accepted (2xx) | {} |", accepted.len());
    println!(
        "| not accepted (errors below) | {} |",
        sent.len() - accepted.len()
    );
    println!("| accepted and delivered | {delivered} |");
    println!("| duplicate deliveries (at-least-once) | {duplicates} |");
    println!("| delivered without a 2xx (answer lost to a kill) | {unacked} |");
    println!("| **lost** (accepted, never delivered) | {} |", lost.len());
    println!("| deliveries of no posted webhook | {} |", inner.unexpected);
    println!(
        "| final wait for deliveries | {} |",
        run.drained_in
            .map_or("deadline passed".to_owned(), |d| format!(
                "{:.1} s",
                d.as_secs_f64()
            ))
    );
    println!("| executes sent | {ex_sent} |");
    println!("| executes answered correctly | {ex_ok} |");
    println!();
    if accepted.is_empty() || *ex_ok == 0 {
        failures.push("no webhook accepted or no execute answered: the load did not run".into());
    }
    if inner.unexpected > 0 {
        failures.push(format!(
            "{} deliveries named no webhook this run posted",
            inner.unexpected
        ));
    }
    if !lost.is_empty() {
        failures.push(format!(
            "{} accepted webhooks were never delivered",
            lost.len()
        ));
        println!("Lost webhooks (first {LOST_SHOWN}): delivery id, posted at, nearest restarts");
        for &i in lost.iter().take(LOST_SHOWN) {
            let at = inner.slots[i].posted_at;
            let near = |role: Role| {
                let before = run.restarts.iter().rfind(|r| r.role == role && r.at <= at);
                let after = run.restarts.iter().find(|r| r.role == role && r.at > at);
                format!(
                    "{} restarted before at {}, after at {}",
                    role.name(),
                    before.map_or("-".into(), |r| format!("{:.1} s", r.at.as_secs_f64())),
                    after.map_or("-".into(), |r| format!("{:.1} s", r.at.as_secs_f64()))
                )
            };
            println!(
                "- {}-{i}: posted at {:.3} s; {}; {}",
                run.delivery_tag,
                at.as_secs_f64(),
                near(Role::Runtime),
                near(Role::Gateway)
            );
        }
        println!();
    }
}

fn errors(run: &Run) {
    println!("| errors by kind | count |");
    println!("|---|---:|");
    let streams = [("webhook", &run.webhooks), ("execute", &run.executes.2)];
    for (stream, errors) in streams {
        if errors.is_empty() {
            println!("| {stream}: none | 0 |");
        }
        for (kind, n) in errors {
            println!("| {stream}: {kind} | {n} |");
        }
    }
    println!();
}

fn restarts(run: &Run) {
    println!("| t (s) | restarted | how | pid | serving again after (ms) |");
    println!("|---:|---|---|---|---:|");
    for r in &run.restarts {
        let pid = |p: Option<u32>| p.map_or("-".to_owned(), |p| p.to_string());
        println!(
            "| {:.1} | {} | SIGKILL, then started again | {} → {} | {} |",
            r.at.as_secs_f64(),
            r.role.name(),
            pid(r.old_pid),
            pid(r.new_pid),
            ms(Some(r.back_after))
        );
    }
    println!();
}

fn windows(run: &Run) {
    println!("| window (s) | webhooks accepted | p99 POST (ms) | executes ok | p99 execute (ms) | first deliveries | p99 POST→delivery (ms) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let inner = run.ledger.lock();
    let w = run.window.as_secs_f64();
    for (i, win) in inner.windows.iter().enumerate() {
        let last = i + 1 == inner.windows.len();
        let span = if last {
            format!("{:.0}–end", i as f64 * w)
        } else {
            format!("{:.0}–{:.0}", i as f64 * w, (i + 1) as f64 * w)
        };
        println!(
            "| {span} | {} | {} | {} | {} | {} | {} |",
            win.post.count(),
            ms(win.post.quantile(0.99)),
            win.execute.count(),
            ms(win.execute.quantile(0.99)),
            win.delivery.count(),
            ms(win.delivery.quantile(0.99)),
        );
    }
    println!();
}

fn resources(run: &Run) {
    println!("| t (s) | bench RSS (MiB) | bench fds | gateway pid | gateway RSS (MiB) | gateway fds | runtime pid | runtime RSS (MiB) | runtime fds |");
    println!("|---:|---:|---:|---|---:|---:|---|---:|---:|");
    let mut previous: [Option<u32>; 3] = [None; 3];
    for s in &run.samples {
        let mut cells = Vec::new();
        for (i, of) in s.of.iter().enumerate() {
            let (pid, rss, fds) = match of {
                Some((pid, u)) => {
                    // A pid that changed since the previous sample: the child restarted.
                    let mark = if previous[i].is_some_and(|p| p != *pid) {
                        " (restarted)"
                    } else {
                        ""
                    };
                    previous[i] = Some(*pid);
                    (
                        format!("{pid}{mark}"),
                        format!("{:.1}", u.rss_kib as f64 / 1024.0),
                        u.fds.to_string(),
                    )
                }
                None => ("down".to_owned(), "-".to_owned(), "-".to_owned()),
            };
            if i > 0 {
                cells.push(pid);
            }
            cells.push(rss);
            cells.push(fds);
        }
        let settled = if s.settled { "" } else { " (unsettled)" };
        println!(
            "| {:.1}{settled} | {} |",
            s.at.as_secs_f64(),
            cells.join(" | ")
        );
    }
    println!();
}

/// Growth of each role over the last half (for a child, since its last start in it).
fn growth(run: &Run, failures: &mut Vec<String>) {
    let half = Duration::from_secs_f64(run.secs / 2.0);
    println!("Growth over the last half (t ≥ {:.0} s), last sample vs the first of that half (children: since their last start):", half.as_secs_f64());
    println!();
    println!("| process | samples | first (RSS MiB / fds) | last (RSS MiB / fds) | RSS growth | fd growth | ran the whole half |");
    println!("|---|---:|---|---|---:|---:|---|");
    let mut warnings = Vec::new();
    for (i, role) in Role::ALL.into_iter().enumerate() {
        let in_half: Vec<(u32, Usage)> = run
            .samples
            .iter()
            .filter(|s| s.at >= half)
            .filter_map(|s| s.of[i])
            .collect();
        let Some(&(last_pid, _)) = in_half.last() else {
            println!("| {} | 0 | - | - | n/a | n/a | - |", role.name());
            continue;
        };
        let since: Vec<Usage> = in_half
            .iter()
            .filter(|(p, _)| *p == last_pid)
            .map(|(_, u)| *u)
            .collect();
        let whole = !run.restarts.iter().any(|r| r.role == role && r.at >= half)
            && since.len() == in_half.len();
        if since.len() < 2 {
            println!(
                "| {} | {} | - | - | n/a (restarted) | n/a (restarted) | no |",
                role.name(),
                since.len()
            );
            continue;
        }
        let (first, last) = (since[0], since[since.len() - 1]);
        let (rss, fds) = (pct(first.rss_kib, last.rss_kib), pct(first.fds, last.fds));
        let mib = |u: Usage| format!("{:.1} / {}", u.rss_kib as f64 / 1024.0, u.fds);
        println!(
            "| {} | {} | {} | {} | {:+.1} % | {:+.1} % | {} |",
            role.name(),
            since.len(),
            mib(first),
            mib(last),
            rss * 100.0,
            fds * 100.0,
            if whole { "yes" } else { "no" }
        );
        // Fails: fd growth of any process that ran the whole half; RSS growth of the
        // bench process only (see the file's doc comment). The rest warns.
        let rss_line = format!(
            "{} RSS grew {:+.1} % over the last half",
            role.name(),
            rss * 100.0
        );
        let fd_line = format!(
            "{} open fds grew {:+.1} % ({} → {}) over the last half",
            role.name(),
            fds * 100.0,
            first.fds,
            last.fds
        );
        if rss > GROWTH_LIMIT {
            if role == Role::Bench {
                failures.push(rss_line)
            } else {
                warnings.push(rss_line)
            }
        }
        if fds > GROWTH_LIMIT {
            if whole {
                failures.push(fd_line)
            } else {
                warnings.push(fd_line)
            }
        }
    }
    println!();
    for w in warnings {
        println!("WARN ({}): {w}", run.store);
    }
}
