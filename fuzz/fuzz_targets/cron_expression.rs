//! Cron expressions from configuration (`[[sources]] provider = "cron"`): any text must
//! parse or be refused with a `CronError`, and a parsed schedule's next fire must come
//! back from its bounded search, later than the instant asked about.
//!
//! Why: a schedule is searched at startup and after every tick; a panic or an endless
//! search there stops every cron source of the runtime.
#![no_main]

use chrono::{TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use switchboard::__private::ingress::cron::Schedule;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for tz in ["UTC", "America/New_York", "Australia/Lord_Howe"] {
        match Schedule::parse(text, tz) {
            Ok(s) => {
                let t = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
                if let Some(next) = s.next_after(t) {
                    assert!(
                        next > t,
                        "{text:?} in {tz}: next fire {next} is not after {t}"
                    );
                    if let Some(again) = s.next_after(next) {
                        assert!(again > next, "{text:?} in {tz}: {again} after {next}");
                    }
                }
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
});
