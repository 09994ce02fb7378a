//! [`Capability`]: a builder for the task-type schemas a connector advertises from
//! [`BaseConnector::capabilities`](crate::BaseConnector::capabilities).
//!
//! The wire message ([`TaskTypeSchema`]) carries its JSON schemas as strings, which
//! invites hand-written JSON with typos that only a gateway notices. The builder takes
//! `serde_json::Value`s (write them with `json!`), so the schema is valid JSON by
//! construction, and it fills the display name from the id when none is given.

use serde_json::Value;

use crate::proto::TaskTypeSchema;

/// One capability (task type) of a connector: its id, what it is for, and the JSON
/// schemas of its input and output.
///
/// ```
/// use serde_json::json;
/// use switchboard::Capability;
///
/// let search = Capability::new("search")
///     .description("Full-text search over the tenant's documents")
///     .input_schema(json!({
///         "type": "object",
///         "properties": {"q": {"type": "string"}},
///         "required": ["q"],
///     }))
///     .build();
/// assert_eq!(search.task_type_id, "search");
/// assert_eq!(search.name, "search");
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Capability does nothing until `build` turns it into a TaskTypeSchema"]
pub struct Capability {
    schema: TaskTypeSchema,
    input: Option<Value>,
    output: Option<Value>,
}

impl Capability {
    /// A capability with the given id: what a caller sends as `capability_id`, and what
    /// [`BaseConnector::execute`](crate::BaseConnector::execute) receives.
    pub fn new(id: impl Into<String>) -> Self {
        Capability {
            schema: TaskTypeSchema {
                task_type_id: id.into(),
                ..TaskTypeSchema::default()
            },
            input: None,
            output: None,
        }
    }

    /// The human-readable name shown by gateways and UIs. Default: the id.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.schema.name = name.into();
        self
    }

    /// What the capability does, for people and for tool-using models choosing one.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.schema.description = description.into();
        self
    }

    /// A grouping for UIs (e.g. `"search"`, `"messaging"`). Default: none.
    pub fn category(mut self, category: impl Into<String>) -> Self {
        self.schema.category = category.into();
        self
    }

    /// An icon name or URL for UIs. Default: none.
    pub fn icon(mut self, icon: impl Into<String>) -> Self {
        self.schema.icon = icon.into();
        self
    }

    /// The JSON Schema of the input payload. Default: none, which tool listings show
    /// as the permissive `{"type": "object"}`.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input = Some(schema);
        self
    }

    /// The JSON Schema of the output payload. Default: none.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output = Some(schema);
        self
    }

    /// The wire message.
    pub fn build(self) -> TaskTypeSchema {
        let mut schema = self.schema;
        if schema.name.is_empty() {
            schema.name = schema.task_type_id.clone();
        }
        schema.input_schema_json = self.input.map(|v| v.to_string()).unwrap_or_default();
        schema.output_schema_json = self.output.map(|v| v.to_string()).unwrap_or_default();
        schema
    }
}

impl From<Capability> for TaskTypeSchema {
    fn from(capability: Capability) -> Self {
        capability.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field_reaches_the_wire_message() {
        let s = Capability::new("send")
            .name("Send a message")
            .description("Posts to a channel")
            .category("messaging")
            .icon("mail")
            .input_schema(json!({"type": "object", "required": ["text"]}))
            .output_schema(json!({"type": "object"}))
            .build();
        assert_eq!(s.task_type_id, "send");
        assert_eq!(s.name, "Send a message");
        assert_eq!(s.description, "Posts to a channel");
        assert_eq!(s.category, "messaging");
        assert_eq!(s.icon, "mail");
        let input: Value = serde_json::from_str(&s.input_schema_json).unwrap();
        assert_eq!(input, json!({"type": "object", "required": ["text"]}));
        assert_eq!(s.output_schema_json, r#"{"type":"object"}"#);
    }

    #[test]
    fn unset_schemas_stay_empty_and_the_name_defaults_to_the_id() {
        let s: TaskTypeSchema = Capability::new("ping").into();
        assert_eq!(s.name, "ping");
        assert_eq!(s.input_schema_json, "");
        assert_eq!(s.output_schema_json, "");
    }
}
