use serde_json::json;

use super::*;
use crate::triggers::testing::event;

fn compile(source: &str) -> Expression {
    Expression::compile("b", "filter", source).unwrap()
}

fn refusal(option: &str, source: &str) -> String {
    Expression::compile("issues-to-linear", option, source)
        .unwrap_err()
        .to_string()
}

fn opened() -> TriggerEvent {
    event(
        "github-main",
        "issues.opened",
        json!({"action": "opened", "number": 7, "repository": {"full_name": "acme/api"},
               "labels": [{"name": "bug"}, {"name": "p1"}]}),
    )
}

#[test]
fn a_filter_sees_the_payload_headers_and_event_fields() {
    let ev = opened();
    for (source, expected) in [
        (r#"payload.action == "opened""#, true),
        (r#"payload.action == "closed""#, false),
        (r#"headers["x-github-event"] == "issues.opened""#, true),
        (
            r#"kind.startsWith("issues.") && source == "github-main""#,
            true,
        ),
        (r#"tenant == "acme" && provider == "github""#, true),
        ("received_at_ms == 1000 && id.startsWith(\"evt_\")", true),
        ("size(trace_id) == 32 && payload.number > 5", true),
        (r#"payload.labels.exists(l, l.name == "bug")"#, true),
        ("has(payload.missing)", false),
        ("type(payload) == map", true),
    ] {
        assert_eq!(compile(source).eval_bool(&ev), Ok(expected), "{source}");
    }
}

#[test]
fn a_syntax_error_names_the_binding_the_option_and_the_position() {
    let msg = refusal("filter", "payload.action ==");
    assert!(
        msg.contains("trigger \"issues-to-linear\": filter:"),
        "{msg}"
    );
    assert!(msg.contains("syntax error at 1:"), "{msg}");
    let multi = refusal("ordering_key", "payload.a &&\n  payload.b ==");
    assert!(multi.contains(": ordering_key:"), "{multi}");
    assert!(multi.contains("at 2:"), "the second line is named: {multi}");
}

#[test]
fn a_name_that_is_not_an_event_variable_is_refused_at_load_with_its_position() {
    let msg = refusal("filter", r#"kind == "x" && paylod.action == "opened""#);
    assert!(msg.contains("unknown variable \"paylod\" at 1:16"), "{msg}");
    assert!(
        msg.contains("headers, payload"),
        "the variables are listed: {msg}"
    );
    let inner = refusal("filter", "payload.labels.exists(l, l.name == other)");
    assert!(inner.contains("\"other\""), "{inner}");
    assert!(
        Expression::compile("b", "filter", "payload.labels.all(l, l.name != \"\")").is_ok(),
        "comprehension variables are bound, not free"
    );
}

#[test]
fn a_non_bool_result_or_an_evaluation_error_is_an_error_not_a_match() {
    let ev = opened();
    let not_bool = compile("payload.number").eval_bool(&ev).unwrap_err();
    assert!(not_bool.contains("not a bool"), "{not_bool}");
    let missing = compile("payload.nope == 1").eval_bool(&ev).unwrap_err();
    assert!(missing.contains("nope"), "{missing}");
    let types = compile("payload.action > 3").eval_bool(&ev).unwrap_err();
    assert!(!types.is_empty());
}

#[test]
fn ordering_keys_render_scalars_and_treat_null_as_no_key() {
    let ev = event(
        "s",
        "k",
        json!({"s": "acme/api", "i": -3, "u": 18446744073709551615u64, "f": 1.5,
               "b": true, "n": null, "l": [1]}),
    );
    let key = |src: &str| {
        Expression::compile("b", "ordering_key", src)
            .unwrap()
            .eval_key(&ev)
    };
    assert_eq!(key("payload.s"), Ok(Some("acme/api".into())));
    assert_eq!(key("payload.i"), Ok(Some("-3".into())));
    assert_eq!(key("payload.u"), Ok(Some("18446744073709551615".into())));
    assert_eq!(key("payload.f"), Ok(Some("1.5".into())));
    assert_eq!(key("payload.b"), Ok(Some("true".into())));
    assert_eq!(key("payload.n"), Ok(None));
    assert!(key("payload.l").unwrap_err().contains("list"));
    assert!(key("payload.zzz").is_err());
}

#[test]
fn a_context_converts_the_payload_once_for_every_expression() {
    let ev = opened();
    let ctx = EventContext::new(&ev);
    let address = |ctx: &EventContext<'_>| match ctx.resolve("payload") {
        Some(CowVal::Borrowed(v)) => v as *const dyn Val as *const u8 as usize,
        _ => panic!("the payload is borrowed from the context"),
    };
    assert_eq!(address(&ctx), address(&ctx));
    assert_eq!(
        compile(r#"payload.action == "opened""#).eval_bool_in(&ctx),
        Ok(true)
    );
    assert_eq!(compile("payload.number == 7").eval_bool_in(&ctx), Ok(true));
}

#[test]
fn expressions_are_shareable_across_threads_and_cheap_to_clone() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Expression>();
    let e = compile("true");
    assert_eq!(e.clone().source(), "true");
    assert_eq!(format!("{e:?}"), "Expression(\"true\")");
}

#[test]
fn an_item_expression_names_only_item_and_gives_a_key() {
    let e = Expression::compile_item(r#"string(item.id) + ":" + item.updated_at"#).unwrap();
    let item = serde_json::json!({"id": 42, "updated_at": "2024-01-01T00:00:00Z"});
    assert_eq!(
        e.eval_item_key(&item),
        Ok(Some("42:2024-01-01T00:00:00Z".into()))
    );
    let id = Expression::compile_item("item.id").unwrap();
    assert_eq!(
        id.eval_item_key(&serde_json::json!({"id": 7})),
        Ok(Some("7".into()))
    );
    assert_eq!(id.eval_item_key(&serde_json::json!({"id": null})), Ok(None));
    assert!(id.eval_item_key(&serde_json::json!({})).is_err());
    let err = Expression::compile_item("payload.id").unwrap_err();
    assert!(
        err.contains("unknown variable \"payload\"") && err.contains("item"),
        "{err}"
    );
    assert!(Expression::compile_item("item.").is_err());
}
