//! Invoke bindings through a real gateway: the runtime registers with the gateway and
//! delivers rows as `invoke_request`s over its shared socket; its own capabilities are
//! executable through the gateway like any connector's.

#[path = "common/mod.rs"]
mod common;
#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::time::Duration;

use common::eventually;
use dsupport::{Recorder, Rt};
use serde_json::{json, Value};
use switchboard::gateway::TestGateway;
use switchboard::{ConnectorConfig, MultiConnectorRunner, Registration, RunnerOptions};

/// A recorder registered on `gw` as `acme.recorder.target`.
async fn target(
    gw: &TestGateway,
    rec: Recorder,
) -> (MultiConnectorRunner, tokio::task::JoinHandle<()>) {
    // Reconnects fast, so after a gateway restart the target is back long before the
    // rows that wait for it have spent their attempts.
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("target")
        .reconnect(switchboard::BackoffPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(100),
        ))
        .build()
        .unwrap();
    let runner =
        MultiConnectorRunner::new(RunnerOptions::default(), [Registration::new(cfg, rec)]).unwrap();
    let handles = runner.registrations();
    let join = {
        let stop = runner.shutdown_handle();
        let _ = stop;
        tokio::spawn(async move {
            let _ = runner.run().await;
        })
    };
    for h in handles {
        h.wait_registered(Duration::from_secs(10)).await.unwrap();
    }
    // The runner moved into its task; hand back a fresh one only for its type.
    (
        MultiConnectorRunner::new(RunnerOptions::default(), []).unwrap(),
        join,
    )
}

fn gateway_section(gw: &TestGateway) -> String {
    format!(
        "[gateway]\nurl = \"{}\"\ntenant = \"acme\"\ninstance_id = \"rt1\"\n",
        gw.ws_url()
    )
}

async fn registered(rt: &Rt) {
    rt.rt()
        .registration()
        .expect("a [gateway] is configured")
        .wait_registered(Duration::from_secs(10))
        .await
        .unwrap();
}

async fn execute(gw_base: &str, arn: &str, capability: &str, payload: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{gw_base}/api/v1/connectors/{arn}/execute"))
        .json(&json!({"payload": payload, "capability_id": capability}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

fn gw_base(gw: &TestGateway) -> String {
    format!("http://{}", gw.local_addr())
}

#[tokio::test]
async fn an_invoke_binding_is_delivered_through_the_gateway_with_its_context() {
    let gw = TestGateway::start().await;
    let rec = Recorder::default();
    let (_r, _join) = target(&gw, rec.clone()).await;
    let config = format!(
        "{}\n[[triggers]]\nid = \"to-target\"\nhandler = {{ invoke = \"acme.recorder.target\", capability = \"record\" }}\n",
        gateway_section(&gw)
    );
    let mut rt = Rt::sqlite(&config, &[]).await;
    registered(&rt).await;
    let id = rt.enqueue("to-target", json!({"ticket": 42})).await;
    eventually("the invoke to reach the target", || async {
        rec.count() == 1
    })
    .await;
    let seen = &rec.seen()[0];
    assert_eq!(seen.payload, json!({"ticket": 42}));
    assert_eq!(seen.ctx("switchboard.event_id"), id);
    assert_eq!(seen.ctx("switchboard.binding"), "to-target");
    assert_eq!(seen.ctx("switchboard.depth"), "0");
    // The W3C context rides along in the same trace (spans are not exported in this
    // binary, so it is the event's creation context, passed through).
    let tp = seen.ctx("traceparent");
    assert_eq!(tp.len(), 55, "{tp:?}");
    assert_eq!(&tp[3..35], seen.ctx("switchboard.trace_id"));
    eventually("the dispatched count", || async {
        rt.get("/api/v1/triggers").await["triggers"][0]["counts"]["dispatched"] == 1
    })
    .await;
    rt.stop().await;
}

#[tokio::test]
async fn the_runtimes_capabilities_are_executable_through_the_gateway() {
    let gw = TestGateway::start().await;
    let config = format!(
        "{}\n[[queues]]\nname = \"work\"\n\n[[triggers]]\nid = \"to-work\"\nhandler = {{ queue = \"work\" }}\n",
        gateway_section(&gw)
    );
    let mut rt = Rt::sqlite(&config, &[]).await;
    registered(&rt).await;
    let arn = rt.rt().registration().unwrap().arn().unwrap();
    let arn = arn.as_str();
    let base = gw_base(&gw);
    let (status, v) = execute(
        &base,
        arn,
        "outbox.enqueue",
        json!({"queue": "work", "payload": {"job": 1}, "idempotency_key": "k1"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["payload"]["duplicate"], false);
    let (_, again) = execute(
        &base,
        arn,
        "outbox.enqueue",
        json!({"queue": "work", "payload": {"job": 1}, "idempotency_key": "k1"}),
    )
    .await;
    assert_eq!(again["payload"]["duplicate"], true, "{again}");
    assert_eq!(again["payload"]["event_id"], v["payload"]["event_id"]);
    let (_, stats) = execute(&base, arn, "outbox.stats", json!({})).await;
    assert_eq!(stats["payload"]["queues"]["work"]["due"], 1, "{stats}");
    let (_, got) = execute(&base, arn, "queue.receive", json!({"queue": "work"})).await;
    let m = &got["payload"]["messages"][0];
    assert_eq!(m["payload"], r#"{"job":1}"#, "{got}");
    let (_, acked) = execute(
        &base,
        arn,
        "queue.ack",
        json!({"queue": "work", "id": m["id"], "receipt": m["receipt"]}),
    )
    .await;
    assert_eq!(acked["payload"]["acked"], true);
    let (_, list) = execute(&base, arn, "dead_letters.list", json!({})).await;
    assert_eq!(list["payload"]["dead_letters"], json!([]));
    let (status, bad) = execute(&base, arn, "outbox.enqueue", json!({"queue": "nope"})).await;
    assert_eq!(status, 502);
    assert!(
        bad["error"].as_str().unwrap().contains("not_found"),
        "{bad}"
    );
    let (status, bad) = execute(&base, arn, "outbox.enqueue", json!({"bogus": 1})).await;
    assert_eq!(status, 502);
    assert!(bad["error"].as_str().unwrap().contains("payload"), "{bad}");
    rt.stop().await;
}

/// A local handler that enqueues its own event again from inside its execute, through
/// the runtime's `outbox.enqueue` capability, so every delivery produces the next hop.
#[derive(Clone, Default)]
struct Looper {
    depths: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl switchboard::BaseConnector for Looper {
    fn connector_type(&self) -> &str {
        "looper"
    }
    async fn execute(
        &self,
        _: switchboard::Payload,
        _: Option<&str>,
    ) -> switchboard::Result<switchboard::Payload> {
        unreachable!()
    }
    async fn execute_with_context(
        &self,
        _: switchboard::Payload,
        _: Option<&str>,
        ctx: &switchboard::ExecuteContext,
    ) -> switchboard::Result<switchboard::Payload> {
        self.depths
            .lock()
            .unwrap()
            .push(ctx.get("switchboard.depth").cloned().unwrap_or_default());
        let answer = ctx
            .invoke(
                "acme.switchboard.rt1",
                "outbox.enqueue",
                switchboard::Payload::Json(json!({"binding": "loop", "payload": {"again": true}})),
                Default::default(),
            )
            .await?;
        Ok(switchboard::Payload::Json(answer.json()?))
    }
}

#[tokio::test]
async fn events_that_handlers_produce_carry_their_depth_and_past_the_maximum_are_dropped() {
    let gw = TestGateway::start().await;
    let looper = Looper::default();
    let config = format!(
        "{}\n[dispatcher]\nmax_depth = 3\n\n[[triggers]]\nid = \"loop\"\nhandler = {{ local = \"looper\", capability = \"x\" }}\n",
        gateway_section(&gw)
    );
    let mut rt = Rt::sqlite_with(&config, |b| b.local_connector("looper", looper.clone())).await;
    let runtime = rt.rt();
    runtime
        .registration()
        .unwrap()
        .wait_registered(Duration::from_secs(10))
        .await
        .unwrap();
    runtime
        .enqueue(switchboard::EnqueueRequest::to_binding(
            "loop",
            b"{}".to_vec(),
        ))
        .await
        .unwrap();
    let ops = runtime.ops().clone();
    eventually("the chain to stop at the maximum depth", || async {
        ops.stats().await.unwrap().depth_dropped == 1
    })
    .await;
    let depths = looper.depths.lock().unwrap().clone();
    assert_eq!(
        depths,
        ["0", "1", "2", "3"],
        "one delivery per depth up to max_depth"
    );
    let stats = ops.stats().await.unwrap();
    assert_eq!(
        stats.stats.total.dead_letters, 0,
        "dropped, not dead-lettered: {stats:?}"
    );
    rt.stop().await;
}

#[tokio::test]
async fn rows_due_while_the_gateway_is_down_wait_and_are_delivered_when_it_returns() {
    let mut gw = TestGateway::start().await;
    let rec = Recorder::default();
    let (_r, _join) = target(&gw, rec.clone()).await;
    let config = format!(
        "{}\n[dispatcher]\npoll_interval = \"100ms\"\n\n[[triggers]]\nid = \"to-target\"\nhandler = {{ invoke = \"acme.recorder.target\", capability = \"record\" }}\nretry = {{ max_attempts = 20, backoff = \"constant\", base = \"100ms\" }}\n",
        gateway_section(&gw)
    );
    let mut rt = Rt::sqlite(&config, &[]).await;
    registered(&rt).await;
    gw.stop().await;
    let registration = rt.rt().registration().unwrap().clone();
    eventually("the runtime to see the gateway gone", || async {
        registration.arn().is_none()
    })
    .await;
    for n in 0..5 {
        rt.enqueue("to-target", json!({"n": n})).await;
    }
    // While the gateway is away the rows stay due: no attempt is spent on them.
    let stats = rt.get("/api/v1/outbox/stats").await;
    assert_eq!(stats["by_binding"]["to-target"]["due"], 5, "{stats}");
    gw.resume().await;
    eventually("every row delivered once the gateway is back", || async {
        rec.count() == 5
    })
    .await;
    let dl = rt.get("/api/v1/dead-letters").await;
    assert_eq!(dl["dead_letters"], json!([]), "nothing dead-lettered: {dl}");
    rt.stop().await;
}

#[tokio::test]
async fn triggers_register_over_the_execute_channel_replaces_a_binding_while_its_rows_drain() {
    let gw = TestGateway::start().await;
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let rec = Recorder::gated(gate.clone());
    let (_r, _join) = target(&gw, rec.clone()).await;
    let mut rt = Rt::sqlite(&gateway_section(&gw), &[]).await;
    registered(&rt).await;
    let arn = rt.rt().registration().unwrap().arn().unwrap();
    let (arn, base) = (arn.as_str(), gw_base(&gw));
    let table = |max: u32| {
        json!({"id": "dyn", "max_concurrent": max,
            "handler": {"invoke": "acme.recorder.target", "capability": "record"}})
    };
    let (status, v) = execute(
        &base,
        arn,
        "triggers.register",
        json!({"trigger": table(1)}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, dup) = execute(
        &base,
        arn,
        "triggers.register",
        json!({"trigger": table(1)}),
    )
    .await;
    assert_eq!(status, 502, "{dup}");
    assert!(dup["error"].as_str().unwrap().contains("conflict"), "{dup}");
    let enqueue = |n: u32| {
        execute(
            &base,
            arn,
            "outbox.enqueue",
            json!({"binding": "dyn", "payload": {"n": n}}),
        )
    };
    assert_eq!(enqueue(1).await.0, 200);
    assert_eq!(enqueue(2).await.0, 200);
    eventually("row 1 in flight", || async {
        rt.trigger("dyn").await["counts"]["in_flight"] == 1
    })
    .await;
    let (status, v) = execute(
        &base,
        arn,
        "triggers.register",
        json!({"trigger": table(4), "replace": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let changes: Vec<String> = v["payload"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("v{} {}", e["version"], e["event"].as_str().unwrap()))
        .collect();
    assert_eq!(changes, ["v1 draining", "v2 registering", "v2 active"]);
    assert_eq!(enqueue(3).await.0, 200);
    gate.add_permits(10);
    eventually("three deliveries", || async { rec.count() == 3 }).await;
    let ran = rec.versions_by_payload();
    assert_eq!(
        ran,
        [
            (1, "dyn@v1".into()),
            (2, "dyn@v1".into()),
            (3, "dyn@v2".into())
        ]
    );
    eventually("dyn@v1 terminated", || async {
        rt.history("dyn")
            .await
            .contains(&"dyn@v1 terminated".to_owned())
    })
    .await;
    let (status, v) = execute(&base, arn, "triggers.deregister", json!({"id": "dyn"})).await;
    assert_eq!(status, 200, "{v}");
    let state = rt.trigger("dyn").await["state"].clone();
    assert!(state == "draining" || state == "terminated", "{state}");
    let (status, _) = execute(
        &base,
        arn,
        "outbox.enqueue",
        json!({"binding": "dyn", "payload": {}}),
    )
    .await;
    assert_eq!(status, 502, "a deregistered binding takes no new events");
    rt.stop().await;
}

/// The line of `text` that starts with `prefix` (a series with its labels), parsed.
fn series(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn metrics_answer_how_long_which_binding_took_and_what_waits() {
    let gw = TestGateway::start().await;
    let rec = Recorder::default();
    let (_r, _join) = target(&gw, rec.clone()).await;
    let failing = Recorder::failing(u32::MAX);
    let config = format!(
        "{}\n[[queues]]\nname = \"work\"\n\n[[triggers]]\nid = \"to-target\"\nhandler = {{ invoke = \"acme.recorder.target\", capability = \"record\" }}\n\n\
         [[triggers]]\nid = \"doomed\"\nhandler = {{ local = \"failing\", capability = \"x\" }}\nretry = {{ max_attempts = 2, backoff = \"constant\", base = \"10ms\", jitter = 0.0 }}\n\n\
         [[triggers]]\nid = \"to-work\"\nhandler = {{ queue = \"work\" }}\n",
        gateway_section(&gw)
    );
    let mut rt = Rt::sqlite(&config, &[("failing", failing.clone())]).await;
    registered(&rt).await;
    rt.enqueue("to-target", json!({"n": 1})).await;
    rt.enqueue("doomed", json!({"n": 2})).await;
    rt.enqueue("to-work", json!({"n": 3})).await;
    let text = support::eventually("the delivery and the dead letter in /metrics", || async {
        let t = rt.metrics().await;
        let delivered = series(
            &t,
            r#"switchboard_dispatch_accepted_to_delivered_seconds_count{binding="to-target",version="1",source="@api",provider="api",tenant="acme"}"#,
        );
        let dead = series(
            &t,
            r#"switchboard_dispatch_accepted_to_dead_lettered_seconds_count{binding="doomed",version="1",source="@api",provider="api",tenant="acme"}"#,
        );
        (delivered == Some(1.0) && dead == Some(1.0)).then_some(t)
    })
    .await;
    assert_eq!(
        series(
            &text,
            r#"switchboard_dispatch_retry_delay_seconds_count{binding="doomed"}"#
        ),
        Some(1.0),
        "one retry scheduled before the second attempt ran out: {text}"
    );
    assert_eq!(
        series(
            &text,
            r#"switchboard_queue_depth{queue="work",state="due"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert!(series(
        &text,
        r#"switchboard_queue_oldest_age_seconds{queue="work"}"#
    )
    .is_some());
    assert_eq!(
        series(
            &text,
            r#"switchboard_outbox_lease_age_seconds{binding="to-target"}"#
        ),
        Some(0.0),
        "nothing in flight: {text}"
    );
    assert!(text.contains("switchboard_dispatch_spans_dropped_total 0"));
    assert!(text.ends_with("# EOF\n"));
    // The gateway's side: the round trip by tenant and outcome.
    let gw_text = reqwest::get(format!("{}/metrics", gw_base(&gw)))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        series(
            &gw_text,
            r#"switchboard_gateway_execute_seconds_count{tenant="acme",outcome="ok"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{gw_text}"
    );
    assert_eq!(gw_text.matches("# EOF").count(), 1);
    rt.stop().await;
}
