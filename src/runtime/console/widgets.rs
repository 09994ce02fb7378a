//! Pieces the runtime's pages share: action buttons, notices, JSON shown as tables or
//! pretty text, the answer to an action.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use crate::console::{ConsoleKit, SessionInfo};
use crate::runtime::ops::OpError;

/// A console action's form: its CSRF token is checked by the kit; `back` is the page
/// to return to.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct ActionForm {
    #[serde(default)]
    pub(crate) back: String,
}

/// A POST button (a one-field form) labelled `label`, returning to `back`; with
/// `confirm`, the browser asks that question first.
pub(crate) fn button(action: &str, label: &str, csrf: &str, back: &str, class: &str) -> Markup {
    confirm_button(action, label, csrf, back, class, None)
}

/// [`button`] that asks `confirm` first, when given.
pub(crate) fn confirm_button(
    action: &str,
    label: &str,
    csrf: &str,
    back: &str,
    class: &str,
    confirm: Option<&str>,
) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="back" value=(back);
            button type="submit" class=(class) data-action=(label.to_lowercase()) { (label) }
        }
    }
}

/// Back to `back` (a console page; else the overview), where `notice` is shown once
/// (kept on the server for this session: a notice in the URL could be forged).
pub(crate) fn done(kit: &ConsoleKit, session: &SessionInfo, back: &str, notice: &str) -> Response {
    let back = if back.starts_with("/console") && !back.starts_with("//") {
        back
    } else {
        "/console"
    };
    kit.flash(session, notice);
    Redirect::to(back).into_response()
}

/// An operation's error as a plain answer with its status.
pub(crate) fn failed(e: OpError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, format!("{}: {}\n", e.code(), e.message())).into_response()
}

/// A JSON value for a person: strings bare, the rest as compact JSON.
pub(crate) fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "—".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A JSON value pretty-printed in a `<pre>` (escaped like every interpolation).
pub(crate) fn pretty(v: &Value) -> Markup {
    html! { pre { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
}

/// Labelled values in the order given, as a two-column table.
pub(crate) fn pairs(rows: &[(&str, String)]) -> Markup {
    html! {
        table.kv {
            @for (k, v) in rows { tr { th { (k) } td { code { (v) } } } }
        }
    }
}

/// An object's fields as a two-column table (nested values as compact JSON).
pub(crate) fn fields(v: &Value) -> Markup {
    html! {
        table.kv {
            @if let Some(map) = v.as_object() {
                @for (k, val) in map { tr { th { (k) } td { code { (scalar(val)) } } } }
            }
        }
    }
}

/// An error from the store while rendering, as a region's content.
pub(crate) fn unavailable(e: &OpError) -> Markup {
    html! { p.error { "Unavailable: " (e.message()) } }
}
