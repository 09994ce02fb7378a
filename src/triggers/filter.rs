//! CEL expressions over a [`TriggerEvent`]: binding filters and ordering keys.
//! (Skeleton: compiled with the `cel` crate in the next commit.)

use serde::Serialize;

use super::TriggerEvent;
use crate::error::{Error, Result};

/// A compiled CEL expression, kept with its source text.
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
}

impl Serialize for Expression {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl Expression {
    /// Compiles `source`, the `option` (`filter`, `ordering_key`) of binding
    /// `binding_id`; the error names both and the position.
    pub fn compile(binding_id: &str, option: &str, source: &str) -> Result<Expression> {
        let _ = source;
        Err(Error::Config(format!(
            "trigger {binding_id:?}: {option}: CEL is not wired yet"
        )))
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates as a filter: `Ok(true)` matches; a non-boolean result is an error.
    pub fn eval_bool(&self, event: &TriggerEvent) -> std::result::Result<bool, String> {
        let _ = event;
        Err("not wired".into())
    }

    /// Evaluates as an ordering key: a string (or number, rendered) is the key, `null`
    /// is no key.
    pub fn eval_key(&self, event: &TriggerEvent) -> std::result::Result<Option<String>, String> {
        let _ = event;
        Err("not wired".into())
    }
}
