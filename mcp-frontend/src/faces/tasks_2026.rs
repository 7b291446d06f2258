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

use super::unknown_task;
use crate::core::{Answer, CancelOutcome, Core, View};
use crate::ids::Caller;
use crate::tasks::{Generation, TaskSnapshot, TaskState, snapshot};

/// The rmcp task of a snapshot, without payload.
fn base_task(task: &TaskSnapshot) -> Task {
    let status = match task.state {
        TaskState::Working => TaskStatus::Working,
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
        TaskState::Cancelled => TaskPayload::Cancelled,
        TaskState::Completed => {
            TaskPayload::Completed { result: json_object(&Answer::Outcome(task.outcome).into_result()) }
        }
        TaskState::Failed => TaskPayload::Failed {
            error: json_object(&McpError::internal_error(task.status_message.clone(), None)),
        },
    };
    DetailedTask::new(base, payload)
}

fn extension_snapshot(core: &Core, workflow: &mining_api::MiningWorkflow) -> TaskSnapshot {
    snapshot(workflow, Timestamp::now(), Generation::Extension2026, core.default_ttl_seconds)
}

/// `start_mining` as a task: creates the workflow and hands out its task
/// only once the API server holds it; argument and limit errors stay
/// ordinary tool errors. Also returns the metric outcome.
pub(crate) async fn start_mining_task(
    core: &Core,
    caller: &Caller,
    arguments: Option<JsonObject>,
) -> (CallToolResponse, &'static str) {
    match core.start(caller, arguments, &[]).await {
        Ok(started) => {
            let task = extension_snapshot(core, &started.workflow);
            (CallToolResponse::Task(CreateTaskResult::new(base_task(&task))), "task")
        }
        Err(answer) => {
            let outcome = answer.metric_outcome();
            (answer.into_result().into(), outcome)
        }
    }
}

pub(crate) async fn get_task(core: &Core, caller: &Caller, task_id: &str) -> Result<GetTaskResult, McpError> {
    match core.find(caller, task_id).await.map_err(|problem| McpError::internal_error(problem, None))? {
        View::Found(workflow) => Ok(GetTaskResult::new(detailed(extension_snapshot(core, &workflow)))),
        View::Unreadable(problem) => {
            let now = Timestamp::now().to_string();
            let base = Task::new(task_id, TaskStatus::Failed, &now, &now)
                .with_status_message(format!("the workflow's stored state cannot be read: {problem}"));
            let error = json_object(&McpError::internal_error(problem, None));
            Ok(GetTaskResult::new(DetailedTask::new(base, TaskPayload::Failed { error })))
        }
        View::Missing => Err(unknown_task(task_id)),
    }
}

/// Sets `spec.cancel` and acknowledges; a finished task is a no-op ack.
pub(crate) async fn cancel_task(core: &Core, caller: &Caller, task_id: &str) -> Result<(), McpError> {
    match core.cancel(caller, task_id).await.map_err(|problem| McpError::internal_error(problem, None))? {
        CancelOutcome::NotCancelled(View::Missing) => Err(unknown_task(task_id)),
        CancelOutcome::NotCancelled(_)
        | CancelOutcome::AlreadyFinished(_)
        | CancelOutcome::AlreadyRequested(_)
        | CancelOutcome::Requested(_) => Ok(()),
    }
}
