//! CEL expressions over a [`TriggerEvent`]: binding filters and ordering keys.
//!
//! An [`Expression`] is compiled once, when the configuration loads, so a typo fails
//! the load with the binding, the option and the line:column instead of failing every
//! event later. The load also refuses a name that is not one of the event's
//! [`VARIABLES`]: the `cel` crate's own reference list counts comprehension variables
//! (`x` in `payload.labels.exists(x, …)`) as free, so the check walks the syntax tree
//! itself and tracks what each comprehension binds. Function names are not checked at
//! load (the crate resolves them at run time); an unknown one fails on the first event
//! and is reported like any evaluation error.
//!
//! Evaluation goes through an [`EventContext`]: the event's variables, converted to CEL
//! values on first use and kept for the rest of the context's life, so one event routed
//! through many bindings converts its payload (the one costly conversion) at most once.
//! The payload tree borrows the event's strings rather than copying them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ParseErrors, Program, Value};
use serde::Serialize;

use super::TriggerEvent;
use crate::error::{Error, Result};

/// The variables an expression may name, all taken from the event: `headers` (a map of
/// lower-case header name to value), `payload` (the parsed JSON body, `null` for a body
/// that is not JSON), `kind`, `source`, `tenant`, `provider`, `id`, `trace_id` (strings)
/// and `received_at_ms` (an int, unix milliseconds).
pub(crate) const VARIABLES: &[&str] = &[
    "headers",
    "payload",
    "kind",
    "source",
    "tenant",
    "provider",
    "id",
    "trace_id",
    "received_at_ms",
];

/// The one variable of an item expression ([`Expression::compile_item`]): the
/// polled or streamed item, as JSON.
pub(crate) const ITEM_VARIABLES: &[&str] = &["item"];

/// The standard environment, built once: building it registers every standard
/// function, which is too much work to repeat per event.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A compiled CEL expression, kept with its source text. Cheap to clone (the program
/// is shared), and `Send + Sync`, so the registry and the dispatcher share bindings.
#[derive(Clone)]
pub struct Expression {
    source: String,
    program: Arc<Program>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl Serialize for Expression {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl Expression {
    /// Compiles `source`, the `option` (`filter`, `ordering_key`) of binding
    /// `binding_id`. Refuses a syntax error, and a name that is not one of
    /// [`VARIABLES`] (nor bound by a comprehension, nor a type such as `int`); the
    /// error names the binding, the option and the line:column.
    pub fn compile(binding_id: &str, option: &str, source: &str) -> Result<Expression> {
        Self::compile_over(source, VARIABLES)
            .map_err(|what| Error::Config(format!("trigger {binding_id:?}: {option}: {what}")))
    }

    /// Compiles `source` as an expression over one JSON value named `item` (the
    /// dedupe key of a polled or streamed item, `item.id`), with the same checks as
    /// [`Expression::compile`]; `Err` is the reason, for the caller to prefix with
    /// its source and option.
    pub(crate) fn compile_item(source: &str) -> std::result::Result<Expression, String> {
        Self::compile_over(source, ITEM_VARIABLES)
    }

    /// Compiles `source`, allowing the free names in `variables`.
    fn compile_over(source: &str, variables: &[&str]) -> std::result::Result<Expression, String> {
        let program = ENV.compile(source).map_err(|e| syntax_errors(&e))?;
        let mut free = Vec::new();
        free_identifiers(program.expression(), &mut Vec::new(), &mut free);
        let unknown = free
            .into_iter()
            .find(|(name, _)| !variables.contains(name) && ENV.types().find_type(name).is_none());
        if let Some((name, id)) = unknown {
            let at = program
                .source_info()
                .offset_for(id)
                .map(|(start, _)| position(source, start as usize))
                .unwrap_or_else(|| "?".into());
            return Err(format!(
                "unknown variable {name:?} at {at}; an expression can use {}",
                variables.join(", ")
            ));
        }
        Ok(Expression {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates as a filter: `Ok(true)` matches. A result that is not a bool, and an
    /// evaluation error (a missing key, a type mismatch), is `Err` with the reason.
    pub fn eval_bool(&self, event: &TriggerEvent) -> std::result::Result<bool, String> {
        self.eval_bool_in(&EventContext::new(event))
    }

    /// [`Expression::eval_bool`] against a context shared with other expressions.
    pub fn eval_bool_in(&self, ctx: &EventContext<'_>) -> std::result::Result<bool, String> {
        match self.execute(ctx)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!("the filter gave {}, not a bool", describe(&other))),
        }
    }

    /// Evaluates as an ordering key: a string is the key; an int, uint, double or bool
    /// is rendered as text; `null` is no key. Anything else (a list, a map, …), and an
    /// evaluation error, is `Err` with the reason.
    pub fn eval_key(&self, event: &TriggerEvent) -> std::result::Result<Option<String>, String> {
        self.eval_key_in(&EventContext::new(event))
    }

    /// [`Expression::eval_key`] against a context shared with other expressions.
    pub fn eval_key_in(
        &self,
        ctx: &EventContext<'_>,
    ) -> std::result::Result<Option<String>, String> {
        key_of(self.execute(ctx)?)
    }

    /// Evaluates an expression made by [`Expression::compile_item`] over `item`, as a
    /// key rendered as [`Expression::eval_key`] renders one.
    pub(crate) fn eval_item_key(
        &self,
        item: &serde_json::Value,
    ) -> std::result::Result<Option<String>, String> {
        key_of(self.execute(&ItemContext {
            item,
            value: OnceLock::new(),
        })?)
    }

    fn execute(&self, ctx: &dyn VariableResolver) -> std::result::Result<Value, String> {
        let mut context = Context::with_env(ENV.clone());
        context.set_variable_resolver(ctx);
        self.program.execute(&context).map_err(|e| e.to_string())
    }
}

/// A string is the key; an int, uint, double or bool is rendered as text; `null` is
/// no key; anything else is `Err`.
fn key_of(value: Value) -> std::result::Result<Option<String>, String> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::String(s) => Arc::unwrap_or_clone(s),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        other => {
            return Err(format!(
                "the key expression gave {}; it must give a string, a number, a bool or null",
                describe(&other)
            ))
        }
    }))
}

/// The variables of an item expression: `item` alone, converted on first use.
struct ItemContext<'i> {
    item: &'i serde_json::Value,
    value: OnceLock<Box<dyn Val + 'i>>,
}

impl VariableResolver for ItemContext<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "item")
            .then(|| CowVal::Borrowed(self.value.get_or_init(|| json_val(self.item)).as_ref()))
    }
}

/// One event's variables for evaluation, each converted on first use and kept, so
/// every expression evaluated against the same context shares the conversion. Build
/// one per event (per [`crate::triggers::registry::TriggerRegistry::route`] call) and
/// drop it with the event.
pub struct EventContext<'e> {
    event: &'e TriggerEvent,
    payload: OnceLock<Box<dyn Val + 'e>>,
    headers: OnceLock<Box<dyn Val + 'e>>,
}

impl<'e> EventContext<'e> {
    /// A context over `event`; nothing is converted yet.
    pub fn new(event: &'e TriggerEvent) -> EventContext<'e> {
        EventContext {
            event,
            payload: OnceLock::new(),
            headers: OnceLock::new(),
        }
    }

    /// The event it evaluates against.
    pub fn event(&self) -> &'e TriggerEvent {
        self.event
    }
}

impl VariableResolver for EventContext<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let e = self.event;
        let text = |s: &'b str| Some(CowVal::owned(CelString::from(s)));
        match variable {
            "payload" => Some(CowVal::Borrowed(
                self.payload.get_or_init(|| json_val(&e.payload)).as_ref(),
            )),
            "headers" => Some(CowVal::Borrowed(
                self.headers
                    .get_or_init(|| {
                        let map: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = e
                            .headers
                            .iter()
                            .map(|(k, v)| (CelMapKey::from(k.as_str()), string_val(v)))
                            .collect();
                        Box::new(CelMap::from(map))
                    })
                    .as_ref(),
            )),
            "kind" => text(&e.kind),
            "source" => text(&e.source),
            "tenant" => text(&e.tenant),
            "provider" => text(&e.provider),
            "id" => text(&e.id),
            "trace_id" => text(&e.trace_id),
            "received_at_ms" => Some(CowVal::owned(CelInt::from(e.received_at_ms))),
            _ => None,
        }
    }
}

fn string_val(s: &str) -> Box<dyn Val + '_> {
    Box::new(CelString::from(s))
}

/// A JSON value as a CEL value tree borrowing its strings. Recursion is bounded by
/// serde_json's nesting limit (128), which every payload was parsed under.
fn json_val(v: &serde_json::Value) -> Box<dyn Val + '_> {
    use serde_json::Value as J;
    match v {
        J::Null => Box::new(CelNull),
        J::Bool(b) => Box::new(CelBool::from(*b)),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        J::String(s) => string_val(s),
        J::Array(items) => Box::new(CelList::from(
            items.iter().map(json_val).collect::<Vec<_>>(),
        )),
        J::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), json_val(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// A result's type, with the value when it is short, for error messages.
fn describe(v: &Value) -> String {
    let shown = format!("{v:?}");
    if shown.len() <= 60 {
        format!("a value of type {} ({shown})", v.type_of())
    } else {
        format!("a value of type {}", v.type_of())
    }
}

/// The parser's errors as `syntax error at L:C: message`, joined.
fn syntax_errors(e: &ParseErrors) -> String {
    let all: Vec<String> = e
        .errors
        .iter()
        .map(|e| {
            let msg = e.msg.strip_prefix("Syntax error: ").unwrap_or(&e.msg);
            format!("syntax error at {}:{}: {msg}", e.pos.0, e.pos.1)
        })
        .collect();
    if all.is_empty() {
        "syntax error".into()
    } else {
        all.join("; ")
    }
}

/// The 1-based `line:column` of byte offset `at` in `source`, counting characters.
fn position(source: &str, at: usize) -> String {
    let before = source.get(..at.min(source.len())).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("{line}:{column}")
}

/// Collects the identifiers of `e` that nothing in it binds (with their node ids), in
/// source order. `bound` holds the comprehension variables in scope.
fn free_identifiers<'a>(e: &'a IdedExpr, bound: &mut Vec<&'a str>, out: &mut Vec<(&'a str, u64)>) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            // `.payload` is the absolute form of `payload`.
            let name = name.strip_prefix('.').unwrap_or(name);
            if !name.starts_with('@') && !bound.contains(&name) {
                out.push((name, e.id));
            }
        }
        Expr::Select(s) => free_identifiers(&s.operand, bound, out),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                free_identifiers(t, bound, out);
            }
            for a in &c.args {
                free_identifiers(a, bound, out);
            }
        }
        Expr::List(l) => {
            for x in &l.elements {
                free_identifiers(x, bound, out);
            }
        }
        Expr::Map(m) => entries(m.entries.iter().map(|e| &e.expr), bound, out),
        Expr::Struct(s) => entries(s.entries.iter().map(|e| &e.expr), bound, out),
        Expr::Comprehension(c) => {
            free_identifiers(&c.iter_range, bound, out);
            free_identifiers(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(&c.iter_var);
            bound.extend(c.iter_var2.as_deref());
            bound.push(&c.accu_var);
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                free_identifiers(x, bound, out);
            }
            bound.truncate(depth);
        }
    }
}

fn entries<'a>(
    items: impl Iterator<Item = &'a EntryExpr>,
    bound: &mut Vec<&'a str>,
    out: &mut Vec<(&'a str, u64)>,
) {
    for entry in items {
        match entry {
            EntryExpr::StructField(f) => free_identifiers(&f.value, bound, out),
            EntryExpr::MapEntry(m) => {
                free_identifiers(&m.key, bound, out);
                free_identifiers(&m.value, bound, out);
            }
        }
    }
}

#[cfg(test)]
mod tests;
