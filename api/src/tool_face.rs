//! How an `McpTool` appears in MCP, beyond what the model reads: the name
//! it is listed and called by (which need not be a Kubernetes object name:
//! most MCP tools are `snake_case`), whether a call may, must or must not
//! be a task, and which client capabilities a call needs (a tool that asks
//! its caller's model needs `sampling`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest MCP tool name (the 2025-11-25 and 2026-07-28 revisions' rule).
pub const MAX_TOOL_NAME_BYTES: usize = 128;

/// Why `name` cannot be an MCP tool name, if it cannot (pure): 1–128 of
/// `A-Za-z0-9_.-`, as the current revisions say.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_TOOL_NAME_BYTES {
        return Some(format!(
            "the tool name must be 1 to {MAX_TOOL_NAME_BYTES} characters (set spec.toolName to a shorter one)"
        ));
    }
    let bad = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')));
    bad.map(|c| format!("the tool name {name:?} has {c:?}; a tool name is letters, digits, '_', '.' and '-'"))
}

impl crate::McpTool {
    /// The name the tool is listed and called by: `spec.toolName`, else the
    /// object's name.
    pub fn mcp_name(&self) -> &str {
        self.spec.tool_name.as_deref().or(self.metadata.name.as_deref()).unwrap_or_default()
    }
}

/// Whether a call of the tool may run as an MCP task (`execution.taskSupport`
/// in `tools/list`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TaskSupport {
    /// A plain call is refused (`-32021` on 2026-07-28, where the client must
    /// declare the Tasks extension; `-32601` on 2025-11-25, as that revision
    /// says): for work no client should wait on.
    Required,
    /// Either (the default).
    #[default]
    Optional,
    /// A call asking for a task is refused: it always answers in the call.
    Forbidden,
}

impl TaskSupport {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Optional => "optional",
            Self::Forbidden => "forbidden",
        }
    }
}

/// A client capability a call of the tool needs: a client that did not
/// declare it is refused before anything is made (`-32021`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClientCapability {
    /// The tool asks its caller (`elicitation/create`).
    Elicitation,
    /// The tool asks its caller's model (`sampling/createMessage`).
    Sampling,
    /// The tool asks for the client's roots (`roots/list`).
    Roots,
}

impl ClientCapability {
    /// Its key in MCP's `ClientCapabilities`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }
}

/// The most capabilities a tool may require (there are three).
pub const MAX_REQUIRED_CAPABILITIES: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_name_is_what_the_revisions_allow() {
        assert_eq!(name_problem("get_weather"), None);
        assert_eq!(name_problem("sum-numbers.v2"), None);
        assert_eq!(name_problem(&"a".repeat(128)), None);
        assert!(name_problem(&"a".repeat(129)).unwrap().contains("1 to 128"));
        assert!(name_problem("").is_some());
        assert!(name_problem("get weather").unwrap().contains("' '"), "spaces are refused");
        assert!(name_problem("ns/tool").unwrap().contains("'/'"), "slashes are refused since 2025-11-25");
    }

    #[test]
    fn task_support_is_optional_unless_said() {
        assert_eq!(TaskSupport::default(), TaskSupport::Optional);
        let said: TaskSupport = serde_json::from_value(serde_json::json!("required")).unwrap();
        assert_eq!(said.as_str(), "required");
        assert!(serde_json::from_value::<TaskSupport>(serde_json::json!("always")).is_err());
    }
}
