//! One trace from webhook to connector, exported over OTLP to a receiver in this test
//! (a tonic server on the protocol's own types): a signed GitHub delivery carrying the
//! sender's `traceparent` is delivered by `invoke` to a connector that invokes
//! another, by `http` to a receiver, and to a connector that fails once. Every span
//! shares the sender's trace id and nests as the guide's "Tracing" page documents;
//! a retried row shows two attempt spans; a collector that is down loses spans
//! (counted), never deliveries.
//!
//! One test in this binary: the tracer is process-wide.
#![cfg(all(feature = "otel", feature = "gateway", feature = "runtime"))]

#[path = "dispatch/support.rs"]
mod dsupport;
#[path = "ingest/support.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsupport::{Recorder, Rt};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use support::{eventually, github_delivery};
use switchboard::gateway::TestGateway;
use switchboard::{
    BaseConnector, ConnectorConfig, ExecuteContext, InvokeOptions, MultiConnectorRunner, Payload,
    Registration, RunnerOptions,
};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";

/// Every span the receiver was sent.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap().clone()
    }

    fn named(&self, name: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(v) => Some(v.clone()),
            any_value::Value::IntValue(i) => Some(i.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

/// The one span named `name` whose parent is `parent`.
fn child(c: &Collector, name: &str, parent: &Span) -> Span {
    let found: Vec<Span> = c
        .named(name)
        .into_iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name:?} under {:?} ({}), got {}: {:#?}",
        parent.name,
        hex(&parent.span_id),
        found.len(),
        c.spans()
            .iter()
            .map(|s| (s.name.clone(), hex(&s.span_id), hex(&s.parent_span_id)))
            .collect::<Vec<_>>()
    );
    found.into_iter().next().unwrap()
}

/// Invokes `acme.recorder.leaf` inside a span of its own.
struct Chain;

#[async_trait]
impl BaseConnector for Chain {
    fn connector_type(&self) -> &str {
        "chain"
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        unreachable!("called with a context")
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        _: Option<&str>,
        ctx: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        let answer = ctx
            .invoke(
                "acme.recorder.leaf",
                "record",
                payload,
                InvokeOptions::default(),
            )
            .instrument(tracing::info_span!("user_work"))
            .await?;
        answer.payload()
    }
}

async fn start_collector() -> (Collector, String, tokio::sync::oneshot::Sender<()>) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let svc = TraceServiceServer::new(collector.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
    });
    (collector, url, stop)
}

/// An HTTP receiver that records each request's `traceparent`.
async fn start_receiver() -> (Arc<Mutex<Vec<String>>>, String) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let s = s.clone();
            async move {
                let tp = headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                s.lock().unwrap().push(tp);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (seen, url)
}

async fn register(regs: Vec<Registration>) {
    let runner = MultiConnectorRunner::new(RunnerOptions::default(), regs).unwrap();
    let handles = runner.registrations();
    tokio::spawn(async move {
        let _ = runner.run().await;
    });
    for h in handles {
        h.wait_registered(Duration::from_secs(10)).await.unwrap();
    }
}

fn registration(gw: &TestGateway, instance: &str, c: impl BaseConnector + 'static) -> Registration {
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id(instance)
        .build()
        .unwrap();
    Registration::new(cfg, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_sender_through_every_hop() {
    let (collector, otlp, stop_collector) = start_collector().await;
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp);
    std::env::set_var("OTEL_SERVICE_NAME", "switchboard-test");
    let telemetry = switchboard::Telemetry::from_env()
        .unwrap()
        .expect("the endpoint is set");
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();

    let gw = TestGateway::start().await;
    let leaf = Recorder::default();
    let flaky = Recorder::failing(1);
    register(vec![
        registration(&gw, "chain", Chain),
        registration(&gw, "leaf", leaf.clone()),
        registration(&gw, "flaky", flaky.clone()),
    ])
    .await;
    let (received, receiver_url) = start_receiver().await;
    let config = format!(
        r#"[gateway]
url = "{ws}"
tenant = "acme"
instance_id = "rt1"

[outbound]
allow = ["127.0.0.0/8"]

[[sources]]
id = "github"
provider = "github"
secret_env = ["GH_SECRET"]

[[triggers]]
id = "to-chain"
sources = ["github"]
handler = {{ invoke = "acme.chain.chain", capability = "go" }}

[[triggers]]
id = "to-receiver"
sources = ["github"]
handler = {{ http = "{receiver_url}", secret_env = "SW_SECRET" }}

[[triggers]]
id = "flaky"
sources = ["github"]
handler = {{ invoke = "acme.recorder.flaky", capability = "record" }}
retry = {{ max_attempts = 3, backoff = "constant", base = "50ms" }}
"#,
        ws = gw.ws_url()
    );
    let mut rt = Rt::sqlite(&config, &[]).await;
    rt.rt()
        .registration()
        .unwrap()
        .wait_registered(Duration::from_secs(10))
        .await
        .unwrap();

    let secret = support::env("GH_SECRET").unwrap();
    let mut d = github_delivery(
        secret.as_bytes(),
        "d-1",
        json!({"action": "opened", "issue": {"number": 1}}).to_string(),
    );
    d.headers
        .push(("traceparent".into(), format!("00-{TRACE}-{SENDER_SPAN}-01")));
    d.headers
        .push(("tracestate".into(), "congo=t61rcWkgMzE".into()));
    let client = reqwest::Client::new();
    let mut req = client.post(format!("{}/hooks/github", rt.base));
    for (k, v) in &d.headers {
        req = req.header(k, v);
    }
    let status = req.body(d.body.clone()).send().await.unwrap().status();
    assert_eq!(status, 200);

    // Delivered everywhere: the leaf through the chain, the receiver, and the flaky
    // connector on its second attempt.
    eventually("the deliveries", || async {
        (leaf.count() == 1 && received.lock().unwrap().len() == 1 && flaky.count() == 2)
            .then_some(())
    })
    .await;
    assert!(
        received.lock().unwrap()[0].starts_with(&format!("00-{TRACE}-")),
        "the http receiver continues the sender's trace: {:?}",
        received.lock().unwrap()
    );
    let leaf_ctx = &leaf.seen()[0];
    assert!(leaf_ctx.ctx("traceparent").contains(TRACE));
    assert_eq!(leaf_ctx.ctx("tracestate"), "congo=t61rcWkgMzE");

    // The spans: all exported (batches linger 200 ms), all in the sender's trace.
    eventually("the spans", || async {
        (collector.named("execute record").len() >= 4
            && collector.named("process flaky").len() == 2
            && collector.named("process to-receiver").len() == 1)
            .then_some(())
    })
    .await;
    for s in collector.spans() {
        assert_eq!(hex(&s.trace_id), TRACE, "{} is in another trace", s.name);
    }
    let create = {
        let all = collector.named("create github");
        assert_eq!(all.len(), 1);
        all.into_iter().next().unwrap()
    };
    assert_eq!(hex(&create.parent_span_id), SENDER_SPAN);
    assert_eq!(create.kind, 4, "create is a PRODUCER span");
    assert_eq!(
        attr(&create, "messaging.operation.type").as_deref(),
        Some("create")
    );
    assert_eq!(
        attr(&create, "messaging.destination.name").as_deref(),
        Some("github")
    );

    // process (CONSUMER) is the child of the creation context and links to it.
    let process = child(&collector, "process to-chain", &create);
    assert_eq!(process.kind, 5, "process is a CONSUMER span");
    assert_eq!(process.links.len(), 1);
    assert_eq!(process.links[0].span_id, create.span_id);
    assert_eq!(process.links[0].trace_state, "congo=t61rcWkgMzE");
    assert_eq!(
        attr(&process, "messaging.system").as_deref(),
        Some("switchboard")
    );
    assert_eq!(
        attr(&process, "messaging.operation.type").as_deref(),
        Some("process")
    );
    assert_eq!(
        attr(&process, "messaging.destination.name").as_deref(),
        Some("to-chain")
    );
    assert_eq!(attr(&process, "switchboard.attempt").as_deref(), Some("1"));

    // The gateway's round trip (CLIENT), the chain's execute (SERVER, the SDK's
    // tracing span), the chain's own span, then the invoke's round trip and the leaf.
    let round_trip = child(&collector, "execute go", &process);
    assert_eq!(
        round_trip.kind, 3,
        "the gateway's round trip is a CLIENT span"
    );
    let executes: Vec<Span> = collector
        .named("execute go")
        .into_iter()
        .filter(|s| s.parent_span_id == round_trip.span_id)
        .collect();
    assert_eq!(
        executes.len(),
        1,
        "the chain's execute under the round trip"
    );
    let chain_execute = &executes[0];
    assert_eq!(chain_execute.kind, 2, "the SDK's execute is a SERVER span");
    let work = child(&collector, "user_work", chain_execute);
    let invoke_trip = child(&collector, "execute record", &work);
    let leaf_execute = child(&collector, "execute record", &invoke_trip);
    assert_eq!(leaf_execute.kind, 2);

    // The retried row: two attempt spans, the first failed with its error type.
    let mut attempts = collector.named("process flaky");
    attempts.sort_by_key(|s| attr(s, "switchboard.attempt"));
    assert_eq!(
        attr(&attempts[0], "switchboard.attempt").as_deref(),
        Some("1")
    );
    assert_eq!(
        attr(&attempts[1], "switchboard.attempt").as_deref(),
        Some("2")
    );
    assert_eq!(attr(&attempts[0], "error.type").as_deref(), Some("handler"));
    assert_eq!(attempts[0].status.as_ref().map(|s| s.code), Some(2));
    assert!(attr(&attempts[0], "switchboard.retry.delay_ms").is_some());
    assert_eq!(attr(&attempts[1], "error.type"), None);
    for a in &attempts {
        assert_eq!(a.parent_span_id, create.span_id);
    }

    // The collector goes away: deliveries go on, spans are dropped and counted.
    let _ = stop_collector.send(());
    let before = leaf.count();
    let d2 = github_delivery(
        secret.as_bytes(),
        "d-2",
        json!({"action": "opened", "issue": {"number": 2}}).to_string(),
    );
    let mut req = client.post(format!("{}/hooks/github", rt.base));
    for (k, v) in &d2.headers {
        req = req.header(k, v);
    }
    assert_eq!(
        req.body(d2.body.clone()).send().await.unwrap().status(),
        200
    );
    eventually("the delivery without a collector", || async {
        (leaf.count() == before + 1).then_some(())
    })
    .await;
    eventually("the dropped spans counted", || async {
        let text = rt.metrics().await;
        let line = text
            .lines()
            .find(|l| l.starts_with("switchboard_dispatch_spans_dropped_total "))?
            .to_owned();
        let n: f64 = line.rsplit(' ').next()?.parse().ok()?;
        (n > 0.0).then_some(())
    })
    .await;
    rt.stop().await;
    telemetry.shutdown().await;
}
