//! Metrics reports: when they are due and what they carry.

use std::collections::HashMap;
use std::time::Duration;

use super::support::*;
use super::wire::*;
use crate::mux::core::Event;
use crate::proto::stream_message::Message;

const INTERVAL: Duration = Duration::from_secs(10);

fn metrics_due(events: &[Event<u32>]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::MetricsDue(h) => Some(*h),
            _ => None,
        })
        .collect()
}

fn report(h: &mut Harness, custom: HashMap<String, f64>) {
    let (now, a) = (h.now(), h.handles[0]);
    h.conn.send_metrics_report(now, a, custom);
}

#[test]
fn a_metrics_report_is_due_at_the_metrics_interval() {
    let mut h = joined([spec("a").metrics_interval(INTERVAL)]);
    h.tick(INTERVAL - ms(1));
    assert!(metrics_due(&h.events()).is_empty());
    h.tick(ms(1));
    assert_eq!(metrics_due(&h.events()), h.handles);
}

#[test]
fn a_metrics_report_carries_the_arn_the_counters_and_the_custom_figures() {
    let mut h = joined([spec("a").metrics_interval(INTERVAL)]);
    h.deliver(execute("r1", &arn("a")));
    let exec = starts(&h.events())[0].0;
    h.finish(exec, "r1");
    h.sent();
    let custom = HashMap::from([("depth".to_owned(), 3.0)]);
    report(&mut h, custom.clone());
    let sent = h.sent();
    assert!(
        matches!(sent.as_slice(), [Message::MetricsReport(r)]
            if r.connector_arn == arn("a") && r.requests_received == 1 && r.requests_processed == 1 && r.custom_metrics == custom),
        "{sent:?}"
    );
}

#[test]
fn no_metrics_report_is_sent_while_not_registered() {
    let mut h = Harness::new([spec("a").metrics_interval(INTERVAL)]);
    h.connect();
    h.reply_join("ok");
    h.frames();
    report(&mut h, HashMap::new());
    assert!(h.sent().is_empty());
}

#[test]
fn sending_a_metrics_report_schedules_the_next_one() {
    let mut h = joined([spec("a").metrics_interval(INTERVAL)]);
    h.tick(INTERVAL);
    h.events();
    report(&mut h, HashMap::new());
    h.tick(INTERVAL - ms(1));
    assert!(metrics_due(&h.events()).is_empty());
    h.tick(ms(1));
    assert_eq!(metrics_due(&h.events()), h.handles);
}

#[test]
fn a_report_skipped_while_not_registered_still_schedules_the_next_one() {
    let mut h = Harness::new([spec("a").metrics_interval(INTERVAL)]);
    h.connect();
    h.reply_join("ok");
    h.tick(INTERVAL);
    h.events();
    report(&mut h, HashMap::new());
    h.tick(INTERVAL);
    assert_eq!(metrics_due(&h.events()), h.handles);
}

#[test]
fn with_a_zero_metrics_interval_no_report_is_ever_due() {
    let h = joined([spec("a")]);
    assert_eq!(h.conn.poll_timeout(), Some(h.in_(PHOENIX_INTERVAL)));
}
#[test]
fn with_a_zero_metrics_interval_sending_a_report_schedules_none() {
    let mut h = joined([spec("a")]);
    report(&mut h, HashMap::new());
    assert_eq!(h.conn.poll_timeout(), Some(h.in_(PHOENIX_INTERVAL)));
}

#[test]
fn a_report_sent_before_it_is_due_does_not_make_two_due() {
    let mut h = joined([spec("a").metrics_interval(INTERVAL)]);
    h.tick(INTERVAL / 2);
    report(&mut h, HashMap::new());
    h.tick(INTERVAL);
    assert_eq!(metrics_due(&h.events()), h.handles);
}
