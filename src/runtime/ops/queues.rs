//! Queue receive, ack and nack, and the dead-letter listing.

use std::time::Duration;

use super::base::{
    OpError, Operations, QueueLimits, DEFAULT_RECEIVE, MAX_DEAD_LETTER_PAGE, MAX_RECEIVE,
};
use crate::clock::now_ms;
use crate::outbox::model::{DeadLetter, DeadLetterQuery, ReceiveOutcome, ReceiveRequest};

impl Operations {
    fn queue(&self, name: &str) -> Result<QueueLimits, OpError> {
        self.queues
            .get(name)
            .copied()
            .ok_or_else(|| OpError::NotFound(format!("no queue {name:?}")))
    }

    /// Receives up to `max` messages (default [`DEFAULT_RECEIVE`], at most
    /// [`MAX_RECEIVE`]), invisible to others for `visibility` (default: the queue's).
    pub async fn receive(
        &self,
        queue: &str,
        max: Option<usize>,
        visibility: Option<Duration>,
    ) -> Result<ReceiveOutcome, OpError> {
        let limits = self.queue(queue)?;
        let req = ReceiveRequest {
            queue: queue.to_owned(),
            max: max.unwrap_or(DEFAULT_RECEIVE).clamp(1, MAX_RECEIVE),
            now_ms: now_ms(),
            visibility_ms: visibility.unwrap_or(limits.visibility).as_millis() as i64,
            max_receives: limits.max_receives,
        };
        let got = self.store.backend().receive(&req).await?;
        self.metrics.queue_dead_lettered(queue, got.dead_lettered);
        Ok(got)
    }

    /// Deletes a received message; `false` when the receipt no longer holds it.
    pub async fn ack(&self, queue: &str, id: i64, receipt: i64) -> Result<bool, OpError> {
        self.queue(queue)?;
        Ok(self.store.backend().ack(queue, id, receipt).await?)
    }

    /// Makes a received message visible again after `delay`.
    pub async fn nack(
        &self,
        queue: &str,
        id: i64,
        receipt: i64,
        delay: Duration,
    ) -> Result<bool, OpError> {
        self.queue(queue)?;
        let at = now_ms() + delay.as_millis() as i64;
        Ok(self.store.backend().nack(queue, id, receipt, at).await?)
    }

    /// Dead letters, newest first.
    pub async fn dead_letters(
        &self,
        mut query: DeadLetterQuery,
    ) -> Result<Vec<DeadLetter>, OpError> {
        query.limit = query.limit.clamp(1, MAX_DEAD_LETTER_PAGE);
        Ok(self.store.backend().dead_letters(&query).await?)
    }
}
