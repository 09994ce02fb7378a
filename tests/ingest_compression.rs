//! `sqlite_body_compression = "zstd"`: bodies are stored as zstd frames when that
//! saves bytes, every reader gets the received bytes back, and a stored frame that no
//! longer decompresses is a clear error that costs nothing else.
#![cfg(feature = "runtime")]

#[macro_use]
#[path = "ingest/support.rs"]
mod support;

use support::{env, Delivery, Harness};

const SOURCE: &str =
    "[[sources]]\nid = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\n";

/// A GitHub delivery of `body`, signed with the test secret.
fn github(id: &str, body: String) -> Delivery {
    support::github_delivery(env("GH_SECRET").unwrap().as_bytes(), id, body)
}

/// An `issues.opened` body with `labels` repeated label objects (JSON compresses).
fn issue(labels: usize) -> String {
    let labels: Vec<String> = (0..labels)
        .map(|i| format!(r#"{{"id":{i},"name":"label-{i}","url":"https://api.github.com/repos/o/r/labels/label-{i}"}}"#))
        .collect();
    format!(
        r#"{{"action":"opened","issue":{{"number":7,"labels":[{}]}}}}"#,
        labels.join(",")
    )
}

fn database(h: &Harness) -> rusqlite::Connection {
    rusqlite::Connection::open(h.dir.path().join("events.db")).unwrap()
}

#[tokio::test]
async fn compressed_bodies_read_back_exactly_and_take_fewer_bytes() {
    let h = Harness::sqlite(&format!("sqlite_body_compression = \"zstd\"\n{SOURCE}")).await;
    let (big, small) = (issue(60), issue(1));
    assert!(big.len() > 4096 && small.len() < 512);
    for (id, body) in [("big", &big), ("small", &small)] {
        let (status, _) = h.post_json("gh", &github(id, body.clone())).await;
        assert_eq!(status, 200, "{id}");
    }
    let events = h.events("gh").await;
    let bodies: Vec<&str> = events.iter().map(|e| e["body"].as_str().unwrap()).collect();
    assert_eq!(
        bodies,
        [small.as_str(), big.as_str()],
        "newest first, as received"
    );
    assert_eq!(
        events[1]["payload"]["issue"]["labels"][59]["name"],
        "label-59"
    );

    let rows: Vec<(i64, usize)> = database(&h)
        .prepare("SELECT body_codec, length(body) FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows[0].0, 1, "the large body is a zstd frame");
    assert!(
        rows[0].1 * 3 < big.len(),
        "{} stored of {}",
        rows[0].1,
        big.len()
    );
    assert_eq!(
        rows[1],
        (0, small.len()),
        "a body under 512 bytes is kept as is"
    );
}

#[tokio::test]
async fn without_the_option_bodies_are_stored_as_received() {
    let h = Harness::sqlite(SOURCE).await;
    let big = issue(60);
    assert_eq!(h.post_json("gh", &github("d", big.clone())).await.0, 200);
    let row: (i64, Vec<u8>) = database(&h)
        .query_row("SELECT body_codec, body FROM events", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(row, (0, big.into_bytes()));
}

#[tokio::test]
async fn a_frame_that_does_not_decompress_is_a_clear_error_and_ingest_goes_on() {
    let h = Harness::sqlite(&format!("sqlite_body_compression = \"zstd\"\n{SOURCE}")).await;
    assert_eq!(h.post_json("gh", &github("a", issue(60))).await.0, 200);
    let changed = database(&h)
        .execute(
            "UPDATE events SET body = X'28B52FFD00' WHERE body_codec = 1",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);

    let resp = h
        .http
        .get(h.url("/api/v1/events?source=gh"))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert!(status.is_server_error(), "{status}: {text}");
    assert!(text.contains("does not decompress"), "{text}");

    // The damage is confined to that row: new deliveries are still taken and stored.
    let (status, body) = h.post_json("gh", &github("b", issue(60))).await;
    assert_eq!((status, body["duplicate"].as_bool()), (200, Some(false)));
    let stored: i64 = database(&h)
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 2);
}
