//! PLACEHOLDER until the cron module lands (being written in a scratch crate).
#![allow(missing_docs, dead_code, unreachable_pub)]
use chrono::{DateTime, Utc};
#[derive(Debug, Clone)]
pub struct Schedule {
    tz: String,
}
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("x")]
    X,
}
impl Schedule {
    pub fn parse(_expr: &str, tz: &str) -> Result<Schedule, CronError> {
        Ok(Schedule { tz: tz.into() })
    }
    pub fn timezone(&self) -> &str {
        &self.tz
    }
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        Some(after + chrono::Duration::seconds(1))
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    #[default]
    Skip,
    All,
    Latest,
}
impl std::str::FromStr for CatchUp {
    type Err = CronError;
    fn from_str(_s: &str) -> Result<Self, CronError> {
        Ok(CatchUp::Skip)
    }
}
pub fn missed_fires(
    _s: &Schedule,
    _l: Option<DateTime<Utc>>,
    _n: DateTime<Utc>,
    _m: CatchUp,
    _max: usize,
) -> Vec<DateTime<Utc>> {
    vec![]
}
