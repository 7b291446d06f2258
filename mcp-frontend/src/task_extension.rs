//! The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`), served
//! through rmcp's own task hooks: `start_mining` answers a `CreateTaskResult`
//! when the request declares the extension, and `tasks/get` / `tasks/cancel`
//! read and patch the MiningWorkflow. rmcp's in-memory `TaskManager` is not
//! used: the resource is the task, so any replica answers for it.

use k8s_openapi::jiff::Timestamp;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};

use crate::ids::{Caller, WorkflowId};
use crate::server::{Answer, MiningServer, View};
use crate::tasks::{Generation, TaskSnapshot, TaskState, snapshot};
use crate::workflows;

/// The same answer for an unknown, malformed, expired or foreign task id.
pub fn unknown_task(task_id: &str) -> McpError {
    McpError::invalid_params(format!("unknown task {task_id:?} (it may have expired)"), None)
}

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

impl MiningServer {
    fn extension_snapshot(&self, workflow: &mining_api::MiningWorkflow) -> TaskSnapshot {
        snapshot(workflow, Timestamp::now(), Generation::Extension2026, self.app.default_ttl_seconds)
    }

    /// `start_mining` as a task: creates the workflow and hands out its task
    /// only once the API server holds it; argument and limit errors stay
    /// ordinary tool errors.
    pub(crate) async fn start_mining_task(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
    ) -> (CallToolResponse, &'static str) {
        match self.create_workflow(caller, arguments, &[]).await {
            Ok((_, workflow, _)) => {
                let task = self.extension_snapshot(&workflow);
                (CallToolResponse::Task(CreateTaskResult::new(base_task(&task))), "task")
            }
            Err(answer) => {
                let outcome = answer.metric_outcome();
                (answer.into_result().into(), outcome)
            }
        }
    }

    /// The workflow behind a task id, as this caller may see it.
    async fn task_view(&self, caller: &Caller, task_id: &str) -> Result<View, McpError> {
        let Some(id) = WorkflowId::parse(task_id) else {
            return Err(unknown_task(task_id));
        };
        match self.visible(caller, &id).await {
            Ok(View::Missing) => Err(unknown_task(task_id)),
            Ok(view) => Ok(view),
            Err(problem) => Err(McpError::internal_error(problem, None)),
        }
    }

    pub(crate) async fn extension_get_task(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<GetTaskResult, McpError> {
        match self.task_view(caller, task_id).await? {
            View::Found(workflow) => Ok(GetTaskResult::new(detailed(self.extension_snapshot(&workflow)))),
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
    pub(crate) async fn extension_cancel_task(&self, caller: &Caller, task_id: &str) -> Result<(), McpError> {
        let View::Found(workflow) = self.task_view(caller, task_id).await? else {
            return Ok(());
        };
        let finished = workflow.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_finished());
        if finished || workflow.spec.cancel {
            return Ok(());
        }
        workflows::request_cancel(&self.app.api, task_id).await.map_err(|err| {
            self.app
                .metrics
                .api_errors
                .get_or_create(&crate::metrics::ReasonLabels { reason: "patch" })
                .inc();
            McpError::internal_error(format!("could not cancel: {err}"), None)
        })?;
        tracing::info!(workflow = task_id, caller = %caller.name, "cancel requested (tasks/cancel)");
        Ok(())
    }
}
