//! Cron expressions from configuration: any text must parse or be refused with a
//! `CronError`, and a parsed schedule's next fire must come back (bounded search).
#![no_main]

use chrono::{TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use switchboard::webhooks::cron::Schedule;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for tz in ["UTC", "America/New_York", "Australia/Lord_Howe"] {
        if let Ok(s) = Schedule::parse(text, tz) {
            let t = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
            if let Some(next) = s.next_after(t) {
                assert!(next > t);
            }
        }
    }
});
