//! The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`), served
//! through rmcp's own task hooks: `start_mining` answers a `CreateTaskResult`
//! when the request declares the extension, and `tasks/get` / `tasks/cancel`
//! are answered by the core. rmcp's in-memory `TaskManager` is not
//! used: the resource is the task, so any replica answers for it.

use k8s_openapi::jiff::Timestamp;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};

use super::JsonBody;
use super::missing_task;
use crate::core::{Answer, Any, Core, RespondError, StartOptions, Starter, View};
use crate::ids::Caller;
use crate::tasks::{Generation, TaskSnapshot, TaskState, snapshot_any};

/// The rmcp task of a snapshot, without payload.
fn base_task(task: &TaskSnapshot) -> Task {
    let status = match task.state {
        TaskState::Working => TaskStatus::Working,
        TaskState::InputRequired => TaskStatus::InputRequired,
        TaskState::Completed => TaskStatus::Completed,
        TaskState::Failed => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    };
    let mut base = Task::new(&task.task_id, status, &task.created_at, &task.last_updated_at)
        .with_status_message(&task.status_message)
        .with_ttl_ms(task.ttl_ms);
    if let Some(interval) = task.poll_interval_ms {
        base = base.with_poll_interval_ms(interval);
    }
    base
}

fn json_object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

/// `tasks/get`'s answer: the task, with the tool result inlined once completed.
fn detailed(task: TaskSnapshot) -> DetailedTask {
    let base = base_task(&task);
    let payload = match task.state {
        TaskState::Working => TaskPayload::Working,
        // Checked by the operator as the tool wrote them (`tool_input`); one
        // rmcp would not carry is shown as still working rather than garbled.
        TaskState::InputRequired => match input_requests(task.input_requests.clone()) {
            Some(input_requests) => TaskPayload::InputRequired { input_requests },
            None => TaskPayload::Working,
        },
        TaskState::Cancelled => TaskPayload::Cancelled,
        TaskState::Completed => TaskPayload::Completed { result: json_object(&task.result) },
        TaskState::Failed => TaskPayload::Failed {
            error: json_object(&McpError::internal_error(task.status_message.clone(), None)),
        },
    };
    DetailedTask::new(base, payload)
}

/// The recorded requests as the protocol's `inputRequests`.
fn input_requests(recorded: Option<JsonObject>) -> Option<rmcp::model::InputRequests> {
    serde_json::from_value(serde_json::Value::Object(recorded?)).ok()
}

/// A task as `tasks/get` gives it (without the result's discriminator),
/// with its state: what `notifications/tasks` carries.
pub(crate) fn detailed_json(core: &Core, work: &Any) -> (TaskState, serde_json::Value) {
    let task = task_of(core, work);
    let state = task.state;
    (state, serde_json::to_value(detailed(task)).unwrap_or_else(|_| serde_json::json!({})))
}

/// Work of any kind as a 2026-07-28 task, now, as this replica sees the operator.
fn task_of(core: &Core, work: &Any) -> TaskSnapshot {
    let mut task = snapshot_any(
        work,
        Timestamp::now(),
        Generation::Extension2026,
        core.default_ttl_seconds,
        core.operator_presence(),
    );
    // A request answered (by the caller, proven: a planted answer hides no
    // question) is no longer asked; all answered, the next step is coming.
    if let (Any::Run(run), Some(requests)) = (work, task.input_requests.as_mut()) {
        let answered = mining_api::tool_input::proven_answers(run, &core.keys);
        requests.retain(|key, _| !answered.contains_key(key));
        if requests.is_empty() {
            task.input_requests = None;
            task.state = TaskState::Working;
        }
    }
    task
}

/// A start as a task: the work is made (arguments checked, limits held)
/// before its task is handed out; argument and limit errors stay ordinary
/// tool errors. Also returns the metric outcome.
pub(crate) fn started_task(core: &Core, started: Result<Any, Answer>) -> (CallToolResponse, &'static str) {
    match started {
        Ok(work) => {
            let task = task_of(core, &work);
            (CallToolResponse::Task(CreateTaskResult::new(base_task(&task))), "task")
        }
        Err(answer) => {
            let outcome = answer.metric_outcome();
            (answer.into_result().into(), outcome)
        }
    }
}

/// A call that starts work, as a task.
pub(crate) async fn start_task(
    core: &Core,
    caller: &Caller,
    starter: Starter<'_>,
    arguments: Option<JsonObject>,
    options: StartOptions<'_>,
) -> (CallToolResponse, &'static str) {
    started_task(core, core.start_any(caller, starter, arguments, options).await)
}

pub(crate) async fn get_task(core: &Core, caller: &Caller, task_id: &str) -> Result<GetTaskResult, McpError> {
    match core.resolve(caller, task_id).await.map_err(|problem| McpError::internal_error(problem, None))? {
        View::Found(work) => Ok(GetTaskResult::new(detailed(task_of(core, &work)))),
        View::Unreadable(problem) => {
            let now = Timestamp::now().to_string();
            let base = Task::new(task_id, TaskStatus::Failed, &now, &now)
                .with_status_message(format!("the task's stored state cannot be read: {problem}"));
            let error = json_object(&McpError::internal_error(problem, None));
            Ok(GetTaskResult::new(DetailedTask::new(base, TaskPayload::Failed { error })))
        }
        View::NotGranted(why) => Err(McpError::invalid_request(why, None)),
        View::Missing => Err(missing_task(core, caller, task_id)),
    }
}

/// Sets `spec.cancel` and acknowledges; a finished task is a no-op ack.
pub(crate) async fn cancel_task(core: &Core, caller: &Caller, task_id: &str) -> Result<(), McpError> {
    let internal = |problem| McpError::internal_error(problem, None);
    match core.resolve(caller, task_id).await.map_err(internal)? {
        View::Found(work) => core.cancel_any(caller, *work).await.map(|_| ()).map_err(internal),
        View::Unreadable(_) => Ok(()),
        View::NotGranted(why) => Err(McpError::invalid_request(why, None)),
        View::Missing => Err(missing_task(core, caller, task_id)),
    }
}

/// `tasks/update`: records the answers to outstanding `inputRequests`
/// (proof-bound, checked against what was asked). Keys that are not
/// outstanding — unknown, answered before, or of a task that never asks —
/// are ignored, as the extension says; an answer that does not fit its
/// request is refused whole.
pub(crate) async fn update_task(
    core: &Core,
    caller: &Caller,
    task_id: &str,
    responses: &rmcp::model::InputResponses,
) -> Result<(), McpError> {
    let responses: JsonObject = responses.iter().map(|(key, value)| (key.clone(), value.clone())).collect();
    match core.respond(caller, task_id, &responses).await {
        Ok(_) => Ok(()),
        Err(RespondError::Invalid(why)) => Err(McpError::invalid_params(why, None)),
        Err(RespondError::Unavailable(why)) => Err(McpError::internal_error(why, None)),
        Err(RespondError::NotGranted(why)) => Err(McpError::invalid_request(why, None)),
        // Not a tool run of this caller's: a task of another kind is
        // acknowledged (nothing of it is outstanding), anything else is not found.
        Err(RespondError::NotFound) => match core.resolve(caller, task_id).await {
            Ok(View::Found(_)) => Ok(()),
            Ok(_) => Err(missing_task(core, caller, task_id)),
            Err(problem) => Err(McpError::internal_error(problem, None)),
        },
    }
}

/// Tasks methods whose `Mcp-Name` header rmcp requires, mirrored from `params.taskId`.
const TASK_ID_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// The `Mcp-Name` a 2026-07-28 task request lacks, when it lacks one (pure).
///
/// rmcp requires the header for `tasks/get|update|cancel` (the Tasks
/// extension's routing hint); the Python SDK 2.x mirrors it only for the
/// core methods, so FastMCP's task polling arrives without it. The header
/// only repeats the body's `taskId`: supplying a missing one invents
/// nothing, and one that disagrees with the body is still refused by rmcp.
pub fn missing_task_name(
    protocol: Option<&str>,
    has_name: bool,
    message: &serde_json::Value,
) -> Option<String> {
    if protocol != Some("2026-07-28") || has_name {
        return None;
    }
    let method = message.get("method")?.as_str()?;
    if !TASK_ID_METHODS.contains(&method) {
        return None;
    }
    let task_id = message.pointer("/params/taskId")?.as_str()?;
    // Only what a header may carry; anything else is left to rmcp to refuse.
    (task_id.len() <= 256 && task_id.bytes().all(|b| b.is_ascii_graphic())).then(|| task_id.to_string())
}

/// The axum layer that applies [`missing_task_name`] before rmcp reads the request.
pub async fn mirror_task_id_header(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let mut request = request;
    // Parsed once, by the layer that checked the body was JSON (POSTs only).
    let Some(JsonBody(message)) = request.extensions().get::<JsonBody>().cloned() else {
        return next.run(request).await;
    };
    let protocol = request.headers().get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    let has_name = request.headers().contains_key("mcp-name");
    if let Some(name) = missing_task_name(protocol, has_name, &message)
        && let Ok(value) = axum::http::HeaderValue::from_str(&name)
    {
        request.headers_mut().insert("mcp-name", value);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_missing_task_name_is_mirrored_from_the_task_id_for_2026_task_methods_only() {
        let get = json!({"method": "tasks/get", "params": {"taskId": "mw-abc"}});
        assert_eq!(missing_task_name(Some("2026-07-28"), false, &get).as_deref(), Some("mw-abc"));
        assert_eq!(missing_task_name(Some("2026-07-28"), true, &get), None, "a header given is left alone");
        assert_eq!(missing_task_name(Some("2025-11-25"), false, &get), None);
        let call = json!({"method": "tools/call", "params": {"name": "start_mining"}});
        assert_eq!(missing_task_name(Some("2026-07-28"), false, &call), None);
        let garbled = json!({"method": "tasks/cancel", "params": {"taskId": "a\nb"}});
        assert_eq!(missing_task_name(Some("2026-07-28"), false, &garbled), None);
    }
}
