//! The protocol faces over the [`crate::core`]: each translates one protocol
//! to and from the core's calls and owns no behaviour of its own.
//! - `mcp_tools`: rmcp's `ServerHandler` (the mining tools, every protocol
//!   version; a call's tool looked up once, [`called`]); `tool_calls`: the
//!   defined tools and their companions, answered by the same core calls;
//! - `tasks_2025`: core tasks of 2025-11-25, an axum layer in front of rmcp;
//! - `tasks_2026`: the 2026-07-28 Tasks extension, through rmcp's task hooks;
//! - `asking_2026`: a defined tool's plain call that asks (2026-07-28 MRTR),
//!   and what a call of one is refused for before anything is made;
//! - `listen_2026`: the extension's `subscriptions/listen` push, in front of rmcp;
//! - `resources`: `resources/read` of a run's files, streamed, in front of rmcp;
//!   `documents`: the documents McpTools offer as resources.

pub mod asking_2026;
pub mod documents;
pub mod listen_2026;
pub mod mcp_tools;
pub mod resources;
pub mod tasks_2025;
mod tasks_2025_wire;
pub mod tasks_2026;
pub mod tool_calls;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};

use crate::core::{Core, Starter};
use crate::ids::{Caller, WorkId};
use crate::tool_runs::catalog::DefinedTool;
use crate::tool_runs::contract::COMPANIONS;
use crate::tools::MiningTool;

/// A POST body as the HTTP edge (`http::reject_unparseable_json`) parsed it, handed on to the
/// layers behind it so none of them buffers or parses it again.
#[derive(Clone, Debug)]
pub struct JsonBody(pub std::sync::Arc<Value>);

/// The metric label of every defined tool's calls (labels stay bounded).
pub(crate) const DEFINED_TOOL: &str = "defined_tool";

/// What a tool name stands for, looked up once per call.
pub(crate) enum Called {
    Mining(MiningTool),
    /// A companion of the defined tools (`get_tool_result`, ...).
    Companion(&'static str),
    Defined(std::sync::Arc<DefinedTool>),
}

impl Called {
    /// What the call starts, when it starts work (and so may run as a task).
    /// A defined tool's run records its McpTool's object name, whatever
    /// name it is listed by.
    pub(crate) fn starter(&self) -> Option<Starter<'_>> {
        match self {
            Self::Mining(MiningTool::StartMining) => Some(Starter::Mining),
            Self::Defined(tool) => Some(Starter::Defined { name: &tool.object, tool }),
            Self::Mining(_) | Self::Companion(_) => None,
        }
    }

    /// Its calls' metric label (bounded: every defined tool is one).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Mining(tool) => tool.name(),
            Self::Companion(companion) => companion,
            Self::Defined(_) => DEFINED_TOOL,
        }
    }
}

/// The tool `name` names, if any (pure lookups: a match, then the catalog).
pub(crate) fn called(core: &Core, name: &str) -> Option<Called> {
    if let Some(tool) = MiningTool::named(name) {
        return Some(Called::Mining(tool));
    }
    if let Some(companion) = COMPANIONS.iter().find(|companion| **companion == name) {
        return Some(Called::Companion(companion));
    }
    core.catalog.get(name).map(Called::Defined)
}

/// The caller's trace context: `_meta.traceparent` (SEP-414) first, else
/// the HTTP `traceparent` header; anything malformed is none (pure).
pub(crate) fn incoming_trace(
    meta: Option<&serde_json::Map<String, Value>>,
    headers: Option<&axum::http::HeaderMap>,
) -> Option<mining_api::trace::TraceParent> {
    use mining_api::trace::TraceParent;
    let from_meta = meta.and_then(|meta| meta.get("traceparent")).and_then(Value::as_str);
    let from_header = headers.and_then(|h| h.get("traceparent")).and_then(|v| v.to_str().ok());
    from_meta.and_then(TraceParent::parse).or_else(|| from_header.and_then(TraceParent::parse))
}

/// A defined tool call's idempotency key, from `_meta` (see
/// [`crate::core::IDEMPOTENCY_META_KEY`]); checked where it is used.
pub(crate) fn idempotency_key_of(meta: Option<&serde_json::Map<String, Value>>) -> Option<&str> {
    meta?.get(crate::core::IDEMPOTENCY_META_KEY)?.as_str()
}

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

/// The answer, in both task generations, for a task this caller cannot see
/// (the spec's `-32602`). An id this server issued to this caller (its tag
/// proves it) whose workflow is gone has expired: its retention ran out.
/// Every other id — unknown, malformed, another caller's — is "not found",
/// all alike, so nothing is learnt of anyone else's tasks.
pub fn missing_task(core: &Core, caller: &Caller, task_id: &str) -> McpError {
    if WorkId::parse_for(&core.keys, caller, task_id).is_some() {
        McpError::invalid_params(
            format!(
                "Failed to retrieve task: Task has expired (task {task_id:?} finished and was kept for its ttl, \
                 then deleted)"
            ),
            None,
        )
    } else {
        McpError::invalid_params(
            format!("Failed to retrieve task: Task not found (unknown task {task_id:?})"),
            None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FROM_META: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const FROM_HEADER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_callers_trace_comes_from_meta_first_then_the_header() {
        let meta = json!({"traceparent": FROM_META});
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("traceparent", FROM_HEADER.parse().unwrap());
        let both = incoming_trace(meta.as_object(), Some(&headers)).unwrap();
        assert_eq!(both.to_string(), FROM_META);
        let header_only = incoming_trace(None, Some(&headers)).unwrap();
        assert_eq!(header_only.to_string(), FROM_HEADER);
        let garbled = json!({"traceparent": "00-zz"});
        assert_eq!(incoming_trace(garbled.as_object(), Some(&headers)).unwrap().to_string(), FROM_HEADER);
        assert_eq!(incoming_trace(garbled.as_object(), None), None);
    }
}
