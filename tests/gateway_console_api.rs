//! The operator console's JSON views (issue 25), driven over HTTP against a real
//! gateway with real connectors registered over real sockets (WebSocket and gRPC):
//! paged and filtered registrations with their live figures, tenants, connections
//! with their peers, the per-second series, bad parameters, and the operator token.
#![cfg(feature = "gateway")]

mod common;

use std::net::SocketAddr;

use async_trait::async_trait;
use common::{eventually_some, start, tagged, Described};
use serde_json::{json, Value};
use switchboard::gateway::{GatewayConfig, TestGateway};
use switchboard::{BaseConnector, ConnectorConfig, Error, Payload, Registration, RunnerOptions};

const TOKEN: &str = "op-token";

/// Fails every execute.
struct Failing;

#[async_trait]
impl BaseConnector for Failing {
    fn connector_type(&self) -> &str {
        "failing"
    }
    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        Err(Error::Connector("upstream said no".into()))
    }
}

async fn gateway() -> TestGateway {
    TestGateway::start_with(GatewayConfig::default().with_admin_token(TOKEN)).await
}

/// `GET {base}{path}` with the operator token: status and JSON body.
async fn get(base: &str, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get_ok(base: &str, path: &str) -> Value {
    let (code, v) = get(base, path).await;
    assert_eq!(code, 200, "{path}: {v}");
    v
}

async fn execute(base: &str, arn: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("{base}/api/v1/connectors/{arn}/execute"))
        .bearer_auth(TOKEN)
        .json(&json!({"payload": {"n": 1}}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn arns(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["arn"].as_str().unwrap().to_owned())
        .collect()
}

fn item<'a>(page: &'a Value, arn: &str) -> &'a Value {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["arn"] == arn)
        .unwrap_or_else(|| panic!("{arn} not in {page}"))
}

/// acme: `a`..`d` (tagged) and `bad` (failing) over WebSocket; beta: `x` over gRPC.
fn registrations(gw: &TestGateway) -> Vec<Registration> {
    let ws = gw.ws_url();
    let grpc = gw.grpc_url().expect("the test gateway serves gRPC");
    let bad = ConnectorConfig::builder(&ws, "acme")
        .instance_id("bad")
        .build()
        .unwrap();
    vec![
        tagged(&ws, "acme", "d"),
        tagged(&ws, "acme", "b"),
        tagged(&ws, "acme", "a"),
        tagged(&ws, "acme", "c"),
        Registration::new(bad, Failing),
        tagged(&grpc, "beta", "x"),
    ]
}

#[tokio::test]
async fn registrations_are_paged_by_arn_filtered_and_carry_their_live_figures() {
    let gw = gateway().await;
    let (_runner, _join) = start(RunnerOptions::default(), registrations(&gw)).await;
    let base = gw.http_url();

    // Three pages of two, chained by `next`.
    let mut seen = Vec::new();
    let mut path = "/api/v1/registrations?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = get_ok(&base, &path).await;
        pages += 1;
        assert_eq!(page["total"], 6, "{page}");
        let got = arns(&page);
        assert_eq!(got.len(), 2, "{page}");
        seen.extend(got.clone());
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(next, got[1], "next is the page's last ARN");
                path = format!("/api/v1/registrations?limit=2&after={next}");
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        seen,
        [
            "matrix:acme:failing:bad",
            "matrix:acme:tagged:a",
            "matrix:acme:tagged:b",
            "matrix:acme:tagged:c",
            "matrix:acme:tagged:d",
            "matrix:beta:tagged:x",
        ]
    );

    // Filters, with the total of every match.
    let page = get_ok(&base, "/api/v1/registrations?tenant=acme&q=TAGGED:B").await;
    assert_eq!(arns(&page), ["matrix:acme:tagged:b"]);
    assert_eq!(
        (page["total"].clone(), page["next"].clone()),
        (json!(1), Value::Null)
    );
    let page = get_ok(&base, "/api/v1/registrations?transport=grpc").await;
    assert_eq!(arns(&page), ["matrix:beta:tagged:x"]);
    assert_eq!(page["items"][0]["transport"], "grpc");
    let page = get_ok(&base, "/api/v1/registrations?tenant=acme&q=tagged&limit=3").await;
    assert_eq!(page["total"], 4);
    assert_eq!(page["next"], "matrix:acme:tagged:c");
    let page = get_ok(&base, "/api/v1/registrations?status=pending").await;
    assert_eq!((arns(&page).len(), page["total"].clone()), (0, json!(0)));
    let page = get_ok(&base, "/api/v1/registrations?status=approved&tenant=").await;
    assert_eq!(page["total"], 6, "an empty parameter is not a filter");

    // Live figures: executes routed to each registration, and their failures.
    for _ in 0..3 {
        assert_eq!(execute(&base, "matrix:acme:tagged:a").await, 200);
    }
    assert_eq!(execute(&base, "matrix:acme:failing:bad").await, 502);
    assert_eq!(execute(&base, "matrix:beta:tagged:x").await, 200);
    let page = get_ok(&base, "/api/v1/registrations").await;
    let a = item(&page, "matrix:acme:tagged:a");
    assert_eq!(
        (
            a["executes"].clone(),
            a["execute_errors"].clone(),
            a["in_flight"].clone()
        ),
        (json!(3), json!(0), json!(0)),
        "{a}"
    );
    let bad = item(&page, "matrix:acme:failing:bad");
    assert_eq!(
        (bad["executes"].clone(), bad["execute_errors"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(item(&page, "matrix:beta:tagged:x")["executes"], 1);
    assert_eq!(item(&page, "matrix:acme:tagged:b")["executes"], 0);
    assert_eq!(a["invokes_received"]["ok"], 0);
    // The /connectors fields are all there, plus when it registered.
    assert_eq!(a["tenant_id"], "acme");
    assert_eq!(a["status"], "approved");
    assert!(a["socket_id"].is_u64());
    let since = a["since_ms"].as_u64().expect("since_ms");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(since > 0 && since <= now, "{since} vs {now}");

    // The old listing is unchanged: a plain array.
    let old = get_ok(&base, "/api/v1/connectors").await;
    assert_eq!(old.as_array().map(Vec::len), Some(6));
}

#[tokio::test]
async fn connections_show_their_peer_and_registrations_and_tenants_their_counts() {
    let gw = gateway().await;
    let (_runner, _join) = start(RunnerOptions::default(), registrations(&gw)).await;
    let base = gw.http_url();

    let page = get_ok(&base, "/api/v1/connections").await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(page["total"], items.len());
    let acme = items
        .iter()
        .find(|c| c["tenant_id"] == "acme" && c["transport"] == "websocket")
        .unwrap_or_else(|| panic!("no acme socket in {page}"));
    assert_eq!(acme["registrations"], 5, "{acme}");
    assert_eq!(
        acme["arns"],
        json!([
            "matrix:acme:failing:bad",
            "matrix:acme:tagged:a",
            "matrix:acme:tagged:b",
            "matrix:acme:tagged:c",
            "matrix:acme:tagged:d",
        ])
    );
    let grpc = items
        .iter()
        .find(|c| c["tenant_id"] == "beta")
        .unwrap_or_else(|| panic!("no beta link in {page}"));
    assert_eq!(grpc["transport"], "grpc");
    assert_eq!(grpc["arns"], json!(["matrix:beta:tagged:x"]));
    for link in [acme, grpc] {
        let peer: SocketAddr = link["peer"]
            .as_str()
            .unwrap_or_else(|| panic!("no peer in {link}"))
            .parse()
            .unwrap();
        assert!(peer.ip().is_loopback(), "{link}");
        assert_ne!(
            peer.port(),
            gw.local_addr().port(),
            "the client's port: {link}"
        );
        assert!(link["since_ms"].as_u64().unwrap() > 0);
        assert_eq!(link["in_flight"], 0);
    }

    // Filtered by tenant, and paged one at a time.
    let beta = get_ok(&base, "/api/v1/connections?tenant=beta").await;
    assert_eq!(beta["total"], 1);
    assert_eq!(beta["items"][0]["id"], grpc["id"]);
    let first = get_ok(&base, "/api/v1/connections?limit=1").await;
    let total = first["total"].as_u64().unwrap();
    assert!(total >= 2, "{first}");
    let next = first["next"].as_u64().expect("more than one page");
    assert_eq!(first["items"][0]["id"], next);
    let second = get_ok(&base, &format!("/api/v1/connections?limit=1&after={next}")).await;
    assert!(
        second["items"][0]["id"].as_u64().unwrap() > next,
        "{second}"
    );

    let tenants = get_ok(&base, "/api/v1/tenants").await;
    let by_id = |id: &str| {
        tenants["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tenant_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no tenant {id} in {tenants}"))
    };
    let acme = by_id("acme");
    assert_eq!(
        (
            acme["registrations"].clone(),
            acme["approved"].clone(),
            acme["pending"].clone()
        ),
        (json!(5), json!(5), json!(0))
    );
    assert!(acme["connections"].as_u64().unwrap() >= 1, "{acme}");
    let beta = by_id("beta");
    assert_eq!(
        (beta["connections"].clone(), beta["registrations"].clone()),
        (json!(1), json!(1))
    );
}

#[tokio::test]
async fn the_series_gains_a_point_a_second_with_the_round_trips_and_their_latency() {
    let gw = gateway().await;
    let (_runner, _join) = start(RunnerOptions::default(), registrations(&gw)).await;
    let base = gw.http_url();
    for _ in 0..4 {
        assert_eq!(execute(&base, "matrix:acme:tagged:a").await, 200);
    }
    assert_eq!(execute(&base, "matrix:acme:failing:bad").await, 502);

    // The sampler ticks each second: wait for the points that hold those five.
    let series = eventually_some("points holding the executes", || async {
        let s = get_ok(&base, "/api/v1/stats/series").await;
        let points = s["points"].as_array().unwrap();
        let sum = |k: &str| points.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
        (sum("round_trips") >= 5).then_some(s)
    })
    .await;
    assert_eq!(series["interval_ms"], 1000);
    let points = series["points"].as_array().unwrap();
    let errors: u64 = points.iter().map(|p| p["errors"].as_u64().unwrap()).sum();
    assert_eq!(errors, 1, "{series}");
    let busy = points
        .iter()
        .find(|p| p["round_trips"].as_u64().unwrap() > 0)
        .unwrap();
    let p50 = busy["latency_p50_ms"].as_f64().expect("a latency");
    let p99 = busy["latency_p99_ms"].as_f64().expect("a latency");
    assert!(p50 > 0.0 && p50 <= p99, "{busy}");
    assert!(busy["at_ms"].as_u64().unwrap() > 0);

    // And more points keep coming, one a second.
    let had = points.len();
    eventually_some("another point", || async {
        let s = get_ok(&base, "/api/v1/stats/series").await;
        (s["points"].as_array().unwrap().len() > had).then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_parameters_are_a_400_naming_them_and_the_routes_need_the_token() {
    let gw = gateway().await;
    let base = gw.http_url();
    for (path, says) in [
        ("/api/v1/registrations?limit=0", "limit"),
        ("/api/v1/registrations?limit=501", "limit"),
        ("/api/v1/registrations?limit=many", "limit"),
        ("/api/v1/registrations?status=gone", "status"),
        ("/api/v1/registrations?transport=udp", "transport"),
        ("/api/v1/registrations?colour=red", "colour"),
        ("/api/v1/connections?after=abc", "after"),
        ("/api/v1/connections?limit=9999", "limit"),
    ] {
        let (code, v) = get(&base, path).await;
        assert_eq!(code, 400, "{path}: {v}");
        assert_eq!(v["error"], "bad_request", "{path}: {v}");
        assert!(v["message"].as_str().unwrap().contains(says), "{path}: {v}");
    }
    for path in [
        "/api/v1/registrations",
        "/api/v1/tenants",
        "/api/v1/connections",
        "/api/v1/stats/series",
    ] {
        let resp = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{path} without the token");
        assert_eq!(get(&base, path).await.0, 200, "{path} with it");
    }
}

#[tokio::test]
async fn one_registration_shows_what_its_connector_sent_and_an_unknown_arn_is_a_404() {
    let gw = gateway().await;
    let base = gw.http_url();
    let cfg = ConnectorConfig::builder(gw.ws_url(), "acme")
        .instance_id("d")
        .display_name("Tickets (EU)")
        .tags(["eu", "tickets"])
        .metadata("region", "eu-west-1")
        .metadata(
            "blob",
            "x".repeat(switchboard::gateway::MAX_LISTED_METADATA_BYTES + 1),
        )
        .build()
        .unwrap();
    let (runner, join) = start(
        RunnerOptions::default(),
        vec![Registration::new(cfg, Described)],
    )
    .await;
    let arn = gw.registrations()[0].arn.clone();
    let v = get_ok(&base, &format!("/api/v1/registrations/{arn}")).await;
    assert_eq!(v["arn"], arn.as_str());
    assert_eq!(v["capabilities"], json!(["create_issue"]));
    // What the connector sent about itself, as it sent it.
    assert_eq!(v["display_name"], "Tickets (EU)");
    assert_eq!(v["version"], "2.4.1");
    assert_eq!(v["tags"], json!(["eu", "tickets"]));
    let instance = &v["instance_metadata"];
    assert_eq!(instance["region"], "eu-west-1");
    assert_eq!(instance["sdk.name"], "switchboard", "the SDK's own entries");
    assert!(
        instance.get("blob").is_none(),
        "values over the listing limit are left out: {instance}"
    );
    let schema = &v["capability_schemas"][0];
    assert_eq!(schema["name"], "Create issue");
    assert_eq!(schema["description"], "Opens an issue");
    assert_eq!(schema["category"], "ticketing");
    assert_eq!(schema["icon"], "ticket");
    let input: Value = serde_json::from_str(schema["input_schema"].as_str().unwrap()).unwrap();
    assert_eq!(input["required"], json!(["title"]));
    let (code, body) = get(&base, "/api/v1/registrations/arn:nope").await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["code"], "not_found");
    runner.shutdown_handle().shutdown();
    join.await.unwrap().unwrap();
}
