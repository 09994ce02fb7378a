//! The PostgreSQL floor of the outbox benches: the least a claimer can do to take due
//! rows off the outbox, one statement locking (`FOR UPDATE SKIP LOCKED`) and deleting
//! the 100 oldest due rows, looped; nothing read, leased or run. Shared by the benches
//! that print it beside the dispatcher (`dispatch.rs`, `drain.rs`), so both measure
//! the same floor.

/// A connection with the floor's statement prepared: connected before the clock
/// starts, so the timed part is the deletes alone.
pub struct PgFloor {
    client: tokio_postgres::Client,
    stmt: tokio_postgres::Statement,
}

impl PgFloor {
    /// Connects to `url` (its `search_path` selects the bench's schema) and prepares.
    pub async fn connect(url: &str) -> PgFloor {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect to PostgreSQL");
        tokio::spawn(conn);
        let stmt = client
            .prepare(
                "WITH c AS (SELECT id FROM outbox WHERE next_attempt_at <= $1
                    ORDER BY next_attempt_at, id LIMIT 100 FOR UPDATE SKIP LOCKED)
                 DELETE FROM outbox USING c WHERE outbox.id = c.id",
            )
            .await
            .expect("prepare the floor's statement");
        PgFloor { client, stmt }
    }

    /// Deletes every row due at `now`, 100 a statement; returns how many.
    pub async fn delete_due(&self, now: i64) -> u64 {
        let mut deleted = 0;
        loop {
            let n = self.client.execute(&self.stmt, &[&now]).await.unwrap();
            if n == 0 {
                return deleted;
            }
            deleted += n;
        }
    }
}
