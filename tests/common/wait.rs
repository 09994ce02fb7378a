//! The one way the integration tests wait: on a condition, with a deadline. Shared by
//! `tests/common` and `tests/ingest/support.rs` (which test binaries include apart).

use std::future::Future;
use std::time::Duration;

/// Upper bound for anything a test waits on; a hang fails instead of blocking CI.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `check` until it returns `Some`, failing at [`DEADLINE`]. The condition is
/// the event awaited; the short pause between checks only paces them.
pub async fn eventually_some<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_some_or(what, check, String::new).await
}

/// [`eventually_some`] whose failure message ends with `context()` (e.g. a child
/// process's log), read only when the deadline has passed.
pub async fn eventually_some_or<T, F, Fut>(
    what: &str,
    mut check: F,
    context: impl Fn() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `cond` holds; [`eventually_some`] for a yes/no condition.
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(what, || {
        let c = cond();
        async move { c.await.then_some(()) }
    })
    .await
}
