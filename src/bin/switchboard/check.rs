//! `--check` of `switchboard serve` and `switchboard gateway`: load and validate the
//! configuration, print what would run and every problem found, and exit 0 (deploy
//! may go ahead) or 1, without serving. What a deploy pipeline (or systemd's
//! `ExecStartPre`) runs before it starts the real thing.

use std::net::SocketAddr;

use switchboard::ConfigCheck;

/// `switchboard serve --check`: the file read and checked (secrets, connectors'
/// options, CEL, the store's reachability and schema version, read only).
#[cfg(feature = "runtime")]
pub(crate) async fn serve(path: &std::path::Path) -> switchboard::Result<()> {
    let mut report = match switchboard::RuntimeConfig::from_file(path) {
        Ok(config) => config.check().await,
        Err(e) => {
            let mut report = ConfigCheck::default();
            report.problems.push(without_prefix(e));
            report
        }
    };
    report
        .summary
        .insert(0, format!("config: {}", path.display()));
    finish(report)
}

/// `switchboard gateway --check`: the flags' settings checked and the data dir read,
/// with the problems the command line already showed (an unset token variable).
pub(crate) fn gateway(
    config: &switchboard::gateway::GatewayConfig,
    listen: SocketAddr,
    found: Vec<String>,
) -> switchboard::Result<()> {
    let mut report = config.check(listen);
    report.problems.extend(found);
    finish(report)
}

/// A configuration error's message without the error type's own prefix.
#[cfg(feature = "runtime")]
fn without_prefix(e: switchboard::Error) -> String {
    match e {
        switchboard::Error::Config(m) => m,
        other => other.to_string(),
    }
}

/// Prints the report on stdout; an error (exit status 1) when it found a problem.
fn finish(report: ConfigCheck) -> switchboard::Result<()> {
    println!("{report}");
    if report.is_ok() {
        Ok(())
    } else {
        Err(switchboard::Error::Config(format!(
            "the check found {} problem(s), listed above; fix them and run --check again",
            report.problems.len()
        )))
    }
}
