//! The wire shapes of 2025-11-25 core tasks (pure): which requests the
//! task layer answers, the `Task` object, a finished task's result, the
//! tool listing with `execution.taskSupport`, and `tasks/list` cursors.

use rmcp::model::ErrorCode;
use serde_json::{Value, json};

use crate::ids::WorkId;
use crate::tasks::TaskSnapshot;
use crate::tools::START_MINING;

pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// `_meta` key tying a `tasks/result` answer to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Longest progress token (as JSON) a task keeps on its workflow.
pub use mining_api::annotations::MAX_PROGRESS_TOKEN_BYTES;

/// The TypeScript SDK's `RequestTimeout` (rmcp has no constant for it): the
/// wait ran out, call again.
pub const REQUEST_TIMEOUT: ErrorCode = ErrorCode(-32001);

/// What this layer does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    PassThrough,
    Initialize,
    ListTools,
    CreateTask,
    Get,
    Result,
    List,
    Cancel,
    /// A client's response to a request a `tasks/result` stream put to it
    /// (see [`input_request_json`]).
    InputResponse,
}

/// Picks the route from the method, the `MCP-Protocol-Version` header and
/// the params (pure). Only 2025-11-25 requests are answered here.
pub fn route(method: &str, protocol_header: Option<&str>, params: &Value) -> Route {
    if method == "initialize" {
        return match params.get("protocolVersion").and_then(Value::as_str) {
            Some(PROTOCOL_VERSION) => Route::Initialize,
            _ => Route::PassThrough,
        };
    }
    if protocol_header != Some(PROTOCOL_VERSION) {
        return Route::PassThrough;
    }
    match method {
        "tools/list" => Route::ListTools,
        "tools/call" if params.get("task").is_some_and(|task| !task.is_null()) => Route::CreateTask,
        "tasks/get" => Route::Get,
        "tasks/result" => Route::Result,
        "tasks/list" => Route::List,
        "tasks/cancel" => Route::Cancel,
        _ => Route::PassThrough,
    }
}

/// What the id of a request put to a client on a `tasks/result` stream
/// starts with; the rest names the task and the key, so the response is
/// routed by any replica (the run holds the request).
const INPUT_REQUEST_ID: &str = "mcp-input:";

/// A tool run's request `key` (`{"method", "params"}` as the tool asked it)
/// as a JSON-RPC request to the client, tied to its task.
pub fn input_request_json(task_id: &str, key: &str, request: &Value) -> Value {
    let mut params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    if let Some(params) = params.as_object_mut() {
        let meta = params.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
        }
    }
    json!({
        "jsonrpc": "2.0",
        "id": format!("{INPUT_REQUEST_ID}{task_id}:{key}"),
        "method": request.get("method").cloned().unwrap_or(Value::Null),
        "params": params,
    })
}

/// The task, key and result of a client's response to [`input_request_json`]
/// (the whole message: no method, our id, a result), if it is one (pure).
/// An error response is none: the request stays asked.
pub fn input_response_of(message: &Value) -> Option<(String, String, Value)> {
    let id = message.get("id")?.as_str()?.strip_prefix(INPUT_REQUEST_ID)?;
    let (task_id, key) = id.rsplit_once(':')?;
    let result = message.get("result")?.clone();
    Some((task_id.to_string(), key.to_string(), result))
}

/// The 2025-11-25 `Task` object.
pub fn task_json(task: &TaskSnapshot) -> Value {
    let mut object = json!({
        "taskId": task.task_id,
        "status": task.state.as_str(),
        "statusMessage": task.status_message,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttl": task.ttl_ms,
    });
    if let Some(interval) = task.poll_interval_ms {
        object["pollInterval"] = json!(interval);
    }
    object
}

/// The tool result a finished task gives: what the synchronous tool returns,
/// in the 2025 shape (no `resultType`), tied to its task.
pub fn task_result_json(task: TaskSnapshot) -> Value {
    let task_id = task.task_id.clone();
    let mut result = task.result;
    result.result_type = None;
    let mut value = serde_json::to_value(result).unwrap_or_else(|_| json!({}));
    value["_meta"] = json!({ RELATED_TASK: { "taskId": task_id } });
    value
}

/// `notifications/tasks/status`: the task's full state, as `tasks/get` returns it.
pub fn status_notification(task: &TaskSnapshot) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": task_json(task)})
}

/// How long a task asked to be kept after it finishes, in whole seconds
/// (rounded up), within what the server keeps: at least 1 s, at most its
/// default retention (pure). `None` when it asked nothing. The task's `ttl`
/// then reports what is kept.
pub fn task_retention_seconds(
    requested_ms: Option<&Value>,
    most_seconds: u64,
) -> Result<Option<i64>, String> {
    let ms = match requested_ms {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => {
            value.as_u64().ok_or("task.ttl must be a whole, non-negative number of milliseconds")?
        }
    };
    let seconds = ms.div_ceil(1000).clamp(1, most_seconds.max(1));
    Ok(Some(i64::try_from(seconds).unwrap_or(i64::MAX)))
}

/// The tools as 2025-11-25 lists them: with `execution.taskSupport`.
/// `defined` gives a defined tool's (whose calls are tool runs) by its name.
pub fn tools_json(tools: &[rmcp::model::Tool], defined: impl Fn(&str) -> Option<&'static str>) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            let mut value = serde_json::to_value(tool).unwrap_or_else(|_| json!({}));
            let support = match defined(&tool.name) {
                Some(support) => support,
                None if tool.name == START_MINING => "optional",
                None => "forbidden",
            };
            value["execution"] = json!({ "taskSupport": support });
            value
        })
        .collect();
    json!({ "tools": tools })
}

/// A `tasks/list` cursor: the sort key of the last task handed out.
pub fn cursor_of(created: i64, name: &str) -> String {
    format!("{created}.{name}")
}

pub fn parse_cursor(cursor: &str) -> Option<(i64, String)> {
    let (created, name) = cursor.split_once('.')?;
    Some((created.parse().ok()?, WorkId::parse(name)?.as_str().to_string()))
}
