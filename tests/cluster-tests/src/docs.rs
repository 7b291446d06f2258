//! Command and file blocks taken from the docs themselves, so that a test
//! runs what a reader copies and a doc that drifts from the code fails.

use mining_api::McpTool;

use crate::repo_root;

/// The fenced blocks of `language` in the section `heading` (a whole
/// `## …` line) of `file` (relative to the repository), in order.
pub fn blocks(file: &str, heading: &str, language: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"));
    let start = text.find(&format!("{heading}\n")).unwrap_or_else(|| panic!("{file} has no {heading:?}"));
    let section = &text[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let fence = format!("```{language}\n");
    section
        .split(&fence)
        .skip(1)
        .map(|rest| rest[..rest.find("```").expect("a closed block")].to_string())
        .collect()
}

/// An McpTool document as kubectl reads it (YAML, as users apply it).
pub fn mcp_tool_from_yaml(yaml: &str) -> McpTool {
    let output = crate::kubectl_with_input(&["create", "--dry-run=client", "-o", "json", "-f", "-"], yaml);
    assert!(
        output.status.success(),
        "kubectl reads the documented YAML: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut tool: McpTool = serde_json::from_slice(&output.stdout).unwrap();
    // kubectl fills in its context's namespace where the document names
    // none; the tests create it in theirs.
    tool.metadata.namespace = None;
    tool
}

/// Every fenced block of `language` in `file`, whatever its section.
pub fn all_blocks(file: &str, language: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"));
    let fence = format!("```{language}\n");
    text.split(&fence)
        .skip(1)
        .map(|rest| rest[..rest.find("```").expect("a closed block")].to_string())
        .collect()
}
