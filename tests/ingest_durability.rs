//! What survives: events, dedupe claims and per-source state across a restart; claim
//! expiry and sweeping; concurrent copies of one delivery; cron ticks and catch-up.
//! Every case runs on SQLite and, when `SWITCHBOARD_TEST_POSTGRES_URL` is set, on
//! PostgreSQL (otherwise the PostgreSQL variants say they were skipped).
#![cfg(feature = "runtime")]

#[macro_use]
#[path = "ingest/support.rs"]
mod support;

use std::collections::HashSet;

use serde_json::Value;
use support::{
    all_sources, eventually, now_s, postgres_url, skip_postgres, Delivery, Harness, Kind, StoreKind,
};

on_both_stores!(
    events_claims_and_captured_tokens_survive_a_restart,
    an_expired_claim_lets_the_key_in_again_and_is_swept,
    concurrent_copies_of_one_delivery_store_exactly_one,
    cron_ticks_are_stored_under_their_schedule_key,
    cron_catches_up_on_fires_missed_while_down,
    two_processes_on_one_store_agree_on_the_notion_token,
);

async fn events_claims_and_captured_tokens_survive_a_restart(kind: StoreKind) {
    let sources = format!(
        "{}[[sources]]\nid = \"fresh-notion\"\nprovider = \"notion\"\n",
        all_sources()
    );
    let mut h = Harness::start(&kind, &sources).await;
    let mut ids = Vec::new();
    for k in Kind::ALL {
        let (status, body) = h.post_json(k.source(), &k.signed("before-restart")).await;
        assert_eq!(status, 200, "{k:?}");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let handshake = Delivery::new(&[], r#"{"verification_token":"secret_kept"}"#);
    assert_eq!(h.post_json("fresh-notion", &handshake).await.0, 200);

    h.restart().await;

    for (k, id) in Kind::ALL.into_iter().zip(&ids) {
        let events = h.events(k.source()).await;
        assert_eq!(events.len(), 1, "{k:?}");
        assert_eq!(events[0]["id"].as_str(), Some(id.as_str()), "{k:?}");
        let (status, body) = h.post_json(k.source(), &k.signed("before-restart")).await;
        assert_eq!(
            (status, body["duplicate"].as_bool()),
            (200, Some(true)),
            "{k:?}: the claim survived"
        );
        assert_eq!(body["id"].as_str(), Some(id.as_str()));
    }
    assert_eq!(
        h.get("/api/v1/sources/fresh-notion").await["verification_token"],
        "secret_kept"
    );
    let signed = Kind::Notion.sign("secret_kept", "n-after", now_s());
    assert_eq!(
        h.post_json("fresh-notion", &signed).await.1["duplicate"],
        false
    );
}

async fn an_expired_claim_lets_the_key_in_again_and_is_swept(kind: StoreKind) {
    // The claim lives in wall-clock time (the store's clock), so it cannot be paused:
    // 3 s leaves the copy right after the first far inside it on a loaded machine.
    let h = Harness::start(
        &kind,
        "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\ndedupe_retention_secs = 3\n",
    )
    .await;
    let d = Kind::Github.signed("short-lived");
    let (_, first) = h.post_json("gh", &d).await;
    assert_eq!(first["duplicate"], false);
    assert_eq!(h.post_json("gh", &d).await.1["duplicate"], true);
    // Redeliver until the 3 s claim has expired; every earlier copy is a duplicate.
    let second = eventually("the claim to expire", || async {
        let (_, body) = h.post_json("gh", &d).await;
        (body["duplicate"] == false).then_some(body)
    })
    .await;
    assert_ne!(second["id"], first["id"]);
    assert_eq!(h.events("gh").await.len(), 2);
    let far_future = switchboard::__private::now_ms() + 60_000;
    let hr = &h;
    let sweep = |before: i64| async move {
        hr.runtime()
            .store()
            .backend()
            .sweep(far_future, before)
            .await
            .unwrap()
    };
    assert_eq!(
        sweep(0).await.claims,
        1,
        "the live claim expires by then and is deleted"
    );
    assert_eq!(sweep(0).await.claims, 0);
    // Audit rows go once they are older than the audit retention.
    h.post("gh", &Kind::Github.sign("wrong", "x", 0)).await;
    eventually("the audit row", || async {
        let n = h.get("/api/v1/rejections").await["rejections"]
            .as_array()?
            .len();
        (n == 1).then_some(())
    })
    .await;
    assert_eq!(sweep(0).await.rejections, 0, "younger than the cut-off");
    assert_eq!(sweep(far_future).await.rejections, 1);
    assert!(h.get("/api/v1/rejections").await["rejections"]
        .as_array()
        .unwrap()
        .is_empty());
}

async fn concurrent_copies_of_one_delivery_store_exactly_one(kind: StoreKind) {
    let h = Harness::start(&kind, &all_sources()).await;
    let d = Kind::Stripe.signed("evt_concurrent");
    let answers = futures_util::future::join_all((0..64).map(|_| h.post_json("stripe", &d))).await;
    let fresh: Vec<&Value> = answers
        .iter()
        .filter(|(_, b)| b["duplicate"] == false)
        .map(|(_, b)| b)
        .collect();
    assert!(answers.iter().all(|(s, _)| *s == 200));
    assert_eq!(fresh.len(), 1, "exactly one copy is new");
    let ids: HashSet<&str> = answers
        .iter()
        .map(|(_, b)| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "every copy names the one stored event");
    assert_eq!(h.events("stripe").await.len(), 1);
}

async fn cron_ticks_are_stored_under_their_schedule_key(kind: StoreKind) {
    let h = Harness::start(
        &kind,
        "[[sources]]\nid = \"tick\"\nprovider = \"cron\"\nschedule = \"* * * * * *\"\ntimezone = \"Europe/Berlin\"\npayload = { job = \"report\" }\n",
    )
    .await;
    let events = eventually("two ticks", || async {
        let e = h.events("tick").await;
        (e.len() >= 2).then_some(e)
    })
    .await;
    for e in &events {
        let at = e["occurred_at_ms"].as_i64().unwrap();
        assert_eq!(at % 1000, 0, "fires are whole seconds");
        assert_eq!(e["dedupe_key"], format!("cron:tick:{}", at / 1000));
        assert_eq!(
            (e["provider"].as_str(), e["kind"].as_str()),
            (Some("cron"), Some("tick"))
        );
        assert_eq!(e["signature"], "internal");
        assert_eq!(e["payload"]["job"], "report");
    }
    assert!(events[0]["occurred_at_ms"].as_i64() > events[1]["occurred_at_ms"].as_i64());
    let shown = h.get("/api/v1/sources/tick").await;
    assert!(shown["last_fire_ms"].as_i64().is_some(), "{shown}");
    assert_eq!(shown["timezone"], "Europe/Berlin");
}

async fn cron_catches_up_on_fires_missed_while_down(kind: StoreKind) {
    for (mode, expect_missed) in [("all", 10), ("latest", 1)] {
        let config = format!("[[sources]]\nid = \"c\"\nprovider = \"cron\"\nschedule = \"0 * * * * *\"\ncatch_up = \"{mode}\"\n");
        // The fires missed are the minute boundaries between the pretended last fire and
        // the restart; one passing while the runtime restarts would make that set depend
        // on how fast the restart was, so such a round is run again (it cannot happen
        // twice in a row).
        let (mut h, down_since, restarted_at) = loop {
            let mut h = Harness::start(&kind, &config).await;
            h.stop().await;
            // Pretend the last fire was ten minutes ago (just after a minute boundary).
            let now = now_s();
            let down_since = (now / 60 - 10) * 60 * 1000 + 1;
            let backend =
                switchboard::__private::store::open_backend(&h.store_url, &Default::default())
                    .await
                    .unwrap();
            backend
                .put_state(
                    "c",
                    switchboard::__private::ingress::CURSOR_KEY,
                    Some(&down_since.to_string()),
                )
                .await
                .unwrap();
            h.restart().await;
            if now_s() / 60 == now / 60 {
                break (h, down_since, now * 1000);
            }
            h.stop().await;
        };
        let missed = |events: &[Value]| -> Vec<i64> {
            events
                .iter()
                .filter_map(|e| e["occurred_at_ms"].as_i64())
                .filter(|at| *at <= restarted_at)
                .collect()
        };
        let caught_up = eventually(&format!("{mode}: catch-up fires"), || async {
            let m = missed(&h.events("c").await);
            (m.len() >= expect_missed).then_some(m)
        })
        .await;
        assert_eq!(caught_up.len(), expect_missed, "{mode}: {caught_up:?}");
        assert!(
            caught_up
                .iter()
                .all(|at| at % 60_000 == 0 && *at > down_since),
            "{mode}"
        );
        // A second restart re-runs nothing: the last fire moved on, and keys dedupe.
        h.restart().await;
        let after = missed(&h.events("c").await);
        assert_eq!(after.len(), expect_missed, "{mode}");
    }
}

async fn two_processes_on_one_store_agree_on_the_notion_token(kind: StoreKind) {
    let config = "[[sources]]\nid = \"notion\"\nprovider = \"notion\"\n";
    let a = Harness::start(&kind, config).await;
    let b = Harness::start_on(a.store_url.clone(), config, a.dir.clone()).await;
    let capture = |t: &str| Delivery::new(&[], format!(r#"{{"verification_token":"{t}"}}"#));
    assert_eq!(a.post_json("notion", &capture("secret_one")).await.0, 200);
    // B never saw the handshake, yet verifies with the token A captured ...
    let signed = Kind::Notion.sign("secret_one", "n-1", now_s());
    assert_eq!(b.post_json("notion", &signed).await.0, 200);
    // ... and refuses a second capture, whichever process it reaches.
    assert_eq!(b.post_json("notion", &capture("attacker")).await.0, 409);
    assert_eq!(
        b.get("/api/v1/sources/notion").await["verification_token"],
        "secret_one"
    );
    // Cleared on A and captured anew on B: A follows.
    let resp = a
        .http
        .delete(a.url("/api/v1/sources/notion/verification_token"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(b.post_json("notion", &capture("secret_two")).await.0, 200);
    let new = Kind::Notion.sign("secret_two", "n-2", now_s());
    assert_eq!(a.post_json("notion", &new).await.0, 200);
    let old = Kind::Notion.sign("secret_one", "n-3", now_s());
    assert_eq!(a.post_json("notion", &old).await.0, 401);
}

#[tokio::test]
async fn postgres_going_away_answers_503_and_recovers() {
    let Some(base) = postgres_url() else {
        return skip_postgres("postgres_going_away_answers_503_and_recovers");
    };
    let Some((_, rest)) = base.split_once('@') else {
        return eprintln!("SKIPPED: SWITCHBOARD_TEST_POSTGRES_URL must have the form postgres://user@host:port/db");
    };
    let target = rest.split('/').next().unwrap().to_owned();
    let proxy = Proxy::start(target.clone()).await;
    let schema_url = support::fresh_postgres_schema(&base).await;
    let through_proxy = schema_url.replacen(&target, &proxy.addr.to_string(), 1);
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let h = Harness::start_on(through_proxy, &all_sources(), dir).await;
    assert_eq!(h.post_json("gh", &Kind::Github.signed("up-1")).await.0, 200);

    proxy.down();
    let resp = eventually("a 503 while the database is away", || async {
        let resp = h.post("gh", &Kind::Github.signed("down-1")).await;
        (resp.status() == 503).then_some(resp)
    })
    .await;
    assert!(resp.headers().contains_key("retry-after"));

    proxy.up();
    eventually("the store to come back", || async {
        (h.post_json("gh", &Kind::Github.signed("down-1")).await.0 == 200).then_some(())
    })
    .await;
    let ids: Vec<String> = h
        .events("gh")
        .await
        .iter()
        .map(|e| e["payload"]["delivery"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        ["down-1", "up-1"],
        "the refused delivery was stored once, on its retry"
    );
}

use support::Proxy;
