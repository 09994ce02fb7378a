//! [`ConfigCheck`]: what a deploy check (`switchboard serve --check`, `switchboard
//! gateway --check`) found, shared by the runtime's and the gateway's checks so both
//! print and exit the same way.

use std::fmt;

/// The outcome of checking a configuration without serving it: a short summary of
/// what would run, and every problem found (not just the first), so that one run of
/// a deploy pipeline's check shows everything to fix.
///
/// Built by [`crate::RuntimeConfig::check`] and
/// [`crate::gateway::GatewayConfig::check`]. `Display` prints the summary, then one
/// `problem: …` line per problem, then a verdict line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigCheck {
    /// What the configuration says would run, one short line each
    /// (`listen: 127.0.0.1:8787`, `source github: provider github`).
    pub summary: Vec<String>,
    /// What would stop or break a start, each naming what is wrong and what to do.
    /// Empty when the configuration may be deployed.
    pub problems: Vec<String>,
}

impl ConfigCheck {
    /// Whether nothing was found wrong: a deploy may go ahead.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Adds a summary line.
    pub(crate) fn note(&mut self, line: impl Into<String>) {
        self.summary.push(line.into());
    }

    /// Adds a problem, unless the same one was already found (a check that looks at
    /// a part alone and then at the whole meets the same error twice).
    pub(crate) fn problem(&mut self, problem: impl Into<String>) {
        let problem = problem.into();
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }
}

impl fmt::Display for ConfigCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.summary {
            writeln!(f, "{line}")?;
        }
        for problem in &self.problems {
            writeln!(f, "problem: {problem}")?;
        }
        match self.problems.len() {
            0 => write!(f, "check passed"),
            1 => write!(f, "check failed: 1 problem"),
            n => write!(f, "check failed: {n} problems"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_summary_then_each_problem_once_then_the_verdict() {
        let mut check = ConfigCheck::default();
        check.note("listen: 127.0.0.1:8787");
        assert!(check.is_ok());
        assert_eq!(check.to_string(), "listen: 127.0.0.1:8787\ncheck passed");
        check.problem("a is wrong");
        check.problem("b is wrong");
        check.problem("a is wrong");
        assert!(!check.is_ok());
        assert_eq!(
            check.to_string(),
            "listen: 127.0.0.1:8787\nproblem: a is wrong\nproblem: b is wrong\ncheck failed: 2 problems"
        );
    }
}
