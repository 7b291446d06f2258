//! Checking a value against a tool's JSON Schema (feature `schemas`), the
//! one way the frontend checks arguments and the operator checks results.

use serde_json::Value;

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
