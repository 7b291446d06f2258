//! Tool runs as core tasks of protocol 2025-11-25: the same task shapes and
//! rules as a workflow's (see `tasks_2025`), backed by the `ToolRun`.

use k8s_openapi::jiff::Timestamp;
use mining_api::ToolRun;
use rmcp::ErrorData as McpError;
use rmcp::model::{ErrorCode, JsonObject};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::tasks_2025::{REQUEST_TIMEOUT, task_json, task_result_json};
use crate::core::{Answer, Core, StartOptions, Unattended};
use crate::ids::Caller;
use crate::tasks::{Generation, TaskSnapshot, run_snapshot};
use crate::tool_runs::RunView;

fn snapshot(core: &Core, run: &ToolRun) -> TaskSnapshot {
    run_snapshot(
        run,
        Timestamp::now(),
        Generation::Core2025,
        core.default_ttl_seconds,
        core.operator_presence(),
    )
}

/// `tasks/get` of a run.
pub(super) fn get(core: &Core, run: &ToolRun) -> Value {
    task_json(&snapshot(core, run))
}

/// `tools/call` with `params.task` of a defined tool: the run, as a task.
pub(super) async fn create(
    core: &Core,
    caller: &Caller,
    name: &str,
    arguments: Option<JsonObject>,
    options: StartOptions<'_>,
) -> Option<Result<Value, McpError>> {
    let tool = core.catalog.get(name)?;
    Some(match core.start_run(caller, name, &tool, arguments, options).await {
        Ok(run) => {
            core.record_call("defined_tool", "task", None);
            Ok(json!({ "task": task_json(&snapshot(core, &run)) }))
        }
        Err(answer) => {
            core.record_call("defined_tool", answer.metric_outcome(), None);
            let code = match answer {
                Answer::InvalidArguments(_) => ErrorCode::INVALID_PARAMS,
                _ => ErrorCode::INTERNAL_ERROR,
            };
            Err(McpError::new(
                code,
                answer.error_text().unwrap_or("the task was not created").to_string(),
                None,
            ))
        }
    })
}

/// `tasks/cancel` of a run: a finished or already cancelled run is terminal.
pub(super) async fn cancel(core: &Core, caller: &Caller, run: Box<ToolRun>) -> Result<Value, McpError> {
    let before = snapshot(core, &run);
    if before.state.is_terminal() {
        let text = format!("Cannot cancel task in terminal status: {}", before.state.as_str());
        return Err(McpError::invalid_params(text, None));
    }
    let id = run.metadata.name.clone().unwrap_or_default();
    match core.cancel_run(caller, &id, std::time::Duration::ZERO).await {
        Ok(RunView::Found(mut run)) => {
            // Recorded: this and every later read say `cancelled`.
            run.spec.cancel = true;
            Ok(task_json(&snapshot(core, &run)))
        }
        Ok(RunView::Missing) => Err(super::missing_task(core, caller, &id)),
        Err(problem) => Err(McpError::internal_error(problem, None)),
    }
}

/// `tasks/result` of a run: waits (woken by the watch, bounded) for it to
/// finish, then its tool result.
pub(super) async fn result(core: &Core, caller: &Caller, run: Box<ToolRun>) -> Result<Value, McpError> {
    let id = run.metadata.name.clone().unwrap_or_default();
    let deadline = Instant::now() + core.task_result_wait;
    let run = match core.wait_run(caller, run, deadline, &mut Unattended).await {
        RunView::Found(run) => run,
        RunView::Missing => return Err(super::missing_task(core, caller, &id)),
    };
    let task = snapshot(core, &run);
    if task.result_ready {
        return Ok(task_result_json(task));
    }
    let seconds = core.task_result_wait.as_secs();
    Err(McpError::new(
        REQUEST_TIMEOUT,
        format!(
            "task {id} is still {} after {seconds} s ({}); call tasks/result again, or poll tasks/get",
            task.state.as_str(),
            task.status_message
        ),
        None,
    ))
}
