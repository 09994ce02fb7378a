//! Unit tests of `views.rs`: parameter checks, paging over a registry filled
//! directly, and the sampler's timing under tokio's paused clock.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gateway::approvals::Approvals;
use crate::gateway::config::GatewayConfig;
use crate::gateway::link::{ConnectorLink, Outbound};
use crate::gateway::registration_info::RegistrationState;
use crate::proto::RegisterConnectorRequest;

fn state() -> Arc<GatewayState> {
    let config = GatewayConfig::default();
    let approvals = Approvals::open(&config, "127.0.0.1:0".parse().unwrap()).unwrap();
    Arc::new(GatewayState::new(config, approvals))
}

/// Registers `tenant.echo.instance` on a fresh gRPC-shaped link `id`.
fn register(
    state: &GatewayState,
    id: u64,
    tenant: &str,
    instance: &str,
    status: RegistrationState,
) {
    let (tx, _rx) = mpsc::channel(1);
    let link = Arc::new(ConnectorLink::new(
        id,
        Outbound::Grpc { tx },
        4,
        CancellationToken::new(),
        None,
    ));
    state.add_link(link.clone());
    let req = RegisterConnectorRequest {
        tenant_id: tenant.into(),
        connector_type: "echo".into(),
        instance_id: instance.into(),
        ..Default::default()
    };
    state
        .registry()
        .register_as(id, "grpc", &req, link, status, 1000 + id);
}

fn query(pairs: &[(&str, &str)]) -> RegistrationsQuery {
    let mut q = RegistrationsQuery::default();
    for (k, v) in pairs {
        let v = Some((*v).to_owned());
        match *k {
            "tenant" => q.tenant = v,
            "status" => q.status = v,
            "transport" => q.transport = v,
            "q" => q.q = v,
            "limit" => q.limit = v,
            "after" => q.after = v,
            other => panic!("no parameter {other}"),
        }
    }
    q
}

fn arns(page: &Page<RegistrationItem, String>) -> Vec<&str> {
    page.items.iter().map(|i| i.info.arn.as_str()).collect()
}

#[test]
fn bad_parameters_are_refused_with_what_is_allowed() {
    for (pairs, says) in [
        (
            &[("limit", "0")][..],
            "limit must be a whole number from 1 to 500",
        ),
        (&[("limit", "501")][..], "got \"501\""),
        (&[("limit", "ten")][..], "limit"),
        (
            &[("status", "gone")][..],
            "status must be one of approved, pending",
        ),
        (
            &[("transport", "udp")][..],
            "transport must be one of websocket, grpc",
        ),
    ] {
        let err = query(pairs).parse().unwrap_err();
        assert!(err.0.contains(says), "{pairs:?}: {err}");
    }
    let long = "x".repeat(MAX_QUERY_CHARS + 1);
    assert!(query(&[("q", &long)]).parse().is_err());
    let bad_after = ConnectionsQuery {
        after: Some("abc".into()),
        ..Default::default()
    };
    assert!(bad_after.parse().unwrap_err().0.contains("connection id"));
}

#[test]
fn empty_parameters_mean_not_given() {
    let f = query(&[("tenant", ""), ("status", ""), ("limit", ""), ("q", "")])
        .parse()
        .unwrap();
    assert_eq!(f, RegistrationFilter::default());
}

#[test]
fn pages_chain_by_arn_and_filters_count_every_match() {
    let s = state();
    for (id, instance) in [(1, "e"), (2, "a"), (3, "c"), (4, "b"), (5, "d")] {
        register(&s, id, "acme", instance, RegistrationState::Approved);
    }
    register(&s, 6, "other", "a", RegistrationState::Pending);

    let mut filter = RegistrationFilter {
        limit: 2,
        ..Default::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = s.registrations_page(&filter);
        assert_eq!(page.total, 6);
        seen.extend(arns(&page).into_iter().map(str::to_owned));
        match page.next {
            Some(next) => filter.after = Some(next),
            None => break,
        }
    }
    assert_eq!(
        seen,
        [
            "matrix:acme:echo:a",
            "matrix:acme:echo:b",
            "matrix:acme:echo:c",
            "matrix:acme:echo:d",
            "matrix:acme:echo:e",
            "matrix:other:echo:a",
        ]
    );

    let f = query(&[("tenant", "acme"), ("q", "ECHO:B"), ("limit", "1")])
        .parse()
        .unwrap();
    let page = s.registrations_page(&f);
    assert_eq!(
        (arns(&page), page.total, page.next.clone()),
        (vec!["matrix:acme:echo:b"], 1, None)
    );

    let pending = query(&[("status", "pending")]).parse().unwrap();
    let page = s.registrations_page(&pending);
    assert_eq!((arns(&page), page.total), (vec!["matrix:other:echo:a"], 1));
    assert_eq!(page.items[0].since_ms, 1006);

    let f = query(&[
        ("tenant", "acme"),
        ("limit", "3"),
        ("after", "matrix:acme:echo:b"),
    ])
    .parse()
    .unwrap();
    let page = s.registrations_page(&f);
    assert_eq!(
        arns(&page),
        [
            "matrix:acme:echo:c",
            "matrix:acme:echo:d",
            "matrix:acme:echo:e"
        ]
    );
    assert_eq!(
        (page.total, page.next),
        (5, None),
        "the page ends with the matches"
    );
}

#[test]
fn tenants_and_connections_are_counted_from_the_registry_and_links() {
    let s = state();
    register(&s, 1, "acme", "a", RegistrationState::Approved);
    register(&s, 2, "acme", "b", RegistrationState::Pending);
    register(&s, 3, "zeta", "a", RegistrationState::Approved);
    let (tx, _rx) = mpsc::channel(1);
    s.add_link(Arc::new(ConnectorLink::new(
        9,
        Outbound::Grpc { tx },
        4,
        CancellationToken::new(),
        Some("10.0.0.7:4242".parse().unwrap()),
    )));

    let t = s.tenants();
    assert_eq!(t.unbound_connections, 1);
    assert_eq!(
        t.items[0],
        TenantItem {
            tenant_id: "acme".into(),
            connections: 2,
            registrations: 2,
            approved: 1,
            pending: 1,
        }
    );
    assert_eq!(t.items[1].tenant_id, "zeta");

    let page = s.connections_page(&ConnectionFilter {
        limit: 2,
        ..Default::default()
    });
    assert_eq!(page.total, 4);
    assert_eq!(page.next, Some(2));
    assert_eq!(page.items[0].arns, ["matrix:acme:echo:a"]);
    assert_eq!(page.items[0].registrations, 1);
    let rest = s.connections_page(&ConnectionFilter {
        limit: 2,
        after: Some(2),
        ..Default::default()
    });
    let ids: Vec<u64> = rest.items.iter().map(|i| i.id).collect();
    assert_eq!((ids, rest.next), (vec![3, 9], None));
    assert_eq!(rest.items[1].peer.as_deref(), Some("10.0.0.7:4242"));
    assert_eq!(rest.items[1].tenant_id, None);

    let acme = s.connections_page(&ConnectionFilter {
        tenant: Some("acme".into()),
        ..Default::default()
    });
    assert_eq!(acme.total, 2);
}

#[tokio::test(start_paused = true)]
async fn the_sampler_takes_a_point_a_second_and_stops_with_the_gateway() {
    let s = state();
    let sampler = spawn_sampler(&s);
    // Before the first tick: this second's work shows in the first point only.
    s.counters
        .execute_ended(Some(Duration::from_micros(700)), true);
    s.counters.execute_ended(None, false);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let series = s.stats_series();
    assert_eq!(series.interval_ms, 1000);
    assert_eq!(series.points.len(), 3, "{series:?}");
    let first = &series.points[0];
    assert_eq!((first.round_trips, first.errors), (2, 1));
    assert_eq!(first.latency_p50_ms, Some(1.0));
    assert_eq!(series.points[1].round_trips, 0);
    assert_eq!(series.points[1].latency_p99_ms, None);

    s.cancel.cancel();
    tokio::time::timeout(Duration::from_secs(1), sampler)
        .await
        .expect("the sampler stops when the gateway is cancelled")
        .unwrap();
}

#[test]
fn ten_thousand_registrations_page_through_exactly_once() {
    let s = state();
    let (tx, _rx) = mpsc::channel(1);
    let link = Arc::new(ConnectorLink::new(
        1,
        Outbound::Grpc { tx },
        4,
        CancellationToken::new(),
        None,
    ));
    {
        let mut registry = s.registry();
        for i in 0..10_000 {
            let req = RegisterConnectorRequest {
                tenant_id: "acme".into(),
                connector_type: if i % 2 == 0 { "even" } else { "odd" }.into(),
                instance_id: format!("n{i:05}"),
                ..Default::default()
            };
            registry.register_as(
                1,
                "grpc",
                &req,
                link.clone(),
                RegistrationState::Approved,
                1,
            );
        }
    }
    for (q, expected) in [(None, 10_000), (Some("ODD:"), 5_000)] {
        let mut filter = RegistrationFilter {
            q: q.map(str::to_lowercase),
            limit: MAX_LIMIT,
            ..Default::default()
        };
        let mut seen = 0;
        let mut last = String::new();
        loop {
            let page = s.registrations_page(&filter);
            assert_eq!(page.total, expected);
            for item in &page.items {
                assert!(item.info.arn > last, "ordered, no repeats");
                last.clone_from(&item.info.arn);
            }
            seen += page.items.len();
            match page.next {
                Some(next) => filter.after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, expected, "{q:?}");
    }
}
