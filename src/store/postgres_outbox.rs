//! The outbox on postgres (skeleton).

use super::postgres::PostgresBackend;
use crate::error::Result;
use crate::outbox::model::{
    ClaimRequest, ClaimedRow, DeadLetter, DeadLetterQuery, Expired, Finish, OutboxStats,
    ReceiveRequest, Received, RunRecord,
};

#[async_trait::async_trait]
impl crate::outbox::OutboxStore for PostgresBackend {
    async fn claim(&self, _: &ClaimRequest) -> Result<Vec<ClaimedRow>> {
        todo!()
    }
    async fn release(&self, _: &[(i64, i64)], _: i64) -> Result<u64> {
        todo!()
    }
    async fn extend(&self, _: &[(i64, i64)], _: i64) -> Result<u64> {
        todo!()
    }
    async fn finish(&self, _: Vec<Finish>, _: i64) -> Result<u64> {
        todo!()
    }
    async fn next_due_ms(&self, _: &[String]) -> Result<Option<i64>> {
        todo!()
    }
    async fn stats(&self, _: i64) -> Result<OutboxStats> {
        todo!()
    }
    async fn dead_letters(&self, _: &DeadLetterQuery) -> Result<Vec<DeadLetter>> {
        todo!()
    }
    async fn dead_letter(&self, _: i64) -> Result<Option<DeadLetter>> {
        todo!()
    }
    async fn replay(&self, _: i64, _: i64) -> Result<Option<i64>> {
        todo!()
    }
    async fn receive(&self, _: &ReceiveRequest) -> Result<Received> {
        todo!()
    }
    async fn ack(&self, _: &str, _: i64, _: i64) -> Result<bool> {
        todo!()
    }
    async fn nack(&self, _: &str, _: i64, _: i64, _: i64) -> Result<bool> {
        todo!()
    }
    async fn record_run(&self, _: &RunRecord) -> Result<()> {
        todo!()
    }
    async fn runs(&self, _: Option<&str>, _: usize) -> Result<Vec<RunRecord>> {
        todo!()
    }
    async fn expire(&self, _: i64, _: usize) -> Result<Expired> {
        todo!()
    }
    fn wake(&self) -> std::sync::Arc<tokio::sync::Notify> {
        todo!()
    }
}
