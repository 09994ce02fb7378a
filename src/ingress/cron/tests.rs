use super::*;

/// No fires.
const NONE: [DateTime<Utc>; 0] = [];

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn sched(expr: &str, tz: &str) -> Schedule {
    Schedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr} in {tz}: {e}"))
}

/// The first `n` fires strictly after `start`.
fn fires(s: &Schedule, start: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::with_capacity(n);
    let mut t = start;
    for _ in 0..n {
        t = s.next_after(t).expect("schedule fires");
        out.push(t);
    }
    out
}

/// Every fire in `(from, to]`.
fn fires_until(s: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(f) = s.next_after(t).filter(|f| *f <= to) {
        assert!(f > t, "next_after({t}) = {f} is not after its argument");
        out.push(f);
        t = f;
    }
    out
}

fn err(expr: &str) -> CronError {
    Schedule::parse(expr, "UTC").expect_err(expr)
}

fn next(expr: &str, tz: &str, after: DateTime<Utc>) -> DateTime<Utc> {
    sched(expr, tz).next_after(after).expect("schedule fires")
}

/// The zones the daylight-saving cases use.
const NY: &str = "America/New_York";
const BERLIN: &str = "Europe/Berlin";

mod catch_up;
mod dst;
mod next_after;
mod parse;
