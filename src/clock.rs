//! The crate's one wall clock. Decision cores never call it: they take `now` as an
//! argument (so their tests are plain `#[test]`s); the tasks that drive them read it
//! here and pass it in.

/// Milliseconds since the Unix epoch, by the system clock; 0 for a clock set before
/// 1970 rather than a panic (the value only orders and expires records).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
