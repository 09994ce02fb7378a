//! `http_poll`'s pure parts: options, `Link` parsing, cursor fields, items, times,
//! events, and the cursor's JSON.

use serde_json::json;

use super::*;

fn ctx(options: &str) -> SourceContext {
    SourceContext::detached(
        "orders",
        "http_poll",
        "acme",
        toml::from_str(options).unwrap(),
        Vec::new(),
    )
}

async fn source(options: &str) -> Result<Box<dyn InboundSource>> {
    HttpPoll.init(ctx(options)).await
}

/// The running source behind the box, for its private methods.
async fn running(options: &str) -> HttpPollSource {
    let o: HttpPollOptions = ctx(options).options().unwrap();
    let c = ctx(options);
    HttpPollSource {
        id: "orders".into(),
        client: reqwest::Client::new(),
        url: Url::parse(o.url.as_deref().unwrap()).unwrap(),
        every: Duration::from_secs(30),
        paging: Paging::parse(&c, o.cursor.as_ref()).unwrap(),
        items: o.items.unwrap_or_default(),
        kind: o.kind.unwrap_or_else(|| DEFAULT_KIND.into()),
        kind_pointer: o.kind_pointer,
        dedupe: o
            .dedupe
            .as_deref()
            .map(|d| Expression::compile_item(d).unwrap()),
        occurred_at_pointer: o.occurred_at_pointer,
        max_response_bytes: 1024,
        ctx: c,
    }
}

#[test]
fn the_next_link_is_found_among_relations_and_headers() {
    assert_eq!(
        next_link([
            r#"<https://api.example.com/items?page=2>; rel="next", <https://api.example.com/items?page=9>; rel="last""#
        ]),
        Some("https://api.example.com/items?page=2".into())
    );
    // Order, case, an unquoted rel, several relations in one, several headers.
    assert_eq!(
        next_link([
            r#"<https://a/?page=9>; rel="last""#,
            "</items?page=3>;REL=NEXT"
        ]),
        Some("/items?page=3".into())
    );
    assert_eq!(
        next_link([r#"<https://a/p2>; title="a, b; c"; rel="prev next""#]),
        Some("https://a/p2".into())
    );
    assert_eq!(
        next_link([r#"<https://a/p1>; rel="prev", <https://a/p0>; rel="first""#]),
        None
    );
    assert_eq!(next_link([r#"<https://a/p2>; rel="nextish""#]), None);
    assert_eq!(next_link(["garbage", "<unterminated; rel=next", ""]), None);
    assert_eq!(
        next_link([r#"<https://a/p2>; rel="ne\"xt", <https://a/p3>; rel=next"#]),
        Some("https://a/p3".into())
    );
}

#[test]
fn a_page_token_is_a_non_empty_string_or_a_number() {
    let body = json!({"next": "abc", "n": 42, "empty": "", "null": null, "no": false, "obj": {}});
    assert_eq!(page_token(&body, "/next").unwrap(), Some("abc".into()));
    assert_eq!(page_token(&body, "/n").unwrap(), Some("42".into()));
    for p in ["/empty", "/null", "/no", "/missing"] {
        assert_eq!(page_token(&body, p).unwrap(), None, "{p}");
    }
    assert!(page_token(&body, "/obj").is_err());
}

#[test]
fn the_token_replaces_the_query_parameter_and_keeps_the_others() {
    let base = Url::parse("https://a.example/items?status=any&cursor=old").unwrap();
    assert_eq!(
        with_param(&base, "cursor", "p 2&x").as_str(),
        "https://a.example/items?status=any&cursor=p+2%26x"
    );
    let bare = Url::parse("https://a.example/items").unwrap();
    assert_eq!(
        with_param(&bare, "page_token", "t").as_str(),
        "https://a.example/items?page_token=t"
    );
}

#[test]
fn items_are_the_array_at_the_pointer() {
    let body = json!({"data": {"orders": [1, 2]}, "x": 3});
    assert_eq!(
        page_items(&body, "/data/orders").unwrap(),
        &vec![json!(1), json!(2)]
    );
    assert!(page_items(&body, "/x")
        .unwrap_err()
        .to_string()
        .contains("no array"));
    assert!(page_items(&body, "/nope")
        .unwrap_err()
        .to_string()
        .contains("nothing"));
    assert!(page_items(&body, "").is_err());
    assert_eq!(page_items(&json!([{"a": 1}]), "").unwrap().len(), 1);
}

#[test]
fn times_are_rfc3339_seconds_or_milliseconds() {
    assert_eq!(
        occurred_at_ms(&json!("2024-01-02T03:04:05.5+01:00")),
        Some(1_704_161_045_500)
    );
    assert_eq!(
        occurred_at_ms(&json!(1_704_164_645)),
        Some(1_704_164_645_000)
    );
    assert_eq!(
        occurred_at_ms(&json!(1_704_164_645_123_i64)),
        Some(1_704_164_645_123)
    );
    assert_eq!(occurred_at_ms(&json!(1.5)), Some(1500));
    assert_eq!(occurred_at_ms(&json!("yesterday")), None);
    assert_eq!(occurred_at_ms(&json!(true)), None);
    assert_eq!(occurred_at_ms(&json!(1e300)), None);
}

#[test]
fn the_cursor_belongs_to_its_base_url() {
    let base = Url::parse("https://a.example/items").unwrap();
    let page = Url::parse("https://a.example/items?cursor=3").unwrap();
    let text = Cursor::write(&base, &page, Some("\"v1\"".into()));
    assert_eq!(
        Cursor::read(Some(&text), &base),
        Some((page.clone(), Some("\"v1\"".into())))
    );
    let other = Url::parse("https://a.example/other").unwrap();
    assert_eq!(Cursor::read(Some(&text), &other), None);
    assert_eq!(Cursor::read(Some("1700000000000"), &base), None);
    assert_eq!(Cursor::read(None, &base), None);
    let no_etag = Cursor::write(&base, &page, None);
    assert!(!no_etag.contains("etag"), "{no_etag}");
}

#[tokio::test]
async fn options_are_checked_at_init() {
    let ok = r#"url = "https://a.example/items"
every = "30s"
items = "/items"
kind_pointer = "/type"
dedupe = "item.id"
cursor = { field = "/next", param = "page" }
occurred_at_pointer = "/at"
"#;
    assert_eq!(source(ok).await.unwrap().kind(), SourceKind::Poll);
    let cases = [
        ("every = \"1s\"", "need `url`"),
        ("url = \"ftp://a.example/x\"", "http or https"),
        ("url = \"not a url\"", "url \"not a url\""),
        ("url = \"https://a/\"\nevery = \"0s\"", "every: must be positive"),
        ("url = \"https://a/\"\nevery = \"soon\"", "every: \"soon\" is not a duration"),
        ("url = \"https://a/\"\nitems = \"orders\"", "items: \"orders\" is not a JSON pointer"),
        ("url = \"https://a/\"\ncursor = \"links\"", "cursor: \"links\" is not a mode"),
        ("url = \"https://a/\"\ncursor = { field = \"/n\", prefix = \"x\" }", "\"prefix\" is not one of field, param"),
        ("url = \"https://a/\"\ncursor = { param = \"x\" }", "field (a JSON pointer string) is missing"),
        ("url = \"https://a/\"\ncursor = { field = \"n\" }", "cursor.field: \"n\" is not a JSON pointer"),
        ("url = \"https://a/\"\ndedupe = \"payload.id\"", "dedupe: unknown variable \"payload\""),
        ("url = \"https://a/\"\nheaders = { Authorization = \"SWITCHBOARD_TEST_SURELY_UNSET_VAR\" }", "SWITCHBOARD_TEST_SURELY_UNSET_VAR, which is unset or empty"),
        ("url = \"https://a/\"\nmax_response_bytes = 0", "max_response_bytes must be positive"),
        ("url = \"https://a/\"\nschedule = \"x\"", "option schedule does not apply to provider http_poll"),
    ];
    for (options, expected) in cases {
        let err = source(options).await.err().expect(options).to_string();
        assert!(err.contains(expected), "{options}: {err}");
        assert!(
            err.contains("source \"orders\" (provider http_poll)"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn an_item_becomes_an_event_with_its_kind_key_and_time() {
    let s = running(
        r#"url = "https://a.example/items"
kind = "order"
kind_pointer = "/type"
dedupe = 'string(item.id) + ":" + item.v'
occurred_at_pointer = "/at"
"#,
    )
    .await;
    let item = json!({"id": 7, "v": "2", "type": "refund", "at": 1_700_000_000});
    let e = s.event(&item, 0).unwrap();
    assert_eq!(
        (e.kind.as_str(), e.dedupe_key.as_str(), e.occurred_at_ms),
        ("refund", "7:2", Some(1_700_000_000_000))
    );
    assert_eq!(e.payload, item);
    assert_eq!(e.body, None, "the stored body is the item's JSON");
    let plain = s.event(&json!({"id": 8, "v": "1"}), 1).unwrap();
    assert_eq!((plain.kind.as_str(), plain.occurred_at_ms), ("order", None));
    let err = s.event(&json!({"v": "1"}), 3).unwrap_err().to_string();
    assert!(err.contains("item 3 of the page: dedupe"), "{err}");

    let hashed = running("url = \"https://a.example/items\"").await;
    let a = hashed.event(&json!({"id": 1}), 0).unwrap();
    assert_eq!(a.kind, "item");
    assert_eq!(a.dedupe_key.len(), 64);
    assert_eq!(
        a.dedupe_key,
        hashed.event(&json!({"id": 1}), 5).unwrap().dedupe_key
    );
    assert_ne!(
        a.dedupe_key,
        hashed.event(&json!({"id": 2}), 0).unwrap().dedupe_key
    );
}

#[tokio::test]
async fn the_next_page_comes_from_the_field_or_the_link_within_the_origin() {
    let page = Url::parse("https://a.example/items?cursor=p1").unwrap();
    let field = running("url = \"https://a.example/items\"\ncursor = { field = \"/next\" }").await;
    assert_eq!(
        field.next_page(&page, &json!({"next": "p2"}), &[]).unwrap(),
        Some(Url::parse("https://a.example/items?cursor=p2").unwrap())
    );
    assert_eq!(
        field.next_page(&page, &json!({"next": "p1"}), &[]).unwrap(),
        None,
        "the same page again is the end"
    );
    assert_eq!(field.next_page(&page, &json!({}), &[]).unwrap(), None);

    let link = running("url = \"https://a.example/items\"\ncursor = \"link\"").await;
    let links = |l: &str| vec![l.to_owned()];
    assert_eq!(
        link.next_page(&page, &json!([]), &links("</items?page=2>; rel=\"next\""))
            .unwrap(),
        Some(Url::parse("https://a.example/items?page=2").unwrap())
    );
    assert_eq!(link.next_page(&page, &json!([]), &[]).unwrap(), None);
    let err = link
        .next_page(
            &page,
            &json!([]),
            &links("<https://evil.example/x>; rel=next"),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("another origin"), "{err}");

    let none = running("url = \"https://a.example/items\"").await;
    assert_eq!(
        none.next_page(&page, &json!({"next": "x"}), &links("</p2>; rel=next"))
            .unwrap(),
        None
    );
}
