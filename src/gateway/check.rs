//! [`GatewayConfig::check`]: what `switchboard gateway --check` runs before a deploy.
//! It validates the settings and reads the data dir as a start would, without
//! binding a port or writing a file.

use std::net::SocketAddr;

use super::config::{ApprovalMode, GatewayConfig};
use crate::check::ConfigCheck;
use crate::error::Error;

impl GatewayConfig {
    /// Checks this configuration for a gateway on `listen` the way
    /// [`super::Gateway::start`] would, without binding or writing anything: the
    /// operator-token rule, the public URL, the trusted issuers' JWKS URLs, and the
    /// data dir's signing key and approvals (a file that does not parse would stop the
    /// start). What a deploy pipeline runs before it rolls a gateway out.
    pub fn check(&self, listen: SocketAddr) -> ConfigCheck {
        let mut report = ConfigCheck::default();
        report.note(format!(
            "listen: {listen} (Phoenix socket, HTTP API, GET /healthz, GET /readyz)"
        ));
        report.note(match self.grpc_listen {
            Some(at) => format!("grpc: {at}"),
            None => "grpc: off".into(),
        });
        report.note(match self.approval {
            ApprovalMode::Auto => "approval: auto",
            ApprovalMode::Manual => "approval: manual",
        });
        report.note(if self.admin_token.is_some() {
            "operator token: set"
        } else {
            "operator token: none (/api and /metrics open)"
        });
        if let Some(problem) = self.open_approval(listen) {
            report.problem(problem);
        }
        if let Some(url) = &self.public_url {
            report.note(format!("public url: {url}"));
            match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                Ok(_) => report.problem(format!(
                    "--public-url {url:?} is not http(s); give the gateway's public base URL, e.g. https://gateway.example.com"
                )),
                Err(e) => report.problem(format!(
                    "--public-url {url:?} is not a URL ({e}); give the gateway's public base URL, e.g. https://gateway.example.com"
                )),
            }
        }
        for t in &self.trusted_issuers {
            report.note(format!(
                "trusted issuer: {} (keys at {})",
                t.issuer, t.jwks_url
            ));
        }
        if let Err(problem) = super::issuers::Issuers::new(self) {
            report.problem(problem);
        }
        match &self.data_dir {
            None => report.note("data dir: none (approvals in memory; a restart forgets them)"),
            Some(dir) => match super::persist::inspect(dir) {
                Ok(line) => report.note(format!("data dir: {line}")),
                Err(e) => {
                    report.note(format!("data dir: {}", dir.display()));
                    report.problem(match e {
                        Error::Config(m) => m,
                        other => other.to_string(),
                    });
                }
            },
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::TrustedIssuer;

    #[test]
    fn a_default_gateway_passes() {
        let report = GatewayConfig::default().check("127.0.0.1:4000".parse().unwrap());
        assert!(report.is_ok(), "{report}");
        assert!(report
            .summary
            .iter()
            .any(|l| l.starts_with("listen: 127.0.0.1:4000")));
    }

    #[test]
    fn every_problem_is_reported_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(super::super::persist::STATE_FILE),
            b"{not json",
        )
        .unwrap();
        let config = GatewayConfig::default()
            .with_approval(ApprovalMode::Manual)
            .with_public_url("gateway.example.com")
            .with_trusted_issuer(TrustedIssuer::new(
                "https://kc.example/realms/a",
                "ftp://kc",
            ))
            .with_data_dir(dir.path());
        let report = config.check("0.0.0.0:4000".parse().unwrap());
        let problems = report.problems.join("\n");
        for needle in [
            "operator token",
            "--public-url",
            "ftp://kc",
            "approvals.json",
        ] {
            assert!(problems.contains(needle), "{needle} in:\n{problems}");
        }
        assert!(!dir.path().join(super::super::persist::KEY_FILE).exists());
    }

    #[test]
    fn a_missing_data_dir_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("gateway");
        let report = GatewayConfig::default()
            .with_data_dir(&data)
            .check("127.0.0.1:4000".parse().unwrap());
        assert!(report.is_ok(), "{report}");
        assert!(report.summary.join("\n").contains("will be created"));
        assert!(!data.exists());
    }
}
