//! The protocol faces over the [`crate::core`]: each translates one protocol
//! to and from the core's calls and owns no behaviour of its own.
//! - `mcp_tools`: rmcp's `ServerHandler` (the four tools, every protocol version);
//! - `tasks_2025`: core tasks of 2025-11-25, an axum layer in front of rmcp;
//! - `tasks_2026`: the 2026-07-28 Tasks extension, through rmcp's task hooks;
//! - `listen_2026`: the extension's `subscriptions/listen` push, in front of rmcp.

pub mod listen_2026;
pub mod mcp_tools;
pub mod tasks_2025;
pub mod tasks_2026;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};

/// One JSON-RPC response message.
pub(crate) fn response_json(id: &Value, outcome: Result<Value, McpError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

/// One JSON-RPC message as a plain JSON HTTP response.
pub(crate) fn json_response(message: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], message.to_string()).into_response()
}

/// The one answer, in both task generations, for a task id that is unknown,
/// malformed, expired or another caller's.
pub fn unknown_task(task_id: &str) -> McpError {
    McpError::invalid_params(format!("unknown task {task_id:?} (it may have expired)"), None)
}
