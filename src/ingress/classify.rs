//! What a verified delivery is: its kind and its dedupe key, per provider rule. Pure
//! functions over headers and the parsed body, so each rule is a plain test.

use serde_json::Value;

use super::signature::{Headers, Rejection};

/// Providers with a built-in rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Provider {
    /// GitHub webhooks.
    Github,
    /// Slack Events API.
    Slack,
    /// Linear webhooks.
    Linear,
    /// Notion webhooks.
    Notion,
    /// Stripe webhooks.
    Stripe,
    /// Standard Webhooks (and Svix).
    StandardWebhooks,
}

impl Provider {
    /// The configuration and storage label (`github`, `standard_webhooks`, …).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Slack => "slack",
            Provider::Linear => "linear",
            Provider::Notion => "notion",
            Provider::Stripe => "stripe",
            Provider::StandardWebhooks => "standard_webhooks",
        }
    }

    /// Parses a label written by [`Provider::as_str`]; `svix` is accepted as an alias
    /// of `standard_webhooks` (Svix is its reference implementation).
    pub(crate) fn parse(s: &str) -> Option<Provider> {
        Some(match s {
            "github" => Provider::Github,
            "slack" => Provider::Slack,
            "linear" => Provider::Linear,
            "notion" => Provider::Notion,
            "stripe" => Provider::Stripe,
            "standard_webhooks" | "svix" => Provider::StandardWebhooks,
            _ => return None,
        })
    }
}

/// The kind and dedupe key of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Classified {
    /// e.g. `issues.opened`, `event_callback.message`, `invoice.paid`.
    pub kind: String,
    /// The key under which a redelivery of the same event is recognised.
    pub dedupe_key: String,
}

fn field<'a>(body: &'a Value, name: &'static str) -> Result<&'a str, Rejection> {
    body.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(Rejection::Malformed {
            what: name,
            why: "missing or not a string in the JSON body".into(),
        })
}

fn header<'a>(h: &'a (impl Headers + ?Sized), name: &'static str) -> Result<&'a str, Rejection> {
    h.header(name)
        .filter(|s| !s.is_empty())
        .ok_or(Rejection::MissingHeader(name))
}

/// Classifies a delivery that has already been verified.
///
/// Rules: GitHub: kind `X-GitHub-Event` plus `.action` when the body has one, key
/// `{X-GitHub-Hook-ID}:{X-GitHub-Delivery}` (the delivery GUID is shared by every hook
/// of an event, so the hook id keeps two hooks' copies apart). Slack: kind `type`, plus
/// `.event.type` for `event_callback`; key `event_id` (retries carry the same one).
/// Linear: kind `{type}.{action}`; key `Linear-Delivery`. Notion: kind `type`; key the
/// body's `id`. Stripe: kind `type`; key the event `id`. Standard Webhooks: kind `type`
/// when the body has one, else `webhook`; key `webhook-id` (or `svix-id`).
pub(crate) fn classify(
    provider: Provider,
    h: &(impl Headers + ?Sized),
    body: &Value,
) -> Result<Classified, Rejection> {
    let (kind, dedupe_key) = match provider {
        Provider::Github => {
            let event = header(h, "X-GitHub-Event")?;
            let delivery = header(h, "X-GitHub-Delivery")?;
            let hook = h.header("X-GitHub-Hook-ID").unwrap_or("0");
            let kind = match body.get("action").and_then(Value::as_str) {
                Some(action) => format!("{event}.{action}"),
                None => event.to_owned(),
            };
            (kind, format!("{hook}:{delivery}"))
        }
        Provider::Slack => {
            let ty = field(body, "type")?;
            let kind = match body.pointer("/event/type").and_then(Value::as_str) {
                Some(inner) if ty == "event_callback" => format!("{ty}.{inner}"),
                _ => ty.to_owned(),
            };
            (kind, field(body, "event_id")?.to_owned())
        }
        Provider::Linear => {
            let kind = format!("{}.{}", field(body, "type")?, field(body, "action")?);
            (kind, header(h, "Linear-Delivery")?.to_owned())
        }
        Provider::Notion => (
            field(body, "type")?.to_owned(),
            field(body, "id")?.to_owned(),
        ),
        Provider::Stripe => (
            field(body, "type")?.to_owned(),
            field(body, "id")?.to_owned(),
        ),
        Provider::StandardWebhooks => {
            let id = h
                .header("webhook-id")
                .or_else(|| h.header("svix-id"))
                .ok_or(Rejection::MissingHeader("webhook-id"))?;
            let kind = body
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("webhook")
                .to_owned();
            (kind, id.to_owned())
        }
    };
    Ok(Classified { kind, dedupe_key })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn github_kind_includes_the_action_and_the_key_separates_hooks() {
        let h = [
            ("X-GitHub-Event", "issues"),
            ("X-GitHub-Delivery", "72d3162e"),
            ("X-GitHub-Hook-ID", "42"),
        ];
        let c = classify(Provider::Github, &h, &json!({"action": "opened"})).unwrap();
        assert_eq!(
            c,
            Classified {
                kind: "issues.opened".into(),
                dedupe_key: "42:72d3162e".into()
            }
        );
        let other_hook = [
            ("X-GitHub-Event", "issues"),
            ("X-GitHub-Delivery", "72d3162e"),
            ("X-GitHub-Hook-ID", "43"),
        ];
        assert_ne!(
            classify(Provider::Github, &other_hook, &json!({}))
                .unwrap()
                .dedupe_key,
            c.dedupe_key
        );
        let ping = [("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", "d1")];
        assert_eq!(
            classify(Provider::Github, &ping, &json!({"zen": "x"}))
                .unwrap()
                .kind,
            "ping"
        );
        assert_eq!(
            classify(Provider::Github, &[("X-GitHub-Event", "ping")], &json!({}))
                .unwrap_err()
                .reason(),
            "missing_header"
        );
    }

    #[test]
    fn slack_event_callbacks_are_keyed_by_event_id() {
        let body =
            json!({"type": "event_callback", "event_id": "Ev1", "event": {"type": "message"}});
        let c = classify(Provider::Slack, &[("X-Slack-Retry-Num", "1")], &body).unwrap();
        assert_eq!(
            (c.kind.as_str(), c.dedupe_key.as_str()),
            ("event_callback.message", "Ev1")
        );
        let err = classify(
            Provider::Slack,
            &[("a", "b")],
            &json!({"type": "event_callback"}),
        )
        .unwrap_err();
        assert_eq!(err.reason(), "malformed");
    }

    #[test]
    fn linear_notion_stripe_and_standard_webhooks_rules() {
        let lin = classify(
            Provider::Linear,
            &[("Linear-Delivery", "del-1")],
            &json!({"type": "Issue", "action": "create"}),
        )
        .unwrap();
        assert_eq!(
            (lin.kind.as_str(), lin.dedupe_key.as_str()),
            ("Issue.create", "del-1")
        );
        let notion = classify(
            Provider::Notion,
            &[("a", "b")],
            &json!({"type": "page.created", "id": "n-1"}),
        )
        .unwrap();
        assert_eq!(
            (notion.kind.as_str(), notion.dedupe_key.as_str()),
            ("page.created", "n-1")
        );
        let stripe = classify(
            Provider::Stripe,
            &[("a", "b")],
            &json!({"type": "invoice.paid", "id": "evt_1"}),
        )
        .unwrap();
        assert_eq!(
            (stripe.kind.as_str(), stripe.dedupe_key.as_str()),
            ("invoice.paid", "evt_1")
        );
        let sw = classify(
            Provider::StandardWebhooks,
            &[("svix-id", "msg_1")],
            &json!({}),
        )
        .unwrap();
        assert_eq!(
            (sw.kind.as_str(), sw.dedupe_key.as_str()),
            ("webhook", "msg_1")
        );
        assert_eq!(
            classify(Provider::Stripe, &[("a", "b")], &json!({"id": "evt"}))
                .unwrap_err()
                .reason(),
            "malformed"
        );
    }
}
