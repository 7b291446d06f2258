//! The protocol faces over the [`crate::core`]: each translates one protocol
//! to and from the core's calls and owns no behaviour of its own.
//! - `mcp_tools`: rmcp's `ServerHandler` (the four tools, every protocol version);
//! - `tasks_2025`: core tasks of 2025-11-25, an axum layer in front of rmcp;
//! - `tasks_2026`: the 2026-07-28 Tasks extension, through rmcp's task hooks.

pub mod mcp_tools;
pub mod tasks_2025;
pub mod tasks_2026;

use rmcp::ErrorData as McpError;

/// The one answer, in both task generations, for a task id that is unknown,
/// malformed, expired or another caller's.
pub fn unknown_task(task_id: &str) -> McpError {
    McpError::invalid_params(format!("unknown task {task_id:?} (it may have expired)"), None)
}
