//! The database going away under a running dispatcher: PostgreSQL behind a TCP proxy
//! in the test process that the test takes down (every connection cut, new ones
//! refused) and brings back. The dispatcher backs off, ingest answers 503, and once
//! the database is back everything accepted is delivered.

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::sync::Arc;

use common::eventually;
use common::tcp_proxy::Proxy;
use dsupport::{Recorder, Rt};
use serde_json::json;

const CONFIG: &str = r#"
[dispatcher]
poll_interval = "100ms"

[[triggers]]
id = "audit"
handler = { local = "rec", capability = "x" }
retry = { max_attempts = 50, backoff = "constant", base = "100ms" }
"#;

#[tokio::test]
async fn the_dispatcher_backs_off_while_postgres_is_away_and_resumes_when_it_returns() {
    let Some(base) = dsupport::postgres_url() else {
        dsupport::skip_postgres(
            "the_dispatcher_backs_off_while_postgres_is_away_and_resumes_when_it_returns",
        );
        return;
    };
    let direct = dsupport::fresh_postgres_schema(&base).await;
    let proxy = Proxy::start("127.0.0.1:5432".into()).await;
    let via_proxy = direct.replacen("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port), 1);
    assert_ne!(via_proxy, direct, "the test URL names 127.0.0.1:5432");
    let rec = Recorder::default();
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut rt = Rt::on(via_proxy, dir, CONFIG, &[("rec", rec.clone())]).await;
    for n in 0..3 {
        rt.enqueue("audit", json!({"n": n})).await;
    }
    eventually("the first rows delivered", || async { rec.count() == 3 }).await;

    proxy.take_down();
    let (status, v) = rt
        .post("/api/v1/triggers/audit/invoke", json!({"n": "refused"}))
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (503, Some("store_unavailable")),
        "{v}"
    );
    // The dispatcher keeps trying (and counting its store errors) while it is away.
    eventually("the dispatcher to notice the store is away", || async {
        let m = reqwest::get(format!("{}/metrics", rt.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        m.lines()
            .find(|l| l.starts_with("switchboard_dispatch_store_errors_total"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
    .await;

    proxy.bring_up();
    eventually("ingest to accept again", || async {
        rt.post("/api/v1/triggers/audit/invoke", json!({"n": 3}))
            .await
            .0
            == 202
    })
    .await;
    for n in 4..6 {
        rt.enqueue("audit", json!({"n": n})).await;
    }
    eventually("the rows enqueued after the outage delivered", || async {
        rec.count() >= 6
    })
    .await;
    // Once nothing is left in the outbox, whatever was stored has been delivered: a
    // stored refusal would be among the deliveries.
    eventually("the outbox to drain", || async {
        let s = rt.get("/api/v1/outbox/stats").await;
        s["due"] == 0 && s["leased"] == 0 && s["scheduled"] == 0
    })
    .await;
    let ns: Vec<_> = rec.seen().iter().map(|s| s.payload["n"].clone()).collect();
    assert!(
        !ns.contains(&json!("refused")),
        "a refused enqueue stored nothing: {ns:?}"
    );
    rt.stop().await;
}
