//! Checking a value against a tool's JSON Schema (feature `schemas`), the
//! one way the frontend checks arguments and the operator checks results.

use serde_json::{Map, Value};

use crate::McpToolSpec;

/// The names of the MCP frontend's own tools: no `McpTool` may take one
/// (the frontend checks its own list against this one in a test).
pub const RESERVED_TOOL_NAMES: [&str; 8] = [
    "start_mining",
    "get_mining_result",
    "cancel_mining",
    "list_mining_workflows",
    "get_tool_result",
    "cancel_tool_run",
    "list_tool_runs",
    "respond_tool_run",
];

/// What an offerable definition compiles to.
#[derive(Debug)]
pub struct Offerable {
    /// The arguments' schema, compiled.
    pub input: Schema,
    /// The result's schema, when the tool declares one (it compiled).
    pub output_schema: Option<Map<String, Value>>,
}

/// Whether the McpTool `name` defined by `spec` can be offered as an MCP
/// tool, and why not (pure): the one verdict the frontend writes into the
/// tool's `Accepted` condition and `kubectl mining validate` prints.
pub fn offerable(name: &str, spec: &McpToolSpec) -> Result<Offerable, String> {
    if RESERVED_TOOL_NAMES.contains(&name) {
        return Err(format!("{name} is the name of one of the frontend's own tools"));
    }
    if let Some(problem) = spec.problem() {
        return Err(problem);
    }
    let input = Schema::compile(&Value::Object(spec.input_schema.clone()))
        .map_err(|why| format!("inputSchema is not a usable JSON Schema: {why}"))?;
    if let Some(schema) = &spec.output_schema {
        Schema::compile(&Value::Object(schema.clone()))
            .map_err(|why| format!("outputSchema is not a usable JSON Schema: {why}"))?;
    }
    Ok(Offerable { input, output_schema: spec.output_schema.clone() })
}

/// A compiled JSON Schema.
pub struct Schema(jsonschema::Validator);

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema")
    }
}

/// Most violations named in one error.
const MAX_VIOLATIONS: usize = 3;
/// Longest error text.
const MAX_ERROR_BYTES: usize = 1024;

impl Schema {
    /// Compiles `schema`; the error says why it is not a usable schema.
    /// Nothing is fetched: a remote `$ref` is an error, not a request.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::validator_for(schema).map(Self).map_err(|err| clipped(err.to_string()))
    }

    /// `Ok` when `value` satisfies the schema, else the first few
    /// violations, each with where in the value it is.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        let violations: Vec<String> = self
            .0
            .iter_errors(value)
            .take(MAX_VIOLATIONS)
            .map(|err| {
                let at = err.instance_path().to_string();
                if at.is_empty() { err.to_string() } else { format!("at {at}: {err}") }
            })
            .collect();
        if violations.is_empty() { Ok(()) } else { Err(clipped(violations.join("; "))) }
    }
}

fn clipped(mut text: String) -> String {
    let keep = crate::pow::clip(&text, MAX_ERROR_BYTES).len();
    text.truncate(keep);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(input_schema: Value) -> McpToolSpec {
        serde_json::from_value(json!({
            "description": "Adds numbers.",
            "inputSchema": input_schema,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "tool", "image": "example/sum"}]}}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_definition_is_offerable_unless_its_name_or_schema_says_otherwise() {
        assert!(offerable("sum", &spec(json!({"type": "object"}))).is_ok());
        let own = offerable("start_mining", &spec(json!({"type": "object"}))).unwrap_err();
        assert_eq!(own, "start_mining is the name of one of the frontend's own tools");
        let array = offerable("sum", &spec(json!({"type": "array"}))).unwrap_err();
        assert_eq!(array, "inputSchema must have \"type\": \"object\"");
        let unusable =
            offerable("sum", &spec(json!({"type": "object", "minProperties": "two"}))).unwrap_err();
        assert!(unusable.starts_with("inputSchema is not a usable JSON Schema: "), "{unusable}");
    }

    #[test]
    fn violations_say_where_and_what() {
        let schema = Schema::compile(&json!({
            "type": "object",
            "properties": {"numbers": {"type": "array", "items": {"type": "number"}}},
            "required": ["numbers"],
        }))
        .unwrap();
        assert_eq!(schema.check(&json!({"numbers": [1, 2.5]})), Ok(()));
        let err = schema.check(&json!({"numbers": [1, "two"]})).unwrap_err();
        assert!(err.contains("/numbers/1") && err.contains("\"two\""), "{err}");
        let err = schema.check(&json!({})).unwrap_err();
        assert!(err.contains("numbers"), "{err}");
    }

    #[test]
    fn a_remote_reference_is_an_error_not_a_request() {
        let err = Schema::compile(&json!({"$ref": "https://example.com/schema.json"})).err();
        assert!(err.is_some());
    }

    #[test]
    fn a_broken_schema_is_an_error() {
        assert!(Schema::compile(&json!({"type": 12})).is_err());
    }
}
